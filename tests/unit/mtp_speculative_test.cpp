// Speculative decoding with the Gemma 4 MTP assistant drafter in the engine: greedy output is
// bit-identical to plain decoding on the golden models (random drafters, mostly rejected; and a
// drafter built to propose one fixed token, accepted where the target emits it), the drafter
// is picked by method "mtp" or by its checkpoint alone, and bad pairings fail at start-up.
#include <gtest/gtest.h>

#include <fstream>
#include <numeric>

#include "engine_test_support.h"
#include "io/json_file.h"
#include "io/safetensors.h"
#include "model/test_model_presets.h"

namespace gemmaserve::enginetest {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// Writes `spec` into `dir`; `fill` may replace a tensor's bytes (return true when it did).
void write_assistant(
    const TestModelSpec& spec, const fs::path& dir,
    const std::function<bool(const TestTensor&, int64_t, int64_t, std::byte*)>& fill = nullptr) {
  fs::create_directories(dir);
  const std::vector<TensorSpec> specs = spec.specs();
  write_safetensors(dir, specs, plan_single_file(specs, {{"format", "pt"}}),
                    [&](size_t i, int64_t first, int64_t count, std::byte* dst) {
                      if (fill && fill(spec.tensors[i], first, count, dst)) return;
                      fill_test_tensor(spec.tensors[i], 11, first, count, dst);
                    });
  std::ofstream(dir / "config.json") << spec.config.dump(2);
}

json golden_config(const std::string& model) {
  return read_json_file(golden_model(model) / "config.json");
}

// A random drafter for a golden model (vocabulary 512: 16 clusters of 32, top 4 scored).
fs::path random_assistant(const fs::path& dir, const std::string& model, bool centroids) {
  AssistantShape shape;
  shape.use_ordered_embeddings = centroids;
  shape.num_centroids = 16;
  shape.centroid_intermediate_top_k = 4;
  write_assistant(make_test_assistant_spec_for(golden_config(model), shape, DType::kF32, model),
                  dir);
  return dir;
}

// A drafter that always proposes `token`: a zero final norm makes every centroid and token
// logit 0, so the first centroid (ties: lowest index) is taken and the smallest id of its
// cluster wins; cluster 0 holds `token` and the 31 ids after it.
fs::path constant_assistant(const fs::path& dir, const std::string& model, int32_t token) {
  AssistantShape shape;
  shape.use_ordered_embeddings = true;
  shape.num_centroids = 16;
  shape.centroid_intermediate_top_k = 1;
  const TestModelSpec spec =
      make_test_assistant_spec_for(golden_config(model), shape, DType::kF32, model);
  std::vector<int64_t> order(512);
  std::iota(order.begin(), order.end(), 0);
  std::rotate(order.begin(), order.begin() + token, order.end());
  write_assistant(spec, dir,
                  [&](const TestTensor& t, int64_t first, int64_t count, std::byte* dst) {
                    if (t.spec.name == "model.norm.weight") {
                      std::memset(dst, 0, static_cast<size_t>(count) * 4);
                      return true;
                    }
                    if (t.spec.name == "masked_embedding.token_ordering") {
                      std::memcpy(dst, order.data() + first, static_cast<size_t>(count) * 8);
                      return true;
                    }
                    return false;
                  });
  return dir;
}

std::vector<EngineRequest> greedy_requests(int vocab) {
  SamplingParams p;
  p.temperature = 0;
  p.ignore_eos = true;
  p.logprobs = 2;
  std::vector<EngineRequest> requests = varied_requests(8, vocab, 5, p, "r", 40);
  EngineRequest r;
  r.request_id = "loop";
  r.prompt_token_ids = {2, 9};
  r.params = p;
  r.params.max_tokens = 24;
  requests.push_back(r);
  return requests;
}

void expect_identical(const RunResult& plain, const RunResult& spec,
                      const std::vector<EngineRequest>& requests, const std::string& what) {
  for (size_t i = 0; i < requests.size(); ++i) {
    expect_same_outputs(plain.outputs[i], spec.outputs[i], what + " " + requests[i].request_id);
  }
}

class MtpEngine : public ::testing::TestWithParam<const char*> {};

TEST_P(MtpEngine, GreedyIsBitIdenticalToPlainDecoding) {
  testing::TempDir dir;
  EngineArgs args = tiny_args(GetParam());
  const std::vector<EngineRequest> requests = greedy_requests(make_engine(args)->vocab_size());
  const RunResult plain = run_together(*make_engine(args), requests);
  for (bool centroids : {false, true}) {
    const fs::path a =
        random_assistant(dir.path() / (centroids ? "c" : "d"), GetParam(), centroids);
    for (int k : {1, 3}) {
      // Both spellings: method "mtp", and the assistant's checkpoint alone.
      args.speculative_config = (k == 1 ? R"({"method": "mtp", "model": ")" : R"({"model": ")") +
                                a.string() + R"(", "num_speculative_tokens": )" +
                                std::to_string(k) + "}";
      std::unique_ptr<Engine> engine = make_engine(args);
      const std::string what = std::string(GetParam()) + (centroids ? " centroid" : " dense") +
                               " k=" + std::to_string(k);
      expect_identical(plain, run_together(*engine, requests), requests, what);
      expect_identical(plain, run_alone(*engine, requests), requests, what + " alone");
      const EngineStats s = engine->stats();
      EXPECT_GT(s.spec_decode_num_drafts, 0u) << what;
      for (int t = 0; t < kNumAttentionTypes; ++t) EXPECT_EQ(s.kv_blocks_in_use[t], 0) << what;
    }
  }
}

// The fixed-token drafter is accepted wherever the target emits that token: accepted runs and
// rollbacks both happen, and the output still equals plain decoding.
TEST_P(MtpEngine, AcceptedDraftsKeepTheOutput) {
  testing::TempDir dir;
  EngineArgs args = tiny_args(GetParam());
  std::vector<EngineRequest> requests = greedy_requests(make_engine(args)->vocab_size());
  const RunResult plain = run_together(*make_engine(args), requests);
  // The token the plain outputs emit most often.
  std::map<int32_t, int> counts;
  for (const RequestOutput& o : plain.outputs) {
    for (int32_t t : o.outputs[0].token_ids) ++counts[t];
  }
  int32_t token = 0;
  for (const auto& [t, c] : counts) {
    if (c > counts[token] && t <= 480) token = t;
  }
  const fs::path a = constant_assistant(dir.path() / "const", GetParam(), token);
  args.speculative_config =
      R"({"method": "mtp", "model": ")" + a.string() + R"(", "num_speculative_tokens": 2})";
  std::unique_ptr<Engine> engine = make_engine(args);
  expect_identical(plain, run_together(*engine, requests), requests, GetParam());
  const EngineStats s = engine->stats();
  EXPECT_GT(s.spec_decode_num_accepted_tokens, 0u) << "token " << token << " never accepted";
  EXPECT_LT(s.spec_decode_num_accepted_tokens, s.spec_decode_num_draft_tokens);
}

// Sampling with temperature: drafts are one-hot proposals, verified by rejection sampling.
TEST_P(MtpEngine, SampledRequestsFinish) {
  testing::TempDir dir;
  EngineArgs args = tiny_args(GetParam());
  args.speculative_config = R"({"method": "mtp", "model": ")" +
                            random_assistant(dir.path() / "a", GetParam(), true).string() +
                            R"(", "num_speculative_tokens": 3})";
  std::unique_ptr<Engine> engine = make_engine(args);
  std::vector<EngineRequest> requests = greedy_requests(engine->vocab_size());
  for (EngineRequest& r : requests) {
    r.params.temperature = 0.8;
    r.params.seed = 7;
  }
  const RunResult spec = run_together(*engine, requests);
  for (size_t i = 0; i < requests.size(); ++i) {
    EXPECT_EQ(static_cast<int>(spec.outputs[i].outputs[0].token_ids.size()),
              requests[i].params.max_tokens);
  }
}

