#include "model/gemma4_gguf_writer.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>

#include "checkpoint/gemmaserve_quantization.h"
#include "core/error.h"
#include "core/logging.h"
#include "io/json_file.h"
#include "kernels/cpu/convert.h"
#include "kernels/cpu/quant.h"
#include "model/config.h"
#include "model/gemma4_gguf.h"
#include "model/quantize.h"
#include "model/weights.h"
#include "tokenizer/chat_template/chat_template.h"
#include "tokenizer/gguf_vocab.h"
#include "tokenizer/hf_tokenizer_json.h"

namespace gemmaserve {
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

bool is_float(DType d) { return d == DType::kF32 || d == DType::kF16 || d == DType::kBF16; }

bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

// One tensor of an output file: where its rows come from.
struct Source {
  const CheckpointTensor* tensor = nullptr;  // nullptr: `generated` holds the values
  std::vector<float> generated;
  int patch = 0;  // > 0: HF's [Hv, p*p*3] patch embedding written as the conv kernel [Hv,3,p,p]
};

// The tensors and metadata of one GGUF file.
struct FilePlan {
  GgufMetadata metadata;
  std::vector<GgufTensorSpec> specs;
  std::vector<Source> sources;
  GgufPlan plan;
};

// gguf-py's size label: "549K", "29M", "8x273K" (experts times shared plus one expert).
std::string size_label(const std::vector<GgufTensorSpec>& specs) {
  uint64_t total = 0, shared = 0, expert = 0, expert_sum = 0, expert_tensors = 0;
  for (const GgufTensorSpec& s : specs) {
    uint64_t n = 1;
    for (int64_t d : s.shape) n *= static_cast<uint64_t>(d);
    if (s.name.find("_exps.") != std::string::npos && s.shape.size() >= 3) {
      const auto experts = static_cast<uint64_t>(s.shape[s.shape.size() - 3]);
      expert += n / experts;
      expert_sum += experts;
      ++expert_tensors;
    } else {
      shared += n;
    }
    total += n;
  }
  auto rounded = [](uint64_t count) {
    const double c = static_cast<double>(count);
    double scaled = c * 1e-3;
    const char* suffix = "K";
    if (c > 1e12) {
      scaled = c * 1e-12;
      suffix = "T";
    } else if (c > 1e9) {
      scaled = c * 1e-9;
      suffix = "B";
    } else if (c > 1e6) {
      scaled = c * 1e-6;
      suffix = "M";
    }
    // Two significant digits at least: 1.5B, 29M, 549K.
    std::string whole = std::to_string(static_cast<long long>(std::nearbyint(scaled)));
    whole.erase(0, std::min(whole.find_first_not_of('0'), whole.size()));
    const int fix = std::max(2 - static_cast<int>(whole.size()), 0);
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.*f%s", fix, scaled, suffix);
    return std::string(buf);
  };
  if (expert_tensors == 0) return rounded(total);
  return std::to_string(expert_sum / expert_tensors) + "x" + rounded(shared + expert);
}

const char* type_label(DType type) {
  switch (type) {
    case DType::kF32:
      return "F32";
    case DType::kF16:
      return "F16";
    case DType::kBF16:
      return "BF16";
    case DType::kQ8_0:
      return "Q8_0";
    case DType::kQ4_0:
      return "Q4_0";
    case DType::kQ4_K:
      return "Q4_K";
    default:
      return dtype_name(type);
  }
}

// image_mean / image_std from processor_config.json's image_processor or
// preprocessor_config.json, as the converter reads them; the tower normalizes itself, so
// transformers' defaults (0 and 1) otherwise.
std::pair<std::vector<float>, std::vector<float>> image_norm(const fs::path& dir) {
  std::vector<float> mean = {0, 0, 0}, stddev = {1, 1, 1};
  for (const char* file : {"preprocessor_config.json", "processor_config.json"}) {
    if (!fs::is_regular_file(dir / file)) continue;
    json j = read_json_file(dir / file);
    if (j.is_object() && j.contains("image_processor") && j["image_processor"].is_object()) {
      j = j["image_processor"];
    }
    if (!j.is_object()) continue;
    for (auto [key, out] : {std::pair{"image_mean", &mean}, {"image_std", &stddev}}) {
      if (j.contains(key) && j[key].is_array() && j[key].size() == 3) {
        for (size_t i = 0; i < 3; ++i) (*out)[i] = j[key][i].get<float>();
      }
    }
  }
  return {mean, stddev};
}

// The special token's content named in tokenizer_config.json (a string or {"content": ...}).
std::optional<std::string> config_token(const json& config, const char* key) {
  if (!config.is_object() || !config.contains(key)) return std::nullopt;
  const json& v = config[key];
  if (v.is_string()) return v.get<std::string>();
  if (v.is_object() && v.contains("content") && v["content"].is_string()) {
    return v["content"].get<std::string>();
  }
  return std::nullopt;
}

}  // namespace

