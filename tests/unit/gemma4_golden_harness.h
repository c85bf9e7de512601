// Shared by the Gemma 4 golden/model tests: reference-JSON loading, a tiny paged-cache
// "engine" (block allocation, sliding-window block release) and logit comparisons.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "core/thread_pool.h"
#include "model/gemma4_model.h"
#include "model/kv_cache.h"
#include "model/weights.h"
#include "test_support.h"

namespace gemmaserve::golden {

struct RefCase {
  std::string name;
  std::vector<int32_t> prompt;
  std::vector<float> last_logits;
  std::vector<std::vector<std::pair<int, float>>> top5;  // per prompt position
  std::vector<int32_t> greedy;
  std::vector<float> greedy_logit;   // logit of the chosen token per step
  std::vector<float> greedy_margin;  // top1 - top2 per step
  bool has_image = false;
};

struct RefFile {
  std::vector<RefCase> cases;
  std::vector<RefCase> batch;
};

inline std::filesystem::path golden_dir() {
  return ::gemmaserve::testing::source_dir() / "tests" / "data" / "golden";
}

inline RefCase parse_case(const nlohmann::json& j) {
  RefCase c;
  c.name = j.at("name").get<std::string>();
  c.prompt = j.at("prompt_ids").get<std::vector<int32_t>>();
  c.last_logits = j.at("last_logits").get<std::vector<float>>();
  for (const auto& pos : j.at("per_position_top5")) {
    std::vector<std::pair<int, float>> row;
    for (const auto& e : pos) row.emplace_back(e.at(0).get<int>(), e.at(1).get<float>());
    c.top5.push_back(std::move(row));
  }
  const auto& g = j.at("greedy");
  c.greedy = g.at("new_tokens").get<std::vector<int32_t>>();
  for (const auto& s : g.at("steps")) {
    c.greedy_logit.push_back(s.at("logit").get<float>());
    c.greedy_margin.push_back(s.at("margin").get<float>());
  }
  // Media cases: "image" (pre-patchified), or "images" / "audio" files (the multimodal fixtures).
  c.has_image = j.contains("image") || j.contains("images") || j.contains("audio");
  return c;
}

inline RefFile load_ref(const std::filesystem::path& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot open " + path.string());
  nlohmann::json j = nlohmann::json::parse(in);
  RefFile r;
  for (const auto& c : j.at("cases")) r.cases.push_back(parse_case(c));
  // The multimodal fixtures list their batches by member name instead ("batches").
  if (j.contains("batch")) {
    for (const auto& c : j.at("batch").at("prompts")) r.batch.push_back(parse_case(c));
  }
  return r;
}

// Index of the largest value; ties to the lower index (as the reference's greedy).
inline int argmax(const float* x, int n) {
  int best = 0;
  for (int i = 1; i < n; ++i) {
    if (x[i] > x[best]) best = i;
  }
  return best;
}

inline std::vector<int> top_ids(const float* x, int n, int k) {
  std::vector<int> ids(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) ids[static_cast<size_t>(i)] = i;
  std::partial_sort(ids.begin(), ids.begin() + k, ids.end(),
                    [&](int a, int b) { return x[a] > x[b] || (x[a] == x[b] && a < b); });
  ids.resize(static_cast<size_t>(k));
  return ids;
}

inline float max_abs_diff(const float* a, const float* b, size_t n) {
  float m = 0.0f;
  for (size_t i = 0; i < n; ++i) m = std::max(m, std::fabs(a[i] - b[i]));
  return m;
}

// Checks one position's logits against the reference top-5: the logits of the reference ids
// agree within `tol`, and our top-5 ids equal the reference's except for swaps between ids
// whose reference logits differ by less than 1e-3. Returns an empty string when fine.
inline std::string check_top5(const float* logits, int vocab,
                              const std::vector<std::pair<int, float>>& ref, float tol) {
  const std::vector<int> ours = top_ids(logits, vocab, static_cast<int>(ref.size()));
  std::string err;
  for (size_t k = 0; k < ref.size(); ++k) {
    const auto [id, ref_logit] = ref[k];
    if (std::fabs(logits[id] - ref_logit) > tol) {
      err += " logit[" + std::to_string(id) + "]=" + std::to_string(logits[id]) + " ref " +
             std::to_string(ref_logit) + ";";
    }
    if (ours[k] != id && std::fabs(logits[ours[k]] - ref_logit) >= 1e-3f) {
      err += " rank " + std::to_string(k) + " id " + std::to_string(ours[k]) + " ref " +
             std::to_string(id) + ";";
    }
  }
  return err;
}

// A minimal paged-KV engine for tests: sequences get physical blocks from a free list in a
// scrambled order; sliding-layer blocks that fall wholly out of the window are released and
// their table entries set to -1, so the model must not read them.
class PagedRunner {
 public:
  PagedRunner(Gemma4Model& model, int block_size, int max_tokens, bool release_sliding = true)
      : model_(model), block_size_(block_size), release_sliding_(release_sliding) {
    const int blocks = max_tokens / block_size + 8;
    cache_ = std::make_unique<KvCache>(model.text_config(), std::array<int, 2>{blocks, blocks},
                                       block_size);
    for (int t = 0; t < kNumAttentionTypes; ++t) {
      // Hand out blocks from both ends alternately so logical order != physical order.
      for (int i = 0; i < blocks; ++i) {
        free_[t].push_back(i % 2 == 0 ? i / 2 : blocks - 1 - i / 2);
      }
      std::reverse(free_[t].begin(), free_[t].end());
    }
  }

