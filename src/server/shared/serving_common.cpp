#include "server/shared/serving_common.h"

#include <algorithm>
#include <chrono>

#include "core/error.h"
#include "core/logging.h"
#include "server/shared/api_error.h"
#include "tokenizer/tokenizer.h"

namespace gemmaserve {

using ordered_json = nlohmann::ordered_json;

void check_model_name(const ServingContext& ctx, const std::optional<std::string>& model) {
  if (!model) return;
  const auto& names = ctx.options.served_model_names;
  if (std::find(names.begin(), names.end(), *model) != names.end()) return;
  throw ApiError(404, "NotFoundError", "The model `" + *model + "` does not exist.", "model");
}

namespace {

ApiError shutting_down_error() {
  return ApiError(503, "ServiceUnavailableError", "The server is shutting down. Retry later.");
}

// Waiting sequences over every data-parallel replica.
int total_waiting(const EngineReplicas& engines) {
  int waiting = 0;
  for (const EngineStats& st : engines.stats()) waiting += st.num_waiting;
  return waiting;
}

void check_waiting(int waiting, int limit) {
  if (limit > 0 && waiting >= limit) {
    throw ApiError(503, "ServiceUnavailableError",
                   "The server is overloaded: " + std::to_string(waiting) +
                       " requests are waiting (--max-waiting-requests " + std::to_string(limit) +
                       "). Retry later.");
  }
}

// The error of a session that ended: one of its requests failed by a step (vLLM's finish_reason
// "error", answered before that request's chunk), aborted from outside (none for a client that
// is gone), or by a failed engine, which aborts whatever it ran.
std::optional<ApiError> abort_error(const EngineSession& session, bool ended) {
  if (std::optional<RequestError> e = session.request_error()) {
    if (e->bad_request) return ApiError(400, "BadRequestError", e->message);
    return ApiError(500, "InternalServerError", e->message);
  }
  const AbortReason reason = session.abort_reason();
  if (reason == AbortReason::kNone && ended) {
    if (auto failure = session.engine_failure()) {
      return ApiError(500, "InternalServerError", "The engine stopped after an error: " + *failure);
    }
  }
  if (reason == AbortReason::kDeadline) {
    return ApiError(504, "TimeoutError",
                    "The request did not finish within --request-timeout and was aborted.");
  }
  if (reason == AbortReason::kShutdown) return shutting_down_error();
  return std::nullopt;
}

bool began_before_drain(const ServingContext& ctx) {
  return ctx.request_began_before_drain && ctx.request_began_before_drain();
}

}  // namespace

void check_overload(const ServingContext& ctx) {
  if (ctx.admission.draining() && !began_before_drain(ctx)) throw shutting_down_error();
  check_waiting(total_waiting(ctx.replicas), ctx.options.max_waiting_requests);
}

void AdmissionGate::submit(const EngineReplicas& engines, EngineSession& session,
                           std::vector<EngineRequest> requests, int limit, bool before_drain) {
  int sequences = 0;
  for (const EngineRequest& r : requests) sequences += std::max(r.params.n, 1);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (draining_ && !before_drain) throw shutting_down_error();
    check_waiting(total_waiting(engines) + queuing_, limit);
    queuing_ += sequences;
  }
  try {
    session.submit(std::move(requests));
  } catch (...) {
    std::lock_guard<std::mutex> lock(mutex_);
    queuing_ -= sequences;
    throw;
  }
  std::lock_guard<std::mutex> lock(mutex_);
  queuing_ -= sequences;
}

std::shared_ptr<EngineSession> start_session(ServingContext& ctx,
                                             std::vector<EngineRequest> requests) {
  auto session = std::make_shared<EngineSession>(ctx.replicas, ctx.metrics);
  ctx.admission.submit(ctx.replicas, *session, std::move(requests),
                       ctx.options.max_waiting_requests, began_before_drain(ctx));
  if (ctx.watch_session) ctx.watch_session(session);
  return session;
}

void log_ignored_fields(const std::vector<std::string>& fields) {
  if (fields.empty()) return;
  std::string list;
  for (const auto& f : fields) {
    if (!list.empty()) list += ", ";
    list += "'" + f + "'";
  }
  GS_LOG_WARNING << "The following fields were present in the request but ignored: {" << list
                 << "}";
}

