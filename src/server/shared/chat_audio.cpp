#include "server/shared/chat_audio.h"

#include "core/error.h"
#include "engine/image_placeholders.h"
#include "io/audio/audio_decode.h"
#include "server/shared/chat_images.h"
#include "server/shared/serving_common.h"

namespace gemmaserve {
namespace {

using ordered_json = nlohmann::ordered_json;

std::string part_type(const ordered_json& part) {
  const auto t = part.find("type");
  return t != part.end() && t->is_string() ? t->get<std::string>() : "";
}

const std::string* string_field(const ordered_json& obj, const char* key) {
  if (!obj.is_object()) return nullptr;
  const auto it = obj.find(key);
  return it != obj.end() && it->is_string() ? it->get_ptr<const std::string*>() : nullptr;
}

}  // namespace

bool is_audio_part(const ordered_json& part) {
  if (!part.is_object()) return false;
  const std::string type = part_type(part);
  return type == "input_audio" || type == "audio_url";
}

std::string audio_part_url(const ordered_json& part) {
  if (part_type(part) == "input_audio") {
    const auto ia = part.find("input_audio");
    const std::string* data = ia != part.end() ? string_field(*ia, "data") : nullptr;
    const std::string* format = ia != part.end() ? string_field(*ia, "format") : nullptr;
    if (data == nullptr || format == nullptr) {
      throw InputError(
          "input_audio content parts need input_audio.data and input_audio.format "
          "(strings)",
          "messages");
    }
    return "data:audio/" + *format + ";base64," + *data;
  }
  const auto au = part.find("audio_url");
  const std::string* url = au != part.end() ? string_field(*au, "url") : nullptr;
  if (url == nullptr) {
    throw InputError("audio_url content parts need audio_url.url (a string)", "messages");
  }
  return *url;
}

std::vector<std::string> audio_urls_of(const ordered_json& messages) {
  return part_urls_of(messages, is_audio_part, audio_part_url);
}

std::vector<PromptAudio> load_chat_audios(const media::MediaConnector& media,
                                          const std::vector<std::string>& urls,
                                          double max_audio_seconds) {
  audio::AudioDecodeLimits limits;
  limits.max_bytes = media.options().max_bytes;
  limits.max_seconds = max_audio_seconds;
  limits.max_seconds_source = "--max-audio-seconds";
  std::vector<PromptAudio> clips;
  clips.reserve(urls.size());
  for (const std::string& url : urls) {
    try {
      const std::vector<std::uint8_t> bytes = media.fetch(url, media::MediaKind::kAudio);
      clips.push_back(
          PromptAudio{audio::load_audio(bytes, PromptAudio::kSampleRate, limits).samples});
    } catch (const InputError& e) {
      throw InputError(e.what(), "messages");
    }
  }
  return clips;
}

std::vector<PromptAudio> load_prompt_audios(const ServingContext& ctx,
                                            const std::vector<std::string>& urls) {
  if (urls.empty()) return {};
  try {
    if (!ctx.engine.has_audio()) {
      throw InputError("This model does not accept audio input: " + ctx.model_name() +
                       " has no audio embedder.");
    }
    check_audio_limit(ctx.engine.args().limit_mm_per_prompt, urls.size());
  } catch (const InputError& e) {
    throw InputError(e.what(), "messages");
  }
  return load_chat_audios(ctx.media, urls, ctx.engine.args().max_audio_seconds);
}

}  // namespace gemmaserve
