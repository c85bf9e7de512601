#include "server/shared/chat_images.h"

#include "core/error.h"
#include "core/logging.h"
#include "engine/image_placeholders.h"
#include "server/shared/chat_audio.h"
#include "server/shared/chat_video.h"
#include "server/shared/serving_common.h"

namespace gemmaserve {
namespace {

using ordered_json = nlohmann::ordered_json;

std::string part_type(const ordered_json& part) {
  const auto t = part.find("type");
  return t != part.end() && t->is_string() ? t->get<std::string>() : "";
}

bool has_type(const ordered_json& part) {
  const auto t = part.find("type");
  return t != part.end() && !t->is_null();
}

}  // namespace

bool is_image_part(const ordered_json& part) {
  if (!part.is_object()) return false;
  if (!has_type(part)) return part.contains("image_url");
  const std::string type = part_type(part);
  return type == "image_url" || type == "input_image";
}

std::string image_part_url(const ordered_json& part) {
  const std::string type = part_type(part);
  const auto iu = part.find("image_url");
  const ordered_json* url = nullptr;
  if (iu != part.end()) {
    // pydantic's ImageURL for "image_url" parts; a bare string for "input_image" and typeless ones.
    if (iu->is_object() && type != "input_image") {
      const auto u = iu->find("url");
      if (u != iu->end()) url = &*u;
      const auto detail = iu->find("detail");
      if (detail != iu->end() && !detail->is_null()) {
        if (!detail->is_string() || (*detail != "auto" && *detail != "low" && *detail != "high")) {
          throw InputError("image_url.detail: Input should be 'auto', 'low' or 'high'", "messages");
        }
        if (*detail != "auto") {
          GS_LOG_WARNING << "'image_url.detail' is currently not supported and will be ignored.";
        }
      }
    } else if (iu->is_string() && type != "image_url") {
      url = &*iu;
    }
  }
  if (url == nullptr || !url->is_string()) {
    throw InputError(type == "input_image"
                         ? "input_image content parts need image_url (a string)"
                         : "image_url content parts need image_url.url (a string)",
                     "messages");
  }
  return url->get<std::string>();
}

std::vector<std::string> part_urls_of(const ordered_json& messages,
                                      bool (*is_part)(const ordered_json&),
                                      std::string (*url_of)(const ordered_json&)) {
  std::vector<std::string> urls;
  if (!messages.is_array()) return urls;
  for (const ordered_json& message : messages) {
    if (!message.is_object()) continue;
    const auto content = message.find("content");
    if (content == message.end() || !content->is_array()) continue;
    for (const ordered_json& part : *content) {
      if (is_part(part)) urls.push_back(url_of(part));
    }
  }
  return urls;
}

std::vector<std::string> image_urls_of(const ordered_json& messages) {
  return part_urls_of(messages, is_image_part, image_part_url);
}

ordered_json messages_for_template(const ordered_json& messages) {
  ordered_json out = messages;
  if (!out.is_array()) return out;
  for (ordered_json& message : out) {
    if (!message.is_object()) continue;
    const auto content = message.find("content");
    if (content == message.end() || !content->is_array()) continue;
    for (ordered_json& part : *content) {
      if (is_image_part(part)) part = ordered_json{{"type", "image"}};
      if (is_audio_part(part)) part = ordered_json{{"type", "audio"}};
      if (is_video_part(part)) part = ordered_json{{"type", "video"}};
    }
  }
  return out;
}

std::vector<image::RgbImage> load_chat_images(const media::MediaConnector& media,
                                              const std::vector<std::string>& urls) {
  image::DecodeOptions decode;
  decode.max_bytes = media.options().max_bytes;
  std::vector<image::RgbImage> images;
  images.reserve(urls.size());
  for (const std::string& url : urls) {
    try {
      const std::vector<std::uint8_t> bytes = media.fetch(url);
      images.push_back(image::decode_image(bytes, decode));
    } catch (const InputError& e) {
      throw InputError(e.what(), "messages");
    }
  }
  return images;
}

std::vector<PromptImage> load_prompt_images(const ServingContext& ctx,
                                            const std::vector<std::string>& urls,
                                            std::optional<int> max_soft_tokens) {
  std::vector<PromptImage> images;
  if (urls.empty()) return images;
  if (!ctx.engine.has_vision()) {
    throw InputError(
        "This model does not accept image input: " + ctx.model_name() + " has no vision encoder.",
        "messages");
  }
  try {
    check_image_limit(ctx.engine.args().limit_mm_per_prompt, urls.size());
  } catch (const InputError& e) {
    throw InputError(e.what(), "messages");
  }
  for (image::RgbImage& rgb : load_chat_images(ctx.media, urls)) {
    images.push_back(PromptImage{std::move(rgb), max_soft_tokens});
  }
  return images;
}

std::vector<int32_t> expand_prompt_images(const ServingContext& ctx, std::span<const int32_t> ids,
                                          std::span<const PromptImage> images,
                                          std::span<const PromptAudio> audios,
                                          std::span<const PromptVideo> videos) {
  try {
    return ctx.engine.expand_media_placeholders(ids, images, audios, videos).token_ids;
  } catch (const InputError& e) {
    throw InputError(e.what(), "messages");
  }
}

}  // namespace gemmaserve
