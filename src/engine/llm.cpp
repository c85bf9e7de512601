// The offline LLM: loads a checkpoint and runs prompts in batched steps. Every live sequence
// advances one step per forward call (prefill in the first, one token per later step).
#include "gemmaserve/llm.h"

#include <algorithm>
#include <filesystem>
#include <random>
#include <set>

#include "core/error.h"
#include "core/logging.h"
#include "core/progress_bar.h"
#include "core/thread_pool.h"
#include "engine/sampler.h"
#include "model/gemma4_model.h"
#include "tokenizer/tokenizer.h"

namespace gemmaserve {
namespace {

constexpr size_t kProgressMinBytes = size_t{512} << 20;  // smaller loads finish too fast to show

struct Sequence {
  size_t request = 0;
  int sample = 0;
  std::vector<int32_t> tokens;  // prompt + generated
  size_t prompt_len = 0;
  size_t cached = 0;  // tokens whose K/V are in the cache
  std::vector<int32_t> blocks;
  std::mt19937_64 rng;
  CompletionOutput out;
  bool done = false;
};

}  // namespace

struct LLM::Impl {
  EngineArgs args;
  std::shared_ptr<ThreadPool> pool;
  std::unique_ptr<Gemma4Model> model;
  std::unique_ptr<Tokenizer> tokenizer;
  std::vector<int32_t> eos_ids;
  int max_model_len = 0;
  uint64_t steps = 0;
  GenerationConfig generation;

