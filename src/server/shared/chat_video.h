// Videos in chat messages, in the content-part form vLLM's chat parser accepts:
//   {"type": "video_url", "video_url": {"url": URL}}
// The chat template sees each as {"type": "video"} (Gemma 4's template writes <|video|> for
// it); the URLs are loaded through the media room (the video size cap and fetch timeout) and
// decoded by io/video with the loader settings below. A data:video/jpeg;base64,F1,F2,... URL is
// vLLM's list of JPEG frames (no sampling, 24 fps as Hugging Face assumes without metadata).
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "gemmaserve/llm.h"
#include "gemmaserve/prompt_video.h"
#include "io/media/media_connector.h"
#include "io/video/video_decode.h"

namespace gemmaserve {

struct ServingContext;

// True for a video_url content part.
bool is_video_part(const nlohmann::ordered_json& part);

// The URL of a video part; InputError (param "messages") when malformed.
std::string video_part_url(const nlohmann::ordered_json& part);

// The URLs of every video part of `messages`, in order (400s for malformed video parts).
std::vector<std::string> video_urls_of(const nlohmann::ordered_json& messages);

// A media_io_kwargs object (--media-io-kwargs, or a request's media_io_kwargs) applied over
// `base`: {"video": {"num_frames": N, "fps": F, "video_backend": "opencv",
// "frame_recovery": false}}; "image" and "audio" may only be empty objects (their loaders take
// no options). null leaves `base`. InputError naming `where` for anything else.
video::VideoSampling apply_media_io_kwargs(const nlohmann::json& kwargs, const std::string& where,
                                           video::VideoSampling base);

// The num_frames / fps of an mm_processor_kwargs object (Gemma4VideoProcessor's names) applied
// over `base`; other keys are the image processor's (parse_mm_processor_kwargs).
video::VideoSampling apply_video_processor_kwargs(const nlohmann::json& kwargs,
                                                  const std::string& where,
                                                  video::VideoSampling base);

// What a request's videos are loaded with.
struct VideoLoadOptions {
  video::VideoSampling sampling;
  video::VideoDecodeLimits limits;
};

// The engine's loader settings: --media-io-kwargs, --mm-processor-kwargs' num_frames / fps,
// --max-video-seconds and the media room's video size cap.
VideoLoadOptions engine_video_load_options(const EngineArgs& args,
                                           const media::MediaConnectorOptions& media);

// The loader settings of a request: the engine's --media-io-kwargs and --mm-processor-kwargs,
// then the request's media_io_kwargs and mm_processor_kwargs (either may be null). 400s (param
// named) for bad values.
VideoLoadOptions video_load_options(const ServingContext& ctx,
                                    const nlohmann::json& request_media_io_kwargs,
                                    const nlohmann::json& request_mm_processor_kwargs);

// A decoded clip as the engine takes it: its frames and their times (index / fps; 24 fps when
// the clip has none, as Hugging Face's processor assumes).
PromptVideo prompt_video_of(video::DecodedVideo decoded);

// Loads and decodes each URL in order; any failure is an InputError (param "messages") with the
// media room's or the decoder's message.
std::vector<PromptVideo> load_chat_videos(const media::MediaConnector& media,
                                          const std::vector<std::string>& urls,
                                          const VideoLoadOptions& options);

// A request's videos for the engine: 400 (param "messages") when the model takes no video or
// the request is over --limit-mm-per-prompt (both before anything is fetched), then loaded.
std::vector<PromptVideo> load_prompt_videos(const ServingContext& ctx,
                                            const std::vector<std::string>& urls,
                                            const VideoLoadOptions& options);

}  // namespace gemmaserve
