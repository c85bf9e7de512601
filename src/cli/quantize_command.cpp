#include "cli/quantize_command.h"

#include <unistd.h>

#include <cctype>
#include <cerrno>
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
#include "io/gguf_writer.h"
#include "io/safetensors.h"
#include "kernels/cpu/convert.h"
#include "kernels/cpu/quant.h"
#include "model/config.h"
#include "model/gemma4_gguf_writer.h"
#include "model/quantize.h"
#include "model/weights.h"

namespace gemmaserve {
namespace {

namespace fs = std::filesystem;

constexpr const char* kUsage =
    "usage: gemmaserve quantize IN_DIR OUT --type q8_0|q4_0|q4_k [--format safetensors|gguf]\n"
    "                           [--threads N] [--max-shard-mb MB] [--split-max-size N[M|G]]\n"
    "                           [--name NAME]\n"
    "Quantizes the checkpoint in IN_DIR: its linear weights, experts, embeddings and vision-tower\n"
    "linear weights become block-quantized (as --quantization does at load).\n"
    "  --format safetensors (default): OUT is a folder, a copy of the checkpoint with U8 tensors\n"
    "      [rows, row_bytes] and config.json quantization_config, plus its tokenizer and other\n"
    "      files; --max-shard-mb caps its shards. Load it with any command.\n"
    "  --format gguf (or OUT ending in .gguf): OUT is a llama.cpp Gemma 4 GGUF carrying the\n"
    "      tokenizer and chat template, with the vision tower in mmproj-<OUT name> beside it\n"
    "      (llama-server --mmproj); an OUT not ending in .gguf is a folder that gets\n"
    "      <IN_DIR name>-<TYPE>.gguf. --type may also be f32, f16 or bf16 (no quantization, as\n"
    "      llama.cpp's convert_hf_to_gguf --outtype). --split-max-size writes parts of at most\n"
    "      that many bytes (M = 1e6, G = 1e9), named as llama.cpp's gguf-split names them;\n"
    "      --name sets general.name (default: the IN_DIR folder's name).\n"
    "OUT must not be an existing non-empty GGUF file (or, for a GGUF folder, a non-empty "
    "folder).\n";

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

struct Options {
  fs::path in, out;
  DType type = DType::kQ8_0;
  bool gguf = false;
  int threads = 0;
  uint64_t max_shard = uint64_t{4096} << 20;
  uint64_t split_max = 0;
  std::string name;  // general.name (GGUF)
};

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

int run_safetensors(const Options& o) {
  const auto start = std::chrono::steady_clock::now();
  const DType type = o.type;
  const std::shared_ptr<const Checkpoint> ckpt = open_model_checkpoint(o.in);
  const ModelConfig config = parse_model_config(ckpt->config(), ckpt->config_source());
  if (stored_quantization(config.raw, ckpt->config_source()) || !ckpt->quant_method().empty()) {
    throw InputError(o.in.string() + ": checkpoint is already quantized; quantize the original");
  }
  const std::string prefix = find_text_prefix(*ckpt, config.tensor_prefix).value_or("");
  std::vector<TensorSpec> specs;
  std::vector<const TensorView*> views;
  std::vector<std::optional<DType>> quantized;
  std::map<std::string, DType> tensors;
  int kept_float = 0;
  for (const auto& [name, v] : ckpt->tensors()) {
    // The tensors and types load-time quantization picks (model/quantize.h), the vision tower's
    // linear weights included.
    bool kept = false;
    const std::optional<DType> q = checkpoint_tensor_quant_type(*v, prefix, type, &kept);
    kept_float += kept ? 1 : 0;
    TensorSpec spec{name, v->dtype, v->shape};
    if (q) {
      spec.dtype = DType::kU8;
      spec.shape.back() = static_cast<int64_t>(dtype_row_bytes(*q, v->shape.back()));
      tensors[name] = *q;
    }
    specs.push_back(spec);
    views.push_back(v);
    quantized.push_back(q);
  }
  if (tensors.empty()) {
    throw InputError(o.in.string() + ": no weight matrix has rows that are a multiple of " +
                     std::to_string(dtype_block_elems(type)) +
                     " elements; nothing to quantize to " + cpu::quantization_type_name(type));
  }
  const std::map<std::string, std::string> metadata = {
      {"format", "pt"}, {"gemmaserve_quantization", cpu::quantization_type_name(type)}};
  const SafetensorsPlan plan = plan_max_shard_bytes(specs, o.max_shard, metadata);
  check_free_disk_space(o.out, plan.disk_bytes + (1 << 20));
  std::error_code ec;
  fs::create_directories(o.out, ec);
  if (!fs::is_directory(o.out)) throw InputError(o.out.string() + ": cannot create directory");
  // Stale shards or index would be mixed in; config.json appears only once all is written.
  remove_old_checkpoint_files(o.out);

  ThreadPool pool(static_cast<size_t>(o.threads));
  StreamWriteOptions wopts;
  wopts.pool = &pool;
  ProgressBar bar(std::string("quantize to ") + cpu::quantization_type_name(type), plan.disk_bytes,
                  plan.disk_bytes > (64u << 20));
  wopts.progress = [&bar](uint64_t done, uint64_t total, const std::string&) {
    if (done < total) bar.update(done);
  };
  write_safetensors(
      o.out, specs, plan,
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
  for (const auto& e : fs::directory_iterator(o.in)) {
    const std::string name = e.path().filename().string();
    if (e.is_regular_file() && !is_checkpoint_file(name)) {
      fs::copy_file(e.path(), o.out / name, fs::copy_options::overwrite_existing);
    }
  }
  nlohmann::json raw = config.raw;
  raw["quantization_config"] = quantization_config_json(type, tensors);
  write_text_file(o.out / "config.json", raw.dump(2) + "\n");
  std::printf(
      "wrote %s: %zu tensors quantized to %s, %d kept in float (row length), %zu "
      "copied, %llu bytes, %.1f s\n",
      o.out.string().c_str(), tensors.size(), cpu::quantization_type_name(type), kept_float,
      specs.size() - tensors.size() - kept_float, static_cast<unsigned long long>(plan.disk_bytes),
      seconds_since(start));
  return 0;
}

// A GGUF output must not replace an earlier file: refused when it exists and is not empty.
void check_new_file(const fs::path& path) {
  std::error_code ec;
  if (fs::is_directory(path, ec)) throw InputError(path.string() + ": is a folder");
  if (fs::exists(path, ec) && fs::file_size(path, ec) > 0) {
    throw InputError(path.string() + ": already exists and is not empty; remove it or choose " +
                     "another name (quantize does not overwrite)");
  }
}

// Creates `dir` (and parents) and checks that files can be created in it.
void prepare_folder(const fs::path& dir) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (!fs::is_directory(dir)) {
    throw InputError(dir.string() + ": cannot create folder" +
                     (ec ? ": " + ec.message() : std::string()));
  }
  if (::access(dir.c_str(), W_OK) != 0) {
    throw InputError(dir.string() + ": folder is not writable: " + std::strerror(errno));
  }
}

int run_gguf(const Options& o) {
  const auto start = std::chrono::steady_clock::now();
  fs::path model = o.out;
  const bool to_folder = o.out.extension() != ".gguf";
  if (to_folder) {
    std::error_code ec;
    if (fs::exists(o.out, ec) && !fs::is_directory(o.out, ec)) {
      throw InputError(o.out.string() +
                       ": is a file; a GGUF output names a .gguf file or a folder");
    }
    if (fs::is_directory(o.out, ec) && !fs::is_empty(o.out, ec)) {
      throw InputError(o.out.string() + ": folder exists and is not empty");
    }
    fs::path in = fs::absolute(o.in).lexically_normal();
    if (!in.has_filename()) in = in.parent_path();
    model = o.out / gemma4_gguf_file_name(in.filename().string(), o.type);
  }
  check_new_file(model);
  const fs::path dir = model.parent_path().empty() ? fs::path(".") : model.parent_path();
  prepare_folder(dir);
  Gemma4GgufOptions options;
  options.type = o.type;
  options.split_max_bytes = o.split_max;
  options.name = o.name;
  const Gemma4GgufWriter writer(o.in, model, options);
  for (const fs::path& f : writer.files()) check_new_file(f);
  check_free_disk_space(dir, writer.disk_bytes() + (1 << 20));

  ThreadPool pool(static_cast<size_t>(o.threads));
  GgufWriteOptions io;
  io.pool = &pool;
  ProgressBar bar("quantize to " + model.filename().string(), writer.disk_bytes(),
                  writer.disk_bytes() > (64u << 20));
  io.progress = [&bar](uint64_t done, uint64_t total, const std::string&) {
    if (done < total) bar.update(done);
  };
  writer.write(io);
  bar.finish();
  std::string types;
  for (const auto& [type, n] : writer.tensor_types()) {
    if (!types.empty()) types += ", ";
    types += std::to_string(n);
    types += ' ';
    types += type;
  }
  std::string files;
  for (const fs::path& f : writer.files()) {
    if (!files.empty()) files += ' ';
    files += f.string();
  }
  std::printf("wrote %s: tensors %s; %zu block-quantized, %llu bytes%s, %.1f s\n", files.c_str(),
              types.c_str(), writer.quantized_tensors(),
              static_cast<unsigned long long>(writer.disk_bytes()),
              writer.has_tokenizer() ? "" : ", no tokenizer", seconds_since(start));
  return 0;
}

// "500M", "2G", "1000000": bytes with llama.cpp's decimal suffixes.
uint64_t parse_split_size(const std::string& text) {
  const auto bad = [&] {
    return InputError("--split-max-size: expected a size such as 500M or 2G, got '" + text + "'");
  };
  if (text.empty()) throw bad();
  uint64_t scale = 1;
  std::string digits = text;
  switch (text.back()) {
    case 'K':
    case 'k':
      scale = 1000;
      break;
    case 'M':
    case 'm':
      scale = 1000 * 1000;
      break;
    case 'G':
    case 'g':
      scale = 1000 * 1000 * 1000;
      break;
    default:
      break;
  }
  if (scale > 1) digits.pop_back();
  if (digits.empty() || digits.size() > 12 ||
      digits.find_first_not_of("0123456789") != std::string::npos) {
    throw bad();
  }
  const uint64_t n = std::stoull(digits) * scale;
  if (n == 0) throw bad();
  return n;
}

DType parse_type(const std::string& text, bool gguf) {
  std::string t;
  for (char c : text) t.push_back(static_cast<char>(std::tolower(static_cast<unsigned char>(c))));
  const std::pair<const char*, DType> floats[] = {
      {"f32", DType::kF32}, {"f16", DType::kF16}, {"bf16", DType::kBF16}};
  for (const auto& [name, d] : floats) {
    if (t != name) continue;
    if (!gguf) {
      throw InputError("--type " + text +
                       " writes no quantized weights; it is for --format gguf only");
    }
    return d;
  }
  return cpu::parse_quantization_type(text, "--type");
}

}  // namespace

int run_quantize_command(const std::vector<std::string>& args) {
  ArgParser p;
  p.value("--type")
      .value("--threads")
      .value("--max-shard-mb")
      .value("--format")
      .value("--split-max-size")
      .value("--name")
      .flag("--help", {"-h"});
  Options o;
  try {
    p.parse(args, 2);
    if (p.get_flag("--help")) {
      std::fputs(kUsage, stdout);
      return 0;
    }
    if (p.positionals().size() != 2) throw InputError("expected IN_DIR and OUT");
    o.in = p.positionals()[0];
    o.out = p.positionals()[1];
    const std::string format =
        p.get("--format").value_or(o.out.extension() == ".gguf" ? "gguf" : "safetensors");
    if (format != "gguf" && format != "safetensors") {
      throw InputError("--format: expected safetensors or gguf, got '" + format + "'");
    }
    o.gguf = format == "gguf";
    const auto t = p.get("--type");
    if (!t) throw InputError("--type is required (q8_0, q4_0 or q4_k)");
    o.type = parse_type(*t, o.gguf);
    o.threads = p.get_int("--threads", 0);
    if (o.threads < 0) throw InputError("--threads: must be 0 (all cores) or positive");
    if (auto m = p.get("--max-shard-mb")) {
      if (o.gguf)
        throw InputError(
            "--max-shard-mb is for --format safetensors; GGUF output "
            "splits with --split-max-size");
      const int mb = p.get_int("--max-shard-mb", 0);
      if (mb <= 0) throw InputError("--max-shard-mb: must be positive, got " + *m);
      o.max_shard = static_cast<uint64_t>(mb) << 20;
    }
    if (auto n = p.get("--name")) {
      if (!o.gguf) throw InputError("--name is for --format gguf (its general.name)");
      o.name = *n;
    }
    if (auto m = p.get("--split-max-size")) {
      if (!o.gguf) throw InputError("--split-max-size is for --format gguf");
      o.split_max = parse_split_size(*m);
    }
  } catch (const InputError& e) {
    std::fprintf(stderr, "quantize: %s\n%s", e.what(), kUsage);
    return 2;
  }
  try {
    if (fs::exists(o.out) && fs::equivalent(o.in, o.out)) {
      throw InputError("OUT must differ from IN_DIR");
    }
    return o.gguf ? run_gguf(o) : run_safetensors(o);
  } catch (const InputError& e) {
    std::fprintf(stderr, "quantize: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "quantize: %s\n", e.what());
    return 1;
  }
}

}  // namespace gemmaserve
