// POST /v1/audio/transcriptions and /v1/audio/translations bodies (multipart/form-data) parsed
// into a struct, with vLLM's field names, defaults and messages (protocol only, no serving).
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "gemmaserve/sampling_params.h"
#include "server/openai/speech_prompt.h"

namespace gemmaserve {

// The form as the HTTP layer read it: the text fields (a repeated name becomes an array, as
// timestamp_granularities[] is sent) and the uploaded file.
struct SpeechForm {
  nlohmann::ordered_json fields = nlohmann::ordered_json::object();
  std::optional<std::string> file;  // the bytes of the `file` part
  bool file_is_text = false;        // `file` came as a plain field, not an upload
};

struct SpeechRequest {
  SpeechTask task = SpeechTask::kTranscribe;
  std::string file;
  std::optional<std::string> model;
  std::optional<std::string> language;  // ISO 639-1, checked
  // Translations' to_language, checked (a transcription leaves it unread: logged as ignored).
  std::string target_language = "en";
  std::string prompt;                    // context for the model (OpenAI's prompt)
  std::string response_format = "json";  // json | text | verbose_json | srt | vtt
  bool segment_timestamps = false;       // timestamp_granularities[] has "segment"
  bool stream = false;
  bool include_usage = false;           // stream_include_usage
  bool continuous_usage_stats = false;  // stream_continuous_usage_stats
  SamplingParams params;                // temperature 0 unless given
  std::optional<int> max_completion_tokens;
  std::vector<std::string> ignored_fields;  // logged as vLLM does
};

// Checks and reads the form. 400 (ApiError, param = the field) for a missing file, a bad value
// or an unknown response format; 422 when `file` is a text field (vLLM's "Expected 'file' to be a
// file-like object, not 'str'."). `max_file_bytes`: larger files get vLLM's "Maximum file size
// exceeded (parameter=audio_filesize_mb, value=MiB)".
SpeechRequest parse_speech_request(const SpeechForm& form, SpeechTask task,
                                   const SamplingParams& defaults, std::size_t max_file_bytes);

}  // namespace gemmaserve
