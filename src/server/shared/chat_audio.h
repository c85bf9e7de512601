// Audio in chat messages, in the content-part forms vLLM's chat parser accepts:
//   {"type": "input_audio", "input_audio": {"data": BASE64, "format": "wav"|"mp3"|...}}
//   {"type": "audio_url", "audio_url": {"url": URL}}
// The chat template sees each as {"type": "audio"} (Gemma 4's template writes <|audio|> for
// it); the clips are loaded through the media room, decoded and resampled to 16 kHz mono.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "gemmaserve/prompt_audio.h"
#include "io/media/media_connector.h"

namespace gemmaserve {

struct ServingContext;

// True for a content part in one of the audio forms above.
bool is_audio_part(const nlohmann::ordered_json& part);

// The URL of an audio part: input_audio's data becomes data:audio/FORMAT;base64,DATA (vLLM's
// form); InputError (param "messages": a 400 at the API) when malformed.
std::string audio_part_url(const nlohmann::ordered_json& part);

// The URLs of every audio part of `messages`, in order (400s for malformed audio parts).
std::vector<std::string> audio_urls_of(const nlohmann::ordered_json& messages);

// Loads each URL in order (at most the media byte limit), decodes it (io/audio: WAV, FLAC, MP3,
// OGG Vorbis, Opus) and resamples it to 16 kHz mono; any failure is an InputError (param
// "messages") with the media room's or the decoder's message.
std::vector<PromptAudio> load_chat_audios(const media::MediaConnector& media,
                                          const std::vector<std::string>& urls,
                                          double max_audio_seconds);

// A request's clips for the engine: 400 (param "messages") when the model takes no audio or the
// request is over --limit-mm-per-prompt (both before anything is fetched), then load_chat_audios.
std::vector<PromptAudio> load_prompt_audios(const ServingContext& ctx,
                                            const std::vector<std::string>& urls);

}  // namespace gemmaserve
