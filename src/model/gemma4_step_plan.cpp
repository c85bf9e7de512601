#include "model/gemma4_step_plan.h"

#include <cstring>
#include <stdexcept>

#include "core/error.h"
#include "parallel/communicator.h"

namespace gemmaserve {
namespace detail {
namespace {

class Writer {
 public:
  explicit Writer(std::vector<uint8_t>* out) : out_(out) { out_->clear(); }
  template <typename T>
  void put(T v) {
    bytes(&v, sizeof(v));
  }
  template <typename T>
  void array(std::span<const T> v) {
    put(static_cast<uint64_t>(v.size()));
    bytes(v.data(), v.size_bytes());
  }
  void bytes(const void* p, size_t n) {
    const size_t at = out_->size();
    out_->resize(at + n);
    if (n) std::memcpy(out_->data() + at, p, n);
  }

 private:
  std::vector<uint8_t>* out_;
};

class Reader {
 public:
  explicit Reader(const std::vector<uint8_t>& in) : in_(in) {}
  template <typename T>
  T get() {
    T v;
    bytes(&v, sizeof(v));
    return v;
  }
  template <typename T>
  void array(std::vector<T>* v) {
    v->resize(static_cast<size_t>(get<uint64_t>()));
    bytes(v->data(), v->size() * sizeof(T));
  }
  void bytes(void* p, size_t n) {
    if (n > in_.size() - pos_) throw std::runtime_error("tensor-parallel step plan is truncated");
    if (n) std::memcpy(p, in_.data() + pos_, n);
    pos_ += n;
  }

 private:
  const std::vector<uint8_t>& in_;
  size_t pos_ = 0;
};

}  // namespace

void encode_step_plan(const std::span<const SequenceInput>* batch, const KvGeometry& kv,
                      int64_t hidden_size, std::vector<uint8_t>* out) {
  Writer w(out);
  w.put<uint8_t>(batch ? 1 : 0);
  if (!batch) return;
  w.put(kv);
  w.put(static_cast<uint64_t>(batch->size()));
  for (const SequenceInput& s : *batch) {
    w.array(s.tokens);
    w.put(s.start_pos);
    for (const auto& table : s.block_tables) w.array(table);
    w.put(static_cast<uint8_t>(s.logits));
    w.put(static_cast<uint64_t>(s.embeddings.size()));
    for (const EmbeddingRows& e : s.embeddings) {
      w.put(e.first_pos);
      w.put(e.count);
      w.bytes(e.rows,
              static_cast<size_t>(e.count) * static_cast<size_t>(hidden_size) * sizeof(float));
    }
    w.array(s.vision_blocks);
  }
}

void decode_step_plan(const std::vector<uint8_t>& bytes, int64_t hidden_size, StepPlan* plan) {
  Reader r(bytes);
  plan->stop = r.get<uint8_t>() == 0;
  plan->batch.clear();
  if (plan->stop) return;
  plan->kv = r.get<KvGeometry>();
  const auto n = static_cast<size_t>(r.get<uint64_t>());
  // Storage first, spans after: nothing reallocates once a span points into it.
  plan->tokens.resize(n);
  plan->tables.resize(n);
  plan->embeddings.resize(n);
  plan->embedding_floats.resize(n);
  plan->vision_blocks.resize(n);
  plan->batch.resize(n);
  for (size_t i = 0; i < n; ++i) {
    SequenceInput& s = plan->batch[i];
    r.array(&plan->tokens[i]);
    s.tokens = plan->tokens[i];
    s.start_pos = r.get<int32_t>();
    for (int t = 0; t < kNumAttentionTypes; ++t) {
      r.array(&plan->tables[i][static_cast<size_t>(t)]);
      s.block_tables[static_cast<size_t>(t)] = plan->tables[i][static_cast<size_t>(t)];
    }
    s.logits = static_cast<LogitsWanted>(r.get<uint8_t>());
    const auto ne = static_cast<size_t>(r.get<uint64_t>());
    std::vector<EmbeddingRows>& rows = plan->embeddings[i];
    std::vector<float>& floats = plan->embedding_floats[i];
    rows.resize(ne);
    size_t total = 0;
    std::vector<size_t> offsets;
    floats.clear();
    for (size_t e = 0; e < ne; ++e) {
      rows[e].first_pos = r.get<int32_t>();
      rows[e].count = r.get<int32_t>();
      const size_t count = static_cast<size_t>(rows[e].count) * static_cast<size_t>(hidden_size);
      floats.resize(total + count);
      r.bytes(floats.data() + total, count * sizeof(float));
      offsets.push_back(total);
      total += count;
    }
    for (size_t e = 0; e < ne; ++e) rows[e].rows = floats.data() + offsets[e];
    s.embeddings = rows;
    r.array(&plan->vision_blocks[i]);
    s.vision_blocks = plan->vision_blocks[i];
  }
}

}  // namespace detail

bool Gemma4Model::leads_ranks() const {
  return communicator_ && communicator_->size() > 1 && communicator_->rank() == 0;
}

void Gemma4Model::send_step(const std::span<const SequenceInput>* batch, const KvCache* cache) {
  detail::KvGeometry kv;
  if (cache) {
    kv.block_size = cache->block_size();
    for (int t = 0; t < kNumAttentionTypes; ++t) {
      kv.num_blocks[static_cast<size_t>(t)] = cache->num_blocks(static_cast<AttentionType>(t));
    }
    kv.dtype = static_cast<int>(cache->dtype());
  }
  detail::encode_step_plan(batch, kv, text_config().hidden_size, &plan_bytes_);
  communicator_->broadcast(plan_bytes_, 0);
}

void Gemma4Model::follow() {
  if (!communicator_ || communicator_->rank() == 0) {
    throw std::logic_error("Gemma4Model::follow runs on tensor-parallel ranks other than 0");
  }
  detail::StepPlan plan;
  std::unique_ptr<KvCache> cache;
  ForwardOutput out;
  for (;;) {
    communicator_->broadcast(plan_bytes_, 0);
    detail::decode_step_plan(plan_bytes_, text_config().hidden_size, &plan);
    if (plan.stop) return;
    const detail::KvGeometry& kv = plan.kv;
    if (!cache || cache->block_size() != kv.block_size ||
        cache->num_blocks(AttentionType::kSliding) != kv.num_blocks[0] ||
        cache->num_blocks(AttentionType::kFull) != kv.num_blocks[1] ||
        static_cast<int>(cache->dtype()) != kv.dtype) {
      cache.reset();
      cache = std::make_unique<KvCache>(text_config(), kv.num_blocks, kv.block_size,
                                        static_cast<cpu::KvDtype>(kv.dtype));
    }
    try {
      run_forward(plan.batch, *cache, &out);
    } catch (const InputError&) {
      // Rank 0 rejects the same batch the same way (before any collective) and reports it.
    }
  }
}

}  // namespace gemmaserve