int resolve_max_tokens(const ServingContext& ctx, int prompt_len, std::optional<int> requested) {
  const int max_len = ctx.engine.max_model_len();
  if (prompt_len >= max_len) {
    const int wanted = requested.value_or(1);
    throw bad_request("You passed " + std::to_string(prompt_len) + " input tokens and requested " +
                          std::to_string(wanted) +
                          " output tokens. However, the model's context length is only " +
                          std::to_string(max_len) +
                          " tokens, resulting in a maximum input length of " +
                          std::to_string(std::max(max_len - std::max(wanted, 1), 0)) +
                          " tokens. Please reduce the length of the input prompt.",
                      "input_tokens");
  }
  if (requested && prompt_len + int64_t{*requested} > max_len) {
    const std::string t = std::to_string(*requested), n = std::to_string(max_len),
                      m = std::to_string(prompt_len);
    throw bad_request("'max_tokens' or 'max_completion_tokens' is too large: " + t +
                          ". This model's maximum context length is " + n +
                          " tokens and your request has " + m + " input tokens (" + t + " > " + n +
                          " - " + m + ").",
                      "max_tokens");
  }
  int max_tokens = requested.value_or(max_len - prompt_len);
  if (ctx.generation.max_tokens) max_tokens = std::min(max_tokens, *ctx.generation.max_tokens);
  return max_tokens;
}

void prepare_prompt_ids(const ServingContext& ctx, std::vector<int32_t>& ids,
                        std::optional<int> truncate_prompt_tokens, bool keep_first) {
  if (ids.empty()) throw bad_request("The decoder prompt cannot be empty", "prompt");
  ids = ctx.engine.prompt_with_bos(std::move(ids));  // what the model sees, so usage counts it
  if (truncate_prompt_tokens) {
    const int keep =
        *truncate_prompt_tokens == -1 ? ctx.engine.max_model_len() : *truncate_prompt_tokens;
    if (static_cast<int>(ids.size()) > keep) {
      if (keep_first) {
        ids.resize(static_cast<size_t>(keep));
      } else {
        // The BOS stays first and counts among the kept tokens.
        const size_t head = keep > 0 ? ctx.engine.prompt_with_bos({}).size() : 0;
        ids.erase(ids.begin() + static_cast<std::ptrdiff_t>(head),
                  ids.end() - (keep - static_cast<std::ptrdiff_t>(head)));
      }
    }
    if (ids.empty()) throw bad_request("The decoder prompt cannot be empty", "prompt");
  }
  const int vocab = ctx.engine.vocab_size();
  for (int32_t id : ids) {
    if (id < 0 || id >= vocab) {
      throw bad_request("Token id " + std::to_string(id) + " is out of vocabulary", "prompt");
    }
  }
}

const ChatTemplate& select_chat_template(const ServingContext& ctx,
                                         const std::optional<std::string>& request_template,
                                         std::optional<ChatTemplate>& storage) {
  if (request_template) {
    if (!ctx.options.trust_request_chat_template) {
      throw bad_request(
          "Chat template is passed with request, but --trust-request-chat-template "
          "is not set. Refused request with untrusted chat template.",
          "chat_template");
    }
    storage = ChatTemplate::parse(*request_template, "request chat_template");
    return *storage;
  }
  if (!ctx.chat_template) {
    throw bad_request(
        "As of transformers v4.44, default chat template is no longer allowed, so "
        "you must provide a chat template if the tokenizer does not define one.",
        "chat_template");
  }
  return *ctx.chat_template;
}

std::string logprob_token_text(const ServingContext& ctx, int32_t id, bool as_token_id) {
  const Tokenizer* tok = ctx.engine.tokenizer();
  if (as_token_id || tok == nullptr) return "token_id:" + std::to_string(id);
  const int32_t one[1] = {id};
  return tok->decode(one, /*skip_special=*/false);
}

std::vector<std::pair<int32_t, float>> ranked_logprobs(const TokenLogprobs& lp) {
  std::vector<std::pair<int32_t, float>> v(lp.begin(), lp.end());
  std::stable_sort(v.begin(), v.end(), [](const auto& a, const auto& b) {
    return a.second > b.second;  // map order keeps ties by lower id
  });
  return v;
}

