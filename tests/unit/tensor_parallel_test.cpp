// Tensor parallelism on the golden fixtures: the model split over 2 MPI ranks (4 ranks, more
// than this machine's CPUs, on the small ones) gives the same greedy tokens as the whole model
// and logits within 1e-4, in prefill, token-by-token decode and batched decode; 4 ranks give
// the same bits from run to run; and each rank holds its share of the weights and KV cache.
// Rank 0 steps the model; the other ranks follow() its steps, as under the engine. Expert
// parallelism (whole experts per rank) likewise on the MoE fixtures.
#include "model/tensor_parallel.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "core/error.h"
#include "gemma4_golden_harness.h"
#include "mpi_test_support.h"

namespace gemmaserve::golden {
namespace {

constexpr float kTol = 1e-4f;
constexpr int kBlockSize = 16;
constexpr int kMaxTokens = 512;
constexpr int kDecodeSteps = 6;

std::filesystem::path ref_path(const std::string& name) {
  return golden_dir() / "ref" / (name + ".json");
}

std::unique_ptr<Gemma4Model> load_shard(const std::filesystem::path& dir,
                                        std::shared_ptr<Communicator> comm,
                                        bool expert_parallel = false) {
  WeightLoadOptions opt;
  opt.tensor_parallel_rank = comm->rank();
  opt.tensor_parallel_size = comm->size();
  opt.expert_parallel = expert_parallel;
  return std::make_unique<Gemma4Model>(load_model_weights(dir, nullptr, opt),
                                       std::make_shared<ThreadPool>(1), Gemma4ModelOptions{},
                                       std::move(comm));
}

// On a rank other than 0: loads its slice and runs rank 0's steps until rank 0's model goes;
// returns false there. On rank 0 returns true.
bool leads(const std::filesystem::path& dir, const std::shared_ptr<Communicator>& comm,
           bool expert_parallel = false) {
  if (comm->rank() == 0) return true;
  load_shard(dir, comm, expert_parallel)->follow();
  return false;
}

// On rank 0: the split model (whose steps the other ranks follow) and the whole model, stepped
// with the same batches.
class SplitAndWhole {
 public:
  SplitAndWhole(const std::filesystem::path& dir, std::shared_ptr<Communicator> comm,
                bool expert_parallel)
      : comm_(comm),
        split_(load_shard(dir, comm, expert_parallel)),
        split_runner_(*split_, kBlockSize, kMaxTokens),
        whole_(load_model(dir, 1)),
        whole_runner_(std::make_unique<PagedRunner>(*whole_, kBlockSize, kMaxTokens)) {}

  int add_sequence() {
    const int id = split_runner_.add_sequence();
    if (whole_runner_) whole_runner_->add_sequence();
    return id;
  }

  // One step on both; on rank 0 checks the logits agree and returns the split model's.
  std::vector<float> step(const std::vector<int>& ids, const std::vector<std::vector<int32_t>>& t,
                          LogitsWanted wanted, const std::string& what) {
    ForwardOutput split = split_runner_.step(ids, t, wanted);
    ForwardOutput whole = whole_runner_->step(ids, t, wanted);
    EXPECT_EQ(whole.rows, split.rows) << what;
    EXPECT_EQ(whole.logits.size(), split.logits.size()) << what;
    if (whole.logits.size() != split.logits.size()) return {};
    const int V = whole_->vocab_size();
    const float diff = max_abs_diff(whole.logits.data(), split.logits.data(), whole.logits.size());
    EXPECT_LE(diff, kTol) << what;
    for (int r = 0; r < whole.rows; ++r) {
      const size_t at = static_cast<size_t>(r) * static_cast<size_t>(V);
      EXPECT_EQ(argmax(&whole.logits[at], V), argmax(&split.logits[at], V)) << what << " row " << r;
    }
    max_diff_ = std::max(max_diff_, diff);
    return std::move(split.logits);
  }

  // The greedy choice for each row of `logits`.
  std::vector<int32_t> greedy(const std::vector<float>& logits, int rows) {
    const int V = whole_->vocab_size();
    std::vector<int32_t> ids;
    for (int r = 0; r < rows; ++r) ids.push_back(argmax(&logits[static_cast<size_t>(r) * V], V));
    return ids;
  }

  Gemma4Model& split() { return *split_; }
  PagedRunner& split_runner() { return split_runner_; }
  float max_diff() const { return max_diff_; }