INSTANTIATE_TEST_SUITE_P(GoldenModels, MtpEngine, ::testing::Values("dense", "keqv", "moe"));

TEST(MtpEngineErrors, PairingIsCheckedAtStart) {
  testing::TempDir dir;
  EngineArgs args = tiny_args("dense");
  // A drafter trained for another width.
  json other = golden_config("dense");
  other["text_config"]["hidden_size"] = 128;
  write_assistant(make_test_assistant_spec_for(other, AssistantShape{}, DType::kF32, "wide"),
                  dir.path() / "wide");
  args.speculative_config = R"({"method": "mtp", "model": ")" + (dir.path() / "wide").string() +
                            R"(", "num_speculative_tokens": 2})";
  EXPECT_EQ(testing::input_error_of([&] { make_engine(args); }),
            "assistant backbone_hidden_size 128 differs from the target's hidden_size 64");
  // method "mtp" with an ordinary Gemma 4 checkpoint.
  args.speculative_config = R"({"method": "mtp", "model": ")" + golden_model("dense").string() +
                            R"(", "num_speculative_tokens": 2})";
  EXPECT_EQ(testing::input_error_of([&] { make_engine(args); }),
            (golden_model("dense") / "config.json").string() +
                ": field 'model_type' is 'gemma4', expected 'gemma4_assistant'");
}

}  // namespace
}  // namespace gemmaserve::enginetest
