#include "server/openai/transcription_protocol.h"

#include "core/python_text.h"
#include "server/openai/request_fields.h"
#include "server/shared/api_error.h"

namespace gemmaserve {
namespace {

using ordered_json = nlohmann::ordered_json;

std::optional<std::string> checked_language(RequestFields& f, const char* name) {
  std::optional<std::string> code = f.get_string(name);
  if (!code || code->empty()) return std::nullopt;
  if (!speech_language_name(*code)) throw bad_request(unsupported_language_message(*code), name);
  return code;
}

}  // namespace

SpeechRequest parse_speech_request(const SpeechForm& form, SpeechTask task,
                                   const SamplingParams& defaults, std::size_t max_file_bytes) {
  if (form.file_is_text) {
    throw ApiError(422, "Unprocessable Entity",
                   "Expected 'file' to be a file-like object, not 'str'.");
  }
  if (!form.file) throw bad_request("file: Field required", "file");
  SpeechRequest r;
  r.task = task;
  RequestFields f(form.fields);
  r.model = f.get_string("model");
  if (r.model && r.model->empty()) r.model.reset();  // vLLM: an empty model is the served one
  r.language = checked_language(f, "language");
  if (task == SpeechTask::kTranslate) {
    if (auto target = checked_language(f, "to_language")) r.target_language = *target;
  }
  r.prompt = f.get_string("prompt").value_or("");
  if (auto hotwords = f.get_string("hotwords"); hotwords && !hotwords->empty()) {
    r.prompt += (r.prompt.empty() ? "" : " ") + *hotwords;
  }
  if (auto v = f.get_string("response_format")) r.response_format = *v;
  if (r.response_format != "json" && r.response_format != "text" &&
      r.response_format != "verbose_json" && r.response_format != "srt" &&
      r.response_format != "vtt") {
    throw bad_request(
        "response_format: Input should be 'json', 'text', 'srt', 'verbose_json' or 'vtt'",
        "response_format");
  }
  for (const char* name : {"timestamp_granularities[]", "timestamp_granularities"}) {
    const ordered_json* v = f.raw(name);
    if (v == nullptr) continue;
    const ordered_json list = v->is_array() ? *v : ordered_json::array({*v});
    for (const ordered_json& g : list) {
      const std::string value = g.is_string() ? g.get<std::string>() : g.dump();
      if (value == "segment") {
        r.segment_timestamps = true;
      } else if (value == "word") {
        throw bad_request(
            "timestamp_granularities: word timestamps are not available: Gemma 4 gives no "
            "word times (segment timestamps are given per piece of the audio)",
            "timestamp_granularities");
      } else {
        throw bad_request("timestamp_granularities: Input should be 'word' or 'segment'",
                          "timestamp_granularities");
      }
    }
  }
  if (r.segment_timestamps && r.response_format != "verbose_json") {
    throw bad_request("timestamp_granularities needs response_format verbose_json",
                      "timestamp_granularities");
  }
  r.stream = f.get_bool("stream").value_or(false);
  r.include_usage = f.get_bool("stream_include_usage").value_or(false);
  r.continuous_usage_stats = f.get_bool("stream_continuous_usage_stats").value_or(false);
  if (!r.stream && (r.include_usage || r.continuous_usage_stats)) {
    throw bad_request("Stream options can only be defined when `stream=True`.",
                      r.include_usage ? "stream_include_usage" : "stream_continuous_usage_stats");
  }
  if (r.stream && r.response_format != "json" && r.response_format != "text") {
    throw bad_request(r.response_format + " format doesn't support streaming case",
                      "response_format");
  }
  if (f.get_bool("use_beam_search").value_or(false)) {
    throw ApiError(501, "NotImplementedError", "Beam search is not supported by gemmaserve yet.");
  }
  if (auto n = f.get_int32("n"); n && *n != 1) {
    throw bad_request("n: speech-to-text gives one answer (n is beam search's width)", "n");
  }
  f.get_double("length_penalty");  // beam search only
  SamplingParams& p = r.params;
  p = defaults;
  p.temperature = 0;  // vLLM's speech requests default to greedy, whatever the model's config
  if (auto v = f.get_double("temperature")) p.temperature = *v;
  if (auto v = f.get_double("top_p")) p.top_p = *v;
  if (auto v = f.get_int32("top_k")) p.top_k = *v;
  if (auto v = f.get_double("min_p")) p.min_p = *v;
  if (auto v = f.get_int("seed")) p.seed = static_cast<uint64_t>(*v);
  if (auto v = f.get_double("frequency_penalty")) p.frequency_penalty = *v;
  if (auto v = f.get_double("presence_penalty")) p.presence_penalty = *v;
  if (auto v = f.get_double("repetition_penalty")) p.repetition_penalty = *v;
  if (auto v = f.get_bool("include_stop_str_in_output")) p.include_stop_str_in_output = *v;
  r.max_completion_tokens = f.get_int32("max_completion_tokens");
  if (r.max_completion_tokens && *r.max_completion_tokens < 1) {
    throw bad_request("max_completion_tokens must be at least 1, got " +
                          std::to_string(*r.max_completion_tokens) + ".",
                      "max_completion_tokens");
  }
  if (form.file->size() > max_file_bytes) {
    const double mib = static_cast<double>(form.file->size()) / (1024.0 * 1024.0);
    throw bad_request("Maximum file size exceeded (parameter=audio_filesize_mb, value=" +
                          python_float_repr(mib) + ")",
                      "audio_filesize_mb");
  }
  r.file = *form.file;
  r.ignored_fields = f.unread();
  return r;
}

}  // namespace gemmaserve