 private:
  std::shared_ptr<Communicator> comm_;
  std::unique_ptr<Gemma4Model> split_;
  PagedRunner split_runner_;
  std::unique_ptr<Gemma4Model> whole_;
  std::unique_ptr<PagedRunner> whole_runner_;
  float max_diff_ = 0.0f;
};

// Prefill of every case (all positions), greedy decode of the first case token by token, and
// a batched decode of all cases together.
void check_split_matches_whole(const std::string& name, const std::filesystem::path& dir,
                               bool expert_parallel = false) {
  std::shared_ptr<Communicator> comm = make_communicator("mpi");
  if (!leads(dir, comm, expert_parallel)) return;
  SplitAndWhole m(dir, comm, expert_parallel);
  const RefFile ref = load_ref(ref_path(name));
  std::vector<int> ids;
  std::vector<int32_t> next;
  for (const RefCase& c : ref.cases) {
    if (c.has_image || c.prompt.size() > 200) continue;
    const int id = m.add_sequence();
    const std::vector<float> logits =
        m.step({id}, {c.prompt}, LogitsWanted::kAll, name + "/" + c.name + " prefill");
    ASSERT_FALSE(logits.empty());
    const std::vector<int32_t> last =
        m.greedy(std::vector<float>(logits.end() - m.split().vocab_size(), logits.end()), 1);
    ids.push_back(id);
    next.push_back(last[0]);
  }
  ASSERT_FALSE(ids.empty());
  for (int s = 0; s < kDecodeSteps; ++s) {
    const std::vector<float> logits =
        m.step({ids[0]}, {{next[0]}}, LogitsWanted::kLast, name + " decode " + std::to_string(s));
    next[0] = m.greedy(logits, 1)[0];
  }
  for (int s = 0; s < kDecodeSteps; ++s) {
    std::vector<std::vector<int32_t>> toks;
    for (int32_t t : next) toks.push_back({t});
    const std::vector<float> logits =
        m.step(ids, toks, LogitsWanted::kLast, name + " batched decode " + std::to_string(s));
    next = m.greedy(logits, static_cast<int>(ids.size()));
  }
  const TensorParallelShard& tp = m.split().weights().tensor_parallel;
  std::printf("TP %s rank %d/%d: weights %.1f KiB, KV cache %.1f KiB, max|dlogit| %.2e\n",
              name.c_str(), tp.rank, tp.size,
              static_cast<double>(held_weight_bytes(m.split().weights())) / 1024.0,
              static_cast<double>(m.split_runner().cache().total_bytes()) / 1024.0,
              static_cast<double>(m.max_diff()));
}

TEST(TensorParallel, DenseTwoRanks) {
  GS_RUN_AS_MPI_RANKS(2);
  check_split_matches_whole("dense", golden_dir() / "models" / "dense");
}

TEST(TensorParallel, DenseCausalLmTwoRanks) {
  GS_RUN_AS_MPI_RANKS(2);
  check_split_matches_whole("dense-clm", golden_dir() / "models" / "dense-clm");
}

TEST(TensorParallel, KeqvTwoRanks) {
  GS_RUN_AS_MPI_RANKS(2);
  check_split_matches_whole("keqv", golden_dir() / "models" / "keqv");
}

// The unified Gemma 4's text path (no PLE, one global KV head) split over two ranks.
TEST(TensorParallel, UnifiedTwoRanks) {
  GS_RUN_AS_MPI_RANKS(2);
  check_split_matches_whole("unified", golden_dir() / "models" / "unified");
}

TEST(TensorParallel, MoeTwoRanks) {
  GS_RUN_AS_MPI_RANKS(2);
  check_split_matches_whole("moe", golden_dir() / "models" / "moe");
}

TEST(TensorParallel, E2bShapeTwoRanks) {
  GS_REQUIRE_SHARED(shared);
  GS_RUN_AS_MPI_RANKS(2);
  check_split_matches_whole("e2b-shape", shared / "fixtures/gemma4-tiny/models/e2b-shape");
}

TEST(TensorParallel, MoeShapeTwoRanks) {
  GS_REQUIRE_SHARED(shared);
  GS_RUN_AS_MPI_RANKS(2);
  check_split_matches_whole("moe-shape", shared / "fixtures/gemma4-tiny/models/moe-shape");
}

TEST(TensorParallel, MoeExpertParallelTwoRanks) {
  GS_RUN_AS_MPI_RANKS(2);
  check_split_matches_whole("moe", golden_dir() / "models" / "moe", true);
}

TEST(TensorParallel, MoeShapeExpertParallelTwoRanks) {
  GS_REQUIRE_SHARED(shared);
  GS_RUN_AS_MPI_RANKS(2);
  check_split_matches_whole("moe-shape", shared / "fixtures/gemma4-tiny/models/moe-shape", true);
}

// Expert parallelism: the ranks hold disjoint halves of the experts, each whole.
TEST(TensorParallel, ExpertParallelRanksHoldDisjointExperts) {
  const std::filesystem::path dir = golden_dir() / "models" / "moe";
  const ModelWeights whole = load_model_weights(dir);
  const int E = whole.config.text.num_experts;
  const LayerWeights& w0 = whole.layers.front();
  for (int rank = 0; rank < 2; ++rank) {
    WeightLoadOptions opt;
    opt.tensor_parallel_rank = rank;
    opt.tensor_parallel_size = 2;
    opt.expert_parallel = true;
    const ModelWeights part = load_model_weights(dir, nullptr, opt);
    const TensorParallelShard& tp = part.tensor_parallel;
    EXPECT_EQ(rank * E / 2, tp.expert_begin);
    EXPECT_EQ((rank + 1) * E / 2, tp.expert_end);
    EXPECT_EQ(whole.config.text.moe_intermediate_size, part.config.text.moe_intermediate_size);
    const LayerWeights& l0 = part.layers.front();
    EXPECT_EQ(w0.experts_gate_up.rows / 2, l0.experts_gate_up.rows);
    EXPECT_EQ(w0.experts_down.rows / 2, l0.experts_down.rows);
    // The rank's first expert is expert expert_begin of the checkpoint, byte for byte.
    const size_t row = dtype_row_bytes(w0.experts_gate_up.dtype, w0.experts_gate_up.cols);
    const size_t expert_bytes = row * static_cast<size_t>(w0.experts_gate_up.rows / E);
    EXPECT_EQ(0, std::memcmp(static_cast<const std::byte*>(w0.experts_gate_up.data) +
                                 static_cast<size_t>(tp.expert_begin) * expert_bytes,
                             l0.experts_gate_up.data, expert_bytes));
  }
}

TEST(TensorParallel, DenseFourRanks) {
  GS_RUN_AS_MPI_RANKS(4);
  check_split_matches_whole("dense", golden_dir() / "models" / "dense");
}

TEST(TensorParallel, MoeFourRanks) {
  GS_RUN_AS_MPI_RANKS(4);
  check_split_matches_whole("moe", golden_dir() / "models" / "moe");
}

// The reduction order is fixed: the same prefill twice on 4 ranks gives the same bits.
TEST(TensorParallel, FourRanksRepeatBitwise) {
  GS_RUN_AS_MPI_RANKS(4);
  std::shared_ptr<Communicator> comm = make_communicator("mpi");
  if (!leads(golden_dir() / "models" / "keqv", comm)) return;
  auto model = load_shard(golden_dir() / "models" / "keqv", comm);
  PagedRunner runner(*model, kBlockSize, kMaxTokens);
  const RefFile ref = load_ref(ref_path("keqv"));
  const std::vector<int32_t>& prompt = ref.cases.front().prompt;
  const ForwardOutput a = runner.step1(runner.add_sequence(), prompt, LogitsWanted::kAll);
  const ForwardOutput b = runner.step1(runner.add_sequence(), prompt, LogitsWanted::kAll);
  ASSERT_EQ(a.logits.size(), b.logits.size());
  ASSERT_FALSE(a.logits.empty());
  EXPECT_EQ(0, std::memcmp(a.logits.data(), b.logits.data(), a.logits.size() * sizeof(float)));
}

// Each rank holds its share: heads and intermediate rows split, vocabulary rows split, the
// replicated parts (norms, router) small. moe-shape has 8 / 2 KV heads, so its KV cache halves.
TEST(TensorParallel, EachRankHoldsItsShare) {
  GS_REQUIRE_SHARED(shared);
  GS_RUN_AS_MPI_RANKS(2);
  const std::filesystem::path dir = shared / "fixtures/gemma4-tiny/models/moe-shape";
  std::shared_ptr<Communicator> comm = make_communicator("mpi");
  auto split = load_shard(dir, comm);
  if (comm->rank() != 0) split->follow();  // rank 0's model sends the stop when it goes
  auto whole = load_model_weights(dir);
  const double share = static_cast<double>(held_weight_bytes(split->weights())) /
                       static_cast<double>(held_weight_bytes(whole));
  const std::array<int, 2> blocks = {8, 8};
  const double kv_share =
      static_cast<double>(KvCache(split->text_config(), blocks, kBlockSize).total_bytes()) /
      static_cast<double>(KvCache(whole.config.text, blocks, kBlockSize).total_bytes());
  std::printf("rank %d: %.3f of the weights, %.3f of the KV cache\n", comm->rank(), share,
              kv_share);
  EXPECT_NEAR(0.5, share, 0.02);
  EXPECT_DOUBLE_EQ(0.5, kv_share);
}

TEST(TensorParallel, HeadsThatDoNotSplitAreAnInputError) {
  WeightLoadOptions opt;
  opt.tensor_parallel_rank = 0;
  opt.tensor_parallel_size = 3;
  try {
    load_model_weights(golden_dir() / "models" / "dense", nullptr, opt);
    FAIL() << "no error";
  } catch (const InputError& e) {
    EXPECT_STREQ("--tensor-parallel-size 3 does not divide num_attention_heads (4)", e.what());
  }
}

}  // namespace
}  // namespace gemmaserve::golden