fs::path gemma4_mmproj_path(const fs::path& model_file) {
  return model_file.parent_path() / ("mmproj-" + model_file.filename().string());
}

std::string gemma4_gguf_file_name(const std::string& name, DType type) {
  return name + "-" + type_label(type) + ".gguf";
}

uint32_t gemma4_gguf_file_type(DType type) {
  switch (type) {
    case DType::kF32:
      return 0;
    case DType::kF16:
      return 1;
    case DType::kQ4_0:
      return 2;
    case DType::kQ8_0:
      return 7;
    case DType::kQ4_K:
      return 14;
    case DType::kBF16:
      return 32;
    default:
      throw InputError(std::string("no GGUF file type for ") + dtype_name(type));
  }
}

struct Gemma4GgufWriter::Impl {
  Impl(const fs::path& in_dir, const fs::path& model_file, const Gemma4GgufOptions& options);

  void plan_text(const fs::path& model_file);
  void plan_vision(const fs::path& mmproj_file);
  // The stored type of a tensor (GGUF name `gguf`, `dims` after any reshape).
  DType stored_type(const CheckpointTensor& t, const std::string& gguf, size_t dims) const;
  void add(FilePlan& f, std::string gguf_name, DType dtype, std::vector<int64_t> shape,
           Source source);
  void add_tokenizer(GgufMetadata& m) const;
  void fill(const FilePlan& f, size_t index, int64_t first, int64_t count, std::byte* dst) const;

  fs::path in_;
  Gemma4GgufOptions options_;
  std::shared_ptr<const Checkpoint> ckpt_;
  ModelConfig config_;
  std::string prefix_, name_;
  std::optional<TokenizerSpec> tokenizer_;
  FilePlan text_;
  std::optional<FilePlan> vision_;
  std::map<std::string, size_t> types_;
  size_t quantized_ = 0;
};

Gemma4GgufWriter::Impl::Impl(const fs::path& in_dir, const fs::path& model_file,
                             const Gemma4GgufOptions& options)
    : in_(in_dir), options_(options) {
  gemma4_gguf_file_type(options.type);  // a type GGUF files of Gemma 4 are made of
  ckpt_ = open_model_checkpoint(in_dir);
  if (ckpt_->format() != "safetensors") {
    throw InputError(in_dir.string() + ": is a GGUF model; quantize reads a Hugging Face folder");
  }
  config_ = parse_model_config(ckpt_->config(), ckpt_->config_source());
  if (config_.family == ModelFamily::kGemma4Unified) {
    // The writer knows llama.cpp's gemma4 layout only; the 12B's embedders have no names there.
    throw InputError(in_dir.string() + ": " + config_.architecture +
                     " (the unified Gemma 4): gemmaserve writes GGUF files in llama.cpp's gemma4 "
                     "layout only, which has no place for its embedders; quantize it to a "
                     "safetensors folder (--format safetensors) instead");
  }
  if (stored_quantization(config_.raw, ckpt_->config_source()) || !ckpt_->quant_method().empty()) {
    throw InputError(in_dir.string() + ": checkpoint is already quantized; quantize the original");
  }
  const std::optional<std::string> prefix = find_text_prefix(*ckpt_, config_.tensor_prefix);
  if (!prefix) {
    throw InputError(in_dir.string() + ": missing tensor '" + config_.tensor_prefix +
                     "embed_tokens.weight'");
  }
  prefix_ = *prefix;
  fs::path dir = fs::absolute(in_dir).lexically_normal();
  if (!dir.has_filename()) dir = dir.parent_path();  // "model/" names the folder "model"
  name_ = options.name.empty() ? dir.filename().string() : options.name;
  if (fs::is_regular_file(in_dir / "tokenizer.json")) {
    const fs::path config = in_dir / "tokenizer_config.json";
    tokenizer_ =
        spec_from_hf_json_file(in_dir / "tokenizer.json",
                               fs::is_regular_file(config) ? std::optional(config) : std::nullopt);
  } else {
    GS_LOG_WARNING << in_dir.string()
                   << ": no tokenizer.json; the GGUF carries no tokenizer (llama.cpp cannot load "
                      "it, gemmaserve needs --tokenizer)";
  }
  plan_text(model_file);
  if (config_.vision) plan_vision(gemma4_mmproj_path(model_file));
}

