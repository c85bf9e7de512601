#include "model/gemma4_model.h"

#include <set>
#include <stdexcept>
#include <string>
#include <utility>

#include "core/error.h"
#include "core/logging.h"
#include "kernels/cpu/cpu_features.h"
#include "model/gemma4_audio_tower.h"
#include "model/gemma4_forward.h"
#include "model/gemma4_unified_embedder.h"
#include "model/weight_layout.h"
#include "parallel/communicator.h"

namespace gemmaserve {
namespace {

// The matrices the forward pass multiplies at the model's precision: not the embedding lookups,
// nor the MoE router (always f32 activations, gemma4_layer.cpp).
std::vector<const WeightMatrix*> multiplied_matrices(const ModelWeights& w) {
  std::vector<const WeightMatrix*> out = {&w.lm_head, &w.per_layer_model_projection};
  for (const LayerWeights& l : w.layers) {
    for (const WeightMatrix* m :
         {&l.q_proj, &l.k_proj, &l.v_proj, &l.o_proj, &l.gate_proj, &l.up_proj, &l.down_proj,
          &l.per_layer_input_gate, &l.per_layer_projection, &l.experts_gate_up, &l.experts_down}) {
      out.push_back(m);
    }
  }
  std::erase_if(out, [](const WeightMatrix* m) { return !*m; });
  return out;
}

}  // namespace

cpu::MatmulPrecision parse_matmul_precision(const std::string& text, const std::string& flag) {
  if (text == "f32") return cpu::MatmulPrecision::kF32;
  if (text == "bf16") return cpu::MatmulPrecision::kBF16;
  std::string msg = flag;
  msg.append(": unknown precision '").append(text).append("' (expected f32 or bf16)");
  throw InputError(msg);
}

const char* matmul_precision_name(cpu::MatmulPrecision precision) {
  return precision == cpu::MatmulPrecision::kBF16 ? "bf16" : "f32";
}

Bf16ActivationCoverage bf16_activation_coverage(const ModelWeights& weights) {
  Bf16ActivationCoverage c;
  std::set<std::string> other_dtypes;
  for (const WeightMatrix* m : multiplied_matrices(weights)) {
    ++c.matrices;
    if (m->dtype == DType::kBF16) {
      ++c.bf16_matrices;
    } else {
      other_dtypes.insert(dtype_name(m->dtype));
    }
  }
  if (!cpu::cpu_features().avx512_bf16) {
    c.unavailable_reason = "this CPU has no avx512_bf16";
  } else if (cpu::cpu_isa() != cpu::CpuIsa::kAvx512) {
    c.unavailable_reason = "the kernel level is ";
    c.unavailable_reason.append(cpu::cpu_isa_name(cpu::cpu_isa()))
        .append(" (GEMMASERVE_CPU_ISA), bf16 dot products need avx512");
  } else if (c.bf16_matrices == 0) {
    c.unavailable_reason = "no weight matrix is bf16 (they are";
    for (const std::string& d : other_dtypes) c.unavailable_reason.append(" ").append(d);
    c.unavailable_reason.append(")");
  }
  if (!c.unavailable_reason.empty()) c.bf16_matrices = 0;
  return c;
}

constexpr const char* kNoImageInput =
    "This model does not accept image input: it has no vision_config.";
constexpr const char* kNoAudioInput =
    "This model does not accept audio input: it has no audio embedder (audio_config).";

// Per-model plan plus buffers reused by every forward() call.
struct Gemma4Model::Scratch {
  detail::Gemma4Plan plan;
  detail::Gemma4Workspace ws;
  std::unique_ptr<Gemma4VisionEncoder> vision;     // with a vision tower
  std::unique_ptr<Gemma4UnifiedEmbedder> unified;  // the unified family's embedders
  std::unique_ptr<Gemma4AudioTower> audio;         // with an audio tower
  // HF's default feature extractor (Gemma 4's processors all use it) for encode_audio.
  std::unique_ptr<Gemma4AudioFeatureExtractor> audio_features;
};

Gemma4Model::Gemma4Model(ModelWeights weights, std::shared_ptr<ThreadPool> pool,
                         Gemma4ModelOptions options, std::shared_ptr<Communicator> communicator)
    : weights_(std::move(weights)),
      pool_(std::move(pool)),
      options_(options),
      communicator_(std::move(communicator)),
      scratch_(std::make_unique<Scratch>()) {
  const TensorParallelShard& tp = weights_.tensor_parallel;
  const int ranks = communicator_ ? communicator_->size() : 1;
  const int rank = communicator_ ? communicator_->rank() : 0;
  if (tp.size != ranks || tp.rank != rank) {
    throw std::invalid_argument("weights sliced for rank " + std::to_string(tp.rank) + " of " +
                                std::to_string(tp.size) + " given to rank " + std::to_string(rank) +
                                " of " + std::to_string(ranks));
  }
  scratch_->plan = detail::make_gemma4_plan(weights_);
  if (options_.interleave_weights) interleave_weights(weights_, pool_.get());
  if (weights_.config.vision && rank == 0) {  // the other ranks get its rows in the plan
    scratch_->vision =
        std::make_unique<Gemma4VisionEncoder>(weights_, pool_.get(), options_.matmul_precision);
  }
  if (weights_.config.audio && weights_.audio && rank == 0) {
    scratch_->audio =
        std::make_unique<Gemma4AudioTower>(weights_, pool_.get(), options_.matmul_precision);
    scratch_->audio_features =
        std::make_unique<Gemma4AudioFeatureExtractor>(Gemma4AudioFeatureOptions{});
  }
  if (weights_.config.family == ModelFamily::kGemma4Unified && rank == 0) {
    scratch_->unified =
        std::make_unique<Gemma4UnifiedEmbedder>(weights_, pool_.get(), options_.matmul_precision);
  }
}

Gemma4Model::~Gemma4Model() {
  if (!leads_ranks()) return;
  try {
    send_step(nullptr, nullptr);  // the other ranks' follow() returns
  } catch (const std::exception& e) {
    GS_LOG_ERROR << "tensor parallel: cannot stop the other ranks: " << e.what();
  }
}

void Gemma4Model::forward(std::span<const SequenceInput> batch, KvCache& cache,
                          ForwardOutput* out) {
  if (leads_ranks()) send_step(&batch, &cache);
  run_forward(batch, cache, out);
}

void Gemma4Model::run_forward(std::span<const SequenceInput> batch, KvCache& cache,
                              ForwardOutput* out) {
  detail::Gemma4Forward runner(weights_, scratch_->plan, pool_.get(), scratch_->ws, matmul_calls_,
                               options_, communicator_.get());
  runner.run(batch, cache, out);
}

CommunicatorStats Gemma4Model::communication_stats() const {
  return communicator_ ? communicator_->stats() : CommunicatorStats{};
}

int Gemma4Model::image_soft_tokens(std::span<const int32_t> positions) const {
  if (weights_.config.unified_vision) {
    return unified_image_soft_tokens(*weights_.config.unified_vision, positions);
  }
  if (!weights_.config.vision) throw InputError(kNoImageInput);
  return vision_soft_tokens(*weights_.config.vision, positions);
}

void Gemma4Model::encode_image(const ImagePatches& image, std::vector<float>* out) {
  std::unique_ptr<VisionEncodeJob> job = begin_image_encode(image);
  while (!job->done()) advance_image_encode(*job, job->remaining_cost());
  finish_image_encode(*job, out);
}

std::unique_ptr<VisionEncodeJob> Gemma4Model::begin_image_encode(const ImagePatches& image) {
  if (scratch_->unified && weights_.config.unified_vision) {
    return scratch_->unified->begin_image(image);
  }
  if (!scratch_->vision) throw InputError(kNoImageInput);
  return scratch_->vision->begin(image);
}

int64_t Gemma4Model::advance_image_encode(VisionEncodeJob& job, int64_t budget) {
  if (scratch_->unified) return scratch_->unified->advance(job, budget);
  return scratch_->vision->advance(job, budget);
}

void Gemma4Model::finish_image_encode(VisionEncodeJob& job, std::vector<float>* out) {
  if (scratch_->unified) return scratch_->unified->finish(job, out);
  scratch_->vision->finish(job, out);
}

bool Gemma4Model::accepts_audio() const {
  if (weights_.config.family == ModelFamily::kGemma4Unified) {
    return weights_.config.unified_audio.has_value();
  }
  return scratch_->audio != nullptr;
}

int64_t Gemma4Model::audio_soft_tokens(int64_t samples) const {
  if (!accepts_audio()) throw InputError(kNoAudioInput);
  if (!scratch_->audio) return unified_audio_soft_tokens(*weights_.config.unified_audio, samples);
  const Gemma4AudioFeatureExtractor& fx = *scratch_->audio_features;
  const int64_t frames = fx.valid_frames(samples);
  if (frames <= 0) {
    const Gemma4AudioFeatureOptions& o = fx.options();
    throw InputError("an audio clip of " + std::to_string(samples) +
                     " samples is too short: it gives no feature frame (at least " +
                     std::to_string(o.frame_length - o.frame_length / 2 + 1) +
                     " samples at 16 kHz are needed)");
  }
  return gemma4_audio_soft_tokens(static_cast<int>(frames));
}

void Gemma4Model::encode_audio(std::span<const float> samples, std::vector<float>* out) {
  if (!accepts_audio()) throw InputError(kNoAudioInput);
  if (scratch_->audio) {
    audio_soft_tokens(static_cast<int64_t>(samples.size()));  // the refusal of short clips
    scratch_->audio->encode(scratch_->audio_features->extract(samples), out);  // moved, not copied
    return;
  }
  if (!scratch_->unified) throw InputError(kNoAudioInput);
  scratch_->unified->encode_audio(samples, out);
}

void Gemma4Model::set_audio_feature_options(const Gemma4AudioFeatureOptions& options) {
  if (!scratch_->audio_features) return;  // no tower, or a rank other than 0
  scratch_->audio_features = std::make_unique<Gemma4AudioFeatureExtractor>(options);
}

std::unique_ptr<AudioEncodeJob> Gemma4Model::begin_audio_encode(std::span<const float> samples) {
  if (!accepts_audio()) throw InputError(kNoAudioInput);
  if (scratch_->audio) {
    audio_soft_tokens(static_cast<int64_t>(samples.size()));  // the refusal of short clips
    return scratch_->audio->begin(scratch_->audio_features->extract(samples));
  }
  auto job = std::make_unique<AudioEncodeJob>();
  job->samples_.assign(samples.begin(), samples.end());
  job->t_ = audio_soft_tokens(static_cast<int64_t>(samples.size()));
  job->num_stages_ = 1;
  return job;
}

int64_t Gemma4Model::advance_audio_encode(AudioEncodeJob& job, int64_t budget) {
  if (scratch_->audio) return scratch_->audio->advance(job, budget);
  if (!scratch_->unified) throw InputError(kNoAudioInput);
  if (job.done()) return 0;
  scratch_->unified->encode_audio(job.samples_, &job.out_);
  job.samples_ = {};
  job.stage_ = job.num_stages_;
  return job.t_;
}

void Gemma4Model::finish_audio_encode(AudioEncodeJob& job, std::vector<float>* out) {
  if (!job.done()) throw std::logic_error("finish_audio_encode() on an unfinished encode");
  *out = std::move(job.out_);
}

void Gemma4Model::encode_audio_features(const AudioFeatures& features, std::vector<float>* out) {
  if (!scratch_->audio) {
    throw InputError("This model does not take audio features: it has no audio tower.");
  }
  scratch_->audio->encode(features, out);
}

}  // namespace gemmaserve