  std::vector<int32_t> prompt_ids(const Prompt& p) const;
};

LLM::LLM(const EngineArgs& args) : impl_(std::make_unique<Impl>()) {
  namespace fs = std::filesystem;
  Impl& m = *impl_;
  m.args = args;
  m.pool = std::make_shared<ThreadPool>(static_cast<size_t>(std::max(0, args.threads)));
  const fs::path dir(args.model);
  std::unique_ptr<ProgressBar> bar;
  ModelWeights weights = load_model_weights(dir, [&](size_t done, size_t total) {
    if (!bar) bar = std::make_unique<ProgressBar>("loading weights", total,
                                                  args.show_progress && total >= kProgressMinBytes);
    bar->update(done);
  });
  if (bar) bar->finish();
  m.generation = load_generation_config(dir);
  const GenerationConfig& gen = m.generation;

  const fs::path tok_path = args.tokenizer.empty() ? dir : fs::path(args.tokenizer);
  const bool has_tok_files = !args.tokenizer.empty() || fs::exists(dir / "tokenizer.json");
  if (has_tok_files) {
    m.tokenizer = std::make_unique<Tokenizer>(Tokenizer::from_path(tok_path));
  } else {
    GS_LOG_INFO << dir.string() << ": no tokenizer.json; only token-id prompts will work";
  }

  // Stop ids: the union of every source the checkpoint offers.
  std::set<int32_t> eos(gen.eos_token_ids.begin(), gen.eos_token_ids.end());
  eos.insert(weights.config.eos_token_ids.begin(), weights.config.eos_token_ids.end());
  if (m.tokenizer) {
    for (int32_t id : m.tokenizer->eos_ids()) eos.insert(id);
  }
  m.eos_ids.assign(eos.begin(), eos.end());

  m.max_model_len = args.max_model_len > 0 ? args.max_model_len
                                           : weights.config.text.max_position_embeddings;
  m.model = std::make_unique<Gemma4Model>(std::move(weights), m.pool);
}

LLM::~LLM() = default;

const Tokenizer* LLM::tokenizer() const { return impl_->tokenizer.get(); }
const std::vector<int32_t>& LLM::eos_token_ids() const { return impl_->eos_ids; }
int LLM::vocab_size() const { return impl_->model->vocab_size(); }
uint64_t LLM::num_steps() const { return impl_->steps; }

SamplingParams LLM::default_sampling_params() const {
  SamplingParams p;
  const GenerationConfig& g = impl_->generation;
  if (g.temperature) p.temperature = *g.temperature;
  if (g.top_k) p.top_k = *g.top_k;
  if (g.top_p) p.top_p = *g.top_p;
  if (g.min_p) p.min_p = *g.min_p;
  return p;
}

std::vector<int32_t> LLM::Impl::prompt_ids(const Prompt& p) const {
  if (!p.text) return p.token_ids;
  if (!tokenizer) {
    throw InputError("a text prompt needs a tokenizer, and " + args.model +
                     " has none (pass --tokenizer or use token ids)");
  }
  std::vector<int32_t> ids = tokenizer->encode(*p.text, /*add_special=*/false,
                                               /*parse_special=*/true);
  // Exactly one BOS at position 0, whether or not the text already starts with one.
  const int32_t bos = tokenizer->bos_id();
  if (bos >= 0 && (ids.empty() || ids.front() != bos)) ids.insert(ids.begin(), bos);
  return ids;
}

std::vector<RequestOutput> LLM::generate(const std::vector<Prompt>& prompts,
                                         const SamplingParams& params) {
  Impl& m = *impl_;
  const int V = m.model->vocab_size();
  params.validate(V);
  const int block = m.args.block_size;
  std::vector<RequestOutput> results(prompts.size());
  std::vector<Sequence> seqs;
  std::random_device rd;
  int total_blocks = 0;
  for (size_t r = 0; r < prompts.size(); ++r) {
    std::vector<int32_t> ids = m.prompt_ids(prompts[r]);
    if (ids.empty()) throw InputError("prompt " + std::to_string(r) + " is empty");
    for (int32_t id : ids) {
      if (id < 0 || id >= V) {
        throw InputError("prompt " + std::to_string(r) + " holds token id " + std::to_string(id) +
                         ", outside the vocabulary of " + std::to_string(V) + " tokens");
      }
    }
    const int64_t need = static_cast<int64_t>(ids.size()) + params.max_tokens;
    if (need > m.max_model_len) {
      throw InputError("This model's maximum context length is " +
                       std::to_string(m.max_model_len) + " tokens. However, you requested " +
                       std::to_string(need) + " tokens (" + std::to_string(ids.size()) +
                       " in the messages, " + std::to_string(params.max_tokens) +
                       " in the completion). Please reduce the length of the messages or "
                       "completion.");
    }
    results[r].request_id = std::to_string(r);
    results[r].prompt = prompts[r].text;
    results[r].prompt_token_ids = ids;
    for (int k = 0; k < params.n; ++k) {
      Sequence s;
      s.request = r;
      s.sample = k;
      s.tokens = ids;
      s.prompt_len = ids.size();
      const int nblocks = static_cast<int>((need + block - 1) / block);
      for (int b = 0; b < nblocks; ++b) s.blocks.push_back(total_blocks + b);
      total_blocks += nblocks;
      // Seeded requests get their own generator; sample k of n draws from seed + k.
      s.rng.seed(params.seed ? *params.seed + static_cast<uint64_t>(k) : rd());
      s.out.index = k;
      if (params.logprobs) s.out.logprobs.emplace();
      if (params.max_tokens == 0) {
        s.done = true;
        s.out.finish_reason = "length";
      }
      seqs.push_back(std::move(s));
    }
  }
  if (seqs.empty()) return results;
  KvCache cache(m.model->text_config(), {total_blocks, total_blocks}, block);
  std::set<int32_t> stop_ids(params.stop_token_ids.begin(), params.stop_token_ids.end());
  if (!params.ignore_eos) stop_ids.insert(m.eos_ids.begin(), m.eos_ids.end());

  ForwardOutput fwd;
  std::vector<size_t> active;
  std::vector<SequenceInput> batch;
  for (;;) {
    active.clear();
    batch.clear();
    for (size_t i = 0; i < seqs.size(); ++i) {
      if (seqs[i].done) continue;
      Sequence& s = seqs[i];
      SequenceInput in;
      in.tokens = std::span<const int32_t>(s.tokens).subspan(s.cached);
      in.start_pos = static_cast<int32_t>(s.cached);
      in.block_tables = {std::span<const int32_t>(s.blocks), std::span<const int32_t>(s.blocks)};
      const bool prefill = s.cached == 0;
      in.logits = prefill && params.prompt_logprobs ? LogitsWanted::kAll : LogitsWanted::kLast;
      active.push_back(i);
      batch.push_back(in);
    }
    if (active.empty()) break;
    m.model->forward(batch, cache, &fwd);
    ++m.steps;
    size_t row = 0;
    for (size_t a = 0; a < active.size(); ++a) {
      Sequence& s = seqs[active[a]];
      const size_t new_tokens = batch[a].tokens.size();
      const bool all = batch[a].logits == LogitsWanted::kAll;
      if (all && s.sample == 0) {
        // Row j predicts prompt token j+1.
        auto& pl = results[s.request].prompt_logprobs.emplace();
        pl.push_back(std::nullopt);
        for (size_t j = 0; j + 1 < s.prompt_len; ++j) {
          std::span<const float> lg(fwd.logits.data() + (row + j) * V, static_cast<size_t>(V));
          pl.push_back(top_logprobs(lg, *params.prompt_logprobs, s.tokens[j + 1]));
        }
      }
      if (all) row += new_tokens - 1;
      std::span<const float> lg(fwd.logits.data() + row * V, static_cast<size_t>(V));
      ++row;
      s.cached += new_tokens;
      const int32_t tok = sample_token(lg, params, s.rng);
      s.tokens.push_back(tok);
      s.out.token_ids.push_back(tok);
      if (s.out.logprobs) s.out.logprobs->push_back(top_logprobs(lg, *params.logprobs, tok));
      const int generated = static_cast<int>(s.out.token_ids.size());
      if (generated >= params.min_tokens && stop_ids.count(tok)) {
        s.done = true;
        s.out.finish_reason = "stop";
        s.out.stop_reason_token = tok;
        // The stop token itself is not part of the text (vLLM hides eos).
      } else if (generated >= params.max_tokens) {
        s.done = true;
        s.out.finish_reason = "length";
      }
      if (!s.done && !params.stop.empty() && m.tokenizer &&
          generated >= params.min_tokens) {
        const std::string text = m.tokenizer->decode(s.out.token_ids, params.skip_special_tokens);
        for (const std::string& stop : params.stop) {
          size_t at = stop.empty() ? std::string::npos : text.find(stop);
          if (at != std::string::npos) {
            s.done = true;
            s.out.finish_reason = "stop";
            s.out.stop_reason_text = stop;
            s.out.text = text.substr(0, params.include_stop_str_in_output ? at + stop.size() : at);
            break;
          }
        }
      }
    }
  }
  for (Sequence& s : seqs) {
    if (!s.out.stop_reason_text) {
      std::vector<int32_t> shown = s.out.token_ids;
      if (s.out.stop_reason_token && !shown.empty()) shown.pop_back();
      if (m.tokenizer) s.out.text = m.tokenizer->decode(shown, params.skip_special_tokens);
    }
    results[s.request].outputs.push_back(std::move(s.out));
  }
  for (auto& r : results) r.finished = true;
  return results;
}

}  // namespace gemmaserve
