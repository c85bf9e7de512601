#include "server/shared/chat_video.h"

#include <cmath>

#include "core/error.h"
#include "engine/image_placeholders.h"
#include "io/image/image_decode.h"
#include "io/media/base64.h"
#include "server/shared/chat_images.h"
#include "server/shared/serving_common.h"

namespace gemmaserve {
namespace {

using ordered_json = nlohmann::ordered_json;

constexpr double kDefaultFps = 24.0;  // HF's Gemma4Processor without video metadata

std::string part_type(const ordered_json& part) {
  const auto t = part.find("type");
  return t != part.end() && t->is_string() ? t->get<std::string>() : "";
}

bool starts_with_ci(const std::string& s, const std::string& prefix) {
  if (s.size() < prefix.size()) return false;
  for (size_t i = 0; i < prefix.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(s[i])) != prefix[i]) return false;
  }
  return true;
}

// vLLM's VideoMediaIO.load_base64 for "video/jpeg": comma-separated base64 JPEG frames.
PromptVideo load_jpeg_frames(const std::string& url, std::size_t max_bytes) {
  const size_t comma = url.find(',');
  const std::string spec = url.substr(5, comma == std::string::npos ? 0 : comma - 5);
  if (comma == std::string::npos || spec.size() < 7 || spec.substr(spec.size() - 7) != ";base64") {
    throw InputError("Invalid video/jpeg data URL: expected data:video/jpeg;base64,F1,F2,...");
  }
  if ((url.size() - comma) / 4 * 3 > max_bytes + 2) {
    throw InputError("Invalid video data URL: the video is larger than the " +
                     std::to_string(max_bytes) + "-byte media limit.");
  }
  PromptVideo video;
  image::DecodeOptions decode;
  decode.max_bytes = max_bytes;
  size_t begin = comma + 1;
  while (begin <= url.size()) {
    const size_t end = std::min(url.find(',', begin), url.size());
    const size_t index = video.frames.size();
    auto bytes = media::decode_base64(std::string_view(url).substr(begin, end - begin));
    if (!bytes || bytes->empty()) {
      throw InputError("Invalid video/jpeg data URL: frame " + std::to_string(index) +
                       " is not valid base64");
    }
    try {
      video.frames.push_back(image::decode_image(*bytes, decode));
    } catch (const InputError& e) {
      throw InputError("video/jpeg frame " + std::to_string(index) + ": " + e.what());
    }
    if (video.frames.back().width != video.frames.front().width ||
        video.frames.back().height != video.frames.front().height) {
      throw InputError("video/jpeg frame " + std::to_string(index) +
                       " differs in size from the first frame; a video's frames share one size");
    }
    video.timestamps.push_back(static_cast<double>(index) / kDefaultFps);
    begin = end + 1;
  }
  return video;
}

int frames_value(const nlohmann::json& v, const std::string& where) {
  if (!v.is_number_integer() || (v.get<int64_t>() != -1 && v.get<int64_t>() < 1) ||
      v.get<int64_t>() > 100000) {
    throw InputError(where +
                     ": num_frames must be -1 (every frame) or an integer from 1 to "
                     "100000, got " +
                     v.dump());
  }
  return static_cast<int>(v.get<int64_t>());
}

double fps_value(const nlohmann::json& v, const std::string& where) {
  if (!v.is_number() || !std::isfinite(v.get<double>()) ||
      (v.get<double>() <= 0 && v.get<double>() != -1) || v.get<double>() > 1000) {
    throw InputError(where +
                     ": fps must be -1 (the clip's own) or a number of frames per second "
                     "above 0 and at most 1000, got " +
                     v.dump());
  }
  return v.get<double>();
}

}  // namespace

bool is_video_part(const ordered_json& part) {
  return part.is_object() && part_type(part) == "video_url";
}

std::string video_part_url(const ordered_json& part) {
  const auto vu = part.find("video_url");
  if (vu != part.end() && vu->is_object()) {
    const auto u = vu->find("url");
    if (u != vu->end() && u->is_string()) return u->get<std::string>();
  }
  throw InputError("video_url content parts need video_url.url (a string)", "messages");
}

std::vector<std::string> video_urls_of(const ordered_json& messages) {
  return part_urls_of(messages, is_video_part, video_part_url);
}