DType Gemma4GgufWriter::Impl::stored_type(const CheckpointTensor& t, const std::string& gguf,
                                          size_t dims) const {
  const DType type = options_.type;
  if (gguf == "v.patch_embd.weight") return type == DType::kF16 ? DType::kF16 : DType::kF32;
  // The converter keeps these F32 whatever the file type (llama.cpp reads them so).
  if (dims <= 1 || ends_with(gguf, "_norm.weight") || ends_with(gguf, "ffn_gate_inp.weight") ||
      gguf == "v.position_embd.weight" || !is_float(t.dtype)) {
    return is_float(t.dtype) ? DType::kF32 : t.dtype;
  }
  if (!dtype_is_quantized(type)) return type;
  return checkpoint_tensor_quant_type(t, prefix_, type).value_or(t.dtype);
}

void Gemma4GgufWriter::Impl::add(FilePlan& f, std::string gguf_name, DType dtype,
                                 std::vector<int64_t> shape, Source source) {
  if (shape.empty()) shape = {1};  // scalars (clipping bounds) are stored as [1]
  ++types_[type_label(dtype)];
  if (dtype_is_quantized(dtype)) ++quantized_;
  f.specs.push_back({std::move(gguf_name), dtype, std::move(shape)});
  f.sources.push_back(std::move(source));
}

void Gemma4GgufWriter::Impl::add_tokenizer(GgufMetadata& m) const {
  if (!tokenizer_) return;
  const TokenizerSpec& spec = *tokenizer_;
  GgufVocabExtras extras;
  extras.chat_template = load_chat_template(in_);
  std::optional<std::string> mask;
  if (fs::is_regular_file(in_ / "tokenizer_config.json")) {
    mask = config_token(read_json_file(in_ / "tokenizer_config.json"), "mask_token");
  }
  for (const AddedToken& t : spec.added_tokens) {
    if (mask ? t.content == *mask : (t.special && t.content == "<mask>")) extras.mask_id = t.id;
  }
  add_gguf_vocab(spec, extras, m);
  size_t n = spec.vocab.size();
  for (const AddedToken& t : spec.added_tokens) n = std::max(n, static_cast<size_t>(t.id) + 1);
  if (static_cast<int64_t>(n) != config_.text.vocab_size) {
    GS_LOG_WARNING << "the tokenizer has " << n << " tokens and the embedding "
                   << config_.text.vocab_size
                   << " rows: llama.cpp refuses a GGUF whose counts differ";
  }
}

