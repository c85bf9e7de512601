// Gemma4Model behaviour beyond golden logits: one matmul per weight per step whatever the batch,
// mixed logits requests, thread-count invariance, weight dtypes, and bad-input errors.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "core/error.h"
#include "gemma4_golden_harness.h"
#include "io/safetensors.h"

namespace gemmaserve::golden {
namespace {

std::filesystem::path model_dir(const std::string& name) { return golden_dir() / "models" / name; }

const std::vector<int32_t> kPromptA = {2,   17, 301, 45, 99,  12, 7,   480, 33, 61, 5,
                                       250, 3,  77,  19, 402, 88, 123, 9,   64, 311};
const std::vector<int32_t> kPromptB = {2, 400, 8};
const std::vector<int32_t> kPromptC = {2, 90, 91, 92, 93, 94, 95, 96, 97};

TEST(Gemma4Model, MatmulCallsDoNotDependOnBatchSize) {
  for (const char* name : {"dense", "keqv"}) {
    auto model = load_model(model_dir(name), 2);
    PagedRunner runner(*model, 16, 256);
    const uint64_t c0 = model->matmul_calls();
    const int a = runner.add_sequence();
    runner.step1(a, kPromptA, LogitsWanted::kLast);
    const uint64_t one = model->matmul_calls() - c0;
    const int b = runner.add_sequence(), c = runner.add_sequence(), d = runner.add_sequence();
    const uint64_t c1 = model->matmul_calls();
    runner.step({b, c, d}, {kPromptA, kPromptB, kPromptC}, LogitsWanted::kLast);
    const uint64_t three = model->matmul_calls() - c1;
    EXPECT_EQ(one, three) << name;
    // Decode steps too: one token for each of four sequences.
    const uint64_t c2 = model->matmul_calls();
    runner.step({a, b, c, d}, {{5}, {6}, {7}, {8}}, LogitsWanted::kLast);
    EXPECT_EQ(one, model->matmul_calls() - c2) << name;
    // Every projection once per layer (+ PLE, + LM head) — no per-sequence or per-token calls.
    const TextConfig& cfg = model->text_config();
    uint64_t expected = 1;  // LM head
    if (cfg.hidden_size_per_layer_input > 0) expected += 1;
    for (const LayerSpec& s : cfg.layers) {
      expected += 2 + 3;  // q, o; gate, up, down
      if (!s.kv_shared()) expected += s.k_eq_v ? 1 : 2;
      if (cfg.hidden_size_per_layer_input > 0) expected += 2;
    }
    EXPECT_EQ(one, expected) << name;
  }
}

// A ragged batch through the KV-shared layers (where rows are compacted) gives each sequence
// the bits it gets alone, with a different block size and scrambled blocks.
TEST(Gemma4Model, RaggedBatchMatchesSeparateRuns) {
  auto model = load_model(model_dir("dense"), 2);
  const int V = model->vocab_size();
  PagedRunner runner(*model, 5, 512);
  const int a = runner.add_sequence();
  const std::vector<float> a_all = runner.step1(a, kPromptA, LogitsWanted::kAll).logits;
  const int b = runner.add_sequence();
  const std::vector<float> b_last = runner.step1(b, kPromptB, LogitsWanted::kLast).logits;
  const int a2 = runner.add_sequence(), b2 = runner.add_sequence(), c = runner.add_sequence();
  ForwardOutput out = runner.step({a2, b2, c}, {kPromptA, kPromptB, kPromptC}, LogitsWanted::kAll);
  ASSERT_EQ(out.rows, static_cast<int>(kPromptA.size() + kPromptB.size() + kPromptC.size()));
  EXPECT_EQ(0, std::memcmp(out.logits.data(), a_all.data(), a_all.size() * sizeof(float)));
  const float* b_row = &out.logits[(kPromptA.size() + kPromptB.size() - 1) * size_t(V)];
  EXPECT_EQ(0, std::memcmp(b_row, b_last.data(), sizeof(float) * V));
}

// Hand-built batch with per-sequence LogitsWanted (the runner uses one value for all).
TEST(Gemma4Model, PerSequenceLogitsWanted) {
  auto model = load_model(model_dir("dense"), 2);
  const int V = model->vocab_size();
  const TextConfig& cfg = model->text_config();
  KvCache cache(cfg, {64, 64}, 8);
  std::vector<int32_t> tables[3][2];
  int next = 0;
  for (int s = 0; s < 3; ++s) {
    for (int t = 0; t < 2; ++t) {
      for (int i = 0; i < 4; ++i) tables[s][t].push_back(next++ % 64);
    }
  }
  const std::vector<int32_t>* prompts[3] = {&kPromptA, &kPromptB, &kPromptC};
  const LogitsWanted wanted[3] = {LogitsWanted::kNone, LogitsWanted::kLast, LogitsWanted::kAll};
  std::vector<SequenceInput> batch(3);
  for (int s = 0; s < 3; ++s) {
    batch[s].tokens = *prompts[s];
    batch[s].start_pos = 0;
    batch[s].block_tables = {tables[s][0], tables[s][1]};
    batch[s].logits = wanted[s];
  }
  ForwardOutput out;
  model->forward(batch, cache, &out);
  ASSERT_EQ(out.rows, 1 + static_cast<int>(kPromptC.size()));
  ASSERT_EQ(out.logits.size(), static_cast<size_t>(out.rows) * V);

  // Same rows from separate calls with fresh caches.
  for (int s = 1; s < 3; ++s) {
    KvCache alone_cache(cfg, {64, 64}, 8);
    SequenceInput in = batch[s];
    in.logits = LogitsWanted::kAll;
    ForwardOutput alone;
    model->forward(std::span<const SequenceInput>(&in, 1), alone_cache, &alone);
    if (s == 1) {
      EXPECT_EQ(0, std::memcmp(out.logits.data(), &alone.logits[(kPromptB.size() - 1) * size_t(V)],
                               sizeof(float) * V));
    } else {
      EXPECT_EQ(0, std::memcmp(&out.logits[size_t(V)], alone.logits.data(),
                               alone.logits.size() * sizeof(float)));
    }
  }
  // The kNone sequence still wrote its K/V: continuing it matches a one-shot run.
  SequenceInput cont = batch[0];
  std::vector<int32_t> next_tok = {42};
  cont.tokens = next_tok;
  cont.start_pos = static_cast<int32_t>(kPromptA.size());
  cont.logits = LogitsWanted::kLast;
  ForwardOutput step;
  model->forward(std::span<const SequenceInput>(&cont, 1), cache, &step);
  std::vector<int32_t> full = kPromptA;
  full.push_back(42);
  KvCache fresh(cfg, {64, 64}, 8);
  SequenceInput once = batch[0];
  once.tokens = full;
  once.logits = LogitsWanted::kLast;
  ForwardOutput ref;
  model->forward(std::span<const SequenceInput>(&once, 1), fresh, &ref);
  ASSERT_EQ(step.rows, 1);
  EXPECT_EQ(0, std::memcmp(step.logits.data(), ref.logits.data(), sizeof(float) * V));
}

TEST(Gemma4Model, ThreadCountDoesNotChangeBits) {
  std::vector<float> results[3];
  const int threads[3] = {1, 2, 3};
  for (int i = 0; i < 3; ++i) {
    auto model = load_model(model_dir("moe"), threads[i]);
    PagedRunner runner(*model, 16, 256);
    const int a = runner.add_sequence(), b = runner.add_sequence();
    results[i] = runner.step({a, b}, {kPromptA, kPromptC}, LogitsWanted::kAll).logits;
  }
  ASSERT_EQ(results[0].size(), results[1].size());
  EXPECT_EQ(0, std::memcmp(results[0].data(), results[1].data(), results[0].size() * 4));
  EXPECT_EQ(0, std::memcmp(results[0].data(), results[2].data(), results[0].size() * 4));
}

// MoE experts run in passes of rows when the per-slot outputs would exceed the option's bound:
// the same bits as one pass (here passes of 1 and 3 rows).
TEST(Gemma4Model, MoePassesDoNotChangeBits) {
  std::vector<float> results[3];
  for (int i = 0; i < 3; ++i) {
    ModelWeights weights = load_model_weights(model_dir("moe"));
    const int64_t row_floats =
        int64_t{weights.config.text.top_k_experts} * weights.config.text.hidden_size;
    Gemma4ModelOptions options;  // one pass (the default), passes of 1 row, of 3 rows
    if (i > 0) options.moe_slot_floats = i == 1 ? 1 : 3 * row_floats;
    Gemma4Model model(std::move(weights), std::make_shared<ThreadPool>(2), options);
    PagedRunner runner(model, 16, 256);
    const int a = runner.add_sequence(), b = runner.add_sequence();
    results[i] = runner.step({a, b}, {kPromptA, kPromptC}, LogitsWanted::kAll).logits;
  }
  ASSERT_EQ(results[0].size(), results[1].size());
  EXPECT_EQ(0, std::memcmp(results[0].data(), results[1].data(), results[0].size() * 4));
  EXPECT_EQ(0, std::memcmp(results[0].data(), results[2].data(), results[0].size() * 4));
}

// The same checkpoint stored as F32 (exact widening of bf16) must give identical bits; as F16
// (rounded weights) it must stay close.
TEST(Gemma4Model, WeightDtypes) {
  const std::filesystem::path src = model_dir("dense");
  ::gemmaserve::testing::TempDir f32_dir, f16_dir;
  {
    SafetensorsCheckpoint ckpt(src);
    SafetensorsWriter w32, w16;
    for (const auto& [name, view] : ckpt.all()) {
      std::vector<float> f(static_cast<size_t>(view->numel()));
      convert_to_f32(view->dtype, view->data, f.data(), f.size());
      w32.add(name, DType::kF32, view->shape, f.data(), f.size() * sizeof(float));
      std::vector<uint16_t> h(f.size());
      for (size_t i = 0; i < f.size(); ++i) h[i] = f32_to_f16(f[i]);
      w16.add(name, DType::kF16, view->shape, h.data(), h.size() * sizeof(uint16_t));
    }
    w32.write(f32_dir.path() / "model.safetensors");
    w16.write(f16_dir.path() / "model.safetensors");
    for (const auto* d : {&f32_dir, &f16_dir}) {
      std::filesystem::copy_file(src / "config.json", d->path() / "config.json");
    }
  }
  std::vector<float> logits[3];
  const std::filesystem::path dirs[3] = {src, f32_dir.path(), f16_dir.path()};
  for (int i = 0; i < 3; ++i) {
    auto model = load_model(dirs[i], 2);
    PagedRunner runner(*model, 16, 256);
    logits[i] = runner.step1(runner.add_sequence(), kPromptA, LogitsWanted::kAll).logits;
  }
  ASSERT_EQ(logits[0].size(), logits[1].size());
  EXPECT_EQ(0, std::memcmp(logits[0].data(), logits[1].data(), logits[0].size() * 4));
  EXPECT_LT(max_abs_diff(logits[0].data(), logits[2].data(), logits[0].size()), 0.5f);
}

TEST(Gemma4Model, RejectsBadInput) {
  auto model = load_model(model_dir("dense"), 1);
  const TextConfig& cfg = model->text_config();
  KvCache cache(cfg, {4, 4}, 4);
  std::vector<int32_t> table = {0, 1, 2, 3};
  std::vector<int32_t> short_table = {0};
  std::vector<int32_t> bad_table = {0, 9};
  std::vector<int32_t> tokens = {2, 5, 6, 7, 8};
  std::vector<int32_t> bad_token = {2, 512};
  std::vector<int32_t> negative = {2, -1};
  std::vector<int32_t> none;
  auto run = [&](std::span<const int32_t> toks, int32_t start, std::span<const int32_t> sliding,
                 std::span<const int32_t> full) {
    SequenceInput in;
    in.tokens = toks;
    in.start_pos = start;
    in.block_tables = {sliding, full};
    ForwardOutput out;
    model->forward(std::span<const SequenceInput>(&in, 1), cache, &out);
    return out.rows;
  };
  EXPECT_EQ(run(tokens, 0, table, table), 1);
  EXPECT_THROW(run(bad_token, 0, table, table), InputError);
  EXPECT_THROW(run(negative, 0, table, table), InputError);
  EXPECT_THROW(run(none, 0, table, table), InputError);
  EXPECT_THROW(run(tokens, -1, table, table), InputError);
  EXPECT_THROW(run(tokens, 0, short_table, table), InputError);
  EXPECT_THROW(run(tokens, 0, table, short_table), InputError);
  EXPECT_THROW(run(tokens, 0, bad_table, table), InputError);
  EXPECT_THROW(run(tokens, 14, table, table), InputError);  // positions past the table
  ForwardOutput empty;
  model->forward({}, cache, &empty);
  EXPECT_EQ(empty.rows, 0);
  EXPECT_TRUE(empty.logits.empty());
}

}  // namespace
}  // namespace gemmaserve::golden
