#include "server/openai/serving_transcription.h"

#include <zlib.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>

#include "core/error.h"
#include "core/logging.h"
#include "core/python_text.h"
#include "io/audio/audio_decode.h"
#include "server/shared/api_error.h"
#include "server/shared/chat_images.h"
#include "server/shared/chat_output_parser.h"
#include "server/shared/chat_rendering.h"
#include "tokenizer/tokenizer.h"

namespace gemmaserve {
namespace {

using ordered_json = nlohmann::ordered_json;
constexpr double kSampleRate = PromptAudio::kSampleRate;

struct SpeechJob {
  SpeechRequest request;
  std::string id;
  int64_t created = 0;
  double duration = 0;  // seconds of audio
  std::vector<audio::SampleRange> pieces;
  std::vector<int> prompt_tokens;  // per piece, soft tokens included
  ChatParseOptions parse;
  std::string separator;  // between the pieces' texts
  std::string marker;     // translations: where the translation starts ("English: ")
};

// The translation in a "<transcription>\n<Target>: <translation>" answer; the whole answer when
// the model did not follow the format.
std::string translation_of(const SpeechJob& job, const std::string& answer) {
  const size_t at = answer.find(job.marker);
  return at == std::string::npos ? answer : answer.substr(at + job.marker.size());
}

std::string piece_text(const SpeechJob& job, const CompletionOutput& o) {
  ChatMessageParts parts = parse_chat_output(o.text, job.parse);
  const std::string content = parts.content.value_or("");
  return job.request.task == SpeechTask::kTranslate ? translation_of(job, content) : content;
}

double seconds_of(size_t samples) { return static_cast<double>(samples) / kSampleRate; }

// len(text) / len(zlib.compress(text)), Whisper's repetition signal.
double compression_ratio(const std::string& text) {
  if (text.empty()) return 0;
  uLongf size = compressBound(static_cast<uLong>(text.size()));
  std::vector<Bytef> out(size);
  if (compress(out.data(), &size, reinterpret_cast<const Bytef*>(text.data()),
               static_cast<uLong>(text.size())) != Z_OK) {
    return 0;
  }
  return static_cast<double>(text.size()) / static_cast<double>(size);
}

// HH:MM:SS,mmm (srt) or HH:MM:SS.mmm (vtt); milliseconds truncated as vLLM's renderer does.
std::string cue_time(double seconds, char comma) {
  const auto whole = static_cast<long long>(seconds);
  const int ms = static_cast<int>((seconds - static_cast<double>(whole)) * 1000);
  char buf[48];
  std::snprintf(buf, sizeof buf, "%02lld:%02lld:%02lld%c%03d", whole / 3600, (whole / 60) % 60,
                whole % 60, comma, ms);
  return buf;
}

struct Segment {
  double start = 0, end = 0;
  std::string text;
  std::vector<int32_t> tokens;
  double avg_logprob = 0;
};

std::vector<Segment> segments_of(const SpeechJob& job, const std::vector<RequestOutput>& finals) {
  std::vector<Segment> out;
  for (size_t i = 0; i < finals.size(); ++i) {
    const CompletionOutput& o = finals[i].outputs.at(0);
    Segment s;
    s.start = seconds_of(job.pieces[i].begin);
    s.end = seconds_of(job.pieces[i].end);
    s.text = (i > 0 ? job.separator : "") + piece_text(job, o);
    s.tokens = o.token_ids;
    double sum = 0;
    if (o.logprobs) {
      for (size_t t = 0; t < o.logprobs->size() && t < o.token_ids.size(); ++t) {
        const auto it = (*o.logprobs)[t].find(o.token_ids[t]);
        if (it != (*o.logprobs)[t].end()) sum += it->second;
      }
    }
    s.avg_logprob = o.token_ids.empty() ? 0 : sum / static_cast<double>(o.token_ids.size());
    out.push_back(std::move(s));
  }
  return out;
}

std::string trimmed(const std::string& s) {
  const size_t b = s.find_first_not_of(" \t\r\n");
  if (b == std::string::npos) return "";
  return s.substr(b, s.find_last_not_of(" \t\r\n") - b + 1);
}

std::string subtitles(const std::vector<Segment>& segments, bool vtt) {
  std::string out = vtt ? "WEBVTT\n\n" : "";
  for (size_t i = 0; i < segments.size(); ++i) {
    const Segment& s = segments[i];
    if (i > 0) out += "\n\n";
    if (!vtt) out += std::to_string(i + 1) + "\n";
    out += cue_time(s.start, vtt ? '.' : ',') + " --> " + cue_time(s.end, vtt ? '.' : ',') + "\n" +
           trimmed(s.text);
  }
  return segments.empty() ? out : out + "\n";
}

ServingResponse whole_response(const SpeechJob& job, const std::vector<RequestOutput>& finals) {
  const std::vector<Segment> segments = segments_of(job, finals);
  std::string text;
  for (const Segment& s : segments) text += s.text;
  ServingResponse resp;
  const std::string& format = job.request.response_format;
  if (format == "text") {
    resp.content_type = "text/plain; charset=utf-8";
    resp.text = text + "\n";  // OpenAI's text answer ends with a newline
    return resp;
  }
  if (format == "srt" || format == "vtt") {
    resp.content_type =
        format == "srt" ? "application/x-subrip; charset=utf-8" : "text/vtt; charset=utf-8";
    resp.text = subtitles(segments, format == "vtt");
    return resp;
  }
  if (format == "verbose_json") {
    ordered_json segs = ordered_json::array();
    for (size_t i = 0; i < segments.size(); ++i) {
      const Segment& s = segments[i];
      ordered_json j;
      j["id"] = i;
      j["avg_logprob"] = s.avg_logprob;
      j["compression_ratio"] = compression_ratio(s.text);
      j["end"] = s.end;
      j["no_speech_prob"] = nullptr;
      j["seek"] = job.pieces[i].begin / 160;  // Whisper's seek: 10 ms frames
      j["start"] = s.start;
      j["temperature"] = job.request.params.temperature;
      j["text"] = s.text;
      j["tokens"] = s.tokens;
      segs.push_back(std::move(j));
    }
    resp.body["duration"] = python_float_repr(job.duration);
    resp.body["language"] =
        job.request.language ? ordered_json(*job.request.language) : ordered_json(nullptr);
    resp.body["text"] = text;
    resp.body["segments"] = std::move(segs);
    resp.body["words"] = nullptr;
    return resp;
  }
  resp.body["text"] = text;
  if (job.request.task == SpeechTask::kTranscribe) {
    resp.body["usage"] = ordered_json{{"type", "duration"},
                                      {"seconds", static_cast<int64_t>(std::ceil(job.duration))}};
  }
  return resp;
}

// The stream's state per piece: pieces run together, their text goes out in order.
struct PieceStream {
  std::unique_ptr<ChatOutputParser> parser;
  std::string pending;  // text not sent yet (a later piece, or a translation before its marker)
  bool marker_seen = false;
  bool finished = false;
  bool sent_any = false;
  std::optional<std::string> finish_reason;
  ordered_json stop_reason = nullptr;
  int tokens = 0;
};

void stream_speech(ServingContext& ctx, std::shared_ptr<SpeechJob> job,
                   std::shared_ptr<EngineSession> session, const SseWrite& write) {
  const SpeechRequest& req = job->request;
  const bool translate = req.task == SpeechTask::kTranslate;
  const char* object = translate ? "translation.chunk" : "transcription.chunk";
  const bool include_usage = req.include_usage || ctx.options.enable_force_include_usage;
  int prompt_tokens = 0;
  for (int n : job->prompt_tokens) prompt_tokens += n;
  std::vector<PieceStream> pieces(job->pieces.size());
  for (PieceStream& p : pieces) p.parser = std::make_unique<ChatOutputParser>(job->parse);
  size_t current = 0;  // the piece whose text goes out now
  auto completion_tokens = [&] {
    int c = 0;
    for (const PieceStream& p : pieces) c += p.tokens;
    return c;
  };
  auto chunk = [&](ordered_json choices) {
    ordered_json c;
    c["id"] = job->id;
    c["object"] = object;
    c["created"] = job->created;
    c["model"] = ctx.model_name();
    c["choices"] = std::move(choices);
    if (include_usage && req.continuous_usage_stats) {
      const int done = completion_tokens();
      c["usage"] = ordered_json{{"prompt_tokens", prompt_tokens},
                                {"total_tokens", prompt_tokens + done},
                                {"completion_tokens", done}};
    }
    return c;
  };
  // Sends the current piece's pending text (and its end when finished); false: client gone.
  auto flush = [&](PieceStream& p, bool finishing) {
    std::string text;
    if (!translate || p.marker_seen) {
      text = std::move(p.pending);
      p.pending.clear();
    } else if (const size_t at = p.pending.find(job->marker); at != std::string::npos) {
      p.marker_seen = true;
      text = p.pending.substr(at + job->marker.size());
      p.pending.clear();
    } else if (finishing) {
      text = std::move(p.pending);  // no marker: the whole answer
      p.pending.clear();
    }
    if (text.empty() && !finishing) return true;
    if (current > 0 && !p.sent_any) text = job->separator + text;
    p.sent_any = true;
    ordered_json choice;
    choice["delta"] = ordered_json{{"content", text}};
    if (finishing) {
      choice["finish_reason"] = p.finish_reason.value_or("stop");
      choice["stop_reason"] = p.stop_reason;
    }
    return write(sse_event(chunk(ordered_json::array({std::move(choice)}))));
  };
  const StreamEnd end = pump_stream(*session, write, [&](std::vector<SessionEvent>& events) {
    for (SessionEvent& e : events) {
      PieceStream& p = pieces.at(e.prompt_index);
      for (const CompletionDelta& d : e.delta.outputs) {
        p.tokens += static_cast<int>(d.token_ids.size());
        ChatOutputDelta out = p.parser->feed(d.text);
        p.pending += out.content;
        if (d.finish_reason) {
          p.pending += p.parser->finish().content;
          p.finished = true;
          p.finish_reason = d.finish_reason;
          p.stop_reason = stop_reason_json(d.stop_reason_text, d.stop_reason_token);
        }
      }
      if (e.prompt_index != current) continue;
      if (!flush(p, p.finished)) return false;
      // A finished piece hands over to the next, whose text may be waiting already.
      while (pieces[current].finished && current + 1 < pieces.size()) {
        ++current;
        PieceStream& next = pieces[current];
        if (!next.pending.empty() || next.finished) {
          if (!flush(next, next.finished)) return false;
        }
      }
    }
    return true;
  });
  if (end == StreamEnd::kClientGone) return;
  if (end == StreamEnd::kFinished && include_usage) {
    const int done = completion_tokens();
    ordered_json c = chunk(ordered_json::array());
    c["usage"] = ordered_json{{"prompt_tokens", prompt_tokens},
                              {"total_tokens", prompt_tokens + done},
                              {"completion_tokens", done}};
    if (!write(sse_event(c))) return;
  }
  write("data: [DONE]\n\n");
}

std::vector<float> decode_upload(const ServingContext& ctx, const std::string& file) {
  audio::AudioDecodeLimits limits;
  limits.max_bytes = file.size();  // the size was checked with the request
  limits.max_seconds = ctx.engine.args().max_audio_seconds;
  limits.max_seconds_source = "--max-audio-seconds";
  try {
    const auto* bytes = reinterpret_cast<const std::uint8_t*>(file.data());
    return audio::load_audio(std::span<const std::uint8_t>(bytes, file.size()),
                             PromptAudio::kSampleRate, limits)
        .samples;
  } catch (const audio::AudioTooLongError& e) {
    throw bad_request(e.what(), "file");
  } catch (const InputError& e) {
    throw bad_request(std::string("Invalid or unsupported audio file: ") + e.what(), "file");
  }
}

}  // namespace

ServingResponse serve_speech_to_text(ServingContext& ctx, const SpeechForm& form, SpeechTask task) {
  auto job = std::make_shared<SpeechJob>();
  job->request = parse_speech_request(form, task, ctx.engine.default_sampling_params(),
                                      ctx.options.max_audio_file_bytes);
  SpeechRequest& req = job->request;
  check_model_name(ctx, req.model);
  log_ignored_fields(req.ignored_fields);
  if (!ctx.engine.has_audio()) {
    throw bad_request(
        "This model does not accept audio input: " + ctx.model_name() + " has no audio embedder.",
        "file");
  }
  const Tokenizer* tok = ctx.engine.tokenizer();
  if (tok == nullptr) throw bad_request("speech-to-text needs a tokenizer; this model has none");
  const std::vector<float> samples = decode_upload(ctx, req.file);
  if (samples.empty()) throw bad_request("Invalid or unsupported audio file: no samples", "file");
  job->duration = seconds_of(samples.size());
  job->pieces = ctx.engine.audio_pieces(samples);

  const std::optional<std::string> language =
      req.language ? speech_language_name(*req.language) : std::nullopt;
  const std::string target = *speech_language_name(req.target_language);
  job->marker = translation_marker(target);
  // The pieces' texts are in the target language (translations) or the spoken one.
  const std::string text_language =
      task == SpeechTask::kTranslate ? req.target_language : req.language.value_or("");
  job->separator = text_language == "ja" || text_language == "zh" ? "" : " ";
  std::optional<ChatTemplate> storage;
  const ChatTemplate& tmpl = select_chat_template(ctx, std::nullopt, storage);
  ordered_json content = ordered_json::array();
  content.push_back({{"type", "input_audio"}, {"input_audio", {{"data", ""}, {"format", "wav"}}}});
  content.push_back(
      {{"type", "text"}, {"text", speech_instruction(task, language, target, req.prompt)}});
  ChatPromptInput in;
  in.messages = messages_for_template(
      ordered_json::array({ordered_json{{"role", "user"}, {"content", std::move(content)}}}));
  in.default_kwargs = ctx.options.default_chat_template_kwargs;
  in.gemma4 = ctx.gemma4;
  in.content_format = ctx.options.chat_template_content_format;
  const ChatPrompt prompt = render_chat_prompt(tmpl, *tok, in);

  job->parse.parse_reasoning = ctx.reasoning_parser;
  job->parse.strip_markers = ctx.gemma4;
  job->parse.include_reasoning = false;
  SamplingParams params = req.params;
  if (ctx.gemma4 && ctx.reasoning_parser) params.skip_special_tokens = false;
  if (req.response_format == "verbose_json") params.logprobs = 0;  // the segments' avg_logprob
  std::vector<EngineRequest> requests;
  for (const audio::SampleRange& piece : job->pieces) {
    std::vector<PromptAudio> clip{
        PromptAudio{std::vector<float>(samples.begin() + static_cast<std::ptrdiff_t>(piece.begin),
                                       samples.begin() + static_cast<std::ptrdiff_t>(piece.end))}};
    const std::vector<int32_t> expanded = expand_prompt_images(ctx, prompt.token_ids, {}, clip);
    const int prompt_len = static_cast<int>(expanded.size());
    job->prompt_tokens.push_back(prompt_len);
    EngineRequest er;
    er.request_id = random_request_id(std::string(speech_task_name(task)) + "-");
    er.prompt_token_ids = prompt.token_ids;
    er.audios = std::move(clip);
    er.prompt = prompt.text;
    er.params = params;
    er.params.max_tokens = resolve_max_tokens(ctx, prompt_len, req.max_completion_tokens);
    er.params.validate(ctx.engine.vocab_size(), ctx.options.max_logprobs);
    requests.push_back(std::move(er));
  }
  check_overload(ctx);
  job->id = std::string(speech_task_name(task)) + "-" + random_request_id("");
  job->created = unix_time_now();
  const size_t n = requests.size();
  auto session = start_session(ctx, std::move(requests));
  if (!ctx.options.disable_log_requests) {
    GS_LOG_INFO << "Received request " << job->id << ": " << job->duration << " s of audio in " << n
                << " piece(s), stream=" << (req.stream ? "true" : "false");
  }
  ServingResponse resp;
  if (req.stream) {
    ServingContext* c = &ctx;
    resp.stream = [c, job, session](const SseWrite& write) {
      stream_speech(*c, job, session, write);
    };
    return resp;
  }
  const std::vector<RequestOutput> finals = collect_final_outputs(*session, n);
  for (const RequestOutput& r : finals) {
    if (r.error) {
      throw r.error->bad_request ? bad_request(r.error->message)
                                 : ApiError(500, "InternalServerError", r.error->message);
    }
  }
  return whole_response(*job, finals);
}

}  // namespace gemmaserve
