// `gemmaserve bench structured TOKENIZER`: what a structured-output mask costs per generated
// token: random logits over the real vocabulary, sampled under a JSON schema, timed per step
// against the same sampling without the constraint.
#include "bench/bench_structured.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>

#include "cli/arg_parser.h"
#include "core/error.h"
#include "engine/json_object_grammar.h"
#include "engine/request_sampler.h"
#include "engine/structured/compiled_grammar.h"
#include "io/json_file.h"
#include "tokenizer/tokenizer.h"

namespace gemmaserve {
namespace {

const char* kStructuredUsage =
    "usage: gemmaserve bench structured TOKENIZER [--schema FILE] [--tokens N (512)]\n"
    "                                  [--batch-size N (1)] [--seed N (0)] [--json]\n"
    "TOKENIZER: a model folder, tokenizer.json or GGUF vocabulary. Samples --tokens steps of\n"
    "--batch-size sequences from random logits under the JSON schema (default: a nested one),\n"
    "each sequence restarting when it stops; prints the sampling time per step with the mask\n"
    "(mean, p50, p99, max) and without it, the mask's share, and the one-off trie build and\n"
    "compile times. The mask cache is shared by the batch, as in the engine.\n";

const char* kDefaultSchema = R"({
  "type": "object",
  "properties": {
    "id": {"type": "string", "format": "uuid"},
    "name": {"type": "string", "maxLength": 40},
    "age": {"type": "integer"},
    "score": {"type": "number"},
    "active": {"type": "boolean"},
    "role": {"enum": ["admin", "user", "guest"]},
    "born": {"type": "string", "format": "date"},
    "address": {"type": "object", "properties": {
      "street": {"type": "string"}, "city": {"type": "string"},
      "zip": {"type": "string", "pattern": "[0-9]{5}"}}, "required": ["city"]},
    "tags": {"type": "array", "items": {"type": "string", "maxLength": 12}, "maxItems": 4},
    "friends": {"type": "array", "items": {"$ref": "#/$defs/friend"}, "maxItems": 3}
  },
  "required": ["id", "name", "age", "active", "role", "address"],
  "$defs": {"friend": {"type": "object", "properties": {
    "name": {"type": "string", "maxLength": 20}, "since": {"type": "integer"}},
    "required": ["name"]}}
})";

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

struct Stats {
  double mean = 0, p50 = 0, p99 = 0, max = 0;
};

Stats stats_of(std::vector<double> v) {
  Stats s;
  if (v.empty()) return s;
  std::sort(v.begin(), v.end());
  double sum = 0;
  for (double x : v) sum += x;
  s.mean = sum / static_cast<double>(v.size());
  s.p50 = v[v.size() / 2];
  s.p99 = v[std::min(v.size() - 1, v.size() * 99 / 100)];
  s.max = v.back();
  return s;
}

// Per-step times (seconds, the whole batch) of `tokens` steps; restarts finished sequences.
std::vector<double> run_steps(const Tokenizer& tok, std::shared_ptr<const JsonTokenTrie> trie,
                              std::shared_ptr<const structured::CompiledGrammar> grammar,
                              const std::string& schema, int tokens, int batch, uint64_t seed,
                              int* answers) {
  const int vocab = static_cast<int>(tok.vocab_size());
  std::vector<int32_t> stops = tok.eos_ids();
  if (stops.empty()) stops.push_back(1);
  SamplingParams p;
  if (grammar) {
    p.answer_constraint = AnswerConstraint{};
    p.answer_constraint->structured_kind = "json";
    p.answer_constraint->structured_spec = schema;
  }
  std::vector<std::unique_ptr<RequestSampler>> samplers(static_cast<size_t>(batch));
  std::vector<std::vector<int32_t>> outputs(static_cast<size_t>(batch));
  uint64_t next_seed = seed;
  auto restart = [&](size_t i) {
    p.seed = next_seed++;
    samplers[i] = std::make_unique<RequestSampler>(p, std::span<const int32_t>(), stops, &tok,
                                                   vocab, 0, trie, grammar);
    outputs[i].clear();
  };
  for (size_t i = 0; i < samplers.size(); ++i) restart(i);
  std::mt19937 rng(static_cast<uint32_t>(seed));
  std::normal_distribution<float> normal(0.0f, 2.0f);
  std::vector<float> logits(static_cast<size_t>(vocab));
  std::vector<double> times;
  for (int step = 0; step < tokens; ++step) {
    double t = 0;
    for (size_t i = 0; i < samplers.size(); ++i) {
      for (float& l : logits) l = normal(rng);
      for (int32_t s : stops) logits[static_cast<size_t>(s)] += 8.0f;  // ends once allowed
      const auto start = std::chrono::steady_clock::now();
      const int32_t id = samplers[i]->sample(logits, outputs[i]);
      t += seconds_since(start);
      outputs[i].push_back(id);
      if (std::find(stops.begin(), stops.end(), id) != stops.end()) {
        ++*answers;
        restart(i);
      }
    }
    times.push_back(t);
  }
  return times;
}

}  // namespace