void Gemma4GgufWriter::Impl::plan_text(const fs::path& model_file) {
  const TextConfig& c = config_.text;
  const int L = c.num_hidden_layers;
  // rope_freqs: 1 for each rotated pair of the full layers' proportional RoPE, 1e30 for the rest.
  const RopeSpec& full = c.rope[static_cast<int>(AttentionType::kFull)];
  const int pairs = c.global_head_dim / 2;
  const int rotated =
      static_cast<int>(static_cast<double>(c.global_head_dim) * full.partial_rotary_factor / 2);
  Source freqs;
  freqs.generated.assign(static_cast<size_t>(pairs), 1e30f);
  std::fill_n(freqs.generated.begin(), std::min(rotated, pairs), 1.0f);
  add(text_, "rope_freqs.weight", DType::kF32, {pairs}, std::move(freqs));

  size_t skipped = 0;
  std::string first_skipped;
  for (const auto& [name, t] : ckpt_->tensors()) {
    const bool text = name.rfind(prefix_, 0) == 0 || name == "lm_head.weight";
    if (!text || name.rfind("model.vision_tower.", 0) == 0 ||
        name.rfind("model.embed_vision.", 0) == 0 || name.rfind("model.audio_tower.", 0) == 0 ||
        name.rfind("model.embed_audio.", 0) == 0) {
      continue;
    }
    if (name == "lm_head.weight" && c.tie_word_embeddings) continue;  // the embedding serves
    const std::string hf = "model.language_model." + name.substr(prefix_.size());
    const std::optional<std::string> gguf =
        gemma4_gguf_name_of_hf(name == "lm_head.weight" ? name : hf);
    if (!gguf) {
      if (skipped++ == 0) first_skipped = name;
      continue;
    }
    Source s;
    s.tensor = t;
    add(text_, *gguf, stored_type(*t, *gguf, std::max<size_t>(t->shape.size(), 1)), t->shape,
        std::move(s));
  }
  if (skipped) {
    GS_LOG_WARNING << "skipping " << skipped << " tensors llama.cpp's Gemma 4 has no name for, "
                   << "e.g. '" << first_skipped << "'";
  }

  // Metadata in the order convert_hf_to_gguf writes it.
  GgufMetadata& m = text_.metadata;
  const std::string a = "gemma4.";
  m.set_string("general.architecture", "gemma4");
  m.set_string("general.type", "model");
  m.set_string("general.name", name_);
  m.set_string("general.size_label", size_label(text_.specs));
  m.set_uint32(a + "block_count", static_cast<uint32_t>(L));
  m.set_uint32(a + "context_length", static_cast<uint32_t>(c.max_position_embeddings));
  m.set_uint32(a + "embedding_length", static_cast<uint32_t>(c.hidden_size));
  // One number, or one per layer where the converter writes an array.
  auto per_layer = [&](const std::string& key, bool array, int value, int LayerSpec::*field) {
    if (!array) return m.set_uint32(a + key, static_cast<uint32_t>(value));
    std::vector<int32_t> values;
    for (const LayerSpec& l : c.layers) values.push_back(l.*field);
    m.set_array(a + key, GgufArray::numbers(values));
  };
  per_layer("feed_forward_length", c.use_double_wide_mlp, c.intermediate_size,
            &LayerSpec::intermediate_size);
  m.set_uint32(a + "attention.head_count", static_cast<uint32_t>(c.num_attention_heads));
  per_layer("attention.head_count_kv", c.num_global_key_value_heads.has_value(),
            c.num_key_value_heads, &LayerSpec::num_kv_heads);
  const RopeSpec& swa = c.rope[static_cast<int>(AttentionType::kSliding)];
  m.set_float32(a + "rope.freq_base", static_cast<float>(full.theta));
  m.set_float32(a + "rope.freq_base_swa", static_cast<float>(swa.theta));
  m.set_float32(a + "attention.layer_norm_rms_epsilon", static_cast<float>(c.rms_norm_eps));
  if (c.enable_moe_block) {
    m.set_uint32(a + "expert_count", static_cast<uint32_t>(c.num_experts));
    m.set_uint32(a + "expert_used_count", static_cast<uint32_t>(c.top_k_experts));
  }
  m.set_uint32(a + "attention.key_length", static_cast<uint32_t>(c.global_head_dim));
  m.set_uint32(a + "attention.value_length", static_cast<uint32_t>(c.global_head_dim));
  m.set_uint32("general.file_type", gemma4_gguf_file_type(options_.type));
  if (c.final_logit_softcapping && *c.final_logit_softcapping != 0) {
    m.set_float32(a + "final_logit_softcapping", static_cast<float>(*c.final_logit_softcapping));
  }
  m.set_uint32(a + "attention.sliding_window", static_cast<uint32_t>(c.sliding_window));
  m.set_uint32(a + "attention.shared_kv_layers", static_cast<uint32_t>(c.num_kv_shared_layers));
  m.set_uint32(a + "embedding_length_per_layer_input",
               static_cast<uint32_t>(c.hidden_size_per_layer_input));
  std::vector<bool> sliding;
  for (AttentionType t : c.layer_types) sliding.push_back(t == AttentionType::kSliding);
  m.set_array(a + "attention.sliding_window_pattern", GgufArray::bools(sliding));
  m.set_uint32(a + "attention.key_length_swa", static_cast<uint32_t>(c.head_dim));
  m.set_uint32(a + "attention.value_length_swa", static_cast<uint32_t>(c.head_dim));
  if (c.enable_moe_block) {
    m.set_uint32(a + "expert_feed_forward_length", static_cast<uint32_t>(c.moe_intermediate_size));
  }
  m.set_uint32(a + "rope.dimension_count", static_cast<uint32_t>(c.global_head_dim));
  m.set_uint32(a + "rope.dimension_count_swa", static_cast<uint32_t>(c.head_dim));
  m.set_uint32("general.quantization_version", 2);
  add_tokenizer(m);
  text_.plan = plan_gguf(model_file, m, text_.specs, options_.split_max_bytes);
}

