#include "server/openai/serving_chat.h"

#include <algorithm>
#include <memory>

#include "core/error.h"
#include "core/logging.h"
#include "server/openai/answer_constraints.h"
#include "server/shared/api_error.h"
#include "server/shared/chat_audio.h"
#include "server/shared/chat_images.h"
#include "server/shared/chat_output_parser.h"
#include "server/shared/chat_rendering.h"
#include "server/shared/chat_video.h"
#include "tokenizer/tokenizer.h"

namespace gemmaserve {
namespace {

using ordered_json = nlohmann::ordered_json;

struct ChatJob {
  ChatRequest request;
  std::vector<int32_t> prompt_ids;
  ChatParseOptions parse;
  std::string id;
  int64_t created = 0;
  std::string echo_text;  // vLLM's chat echo: the last message's content when it is the assistant's
  bool forced_tool_call = false;  // tool_choice "required" or a named function, enforced
  std::string prompt_text;        // the rendered prompt (return_prompt_text)
  // vLLM: with include_reasoning off and an output parser, token ids and logprobs are withheld.
  bool hide_metadata = false;
  int32_t thought_open = -1, thought_close = -1;  // <|channel> / <channel|>, for reasoning_tokens
};

// Tokens inside the thought channel, as a thinking-token reasoning parser counts them.
int reasoning_tokens(const ChatJob& job, const std::vector<int32_t>& ids) {
  size_t begin = 0;
  bool open = job.parse.starts_in_thought_channel;
  for (size_t i = 0; i < ids.size() && !open; ++i) {
    if (ids[i] == job.thought_open) {
      begin = i + 1;
      open = true;
    }
  }
  if (!open) return 0;
  size_t end = begin;
  while (end < ids.size() && ids[end] != job.thought_close) ++end;
  return static_cast<int>(end - begin);
}

// usage.completion_tokens_details: {"reasoning_tokens": N} when a reasoning parser runs.
ordered_json completion_details(const ServingContext& ctx, int reasoning) {
  if (!ctx.reasoning_parser) return nullptr;
  return ordered_json{{"reasoning_tokens", reasoning}};
}

// parallel_tool_calls false keeps only the first call.
bool keeps_tool_call(const ChatJob& job, int index) {
  return job.request.parallel_tool_calls || index == 0;
}

// vLLM's chat `echo`: the last message's text content when its role is the reply's role.
std::string chat_echo_text(const ChatRequest& req) {
  if (!req.echo || req.messages.empty()) return "";
  const ordered_json& last = req.messages.back();
  if (last.value("role", std::string()) != "assistant" || !last.contains("content")) return "";
  const ordered_json& c = last["content"];
  if (c.is_string()) return c.get<std::string>();
  std::string text;
  if (c.is_array()) {
    for (const auto& part : c) {
      if (part.value("type", std::string()) == "text") text += part.value("text", std::string());
    }
  }
  return text;
}

double floor_logprob(float v) { return std::max(static_cast<double>(v), -9999.0); }

ordered_json bytes_of(const std::string& s) {
  ordered_json b = ordered_json::array();
  for (unsigned char c : s) b.push_back(static_cast<int>(c));
  return b;
}

// vLLM's chat logprobs entries for generated tokens.
ordered_json chat_logprobs_content(const ServingContext& ctx, const ChatJob& job,
                                   const std::vector<int32_t>& ids,
                                   const std::vector<TokenLogprobs>& lps) {
  ordered_json content = ordered_json::array();
  const bool as_ids = job.request.return_tokens_as_token_ids;
  const int top = std::max(job.request.top_logprobs.value_or(0), 0);
  for (size_t i = 0; i < ids.size(); ++i) {
    const std::string text = logprob_token_text(ctx, ids[i], as_ids);
    ordered_json e;
    e["token"] = text;
    double lp = -9999.0;
    if (i < lps.size()) {
      auto it = lps[i].find(ids[i]);
      if (it != lps[i].end()) lp = floor_logprob(it->second);
    }
    e["logprob"] = lp;
    e["bytes"] = bytes_of(text);
    ordered_json tops = ordered_json::array();
    if (i < lps.size()) {
      int taken = 0;
      for (const auto& [tid, v] : ranked_logprobs(lps[i])) {
        if (taken++ >= top) break;
        const std::string t = logprob_token_text(ctx, tid, as_ids);
        ordered_json te;
        te["token"] = t;
        te["logprob"] = floor_logprob(v);
        te["bytes"] = bytes_of(t);
        tops.push_back(std::move(te));
      }
    }
    e["top_logprobs"] = std::move(tops);
    content.push_back(std::move(e));
  }
  return content;
}

ordered_json tool_call_json(const ToolCall& call) {
  ordered_json fn;
  fn["name"] = call.name;
  fn["arguments"] = call.arguments;
  ordered_json t;
  t["id"] = call.id;
  t["type"] = "function";
  t["function"] = std::move(fn);
  return t;
}

// vLLM, whole response: "tool_calls" when the model called tools on its own ("auto"), or for
// tool_choice "required" that stopped normally; a named function keeps the engine's reason.
std::string whole_finish_reason(const ChatJob& job, const std::optional<std::string>& reason,
                                bool called_tools) {
  const std::string& choice = job.request.tool_choice;
  const std::string engine = reason.value_or("stop");
  if ((choice == "auto" && called_tools) || (choice == "required" && engine == "stop")) {
    return "tool_calls";
  }
  return engine;
}

// vLLM, stream: "tool_calls" when calls were streamed and the engine stopped normally, unless a
// named function was asked for.
std::string streamed_finish_reason(const ChatJob& job, const std::optional<std::string>& reason,
                                   bool called_tools) {
  const std::string engine = reason.value_or("stop");
  if (called_tools && job.request.tool_choice != "function" && engine == "stop") {
    return "tool_calls";
  }
  return engine;
}

ordered_json final_response(const ServingContext& ctx, const ChatJob& job, const RequestOutput& r) {
  ordered_json choices = ordered_json::array();
  int completion_tokens = 0, reasoning = 0;
  for (const CompletionOutput& o : r.outputs) {
    ChatMessageParts parts = parse_chat_output(o.text, job.parse);
    ordered_json msg;
    msg["role"] = "assistant";
    if (!job.echo_text.empty()) parts.content = job.echo_text + parts.content.value_or("");
    // vLLM answers a forced tool call with content "" (its structured output holds no text).
    if (job.forced_tool_call && !parts.content) parts.content = "";
    msg["content"] = parts.content ? ordered_json(*parts.content) : ordered_json(nullptr);
    msg["refusal"] = nullptr;
    msg["annotations"] = nullptr;
    msg["audio"] = nullptr;
    msg["function_call"] = nullptr;
    // vLLM's ChatMessage drops an empty tool_calls list.
    ordered_json calls = ordered_json::array();
    for (const ToolCall& c : parts.tool_calls) {
      if (keeps_tool_call(job, static_cast<int>(calls.size()))) calls.push_back(tool_call_json(c));
    }
    if (!calls.empty()) msg["tool_calls"] = std::move(calls);
    msg["reasoning"] = parts.reasoning ? ordered_json(*parts.reasoning) : ordered_json(nullptr);
    ordered_json c;
    c["index"] = o.index;
    c["message"] = std::move(msg);
    if (job.request.logprobs && o.logprobs && !job.hide_metadata) {
      ordered_json lp;
      lp["content"] = chat_logprobs_content(ctx, job, o.token_ids, *o.logprobs);
      c["logprobs"] = std::move(lp);
    } else {
      c["logprobs"] = nullptr;
    }
    c["finish_reason"] = whole_finish_reason(job, o.finish_reason, !parts.tool_calls.empty());
    c["stop_reason"] = stop_reason_json(o.stop_reason_text, o.stop_reason_token);
    c["token_ids"] = job.request.return_token_ids && !job.hide_metadata ? ordered_json(o.token_ids)
                                                                        : ordered_json(nullptr);
    c["routed_experts"] = nullptr;
    completion_tokens += static_cast<int>(o.token_ids.size());
    reasoning += reasoning_tokens(job, o.token_ids);
    choices.push_back(std::move(c));
  }
  ordered_json resp;
  resp["id"] = job.id;
  resp["object"] = "chat.completion";
  resp["created"] = job.created;
  resp["model"] = ctx.model_name();
  resp["choices"] = std::move(choices);
  resp["service_tier"] = nullptr;
  resp["system_fingerprint"] = nullptr;
  resp["usage"] = usage_json(static_cast<int>(job.prompt_ids.size()), completion_tokens,
                             reported_cached_tokens(ctx, r.num_cached_tokens),
                             completion_details(ctx, reasoning));
  resp["prompt_logprobs"] = r.prompt_logprobs
                                ? prompt_logprobs_json(ctx, *r.prompt_logprobs, job.prompt_ids)
                                : ordered_json(nullptr);
  resp["prompt_token_ids"] =
      job.request.return_token_ids ? ordered_json(job.prompt_ids) : ordered_json(nullptr);
  resp["prompt_text"] =
      job.request.return_prompt_text ? ordered_json(job.prompt_text) : ordered_json(nullptr);
  resp["kv_transfer_params"] = nullptr;
  resp["ec_transfer_params"] = nullptr;
  resp["metrics"] = nullptr;
  return resp;
}

ordered_json tool_call_delta_json(const ToolCallDelta& d) {
  ordered_json t;
  t["index"] = d.index;
  if (d.id) t["id"] = *d.id;
  if (d.name) t["type"] = "function";
  ordered_json fn = ordered_json::object();
  if (d.name) fn["name"] = *d.name;
  fn["arguments"] = d.arguments;
  t["function"] = std::move(fn);
  return t;
}

void stream_chat(ServingContext& ctx, std::shared_ptr<ChatJob> job,
                 std::shared_ptr<EngineSession> session, const SseWrite& write) {
  const int n = job->request.params.n;
  const int prompt_tokens = static_cast<int>(job->prompt_ids.size());
  std::vector<std::unique_ptr<ChatOutputParser>> parsers;
  std::vector<int> tokens(static_cast<size_t>(n), 0);
  std::vector<std::vector<int32_t>> generated(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) parsers.push_back(std::make_unique<ChatOutputParser>(job->parse));
  const auto& so = job->request.stream_options;
  const bool continuous = so.include_usage && so.continuous_usage_stats;
  auto chunk_json = [&](ordered_json choices) {
    ordered_json c;
    c["id"] = job->id;
    c["object"] = "chat.completion.chunk";
    c["created"] = job->created;
    c["model"] = ctx.model_name();
    c["choices"] = std::move(choices);
    return c;
  };
  // vLLM's continuous usage counts the prompt and the one choice the chunk carries.
  auto choice_usage = [&](int index) {
    const auto i = static_cast<size_t>(index);
    ordered_json u = usage_json(prompt_tokens, tokens[i], -1,
                                completion_details(ctx, reasoning_tokens(*job, generated[i])));
    u.erase("prompt_tokens_details");  // the chunk sets only the counts and the details
    return u;
  };
  for (int i = 0; i < n; ++i) {
    ordered_json delta;
    delta["role"] = "assistant";
    delta["content"] = "";
    ordered_json choice;
    choice["index"] = i;
    choice["delta"] = std::move(delta);
    choice["logprobs"] = nullptr;
    choice["finish_reason"] = nullptr;
    ordered_json first = chunk_json(ordered_json::array({std::move(choice)}));
    if (continuous) first["usage"] = choice_usage(i);
    // vLLM sends the prompt's ids (and rendered text) with the first chunk of each choice.
    first["prompt_token_ids"] =
        job->request.return_token_ids ? ordered_json(job->prompt_ids) : ordered_json(nullptr);
    first["prompt_text"] =
        job->request.return_prompt_text ? ordered_json(job->prompt_text) : ordered_json(nullptr);
    if (!write(sse_event(first))) {
      session->abort();
      return;
    }
  }
  // vLLM sends every choice's role chunk first, then the echo chunks.
  for (int i = 0; i < n && !job->echo_text.empty(); ++i) {
    ordered_json echo;
    echo["index"] = i;
    echo["delta"] = ordered_json{{"content", job->echo_text}};
    echo["logprobs"] = nullptr;
    echo["finish_reason"] = nullptr;
    ordered_json c = chunk_json(ordered_json::array({std::move(echo)}));
    if (continuous) c["usage"] = choice_usage(i);
    if (!write(sse_event(c))) {
      session->abort();
      return;
    }
  }
  const bool with_token_ids = job->request.return_token_ids && !job->hide_metadata;
  int cached_tokens = -1;
  const StreamEnd end = pump_stream(*session, write, [&](std::vector<SessionEvent>& events) {
    for (SessionEvent& e : events) {
      cached_tokens = std::max(cached_tokens, e.num_cached_tokens);
      for (const CompletionDelta& d : e.delta.outputs) {
        const auto i = static_cast<size_t>(d.index);
        ChatOutputParser& parser = *parsers[i];
        const bool first_tokens = tokens[i] == 0;
        tokens[i] += static_cast<int>(d.token_ids.size());
        generated[i].insert(generated[i].end(), d.token_ids.begin(), d.token_ids.end());
        ChatOutputDelta out = parser.feed(d.text);
        const bool finishing = d.finish_reason.has_value();
        if (finishing) {
          ChatOutputDelta tail = parser.finish();
          out.reasoning += tail.reasoning;
          out.content += tail.content;
          for (auto& t : tail.tool_calls) out.tool_calls.push_back(std::move(t));
        }
        // vLLM skips an empty first delta (chunked prefill), and a delta the parsers hold back
        // unless its tokens must be shown (logprobs, token ids).
        if (d.text.empty() && d.token_ids.empty() && first_tokens && !finishing) continue;
        const bool with_logprobs =
            job->request.logprobs && !d.token_ids.empty() && !job->hide_metadata;
        if (out.empty() && !finishing && !with_logprobs && !with_token_ids) continue;
        ordered_json delta = ordered_json::object();
        if (!out.reasoning.empty()) delta["reasoning"] = out.reasoning;
        if (!out.content.empty()) delta["content"] = out.content;
        ordered_json calls = ordered_json::array();
        for (const auto& t : out.tool_calls) {
          if (keeps_tool_call(*job, t.index)) calls.push_back(tool_call_delta_json(t));
        }
        if (!calls.empty()) delta["tool_calls"] = std::move(calls);
        ordered_json choice;
        choice["index"] = d.index;
        choice["delta"] = std::move(delta);
        if (with_logprobs) {
          ordered_json lp;
          lp["content"] = chat_logprobs_content(ctx, *job, d.token_ids, d.logprobs);
          choice["logprobs"] = std::move(lp);
        } else {
          choice["logprobs"] = nullptr;
        }
        if (finishing) {
          choice["finish_reason"] =
              streamed_finish_reason(*job, d.finish_reason, !parser.tool_calls().empty());
          choice["stop_reason"] = stop_reason_json(d.stop_reason_text, d.stop_reason_token);
        } else {
          choice["finish_reason"] = nullptr;
        }
        choice["token_ids"] = with_token_ids ? ordered_json(d.token_ids) : ordered_json(nullptr);
        ordered_json c = chunk_json(ordered_json::array({std::move(choice)}));
        if (continuous) c["usage"] = choice_usage(d.index);
        if (!write(sse_event(c))) return false;
      }
    }
    return true;
  });
  if (end == StreamEnd::kClientGone) return;
  if (end == StreamEnd::kFinished && so.include_usage) {
    int completion = 0, reasoning = 0;
    for (size_t i = 0; i < tokens.size(); ++i) {
      completion += tokens[i];
      reasoning += reasoning_tokens(*job, generated[i]);
    }
    ordered_json c = chunk_json(ordered_json::array());
    // vLLM drops the null members of the final usage chunk (exclude_none).
    c["usage"] = without_nulls(usage_json(prompt_tokens, completion,
                                          reported_cached_tokens(ctx, cached_tokens),
                                          completion_details(ctx, reasoning)));
    if (!write(sse_event(c))) return;
  }
  write("data: [DONE]\n\n");
}

}  // namespace

ServingResponse serve_chat(ServingContext& ctx, const ordered_json& body) {
  auto job = std::make_shared<ChatJob>();
  job->request = parse_chat_request(body, ctx.engine.default_sampling_params());
  apply_server_request_defaults(ctx.options, body, job->request);
  ChatRequest& req = job->request;
  check_model_name(ctx, req.model);
  log_ignored_fields(req.ignored_fields);
  const Tokenizer* tok = ctx.engine.tokenizer();
  if (tok == nullptr) {
    throw bad_request("chat needs a tokenizer, and this model has none", "messages");
  }
  std::vector<PromptImage> images = load_prompt_images(ctx, req.image_urls, req.max_soft_tokens);
  std::vector<PromptAudio> audios = load_prompt_audios(ctx, req.audio_urls);
  std::vector<PromptVideo> videos = load_prompt_videos(
      ctx, req.video_urls, video_load_options(ctx, req.media_io_kwargs, req.mm_processor_kwargs));
  std::optional<ChatTemplate> request_template;
  const ChatTemplate* tmpl = &select_chat_template(ctx, req.chat_template, request_template);
  ChatPromptInput in;
  in.messages = messages_for_template(req.messages);
  in.tools = req.tools.is_array() ? req.tools : ordered_json(nullptr);
  in.documents = req.documents;
  in.add_generation_prompt = req.add_generation_prompt;
  in.continue_final_message = req.continue_final_message;
  in.default_kwargs = ctx.options.default_chat_template_kwargs;
  in.kwargs = req.chat_template_kwargs;
  in.reasoning_effort = req.reasoning_effort;
  in.gemma4 = ctx.gemma4;
  in.add_special_tokens = req.add_special_tokens.value_or(false);
  in.content_format = ctx.options.chat_template_content_format;
  ChatPrompt prompt = render_chat_prompt(*tmpl, *tok, in);
  job->prompt_ids = std::move(prompt.token_ids);
  prepare_prompt_ids(ctx, job->prompt_ids, req.truncate_prompt_tokens, req.truncate_keeps_first);
  // The engine expands each <|image|> itself; usage and the length checks count the expansion.
  std::vector<int32_t> engine_ids = job->prompt_ids;
  job->prompt_ids = expand_prompt_images(ctx, engine_ids, images, audios, videos);

  const bool in_thought = prompt_ends_in_open_thought_channel(prompt.text);
  SamplingParams params = req.params;
  if (req.tool_choice == "required" || req.tool_choice == "function") {
    params.answer_constraint = tool_choice_constraint(*tok, req, prompt.text);
    job->forced_tool_call = params.answer_constraint.has_value();
    if (!job->forced_tool_call) {
      GS_LOG_WARNING << "tool_choice '" << req.tool_choice
                     << "' cannot be enforced: the vocabulary has no Gemma 4 tool-call marker; "
                        "the model's own tool calls are parsed as with 'auto'";
    }
  }
  if (auto constraint = requested_answer_constraint(tok, ctx.gemma4, prompt.text, req,
                                                    ctx.options.disable_any_whitespace)) {
    if (job->forced_tool_call) {  // vLLM's refusal: the tool call is the answer's grammar
      throw bad_request(
          "You can only either use constraints for structured outputs or tools, not both.",
          "response_format");
    }
    params.answer_constraint = std::move(constraint);
  }
  job->parse.parse_reasoning = ctx.reasoning_parser;
  job->parse.parse_tools = job->forced_tool_call || (ctx.tool_parser && req.tool_choice != "none");
  job->parse.strip_markers = ctx.gemma4;
  job->parse.include_reasoning = req.include_reasoning;
  job->parse.starts_in_thought_channel = ctx.reasoning_parser && in_thought;

  // The parsers read the marker text, so special tokens are decoded and stripped afterwards.
  if ((ctx.gemma4 && (ctx.reasoning_parser || ctx.tool_parser)) || job->forced_tool_call) {
    params.skip_special_tokens = false;
  }
  params.max_tokens =
      resolve_max_tokens(ctx, static_cast<int>(job->prompt_ids.size()), req.max_tokens);
  check_overload(ctx);
  job->echo_text = chat_echo_text(req);
  // vLLM names the response after the request's request_id when one is given.
  job->id = req.request_id ? "chatcmpl-" + *req.request_id : random_request_id("chatcmpl-");
  job->created = unix_time_now();
  job->prompt_text = prompt.text;
  job->hide_metadata =
      !req.include_reasoning && (job->parse.parse_reasoning || job->parse.parse_tools);
  job->thought_open = tok->piece_to_id("<|channel>").value_or(-1);
  job->thought_close = tok->piece_to_id("<channel|>").value_or(-1);
  EngineRequest er;
  er.request_id = random_request_id("chatcmpl-");  // unique even when request_ids repeat
  er.prompt_token_ids = std::move(engine_ids);
  er.images = std::move(images);
  er.audios = std::move(audios);
  er.videos = std::move(videos);
  er.prompt = prompt.text;
  er.params = params;
  er.params.validate(ctx.engine.vocab_size(), ctx.options.max_logprobs);  // --max-logprobs
  er.priority = req.priority;
  er.cache_salt = req.cache_salt;
  std::vector<EngineRequest> one;
  one.push_back(std::move(er));
  auto session = start_session(ctx, std::move(one));
  if (!ctx.options.disable_log_requests) {
    GS_LOG_INFO << "Received request " << job->id << ": " << job->prompt_ids.size()
                << " prompt tokens, n=" << params.n << ", max_tokens=" << params.max_tokens
                << ", stream=" << (req.stream ? "true" : "false");
  }
  ServingResponse resp;
  if (req.stream) {
    ServingContext* c = &ctx;
    resp.stream = [c, job, session](const SseWrite& write) {
      stream_chat(*c, job, session, write);
    };
    return resp;
  }
  std::vector<RequestOutput> finals = collect_final_outputs(*session, 1);
  resp.body = final_response(ctx, *job, finals[0]);
  return resp;
}

}  // namespace gemmaserve