int run_bench_structured(const std::vector<std::string>& args) {
  ArgParser p;
  p.value("--schema").value("--tokens").value("--batch-size").value("--seed");
  p.flag("--json").flag("--help", {"-h"});
  p.parse(args, 1);
  if (p.get_flag("--help")) {
    std::cout << kStructuredUsage;
    return 0;
  }
  if (p.positionals().empty())
    throw InputError(std::string("bench structured needs TOKENIZER\n") + kStructuredUsage);
  const int tokens = p.get_positive_int("--tokens", 512);
  const int batch = p.get_positive_int("--batch-size", 1);
  const auto seed = static_cast<uint64_t>(p.get_non_negative_int("--seed", 0));
  const std::string schema =
      p.get("--schema") ? read_json_file(*p.get("--schema")).dump() : std::string(kDefaultSchema);

  const Tokenizer tok = Tokenizer::from_path(p.positionals()[0]);
  auto start = std::chrono::steady_clock::now();
  auto trie = std::make_shared<const JsonTokenTrie>(tok);
  const double trie_s = seconds_since(start);
  start = std::chrono::steady_clock::now();
  structured::GrammarCompiler compiler;
  const auto grammar = compiler.compile("json", schema);
  const double compile_s = seconds_since(start);

  int answers = 0, free_answers = 0;
  const Stats with = stats_of(run_steps(tok, trie, grammar, schema, tokens, batch, seed, &answers));
  const Stats without =
      stats_of(run_steps(tok, trie, nullptr, schema, tokens, batch, seed, &free_answers));
  const double mask_mean = with.mean - without.mean;
  if (p.get_flag("--json")) {
    nlohmann::ordered_json j;
    j["vocab_size"] = tok.vocab_size();
    j["batch_size"] = batch;
    j["steps"] = tokens;
    j["answers_completed"] = answers;
    j["trie_build_s"] = trie_s;
    j["compile_s"] = compile_s;
    for (const auto& [name, s] :
         {std::pair<const char*, Stats>{"with_mask", with}, {"without_mask", without}}) {
      j[name] = {{"mean_ms", s.mean * 1e3},
                 {"p50_ms", s.p50 * 1e3},
                 {"p99_ms", s.p99 * 1e3},
                 {"max_ms", s.max * 1e3}};
    }
    j["mask_mean_ms"] = mask_mean * 1e3;
    std::cout << j.dump(2) << "\n";
    return 0;
  }
  std::printf("vocabulary %zu tokens, batch %d, %d steps, %d answers completed\n", tok.vocab_size(),
              batch, tokens, answers);
  std::printf("trie build %.3f s (once per engine), schema compile %.4f s (cached per schema)\n",
              trie_s, compile_s);
  std::printf("sampling per step, ms   mean     p50     p99     max\n");
  std::printf("  with the schema     %7.3f %7.3f %7.3f %7.3f\n", with.mean * 1e3, with.p50 * 1e3,
              with.p99 * 1e3, with.max * 1e3);
  std::printf("  without             %7.3f %7.3f %7.3f %7.3f\n", without.mean * 1e3,
              without.p50 * 1e3, without.p99 * 1e3, without.max * 1e3);
  std::printf("mask cost per step: mean %.3f ms, worst %.3f ms\n", mask_mean * 1e3,
              (with.max - without.p50) * 1e3);
  return 0;
}

}  // namespace gemmaserve
