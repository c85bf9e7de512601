// The committed demo model (models/gemma4-demo): the C++ engine's logits equal the training
// script's torch forward (tests/data/demo_model_logits.json, written by
// tools/train_demo_model.py --check-logits), and the C++ tokenizer gives the same ids.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <numeric>
#include <string>
#include <vector>

#include "core/thread_pool.h"
#include "model/gemma4_model.h"
#include "model/kv_cache.h"
#include "model/weights.h"
#include "test_support.h"
#include "tokenizer/tokenizer.h"

namespace gemmaserve {
namespace {

namespace fs = std::filesystem;

// f32 weights and activations on both sides: only summation order differs.
constexpr float kTolerance = 2e-3f;

fs::path demo_dir() { return testing::source_dir() / "models/gemma4-demo"; }

nlohmann::json reference() {
  std::ifstream in(testing::source_dir() / "tests/data/demo_model_logits.json");
  EXPECT_TRUE(in.good());
  return nlohmann::json::parse(in);
}

struct Runner {
  std::shared_ptr<ThreadPool> pool = std::make_shared<ThreadPool>(2);
  Gemma4Model model{load_model_weights(demo_dir()), pool};

  // Logits of every row when `chunk` is 0 (one prefill), else the last row after feeding the
  // prompt `chunk` tokens per step (the decode path, past the sliding window).
  std::vector<std::vector<float>> run(const std::vector<int32_t>& ids, int chunk) {
    const int block = 16;
    const int blocks = static_cast<int>(ids.size()) / block + 2;
    KvCache cache(model.text_config(), {blocks, blocks}, block);
    std::vector<int32_t> table(static_cast<size_t>(blocks));
    std::iota(table.begin(), table.end(), 0);
    const int V = model.vocab_size();
    std::vector<std::vector<float>> rows;
    const size_t step = chunk == 0 ? ids.size() : static_cast<size_t>(chunk);
    for (size_t pos = 0; pos < ids.size(); pos += step) {
      SequenceInput in;
      in.tokens = std::span<const int32_t>(ids).subspan(pos, std::min(step, ids.size() - pos));
      in.start_pos = static_cast<int32_t>(pos);
      for (int t = 0; t < kNumAttentionTypes; ++t) in.block_tables[t] = table;
      in.logits = chunk == 0 ? LogitsWanted::kAll : LogitsWanted::kLast;
      ForwardOutput out;
      model.forward(std::span<const SequenceInput>(&in, 1), cache, &out);
      rows.clear();
      for (int r = 0; r < out.rows; ++r) {
        rows.emplace_back(out.logits.begin() + static_cast<long>(r) * V,
                          out.logits.begin() + static_cast<long>(r + 1) * V);
      }
    }
    return rows;
  }
};

float max_diff(const std::vector<float>& a, const nlohmann::json& b) {
  EXPECT_EQ(a.size(), b.size());
  float m = 0;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
    m = std::max(m, std::abs(a[i] - b[i].get<float>()));
  }
  return m;
}

TEST(DemoModel, TokenizerMatchesTrainingScript) {
  const Tokenizer tok = Tokenizer::from_path(demo_dir());
  const nlohmann::json ref = reference();  // kept alive: the loop ranges over a member
  for (const auto& c : ref["cases"]) {
    EXPECT_EQ(tok.encode(c["prompt"].get<std::string>(), false, true),
              c["ids"].get<std::vector<int32_t>>())
        << c["prompt"];
  }
}

TEST(DemoModel, PrefillLogitsMatchTorch) {
  Runner runner;
  const nlohmann::json ref = reference();
  for (const auto& c : ref["cases"]) {
    const auto rows = runner.run(c["ids"].get<std::vector<int32_t>>(), 0);
    const auto positions = c["positions"].get<std::vector<size_t>>();
    for (size_t i = 0; i < positions.size(); ++i) {
      ASSERT_LT(positions[i], rows.size());
      EXPECT_LT(max_diff(rows[positions[i]], c["logits"][i]), kTolerance)
          << c["prompt"] << " position " << positions[i];
    }
  }
}

TEST(DemoModel, DecodeLogitsMatchTorch) {
  Runner runner;
  const nlohmann::json ref = reference();
  for (const auto& c : ref["cases"]) {
    const auto ids = c["ids"].get<std::vector<int32_t>>();
    const auto rows = runner.run(ids, 1);  // one token per step
    ASSERT_EQ(rows.size(), 1u);
    EXPECT_EQ(c["positions"].back().get<size_t>(), ids.size() - 1);
    EXPECT_LT(max_diff(rows[0], c["logits"].back()), kTolerance) << c["prompt"];
  }
}

}  // namespace
}  // namespace gemmaserve