video::VideoSampling apply_media_io_kwargs(const nlohmann::json& kwargs, const std::string& where,
                                           video::VideoSampling base) {
  if (kwargs.is_null()) return base;
  if (!kwargs.is_object()) throw InputError(where + " must be a JSON object");
  for (const auto& [modality, options] : kwargs.items()) {
    if (modality == "image" || modality == "audio") {
      if (!options.is_object() || !options.empty()) {
        throw InputError(where + ": the " + modality + " loader takes no options, got " +
                         options.dump());
      }
      continue;
    }
    if (modality != "video") {
      throw InputError(where + ": unknown modality '" + modality + "' (image, video or audio)");
    }
    if (!options.is_object()) throw InputError(where + ": \"video\" must be a JSON object");
    const std::string at = where + ".video";
    for (const auto& [key, value] : options.items()) {
      if (key == "num_frames") {
        base.num_frames = frames_value(value, at);
      } else if (key == "fps") {
        base.fps = fps_value(value, at);
      } else if (key == "video_backend") {
        if (value != "opencv") {
          throw InputError(at + ": video_backend " + value.dump() +
                           " is not available; gemmaserve decodes with FFmpeg's libraries as "
                           "vLLM's opencv backend does, and accepts only \"opencv\"");
        }
      } else if (key == "frame_recovery") {
        if (value != false) {
          throw InputError(at +
                           ": frame_recovery is not available; a frame that cannot be "
                           "decoded makes the video a 400 instead (false is accepted)");
        }
      } else {
        throw InputError(at + ": unsupported key '" + key +
                         "' (num_frames, fps, video_backend, frame_recovery)");
      }
    }
  }
  return base;
}

video::VideoSampling apply_video_processor_kwargs(const nlohmann::json& kwargs,
                                                  const std::string& where,
                                                  video::VideoSampling base) {
  if (!kwargs.is_object()) return base;
  if (const auto it = kwargs.find("num_frames"); it != kwargs.end()) {
    base.num_frames = frames_value(*it, where);
  }
  if (const auto it = kwargs.find("fps"); it != kwargs.end()) base.fps = fps_value(*it, where);
  return base;
}

VideoLoadOptions engine_video_load_options(const EngineArgs& a,
                                           const media::MediaConnectorOptions& media) {
  VideoLoadOptions o;
  o.sampling = apply_media_io_kwargs(a.media_io_kwargs, "--media-io-kwargs", o.sampling);
  o.sampling =
      apply_video_processor_kwargs(a.mm_processor_kwargs, "--mm-processor-kwargs", o.sampling);
  o.limits.max_bytes = media.video_max_bytes;
  o.limits.max_duration_seconds = a.max_video_seconds;
  return o;
}

VideoLoadOptions video_load_options(const ServingContext& ctx,
                                    const nlohmann::json& request_media_io_kwargs,
                                    const nlohmann::json& request_mm_processor_kwargs) {
  VideoLoadOptions o = engine_video_load_options(ctx.engine.args(), ctx.media.options());
  try {
    o.sampling = apply_media_io_kwargs(request_media_io_kwargs, "media_io_kwargs", o.sampling);
  } catch (const InputError& e) {
    throw InputError(e.what(), "media_io_kwargs");
  }
  try {
    o.sampling = apply_video_processor_kwargs(request_mm_processor_kwargs, "mm_processor_kwargs",
                                              o.sampling);
  } catch (const InputError& e) {
    throw InputError(e.what(), "mm_processor_kwargs");
  }
  return o;
}

PromptVideo prompt_video_of(video::DecodedVideo decoded) {
  PromptVideo v;
  const double fps = decoded.info.fps > 0 ? decoded.info.fps : kDefaultFps;
  for (const int64_t index : decoded.frame_indices) {
    v.timestamps.push_back(static_cast<double>(index) / fps);
  }
  v.frames = std::move(decoded.frames);
  return v;
}

std::vector<PromptVideo> load_chat_videos(const media::MediaConnector& media,
                                          const std::vector<std::string>& urls,
                                          const VideoLoadOptions& options) {
  std::vector<PromptVideo> videos;
  videos.reserve(urls.size());
  for (const std::string& url : urls) {
    try {
      if (starts_with_ci(url, "data:video/jpeg")) {
        videos.push_back(load_jpeg_frames(url, media.options().video_max_bytes));
        continue;
      }
      const std::vector<std::uint8_t> bytes = media.fetch(url, media::MediaKind::kVideo);
      videos.push_back(
          prompt_video_of(video::decode_video(bytes, options.sampling, options.limits)));
    } catch (const InputError& e) {
      throw InputError(e.what(), "messages");
    }
  }
  return videos;
}

std::vector<PromptVideo> load_prompt_videos(const ServingContext& ctx,
                                            const std::vector<std::string>& urls,
                                            const VideoLoadOptions& options) {
  if (urls.empty()) return {};
  try {
    if (!ctx.engine.has_vision() || !ctx.engine.model_config().video_token_id) {
      throw InputError("This model does not accept video input: " + ctx.model_name() +
                       " has no vision encoder.");
    }
    check_video_limit(ctx.engine.args().limit_mm_per_prompt, urls.size());
  } catch (const InputError& e) {
    throw InputError(e.what(), "messages");
  }
  return load_chat_videos(ctx.media, urls, options);
}

}  // namespace gemmaserve
