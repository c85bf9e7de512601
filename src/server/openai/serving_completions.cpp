#include "server/openai/serving_completions.h"

#include <algorithm>
#include <cmath>
#include <memory>

#include "core/logging.h"
#include "core/utf8.h"
#include "server/openai/answer_constraints.h"
#include "server/shared/api_error.h"
#include "tokenizer/tokenizer.h"

namespace gemmaserve {
namespace {

using ordered_json = nlohmann::ordered_json;

size_t codepoints(const std::string& s) {
  size_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

double floor_logprob(float v) { return std::max(static_cast<double>(v), -9999.0); }

// The legacy completions logprobs object, built token by token.
class CompletionLogprobs {
 public:
  CompletionLogprobs(const ServingContext& ctx, int num_top, bool as_ids, size_t start_offset)
      : ctx_(ctx), num_top_(num_top), as_ids_(as_ids), offset_(start_offset) {
    json_["text_offset"] = ordered_json::array();
    json_["token_logprobs"] = ordered_json::array();
    json_["tokens"] = ordered_json::array();
    json_["top_logprobs"] = ordered_json::array();
  }

  void add(int32_t id, const TokenLogprobs* lp) {
    const std::string text = logprob_token_text(ctx_, id, as_ids_);
    json_["tokens"].push_back(text);
    json_["text_offset"].push_back(offset_);
    offset_ += codepoints(text);
    if (lp == nullptr) {
      json_["token_logprobs"].push_back(nullptr);
      json_["top_logprobs"].push_back(nullptr);
      return;
    }
    auto it = lp->find(id);
    json_["token_logprobs"].push_back(it == lp->end() ? ordered_json(nullptr)
                                                      : ordered_json(floor_logprob(it->second)));
    // The sampled token first, then the top num_top by rank (vLLM's dict, keyed by text).
    ordered_json top = ordered_json::object();
    if (it != lp->end()) top[text] = floor_logprob(it->second);
    int taken = 0;
    for (const auto& [tid, v] : ranked_logprobs(*lp)) {
      if (taken >= num_top_) break;
      ++taken;
      top[logprob_token_text(ctx_, tid, as_ids_)] = floor_logprob(v);
    }
    json_["top_logprobs"].push_back(std::move(top));
  }

  ordered_json take() { return std::move(json_); }

 private:
  const ServingContext& ctx_;
  int num_top_;
  bool as_ids_;
  size_t offset_;
  ordered_json json_;
};

struct PreparedPrompt {
  std::vector<int32_t> ids;
  std::string text;  // what echo shows
};

struct CompletionJob {
  CompletionRequest request;
  std::vector<PreparedPrompt> prompts;
  std::string id;
  int64_t created = 0;
  bool echo_only = false;  // echo with max_tokens 0: the one generated token is dropped
};

ordered_json choice_logprobs(const ServingContext& ctx, const CompletionJob& job,
                             const PreparedPrompt& prompt,
                             const std::optional<std::vector<std::optional<TokenLogprobs>>>& plp,
                             const std::vector<int32_t>& ids, const std::vector<TokenLogprobs>& lps,
                             bool with_prompt, size_t start_offset) {
  CompletionLogprobs b(ctx, *job.request.logprobs, job.request.return_tokens_as_token_ids,
                       start_offset);
  if (with_prompt) {
    for (size_t i = 0; i < prompt.ids.size(); ++i) {
      const TokenLogprobs* lp = plp && i < plp->size() && (*plp)[i] ? &*(*plp)[i] : nullptr;
      b.add(prompt.ids[i], lp);
    }
  }
  if (!job.echo_only) {
    for (size_t i = 0; i < ids.size(); ++i) b.add(ids[i], i < lps.size() ? &lps[i] : nullptr);
  }
  return b.take();
}

ordered_json final_response(const ServingContext& ctx, const CompletionJob& job,
                            const std::vector<RequestOutput>& finals) {
  ordered_json choices = ordered_json::array();
  int prompt_tokens = 0, completion_tokens = 0;
  const int n = job.request.params.n;
  for (size_t p = 0; p < finals.size(); ++p) {
    const RequestOutput& r = finals[p];
    const PreparedPrompt& prompt = job.prompts[p];
    prompt_tokens += static_cast<int>(prompt.ids.size());
    for (const CompletionOutput& o : r.outputs) {
      ordered_json c;
      c["index"] = static_cast<int>(p) * n + o.index;
      std::string text = job.request.echo ? prompt.text : "";
      if (!job.echo_only) text += o.text;
      c["text"] = text;
      if (job.request.logprobs) {
        c["logprobs"] = choice_logprobs(ctx, job, prompt, r.prompt_logprobs, o.token_ids,
                                        o.logprobs ? *o.logprobs : std::vector<TokenLogprobs>{},
                                        job.request.echo, 0);
      } else {
        c["logprobs"] = nullptr;
      }
      c["finish_reason"] = job.echo_only ? ordered_json("length")
                                         : (o.finish_reason ? ordered_json(*o.finish_reason)
                                                            : ordered_json(nullptr));
      c["stop_reason"] = job.echo_only ? ordered_json(nullptr)
                                       : stop_reason_json(o.stop_reason_text, o.stop_reason_token);
      // vLLM: the generated ids, even the one token an echo with max_tokens 0 runs.
      c["token_ids"] =
          job.request.return_token_ids ? ordered_json(o.token_ids) : ordered_json(nullptr);
      // vLLM returns whatever prompt logprobs ran, also those echo + logprobs asked for.
      c["prompt_logprobs"] = r.prompt_logprobs
                                 ? prompt_logprobs_json(ctx, *r.prompt_logprobs, prompt.ids)
                                 : ordered_json(nullptr);
      c["prompt_token_ids"] =
          job.request.return_token_ids ? ordered_json(prompt.ids) : ordered_json(nullptr);
      c["routed_experts"] = nullptr;
      completion_tokens += static_cast<int>(o.token_ids.size());
      choices.push_back(std::move(c));
    }
  }
  ordered_json resp;
  resp["id"] = job.id;
  resp["object"] = "text_completion";
  resp["created"] = job.created;
  resp["model"] = ctx.model_name();
  resp["choices"] = std::move(choices);
  resp["service_tier"] = nullptr;
  resp["system_fingerprint"] = nullptr;
  // vLLM reports the cached tokens of the last prompt.
  const int cached_tokens = finals.empty() ? -1 : finals.back().num_cached_tokens;
  resp["usage"] =
      usage_json(prompt_tokens, completion_tokens, reported_cached_tokens(ctx, cached_tokens));
  resp["kv_transfer_params"] = nullptr;
  resp["ec_transfer_params"] = nullptr;
  resp["metrics"] = nullptr;
  return resp;
}

// Per choice streaming state.
struct StreamChoice {
  bool echoed = false;
  size_t text_offset = 0;  // characters sent so far (logprobs text_offset)
  int tokens = 0;
};

void stream_completion(ServingContext& ctx, std::shared_ptr<CompletionJob> job,
                       std::shared_ptr<EngineSession> session, const SseWrite& write) {
  const int n = job->request.params.n;
  std::vector<StreamChoice> choices(job->prompts.size() * static_cast<size_t>(n));
  int prompt_tokens = 0;
  for (const auto& p : job->prompts) prompt_tokens += static_cast<int>(p.ids.size());
  auto chunk = [&](ordered_json choice, int choice_prompt_tokens, int choice_tokens) {
    ordered_json c;
    c["id"] = job->id;
    c["object"] = "text_completion";
    c["created"] = job->created;
    c["model"] = ctx.model_name();
    c["choices"] = ordered_json::array({std::move(choice)});
    if (job->request.stream_options.include_usage &&
        job->request.stream_options.continuous_usage_stats) {
      // vLLM: this choice's prompt and tokens, the counts only.
      ordered_json u = usage_json(choice_prompt_tokens, choice_tokens);
      u.erase("prompt_tokens_details");
      u.erase("completion_tokens_details");
      c["usage"] = std::move(u);
    }
    return sse_event(c);
  };
  const bool ids = job->request.return_token_ids;
  int cached_tokens = -1;  // the last prompt's, as vLLM reports it
  const StreamEnd end = pump_stream(*session, write, [&](std::vector<SessionEvent>& events) {
    for (SessionEvent& e : events) {
      if (e.prompt_index + 1 == job->prompts.size() && e.num_cached_tokens >= 0) {
        cached_tokens = e.num_cached_tokens;
      }
      const PreparedPrompt& prompt = job->prompts[e.prompt_index];
      for (const CompletionDelta& d : e.delta.outputs) {
        const size_t index = e.prompt_index * static_cast<size_t>(n) + static_cast<size_t>(d.index);
        StreamChoice& sc = choices[index];
        std::string text;
        const bool first = !sc.echoed;
        const int previous_tokens = sc.tokens;
        if (first && job->request.echo) text = prompt.text;
        if (!job->echo_only) text += d.text;
        sc.tokens += static_cast<int>(d.token_ids.size());
        const bool finishing = d.finish_reason.has_value();
        // vLLM skips an empty delta before the first token (chunked prefill).
        if (!(first && job->request.echo) && text.empty() && d.token_ids.empty() &&
            previous_tokens == 0 && !finishing) {
          continue;
        }
        sc.echoed = true;
        ordered_json c;
        c["index"] = static_cast<int>(index);
        c["text"] = text;
        if (job->request.logprobs) {
          const bool with_prompt = first && job->request.echo;
          c["logprobs"] = choice_logprobs(ctx, *job, prompt, e.delta.prompt_logprobs, d.token_ids,
                                          d.logprobs, with_prompt, sc.text_offset);
        } else {
          c["logprobs"] = nullptr;
        }
        sc.text_offset += codepoints(text);
        if (finishing) {
          c["finish_reason"] = job->echo_only ? "length" : *d.finish_reason;
          c["stop_reason"] = job->echo_only
                                 ? ordered_json(nullptr)
                                 : stop_reason_json(d.stop_reason_text, d.stop_reason_token);
        } else {
          c["finish_reason"] = nullptr;
          c["stop_reason"] = nullptr;
        }
        // vLLM: the prompt's ids with a choice's first chunk (always when echoing), the new ids
        // with every chunk.
        c["prompt_token_ids"] =
            (ids || job->request.echo) && first ? ordered_json(prompt.ids) : ordered_json(nullptr);
        c["token_ids"] = ids ? ordered_json(d.token_ids) : ordered_json(nullptr);
        if (!write(chunk(std::move(c), static_cast<int>(prompt.ids.size()), sc.tokens))) {
          return false;
        }
      }
    }
    return true;
  });
  if (end == StreamEnd::kClientGone) return;
  if (end == StreamEnd::kFinished && job->request.stream_options.include_usage) {
    int completion = 0;
    for (const auto& sc : choices) completion += sc.tokens;
    ordered_json c;
    c["id"] = job->id;
    c["object"] = "text_completion";
    c["created"] = job->created;
    c["model"] = ctx.model_name();
    c["choices"] = ordered_json::array();
    // vLLM drops the null members of the final usage chunk (exclude_none).
    c["usage"] = without_nulls(
        usage_json(prompt_tokens, completion, reported_cached_tokens(ctx, cached_tokens)));
    if (!write(sse_event(c))) return;
  }
  write("data: [DONE]\n\n");
}

}  // namespace

ServingResponse serve_completion(ServingContext& ctx, const ordered_json& body) {
  auto job = std::make_shared<CompletionJob>();
  job->request = parse_completion_request(body, ctx.engine.default_sampling_params());
  apply_server_request_defaults(ctx.options, body, job->request);
  CompletionRequest& req = job->request;
  check_model_name(ctx, req.model);
  log_ignored_fields(req.ignored_fields);
  if (req.max_tokens && *req.max_tokens == 0) {
    if (!req.echo) throw bad_request("max_tokens must be at least 1, got 0.", "max_tokens");
    job->echo_only = true;  // vLLM runs one token and returns only the echo
  }
  const Tokenizer* tok = ctx.engine.tokenizer();
  const bool add_special = req.add_special_tokens.value_or(true);
  for (const PromptInput& in : req.prompts) {
    PreparedPrompt p;
    if (in.text) {
      if (tok == nullptr) {
        throw bad_request("a text prompt needs a tokenizer, and this model has none", "prompt");
      }
      p.ids = add_special ? ctx.engine.encode_prompt(*in.text)
                          : tok->encode(*in.text, /*add_special=*/false, /*parse_special=*/true);
    } else {
      p.ids = in.token_ids;
    }
    prepare_prompt_ids(ctx, p.ids, req.truncate_prompt_tokens, req.truncate_keeps_first);
    // vLLM does not detokenize the prompt when token ids are returned: echo then shows none.
    if (req.echo && !req.return_token_ids) {
      p.text = in.text && !req.truncate_prompt_tokens
                   ? *in.text
                   : (tok ? tok->decode(p.ids, /*skip_special=*/false) : std::string());
    }
    job->prompts.push_back(std::move(p));
  }
  check_overload(ctx);
  // vLLM names the response after the request's request_id when one is given.
  job->id = req.request_id ? "cmpl-" + *req.request_id : random_request_id("cmpl-");
  const std::string engine_id = random_request_id("cmpl-");  // unique even if request_ids repeat
  job->created = unix_time_now();
  std::vector<EngineRequest> requests;
  const std::optional<AnswerConstraint> json =
      requested_answer_constraint(tok, ctx.gemma4, "", req, ctx.options.disable_any_whitespace);
  for (size_t i = 0; i < job->prompts.size(); ++i) {
    EngineRequest er;
    er.request_id = engine_id + "-" + std::to_string(i);
    er.prompt_token_ids = job->prompts[i].ids;
    er.params = req.params;
    er.params.answer_constraint = json;
    const int prompt_len = static_cast<int>(er.prompt_token_ids.size());
    er.params.max_tokens = job->echo_only ? resolve_max_tokens(ctx, prompt_len, 1)
                                          : resolve_max_tokens(ctx, prompt_len, req.max_tokens);
    er.params.validate(ctx.engine.vocab_size(), ctx.options.max_logprobs);  // --max-logprobs
    er.priority = req.priority;
    er.cache_salt = req.cache_salt;
    requests.push_back(std::move(er));
  }
  auto session = start_session(ctx, std::move(requests));
  if (!ctx.options.disable_log_requests) {
    GS_LOG_INFO << "Received request " << job->id << ": " << job->prompts.size()
                << " prompt(s), n=" << req.params.n
                << ", stream=" << (req.stream ? "true" : "false");
  }
  ServingResponse resp;
  if (req.stream) {
    ServingContext* c = &ctx;
    resp.stream = [c, job, session](const SseWrite& write) {
      stream_completion(*c, job, session, write);
    };
    return resp;
  }
  std::vector<RequestOutput> finals = collect_final_outputs(*session, job->prompts.size());
  resp.body = final_response(ctx, *job, finals);
  return resp;
}

}  // namespace gemmaserve
