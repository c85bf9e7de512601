#include "engine/image_placeholders.h"

#include <algorithm>

#include "core/error.h"
#include "core/logging.h"
#include "engine/block_hash.h"
#include "model/gemma4_image_processor.h"

namespace gemmaserve {
namespace {

std::string plural(size_t n, const std::string& word) {
  return std::to_string(n) + " " + word + (n == 1 ? "" : "s");
}

void put_u64(Sha256* h, uint64_t v) {
  uint8_t b[8];
  for (int i = 0; i < 8; ++i) b[i] = static_cast<uint8_t>(v >> (8 * i));
  h->update(std::span<const uint8_t>(b, 8));
}

}  // namespace

ExpandedPrompt expand_image_placeholders(std::span<const int32_t> ids,
                                         std::span<const int> soft_tokens,
                                         const ImageTokenIds& tokens) {
  return expand_media_placeholders(ids, soft_tokens, {tokens.image, tokens.boi, tokens.eoi});
}

std::vector<ImagePlaceholder> placeholder_runs(std::span<const int32_t> ids, int32_t placeholder) {
  std::vector<ImagePlaceholder> runs;
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] != placeholder) continue;
    if (i > 0 && ids[i - 1] == placeholder) {
      ++runs.back().length;
    } else {
      runs.push_back({static_cast<int32_t>(i), 1});
    }
  }
  return runs;
}

namespace {

void check_placeholder_count(std::span<const int32_t> ids, size_t items,
                             const MediaTokens& tokens) {
  const std::string name = tokens.name, item = tokens.item;
  const size_t found = static_cast<size_t>(std::count(ids.begin(), ids.end(), tokens.placeholder));
  if (found != items) {
    throw InputError("Found " + plural(found, name + " token") + " in the prompt but " +
                     plural(items, item) + (items == 1 ? " was" : " were") +
                     " given; the prompt needs one " + name + " per " + item + ", in order");
  }
}

void check_not_expanded(std::span<const int32_t> ids, size_t i, const MediaTokens& tokens) {
  if (i > 0 && ids[i - 1] == tokens.begin) {
    const std::string name = tokens.name, item = tokens.item;
    throw InputError("the prompt already holds an expanded " + item + " (" + tokens.begin_name +
                     " followed by " + name + "); put one bare " + name + " per " + item +
                     " and let the engine expand it");
  }
}

}  // namespace

std::vector<int32_t> replace_media_placeholders(std::span<const int32_t> ids,
                                                std::span<const std::vector<int32_t>> replacements,
                                                const MediaTokens& tokens) {
  check_placeholder_count(ids, replacements.size(), tokens);
  std::vector<int32_t> out;
  size_t next = 0;
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] != tokens.placeholder) {
      out.push_back(ids[i]);
      continue;
    }
    check_not_expanded(ids, i, tokens);
    const std::vector<int32_t>& r = replacements[next++];
    out.insert(out.end(), r.begin(), r.end());
  }
  return out;
}

ExpandedPrompt expand_media_placeholders(std::span<const int32_t> ids,
                                         std::span<const int> soft_tokens,
                                         const MediaTokens& tokens) {
  check_placeholder_count(ids, soft_tokens.size(), tokens);
  ExpandedPrompt out;
  size_t extra = 0;
  for (int n : soft_tokens) extra += static_cast<size_t>(n) + 1;
  out.token_ids.reserve(ids.size() + extra);
  size_t next = 0;
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] != tokens.placeholder) {
      out.token_ids.push_back(ids[i]);
      continue;
    }
    check_not_expanded(ids, i, tokens);
    const int n = soft_tokens[next++];
    out.token_ids.push_back(tokens.begin);
    out.placeholders.push_back({static_cast<int32_t>(out.token_ids.size()), n});
    out.token_ids.insert(out.token_ids.end(), static_cast<size_t>(n), tokens.placeholder);
    out.token_ids.push_back(tokens.end);
  }
  return out;
}

int gemma4_image_soft_tokens(const Gemma4ImageProcessorOptions& o, int position_embedding_size,
                             int width, int height) {
  const Gemma4ResizeTarget t = gemma4_resize_target(height, width, o);
  const int rows = t.height / o.patch_size;
  const int columns = t.width / o.patch_size;
  if (std::max(rows, columns) > position_embedding_size) {
    throw InputError("a " + std::to_string(width) + "x" + std::to_string(height) +
                     " image at max_soft_tokens " + std::to_string(o.max_soft_tokens) + " is " +
                     std::to_string(columns) + "x" + std::to_string(rows) +
                     " patches, more per side than the vision tower's position table holds (" +
                     std::to_string(position_embedding_size) + "); use a smaller max_soft_tokens");
  }
  const int64_t patches = int64_t{rows} * columns;
  return static_cast<int>(patches / (int64_t{o.pooling_kernel_size} * o.pooling_kernel_size));
}