ordered_json usage_json(int prompt_tokens, int completion_tokens, int cached_tokens,
                        ordered_json completion_tokens_details) {
  ordered_json u;
  u["prompt_tokens"] = prompt_tokens;
  u["total_tokens"] = prompt_tokens + completion_tokens;
  u["completion_tokens"] = completion_tokens;
  // vLLM reports a prefix-cache hit only with --enable-prompt-tokens-details, and never 0.
  u["prompt_tokens_details"] =
      cached_tokens > 0 ? ordered_json{{"cached_tokens", cached_tokens}} : ordered_json(nullptr);
  u["completion_tokens_details"] = std::move(completion_tokens_details);
  return u;
}

int reported_cached_tokens(const ServingContext& ctx, int cached_tokens) {
  return ctx.options.enable_prompt_tokens_details ? cached_tokens : -1;
}

ordered_json without_nulls(const ordered_json& j) {
  if (!j.is_object()) return j;
  ordered_json out = ordered_json::object();
  for (auto it = j.begin(); it != j.end(); ++it) {
    if (!it.value().is_null()) out[it.key()] = without_nulls(it.value());
  }
  return out;
}

ordered_json prompt_logprobs_json(const ServingContext& ctx,
                                  const std::vector<std::optional<TokenLogprobs>>& lps,
                                  const std::vector<int32_t>& prompt_ids) {
  ordered_json out = ordered_json::array();
  for (size_t i = 0; i < lps.size(); ++i) {
    if (!lps[i]) {
      out.push_back(nullptr);
      continue;
    }
    ordered_json pos = ordered_json::object();
    const auto ranked = ranked_logprobs(*lps[i]);
    auto add = [&](int32_t id, float v) {
      int rank = 1;
      for (const auto& [rid, rv] : ranked) {
        if (rid == id) break;
        ++rank;
      }
      ordered_json e;
      e["logprob"] = std::max(static_cast<double>(v), -9999.0);
      e["rank"] = rank;
      e["decoded_token"] = logprob_token_text(ctx, id, false);
      pos[std::to_string(id)] = std::move(e);
    };
    if (i < prompt_ids.size()) {
      auto it = lps[i]->find(prompt_ids[i]);
      if (it != lps[i]->end()) add(it->first, it->second);
    }
    for (const auto& [id, v] : ranked) add(id, v);
    out.push_back(std::move(pos));
  }
  return out;
}

ordered_json stop_reason_json(const std::optional<std::string>& text,
                              const std::optional<int32_t>& token) {
  if (text) return *text;
  if (token) return *token;
  return nullptr;
}

std::string dump_json(const ordered_json& j) {
  return j.dump(-1, ' ', false, ordered_json::error_handler_t::replace);
}

std::string sse_event(const ordered_json& chunk) {
  std::string s = "data: ";
  s += dump_json(chunk);
  s += "\n\n";
  return s;
}

int64_t unix_time_now() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::vector<RequestOutput> collect_final_outputs(EngineSession& session, size_t num_prompts) {
  std::vector<RequestOutput> finals(num_prompts);
  std::vector<SessionEvent> events;
  while (session.next_events(&events, std::chrono::milliseconds(500))) {
    for (SessionEvent& e : events) {
      if (e.final_output) finals[e.prompt_index] = std::move(*e.final_output);
    }
    events.clear();
  }
  if (auto error = abort_error(session, true)) throw *error;
  return finals;
}

StreamEnd pump_stream(EngineSession& session, const SseWrite& write,
                      const std::function<bool(std::vector<SessionEvent>&)>& on_events) {
  std::vector<SessionEvent> events;
  try {
    while (session.next_events(&events, std::chrono::milliseconds(100))) {
      if (auto error = abort_error(session, false)) {
        return write(sse_event(error_json(*error))) ? StreamEnd::kFailed : StreamEnd::kClientGone;
      }
      if (events.empty()) continue;
      if (!on_events(events)) {
        session.abort();  // the client is gone: free its KV blocks now
        return StreamEnd::kClientGone;
      }
      events.clear();
    }
    if (auto error = abort_error(session, true)) {
      return write(sse_event(error_json(*error))) ? StreamEnd::kFailed : StreamEnd::kClientGone;
    }
  } catch (const std::exception& e) {
    session.abort();
    const bool input = dynamic_cast<const InputError*>(&e) != nullptr;
    GS_LOG_ERROR << "error while streaming: " << e.what();
    const bool sent = write(
        sse_event(error_json(input ? 400 : 500, input ? "BadRequestError" : "InternalServerError",
                             e.what(), std::nullopt)));
    return sent ? StreamEnd::kFailed : StreamEnd::kClientGone;
  }
  return StreamEnd::kFinished;
}

}  // namespace gemmaserve