void Gemma4GgufWriter::Impl::plan_vision(const fs::path& mmproj_file) {
  const VisionConfig& v = *config_.vision;
  FilePlan f;
  size_t skipped = 0;
  for (const auto& [name, t] : ckpt_->tensors()) {
    if (name.rfind("model.vision_tower.", 0) != 0 && name.rfind("model.embed_vision.", 0) != 0) {
      continue;
    }
    const std::optional<std::string> gguf = gemma4_gguf_name_of_hf(name);
    if (!gguf) {
      ++skipped;  // e.g. the pooler's scale, which HF's tower does not use either
      continue;
    }
    Source s;
    s.tensor = t;
    std::vector<int64_t> shape = t->shape;
    if (*gguf == "v.patch_embd.weight") {
      const int p = v.patch_size;
      if (shape.size() != 2 || shape[1] != 3 * p * p || !is_float(t->dtype)) {
        throw InputError(t->file.string() + ": tensor '" + name + "' has shape " +
                         t->shape_string() + ", expected [" + std::to_string(v.hidden_size) + ", " +
                         std::to_string(3 * p * p) + "] in a float type");
      }
      s.patch = p;
      shape = {shape[0], 3, p, p};
    }
    const DType type = stored_type(*t, *gguf, std::max<size_t>(shape.size(), 1));
    add(f, *gguf, type, std::move(shape), std::move(s));
  }
  if (skipped) {
    GS_LOG_DEBUG << "mmproj: skipping " << skipped << " unused vision tensors";
  }
  if (f.specs.empty()) return;
  const auto [mean, stddev] = image_norm(in_);
  GgufMetadata& m = f.metadata;
  m.set_string("general.architecture", "clip");
  m.set_string("general.type", "mmproj");
  m.set_string("general.name", name_);
  m.set_string("general.size_label", size_label(f.specs));
  m.set_uint32("general.file_type", gemma4_gguf_file_type(options_.type));
  m.set_bool("clip.has_vision_encoder", true);
  m.set_uint32("clip.vision.projection_dim", static_cast<uint32_t>(config_.text.hidden_size));
  m.set_uint32("clip.vision.image_size", 224);  // unused by gemma4v; the converter writes 224
  m.set_uint32("clip.vision.patch_size", static_cast<uint32_t>(v.patch_size));
  m.set_uint32("clip.vision.embedding_length", static_cast<uint32_t>(v.hidden_size));
  m.set_uint32("clip.vision.feed_forward_length", static_cast<uint32_t>(v.intermediate_size));
  m.set_uint32("clip.vision.block_count", static_cast<uint32_t>(v.num_hidden_layers));
  m.set_uint32("clip.vision.attention.head_count", static_cast<uint32_t>(v.num_attention_heads));
  m.set_array("clip.vision.image_mean", GgufArray::numbers(mean));
  m.set_array("clip.vision.image_std", GgufArray::numbers(stddev));
  m.set_string("clip.vision.projector_type", "gemma4v");
  m.set_float32("clip.vision.attention.layer_norm_epsilon", static_cast<float>(v.rms_norm_eps));
  // llama.cpp assumes the released models' 3x3 pooling without it.
  m.set_uint32("clip.vision.projector.scale_factor", static_cast<uint32_t>(v.pooling_kernel_size));
  m.set_uint32("general.quantization_version", 2);
  f.plan = plan_gguf(mmproj_file, m, f.specs);
  vision_ = std::move(f);
}

