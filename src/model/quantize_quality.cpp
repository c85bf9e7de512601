#include "model/quantize_quality.h"

#include <algorithm>
#include <cmath>
#include <random>

#include "core/error.h"
#include "model/kv_cache.h"

namespace gemmaserve {
namespace {

std::vector<float> prefill_logits(Gemma4Model& model, const std::vector<int32_t>& prompt) {
  constexpr int kBlockSize = 16;
  const int blocks = static_cast<int>(prompt.size()) / kBlockSize + 1;
  KvCache cache(model.text_config(), {blocks, blocks}, kBlockSize);
  std::vector<int32_t> table(static_cast<size_t>(blocks));
  for (int b = 0; b < blocks; ++b) table[static_cast<size_t>(b)] = b;
  SequenceInput in;
  in.tokens = prompt;
  in.start_pos = 0;
  for (auto& t : in.block_tables) t = table;
  in.logits = LogitsWanted::kAll;
  ForwardOutput out;
  model.forward(std::span<const SequenceInput>(&in, 1), cache, &out);
  return std::move(out.logits);
}

}  // namespace

void QuantQualityReport::add(const QuantQualityReport& o) {
  positions += o.positions;
  top1_agree += o.top1_agree;
  confident_positions += o.confident_positions;
  confident_top1_agree += o.confident_top1_agree;
  kl_sum += o.kl_sum;
  kl_max = std::max(kl_max, o.kl_max);
}

QuantQualityReport compare_quantized(Gemma4Model& reference, Gemma4Model& quantized,
                                     const std::vector<std::vector<int32_t>>& prompts,
                                     float margin) {
  if (reference.vocab_size() != quantized.vocab_size()) {
    throw InputError("quality: the two models have different vocabularies");
  }
  const auto V = static_cast<size_t>(reference.vocab_size());
  QuantQualityReport r;
  for (const auto& prompt : prompts) {
    if (prompt.empty()) continue;
    const std::vector<float> ref = prefill_logits(reference, prompt);
    const std::vector<float> got = prefill_logits(quantized, prompt);
    for (size_t pos = 0; pos < prompt.size(); ++pos) {
      const float* a = ref.data() + pos * V;
      const float* b = got.data() + pos * V;
      const size_t top_a = static_cast<size_t>(std::max_element(a, a + V) - a);
      const size_t top_b = static_cast<size_t>(std::max_element(b, b + V) - b);
      float second = -INFINITY;
      for (size_t i = 0; i < V; ++i) {
        if (i != top_a) second = std::max(second, a[i]);
      }
      // Log-softmax of both rows in double, then KL(ref || quantized).
      double ma = a[top_a], mb = b[top_b], za = 0, zb = 0;
      for (size_t i = 0; i < V; ++i) {
        za += std::exp(a[i] - ma);
        zb += std::exp(b[i] - mb);
      }
      const double la = ma + std::log(za), lb = mb + std::log(zb);
      double kl = 0;
      for (size_t i = 0; i < V; ++i) {
        const double lpa = a[i] - la, lpb = b[i] - lb;
        kl += std::exp(lpa) * (lpa - lpb);
      }
      kl = std::max(kl, 0.0);
      ++r.positions;
      r.top1_agree += top_a == top_b;
      if (a[top_a] - second > margin) {
        ++r.confident_positions;
        r.confident_top1_agree += top_a == top_b;
      }
      r.kl_sum += kl;
      r.kl_max = std::max(r.kl_max, kl);
    }
  }
  return r;
}

std::vector<std::vector<int32_t>> random_prompts(int vocab_size, int count, int length,
                                                 uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int32_t> dist(0, vocab_size - 1);
  std::vector<std::vector<int32_t>> out(static_cast<size_t>(count));
  for (auto& p : out) {
    p.resize(static_cast<size_t>(length));
    for (auto& t : p) t = dist(rng);
  }
  return out;
}

}  // namespace gemmaserve