  int add_sequence() {
    seqs_.push_back(Seq{});
    return static_cast<int>(seqs_.size()) - 1;
  }

  void free_sequence(int id) {
    for (int t = 0; t < kNumAttentionTypes; ++t) {
      for (int32_t b : seqs_[static_cast<size_t>(id)].table[t]) {
        if (b >= 0) free_[t].push_back(b);
      }
      seqs_[static_cast<size_t>(id)].table[t].clear();
    }
    seqs_[static_cast<size_t>(id)].len = 0;
  }

  int length(int id) const { return seqs_[static_cast<size_t>(id)].len; }

  // A sequence's image inputs for one step (absolute positions; see SequenceInput).
  struct ImageInputs {
    std::vector<EmbeddingRows> embeddings;
    std::vector<PositionRange> blocks;
  };

  // One forward over several sequences' new tokens (a ragged batch); `images` is empty or has
  // one entry per sequence.
  ForwardOutput step(const std::vector<int>& ids, const std::vector<std::vector<int32_t>>& toks,
                     LogitsWanted wanted, const std::vector<ImageInputs>& images = {}) {
    std::vector<SequenceInput> batch;
    for (size_t i = 0; i < ids.size(); ++i) {
      Seq& s = seqs_[static_cast<size_t>(ids[i])];
      const int end = s.len + static_cast<int>(toks[i].size());
      for (int t = 0; t < kNumAttentionTypes; ++t) {
        while (static_cast<int>(s.table[t].size()) * block_size_ < end) {
          if (free_[t].empty()) throw std::runtime_error("test KV cache exhausted");
          s.table[t].push_back(free_[t].back());
          free_[t].pop_back();
        }
      }
      SequenceInput in;
      in.tokens = toks[i];
      in.start_pos = s.len;
      for (int t = 0; t < kNumAttentionTypes; ++t) in.block_tables[t] = s.table[t];
      in.logits = wanted;
      if (!images.empty()) {
        in.embeddings = images[i].embeddings;
        in.vision_blocks = images[i].blocks;
      }
      batch.push_back(in);
    }
    ForwardOutput out;
    model_.forward(batch, *cache_, &out);
    for (size_t i = 0; i < ids.size(); ++i) {
      Seq& s = seqs_[static_cast<size_t>(ids[i])];
      s.len += static_cast<int>(toks[i].size());
      if (release_sliding_) release_out_of_window(s);
    }
    return out;
  }

  ForwardOutput step1(int id, const std::vector<int32_t>& toks, LogitsWanted wanted) {
    return step({id}, {toks}, wanted);
  }

  KvCache& cache() { return *cache_; }

 private:
  struct Seq {
    int len = 0;
    std::vector<int32_t> table[kNumAttentionTypes];
  };

  // The next query is at position len; it reads keys > len - W.
  void release_out_of_window(Seq& s) {
    const int W = model_.text_config().sliding_window;
    const int t = static_cast<int>(AttentionType::kSliding);
    const int first_needed = std::max(0, s.len - W + 1);
    for (int b = 0; b < static_cast<int>(s.table[t].size()); ++b) {
      if ((b + 1) * block_size_ <= first_needed && s.table[t][static_cast<size_t>(b)] >= 0) {
        free_[t].push_back(s.table[t][static_cast<size_t>(b)]);
        s.table[t][static_cast<size_t>(b)] = -1;
      }
    }
  }

  Gemma4Model& model_;
  int block_size_;
  bool release_sliding_;
  std::unique_ptr<KvCache> cache_;
  std::vector<int32_t> free_[kNumAttentionTypes];
  std::vector<Seq> seqs_;
};

inline std::unique_ptr<Gemma4Model> load_model(const std::filesystem::path& dir, int threads) {
  return std::make_unique<Gemma4Model>(load_model_weights(dir),
                                       std::make_shared<ThreadPool>(threads));
}

}  // namespace gemmaserve::golden
