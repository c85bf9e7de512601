#include "cli/generate_command.h"

#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>

#include "cli/arg_parser.h"
#include "core/error.h"
#include "gemmaserve/llm.h"

namespace gemmaserve {
namespace {

constexpr const char* kUsage =
    "usage: gemmaserve generate MODEL_DIR (--prompt TEXT | --prompt-ids 2,45,67)... \n"
    "         [--max-tokens N] [--temperature T] [--top-p P] [--top-k K] [--min-p P]\n"
    "         [--seed S] [--ignore-eos] [--logprobs K] [--prompt-logprobs K] [--json]\n"
    "         [--tokenizer PATH] [--threads N] [--max-model-len N] [--block-size N]\n";

nlohmann::json logprobs_json(const TokenLogprobs& lp) {
  nlohmann::json o = nlohmann::json::object();
  for (const auto& [id, v] : lp) o[std::to_string(id)] = v;
  return o;
}

}  // namespace

int run_generate_command(const std::vector<std::string>& args) {
  ArgParser p;
  p.value("--prompt").value("--prompt-ids").value("--max-tokens").value("--temperature");
  p.value("--top-p").value("--top-k").value("--min-p").value("--seed").value("--logprobs");
  p.value("--prompt-logprobs").value("--tokenizer").value("--threads").value("--max-model-len");
  p.value("--block-size").value("--min-tokens").value("--stop").value("--stop-token-ids");
  p.flag("--ignore-eos").flag("--json").flag("--help", {"-h"}).flag("--skip-special-tokens");
  p.parse(args, 1);
  if (p.get_flag("--help")) {
    std::cout << kUsage;
    return 0;
  }
  if (p.positionals().size() != 1) throw InputError("generate needs MODEL_DIR\n" + std::string(kUsage));
  if (p.all("--prompt").empty() && p.all("--prompt-ids").empty()) {
    throw InputError("generate needs --prompt TEXT or --prompt-ids IDS\n" + std::string(kUsage));
  }
  EngineArgs ea;
  ea.model = p.positionals()[0];
  ea.tokenizer = p.get("--tokenizer").value_or("");
  ea.threads = p.get_int("--threads", 0);
  ea.max_model_len = p.get_int("--max-model-len", 0);
  ea.block_size = p.get_int("--block-size", 16);
  if (ea.threads < 0) throw InputError("--threads must be >= 0");
  if (ea.block_size <= 0) throw InputError("--block-size must be positive");
  // Flags are checked before the (possibly slow) load so mistakes fail fast.
  std::vector<Prompt> prompts;
  for (const auto& t : p.all("--prompt")) prompts.push_back(Prompt::from_text(t));
  for (const auto& s : p.all("--prompt-ids")) {
    auto ids = parse_int_list(s, "--prompt-ids");
    prompts.push_back(Prompt::from_ids(std::vector<int32_t>(ids.begin(), ids.end())));
  }
  std::vector<int> stop_ids;
  for (const auto& s : p.all("--stop-token-ids")) {
    for (int id : parse_int_list(s, "--stop-token-ids")) stop_ids.push_back(id);
  }
  const int max_tokens = p.get_int("--max-tokens", 16);
  const int min_tokens = p.get_int("--min-tokens", 0);
  LLM llm(ea);

  SamplingParams sp = llm.default_sampling_params();
  sp.max_tokens = max_tokens;
  sp.min_tokens = min_tokens;
  sp.temperature = p.get_double("--temperature", sp.temperature);
  sp.top_p = p.get_double("--top-p", sp.top_p);
  sp.top_k = p.get_int("--top-k", sp.top_k);
  sp.min_p = p.get_double("--min-p", sp.min_p);
  if (auto s = p.get("--seed")) sp.seed = static_cast<uint64_t>(p.get_int("--seed", 0));
  sp.ignore_eos = p.get_flag("--ignore-eos");
  sp.skip_special_tokens = p.get_flag("--skip-special-tokens", true);
  if (p.has("--logprobs")) sp.logprobs = p.get_int("--logprobs", 0);
  if (p.has("--prompt-logprobs")) sp.prompt_logprobs = p.get_int("--prompt-logprobs", 0);
  for (const auto& s : p.all("--stop")) sp.stop.push_back(s);
  sp.stop_token_ids.assign(stop_ids.begin(), stop_ids.end());

  const bool json = p.get_flag("--json");
  for (const RequestOutput& r : llm.generate(prompts, sp)) {
    const CompletionOutput& o = r.outputs.front();
    if (!json) {
      if (llm.tokenizer()) {
        std::cout << o.text << "\n";
      } else {
        for (size_t i = 0; i < o.token_ids.size(); ++i) std::cout << (i ? "," : "") << o.token_ids[i];
        std::cout << "\n";
      }
      continue;
    }
    nlohmann::json j;
    j["prompt_token_ids"] = r.prompt_token_ids;
    j["token_ids"] = o.token_ids;
    if (llm.tokenizer()) j["text"] = o.text;
    if (o.logprobs) {
      j["logprobs"] = nlohmann::json::array();
      for (const auto& lp : *o.logprobs) j["logprobs"].push_back(logprobs_json(lp));
    }
    if (r.prompt_logprobs) {
      j["prompt_logprobs"] = nlohmann::json::array();
      for (const auto& lp : *r.prompt_logprobs) {
        j["prompt_logprobs"].push_back(lp ? logprobs_json(*lp) : nlohmann::json(nullptr));
      }
    }
    j["finish_reason"] = o.finish_reason ? nlohmann::json(*o.finish_reason) : nlohmann::json();
    if (o.stop_reason_text) {
      j["stop_reason"] = *o.stop_reason_text;
    } else if (o.stop_reason_token) {
      j["stop_reason"] = *o.stop_reason_token;
    } else {
      j["stop_reason"] = nullptr;
    }
    // Invalid UTF-8 from byte-level tokens is replaced rather than aborting the dump.
    std::cout << j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
  }
  return 0;
}

}  // namespace gemmaserve