std::optional<int> parse_mm_processor_kwargs(const nlohmann::json& kwargs,
                                             const std::string& where) {
  if (kwargs.is_null()) return std::nullopt;
  if (!kwargs.is_object()) throw InputError(where + " must be a JSON object");
  std::optional<int> max_soft_tokens;
  for (const auto& [key, value] : kwargs.items()) {
    if (key == "num_frames" || key == "fps") continue;  // the video loader's (chat_video.h)
    if (key != "max_soft_tokens") {
      throw InputError(where + ": unsupported key '" + key +
                       "' (Gemma 4 images take max_soft_tokens, videos num_frames and fps)");
    }
    if (!value.is_number_integer()) {
      throw InputError(where + ": max_soft_tokens must be an integer, got " + value.dump());
    }
    const int64_t v = value.get<int64_t>();
    validate_gemma4_max_soft_tokens(static_cast<int>(std::clamp<int64_t>(v, -1, int64_t{1} << 30)));
    max_soft_tokens = static_cast<int>(v);
  }
  return max_soft_tokens;
}

namespace {

// vLLM's per-modality options besides count size the dummy items of its memory profiling run
// (ImageDummyOptions, VideoDummyOptions, AudioDummyOptions); gemmaserve has no such run.
void check_dummy_options(const std::string& flag, const std::string& modality,
                         const nlohmann::json& options) {
  const std::vector<std::string> known =
      modality == "image"   ? std::vector<std::string>{"width", "height"}
      : modality == "video" ? std::vector<std::string>{"num_frames", "width", "height"}
                            : std::vector<std::string>{"length"};
  for (const auto& [key, value] : options.items()) {
    if (key == "count") continue;
    if (std::find(known.begin(), known.end(), key) == known.end()) {
      std::string names = "count";
      for (const std::string& k : known) names += ", " + k;
      throw InputError(flag + ": unknown option '" + key + "' of '" + modality + "' (" + names +
                       ")");
    }
    GS_LOG_WARNING << flag << ": " << modality << "." << key
                   << " sizes vLLM's memory-profiling dummy inputs; gemmaserve does no profiling "
                      "run, so it changes nothing";
  }
}

}  // namespace

std::map<std::string, int> parse_limit_mm_per_prompt(const std::string& json_text) {
  const std::string flag = "--limit-mm-per-prompt";
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(json_text);
  } catch (const nlohmann::json::parse_error& e) {
    throw InputError(flag + ": not valid JSON (" + std::string(e.what()) + ")");
  }
  if (!j.is_object()) throw InputError(flag + " must be a JSON object such as '{\"image\": 2}'");
  std::map<std::string, int> limits;
  for (const auto& [key, value] : j.items()) {
    if (key != "image" && key != "video" && key != "audio") {
      throw InputError(flag + ": unknown modality '" + key + "' (image, video or audio)");
    }
    if (value.is_object()) check_dummy_options(flag, key, value);
    const nlohmann::json& count =
        value.is_object() && value.contains("count") ? value.at("count") : value;
    if (!count.is_number_integer() || count.get<int64_t>() < 0 ||
        count.get<int64_t>() > (int64_t{1} << 30)) {
      throw InputError(flag + ": the limit of '" + key + "' must be a non-negative integer, got " +
                       value.dump());
    }
    limits[key] = static_cast<int>(count.get<int64_t>());
  }
  return limits;
}

namespace {

// vLLM's "At most N image(s) may be provided in one prompt." for any modality.
void check_media_limit(const std::map<std::string, int>& limits, const std::string& modality,
                       size_t count) {
  const auto it = limits.find(modality);
  if (it == limits.end() || count <= static_cast<size_t>(it->second)) return;
  throw InputError("At most " + std::to_string(it->second) + " " + modality +
                   "(s) may be provided in one prompt. Set `--limit-mm-per-prompt` to "
                   "increase this limit.");
}

}  // namespace

void check_image_limit(const std::map<std::string, int>& limits, size_t count) {
  check_media_limit(limits, "image", count);
}

void check_audio_limit(const std::map<std::string, int>& limits, size_t count) {
  check_media_limit(limits, "audio", count);
}

void check_video_limit(const std::map<std::string, int>& limits, size_t count) {
  check_media_limit(limits, "video", count);
}

std::string audio_content_hash(std::span<const float> samples) {
  Sha256 h;
  h.update(std::string_view("gemmaserve.audio.v1"));
  put_u64(&h, static_cast<uint64_t>(samples.size()));
  h.update(std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(samples.data()),
                                    samples.size() * sizeof(float)));
  return BlockHash{h.finish()}.hex();
}

std::string image_content_hash(const image::RgbImage& rgb, int max_soft_tokens) {
  Sha256 h;
  h.update(std::string_view("gemmaserve.image.v1"));
  put_u64(&h, static_cast<uint64_t>(rgb.width));
  put_u64(&h, static_cast<uint64_t>(rgb.height));
  put_u64(&h, static_cast<uint64_t>(max_soft_tokens));
  h.update(std::span<const uint8_t>(rgb.pixels));
  return BlockHash{h.finish()}.hex();
}

}  // namespace gemmaserve
