#include "cli/quantize_command.h"

#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <optional>

#include "checkpoint/gemmaserve_quantization.h"
#include "cli/arg_parser.h"
#include "cli/make_test_model_command.h"
#include "core/error.h"
#include "core/logging.h"
#include "core/progress_bar.h"
#include "io/safetensors.h"
#include "kernels/cpu/convert.h"
#include "kernels/cpu/quant.h"
#include "model/config.h"
#include "model/weights.h"

namespace gemmaserve {
namespace {

namespace fs = std::filesystem;

constexpr const char* kUsage =
    "usage: gemmaserve quantize IN_DIR OUT_DIR --type q8_0|q4_0|q4_k [--threads N]\n"
    "                           [--max-shard-mb MB]\n"
    "Writes a copy of the checkpoint in IN_DIR whose linear weights, experts and embeddings are\n"
    "block-quantized (U8 tensors [rows, row_bytes], config.json quantization_config), plus its\n"
    "tokenizer and other files. Load it with any command; it is not quantized again.\n";

bool is_float(DType d) { return d == DType::kF32 || d == DType::kF16 || d == DType::kBF16; }

bool is_checkpoint_file(const std::string& name) {
  return name == "config.json" || name.ends_with(".safetensors") ||
         name == "model.safetensors.index.json" || name.ends_with(".partial");
}

void write_text_file(const fs::path& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
  out.close();
  if (!out) throw InputError(path.string() + ": cannot write");
}

int run(const fs::path& in, const fs::path& out, DType type, int threads, uint64_t max_shard) {
  const auto start = std::chrono::steady_clock::now();
  if (fs::exists(out) && fs::equivalent(in, out)) {
    throw InputError("OUT_DIR must differ from IN_DIR");
  }
  const std::shared_ptr<const Checkpoint> ckpt = open_model_checkpoint(in);
  const ModelConfig config = parse_model_config(ckpt->config(), ckpt->config_source());
  if (stored_quantization(config.raw, ckpt->config_source()) || !ckpt->quant_method().empty()) {
    throw InputError(in.string() + ": checkpoint is already quantized; quantize the original");
  }
  // The text prefix, found like the loader does.
  std::string prefix;
  for (const std::string& p :
       {config.tensor_prefix, std::string("model.language_model."), std::string("model."),
        std::string("language_model.model."), std::string("")}) {
    if (ckpt->find(p + "embed_tokens.weight")) {
      prefix = p;
      break;
    }
  }
  std::vector<TensorSpec> specs;
  std::vector<const TensorView*> views;
  std::vector<std::optional<DType>> quantized;
  std::map<std::string, DType> tensors;
  int kept_float = 0;
  for (const auto& [name, v] : ckpt->tensors()) {
    const bool text = name.rfind(prefix, 0) == 0 || name == "lm_head.weight";
    const std::string key = name.rfind(prefix, 0) == 0 ? name.substr(prefix.size()) : name;
    const DType wanted = tensor_quant_type(type, key);
    bool quantize =
        text && v->shape.size() >= 2 && is_float(v->dtype) && is_quantizable_tensor(key);
    const std::optional<DType> fit = quantize ? block_fit_type(wanted, v->shape.back()) : wanted;
    if (fit != wanted) {
      GS_LOG_INFO << block_fit_note(name, wanted, v->shape.back(), v->dtype);
    }
    if (!fit) {
      quantize = false;
      ++kept_float;
    }
    const DType tensor_type = fit.value_or(wanted);
    TensorSpec spec{name, v->dtype, v->shape};
    if (quantize) {
      spec.dtype = DType::kU8;
      spec.shape.back() = static_cast<int64_t>(dtype_row_bytes(tensor_type, v->shape.back()));
      tensors[name] = tensor_type;
    }
    specs.push_back(spec);
    views.push_back(v);
    quantized.push_back(quantize ? std::optional<DType>(tensor_type) : std::nullopt);
  }
  if (tensors.empty()) {
    throw InputError(in.string() + ": no weight matrix has rows that are a multiple of " +
                     std::to_string(dtype_block_elems(type)) +
                     " elements; nothing to quantize to " + cpu::quantization_type_name(type));
  }
  const std::map<std::string, std::string> metadata = {
      {"format", "pt"}, {"gemmaserve_quantization", cpu::quantization_type_name(type)}};
  const SafetensorsPlan plan = plan_max_shard_bytes(specs, max_shard, metadata);
  check_free_disk_space(out, plan.disk_bytes + (1 << 20));
  std::error_code ec;
  fs::create_directories(out, ec);
  if (!fs::is_directory(out)) throw InputError(out.string() + ": cannot create directory");
  // Stale shards or index would be mixed in; config.json appears only once all is written.
  remove_old_checkpoint_files(out);

  ThreadPool pool(static_cast<size_t>(threads));
  StreamWriteOptions wopts;
  wopts.pool = &pool;
  ProgressBar bar(std::string("quantize to ") + cpu::quantization_type_name(type), plan.disk_bytes,
                  plan.disk_bytes > (64u << 20));
  wopts.progress = [&bar](uint64_t done, uint64_t total, const std::string&) {
    if (done < total) bar.update(done);
  };
  write_safetensors(
      out, specs, plan,
      [&](size_t t, int64_t first, int64_t count, std::byte* dst) {
        const TensorView& v = *views[t];
        if (!quantized[t]) {
          const size_t esize = dtype_size(v.dtype);
          std::memcpy(dst, v.data + static_cast<size_t>(first) * esize,
                      static_cast<size_t>(count) * esize);
          return;
        }
        const int64_t cols = v.shape.back();
        const size_t src_row = dtype_row_bytes(v.dtype, cols);
        fill_quantized_bytes(*quantized[t], cols, first, count, dst, [&](int64_t r, float* values) {
          cpu::to_f32(v.dtype, v.data + static_cast<size_t>(r) * src_row, values,
                      static_cast<size_t>(cols));
        });
      },
      wopts);
  bar.finish();
  for (const auto& e : fs::directory_iterator(in)) {
    const std::string name = e.path().filename().string();
    if (e.is_regular_file() && !is_checkpoint_file(name)) {
      fs::copy_file(e.path(), out / name, fs::copy_options::overwrite_existing);
    }
  }
  nlohmann::json raw = config.raw;
  raw["quantization_config"] = quantization_config_json(type, tensors);
  write_text_file(out / "config.json", raw.dump(2) + "\n");
  const double secs =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf(
      "wrote %s: %zu tensors quantized to %s, %d kept in float (row length), %zu "
      "copied, %llu bytes, %.1f s\n",
      out.string().c_str(), tensors.size(), cpu::quantization_type_name(type), kept_float,
      specs.size() - tensors.size() - kept_float, static_cast<unsigned long long>(plan.disk_bytes),
      secs);
  return 0;
}

}  // namespace

int run_quantize_command(const std::vector<std::string>& args) {
  ArgParser p;
  p.value("--type").value("--threads").value("--max-shard-mb").flag("--help", {"-h"});
  fs::path in, out;
  DType type = DType::kQ8_0;
  int threads = 0;
  uint64_t max_shard = uint64_t{4096} << 20;
  try {
    p.parse(args, 2);
    if (p.get_flag("--help")) {
      std::fputs(kUsage, stdout);
      return 0;
    }
    if (p.positionals().size() != 2) throw InputError("expected IN_DIR and OUT_DIR");
    in = p.positionals()[0];
    out = p.positionals()[1];
    const auto t = p.get("--type");
    if (!t) throw InputError("--type is required (q8_0, q4_0 or q4_k)");
    type = cpu::parse_quantization_type(*t, "--type");
    threads = p.get_int("--threads", 0);
    if (threads < 0) throw InputError("--threads: must be 0 (all cores) or positive");
    if (auto m = p.get("--max-shard-mb")) {
      const int mb = p.get_int("--max-shard-mb", 0);
      if (mb <= 0) throw InputError("--max-shard-mb: must be positive, got " + *m);
      max_shard = static_cast<uint64_t>(mb) << 20;
    }
  } catch (const InputError& e) {
    std::fprintf(stderr, "quantize: %s\n%s", e.what(), kUsage);
    return 2;
  }
  try {
    return run(in, out, type, threads, max_shard);
  } catch (const InputError& e) {
    std::fprintf(stderr, "quantize: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "quantize: %s\n", e.what());
    return 1;
  }
}

}  // namespace gemmaserve