void Gemma4GgufWriter::Impl::fill(const FilePlan& f, size_t index, int64_t first, int64_t count,
                                  std::byte* dst) const {
  const GgufTensorSpec& spec = f.specs[index];
  const Source& src = f.sources[index];
  const int64_t cols = spec.shape.back();
  const size_t dst_row = spec.row_bytes();
  if (src.tensor && src.patch == 0 && src.tensor->dtype == spec.dtype) {
    std::memcpy(dst, src.tensor->data + static_cast<size_t>(first) * dst_row,
                static_cast<size_t>(count) * dst_row);
    return;
  }
  thread_local std::vector<float> values, scratch;
  values.resize(static_cast<size_t>(cols));
  for (int64_t r = first; r < first + count; ++r) {
    if (!src.tensor) {
      std::copy_n(src.generated.begin() + r * cols, cols, values.begin());
    } else if (src.patch > 0) {
      // Row (o, c, y) of the conv kernel [Hv, 3, p, p] from HF's (y, x, c)-ordered row o.
      const int64_t p = src.patch, o = r / (3 * p), c = (r / p) % 3, y = r % p;
      const size_t src_row = dtype_row_bytes(src.tensor->dtype, 3 * p * p);
      scratch.resize(static_cast<size_t>(3 * p * p));
      cpu::to_f32(src.tensor->dtype, src.tensor->data + static_cast<size_t>(o) * src_row,
                  scratch.data(), scratch.size());
      for (int64_t x = 0; x < p; ++x) {
        values[static_cast<size_t>(x)] = scratch[static_cast<size_t>((y * p + x) * 3 + c)];
      }
    } else {
      const size_t src_row = dtype_row_bytes(src.tensor->dtype, cols);
      cpu::to_f32(src.tensor->dtype, src.tensor->data + static_cast<size_t>(r) * src_row,
                  values.data(), values.size());
    }
    std::byte* out = dst + static_cast<size_t>(r - first) * dst_row;
    switch (spec.dtype) {
      case DType::kF32:
        std::memcpy(out, values.data(), dst_row);
        break;
      case DType::kF16:
      case DType::kBF16:
        for (int64_t i = 0; i < cols; ++i) {
          const float x = values[static_cast<size_t>(i)];
          const uint16_t h = spec.dtype == DType::kF16 ? f32_to_f16(x) : f32_to_bf16(x);
          std::memcpy(out + 2 * i, &h, 2);
        }
        break;
      default:
        cpu::quantize_row(spec.dtype, values.data(), out, cols);
    }
  }
}

Gemma4GgufWriter::Gemma4GgufWriter(const fs::path& in_dir, const fs::path& model_file,
                                   const Gemma4GgufOptions& options)
    : impl_(std::make_unique<Impl>(in_dir, model_file, options)) {}

Gemma4GgufWriter::~Gemma4GgufWriter() = default;

std::vector<fs::path> Gemma4GgufWriter::files() const {
  std::vector<fs::path> out;
  for (const auto& f : impl_->text_.plan.files) out.push_back(f.path);
  if (impl_->vision_) out.push_back(impl_->vision_->plan.files.front().path);
  return out;
}

std::optional<fs::path> Gemma4GgufWriter::mmproj_file() const {
  if (!impl_->vision_) return std::nullopt;
  return impl_->vision_->plan.files.front().path;
}

uint64_t Gemma4GgufWriter::disk_bytes() const {
  return impl_->text_.plan.disk_bytes + (impl_->vision_ ? impl_->vision_->plan.disk_bytes : 0);
}

bool Gemma4GgufWriter::has_tokenizer() const { return impl_->tokenizer_.has_value(); }

std::map<std::string, size_t> Gemma4GgufWriter::tensor_types() const { return impl_->types_; }

size_t Gemma4GgufWriter::quantized_tensors() const { return impl_->quantized_; }

void Gemma4GgufWriter::write(const GgufWriteOptions& io) const {
  const uint64_t total = disk_bytes();
  uint64_t base = 0;
  for (const FilePlan* f : {&impl_->text_, impl_->vision_ ? &*impl_->vision_ : nullptr}) {
    if (!f) continue;
    GgufWriteOptions o = io;
    if (io.progress) {
      o.progress = [&](uint64_t done, uint64_t, const std::string& file) {
        io.progress(base + done, total, file);
      };
    }
    write_gguf(
        f->plan, f->specs,
        [&](size_t t, int64_t first, int64_t count, std::byte* dst) {
          impl_->fill(*f, t, first, count, dst);
        },
        o);
    base += f->plan.disk_bytes;
  }
}

}  // namespace gemmaserve
