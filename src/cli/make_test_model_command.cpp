#include "cli/make_test_model_command.h"

#include <sys/statvfs.h>

#include <cerrno>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>

#include "cli/arg_parser.h"
#include "core/error.h"
#include "core/progress_bar.h"
#include "core/thread_pool.h"
#include "io/safetensors.h"
#include "kernels/cpu/quant.h"
#include "model/test_model_presets.h"

namespace gemmaserve {
namespace {

namespace fs = std::filesystem;

constexpr const char* kUsage =
    "usage: gemmaserve make-test-model --preset NAME (tiny, e2b, e4b, 31b, 26b-a4b, 12b,\n"
    "                                                 tiny-unified)\n"
    "                                  [--dtype bf16|f16|f32|q8_0|q4_0|q4_k]\n"
    "                                  [--seed N] --out DIR [--dry-run] [--max-shard-mb MB]\n"
    "                                  [--threads N] [--assistant]\n"
    "Writes a random-weight checkpoint (text decoder, vision tower or unified embedders, and\n"
    "e2b/e4b's audio tower) with the variant's real tensor names and shapes: config.json,\n"
    "generation_config.json and model.safetensors, or shards of at most --max-shard-mb\n"
    "(default 4096) with model.safetensors.index.json.\n"
    "--dry-run prints the tensor list and sizes without writing anything.\n"
    "q8_0/q4_0/q4_k store the weight matrices block-quantized (as 'gemmaserve quantize'\n"
    "does), so the large presets fit in little RAM and disk.\n"
    "--assistant writes the preset's MTP assistant drafter instead (gemma4_assistant, for\n"
    "--speculative-config method mtp; --dtype bf16, f16 or f32).\n";

struct Options {
  std::string preset;
  DType dtype = DType::kBF16;
  uint64_t seed = 0;
  fs::path out;
  bool dry_run = false;
  uint64_t max_shard_bytes = uint64_t{4096} << 20;
  int threads = 0;
  bool help = false;
  bool assistant = false;
};

DType parse_dtype_flag(const std::string& s) {
  if (s == "bf16" || s == "bfloat16") return DType::kBF16;
  if (s == "f16" || s == "float16" || s == "fp16") return DType::kF16;
  if (s == "f32" || s == "float32" || s == "fp32") return DType::kF32;
  if (s == "q8_0" || s == "q4_0" || s == "q4_k") return cpu::parse_quantization_type(s, "--dtype");
  throw InputError("--dtype: unknown dtype '" + s +
                   "' (expected bf16, f16, f32, q8_0, q4_0 or q4_k)");
}

uint64_t parse_u64(const std::string& flag, const std::string& s) {
  errno = 0;
  char* end = nullptr;
  unsigned long long x = std::strtoull(s.c_str(), &end, 10);
  if (s.empty() || s[0] == '-' || *end != '\0' || errno == ERANGE) {
    throw InputError(flag + ": expected a non-negative integer, got '" + s + "'");
  }
  return x;
}

Options parse_options(const std::vector<std::string>& args) {
  ArgParser p;
  p.value("--preset").value("--dtype").value("--seed").value("--out").value("--max-shard-mb");
  p.value("--threads").flag("--dry-run").flag("--assistant").flag("--help", {"-h"});
  p.parse(args, 0);
  Options o;
  o.help = p.get_flag("--help");
  if (o.help) return o;
  auto preset = p.get("--preset");
  if (!preset) throw InputError("--preset is required (tiny, e2b, e4b, 31b or 26b-a4b)");
  o.preset = *preset;
  bool known = false;
  for (const auto& n : test_model_preset_names()) known = known || n == o.preset;
  if (!known) {
    throw InputError("--preset: unknown preset '" + o.preset +
                     "' (expected tiny, e2b, e4b, 31b or 26b-a4b)");
  }
  if (auto d = p.get("--dtype")) o.dtype = parse_dtype_flag(*d);
  if (auto s = p.get("--seed")) o.seed = parse_u64("--seed", *s);
  o.dry_run = p.get_flag("--dry-run");
  o.assistant = p.get_flag("--assistant");
  if (auto out = p.get("--out")) o.out = *out;
  if (o.out.empty() && !o.dry_run) throw InputError("--out DIR is required");
  if (auto m = p.get("--max-shard-mb")) {
    const uint64_t mb = parse_u64("--max-shard-mb", *m);
    if (mb == 0) throw InputError("--max-shard-mb: must be positive");
    o.max_shard_bytes = mb << 20;
  }
  o.threads = p.get_int("--threads", 0);
  if (o.threads < 0) throw InputError("--threads: must be 0 (all cores) or positive");
  return o;
}

std::string gib(uint64_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f GiB", static_cast<double>(bytes) / (1ull << 30));
  return buf;
}

void write_text_file(const fs::path& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
  out.close();
  if (!out) throw InputError(path.string() + ": cannot write");
}

// Files of an earlier checkpoint in DIR that the new one would be mixed with (a stale index
// would shadow a new single file, stale shards would be loaded by the fallback glob); its
// config.json goes too, so the folder has one only once the new checkpoint is complete.
// Whether `name` is a shard name: model-<digits>-of-<digits>.safetensors[.partial].
bool is_shard_name(std::string name) {
  const std::string partial = ".partial";
  if (name.ends_with(partial)) name.resize(name.size() - partial.size());
  auto digits = [&](size_t& i) {
    size_t start = i;
    while (i < name.size() && name[i] >= '0' && name[i] <= '9') ++i;
    return i > start;
  };
  if (!name.starts_with("model-")) return false;
  size_t i = 6;
  if (!digits(i) || name.compare(i, 4, "-of-") != 0) return false;
  i += 4;
  return digits(i) && name.substr(i) == ".safetensors";
}

void remove_stale_checkpoint_files(const fs::path& dir) {
  std::vector<fs::path> stale;
  for (const auto& e : fs::directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    if (name == "config.json" || name == "model.safetensors" ||
        name == "model.safetensors.index.json" || name == "model.safetensors.partial" ||
        is_shard_name(name)) {
      stale.push_back(e.path());
    }
  }
  for (const auto& p : stale) fs::remove(p);
}

void print_dry_run(const Options& o, const TestModelSpec& spec, const SafetensorsPlan& plan) {
  std::printf("# gemmaserve make-test-model --preset %s --dtype %s --dry-run (nothing written)\n",
              o.preset.c_str(), dtype_name(o.dtype));
  for (const auto& t : spec.tensors) {
    std::printf("%s %s %s\n", t.spec.name.c_str(), dtype_name(t.spec.dtype),
                t.spec.shape_string().c_str());
  }
  std::printf("tensors: %zu\n", spec.tensors.size());
  std::printf("parameters: %" PRId64 "\n", spec.num_parameters());
  std::printf("total_bytes: %" PRIu64 " (%s of tensor data)\n", plan.data_bytes,
              gib(plan.data_bytes).c_str());
  std::printf("files: %zu (%s), %" PRIu64 " bytes on disk with headers\n", plan.files.size(),
              plan.sharded ? "shards + model.safetensors.index.json" : "model.safetensors",
              plan.disk_bytes);
}

int run(const Options& o) {
  const auto start = std::chrono::steady_clock::now();
  const TestModelSpec spec = o.assistant ? make_test_assistant_spec(o.preset, o.dtype)
                                         : make_test_model_spec(o.preset, o.dtype);
  const std::map<std::string, std::string> metadata = {
      {"format", "pt"}, {"gemmaserve_test_model", spec.preset}, {"seed", std::to_string(o.seed)}};
  const std::vector<TensorSpec> specs = spec.specs();
  const SafetensorsPlan plan = plan_max_shard_bytes(specs, o.max_shard_bytes, metadata);
  if (o.dry_run) {
    print_dry_run(o, spec, plan);
    return 0;
  }
  check_free_disk_space(o.out, plan.disk_bytes + (1 << 20));
  std::error_code ec;
  fs::create_directories(o.out, ec);
  if (!fs::is_directory(o.out)) {
    throw InputError(o.out.string() + ": cannot create directory" +
                     (ec ? ": " + ec.message() : std::string()));
  }
  remove_stale_checkpoint_files(o.out);

  ThreadPool pool(static_cast<size_t>(o.threads));
  StreamWriteOptions wopts;
  wopts.pool = &pool;
  ProgressBar bar("make-test-model " + o.preset, plan.disk_bytes, plan.disk_bytes > (64u << 20));
  // The final line is drawn by finish().
  wopts.progress = [&bar](uint64_t done, uint64_t total, const std::string&) {
    if (done < total) bar.update(done);
  };
  write_safetensors(
      o.out, specs, plan,
      [&spec, &o](size_t t, int64_t first, int64_t count, std::byte* dst) {
        fill_test_tensor(spec.tensors[t], o.seed, first, count, dst);
      },
      wopts);
  bar.finish();
  write_text_file(o.out / "generation_config.json", spec.generation_config.dump(2) + "\n");
  const std::string how = "gemmaserve make-test-model --preset " + o.preset +
                          (o.assistant ? " --assistant" : "") + " --dtype " + dtype_name(o.dtype) +
                          " --seed " + std::to_string(o.seed);
  write_text_file(o.out / "TEST_MODEL.txt",
                  "Random weights for tests (not a trained model): " + how + "\n");
  // config.json last: a folder that has one holds a complete checkpoint.
  write_text_file(o.out / "config.json", spec.config.dump(2) + "\n");
  const double secs =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("wrote %s: preset %s, %s, seed %" PRIu64 ", %zu tensors, %" PRId64
              " parameters, %" PRIu64 " bytes in %zu file(s), %.1f s\n",
              o.out.string().c_str(), spec.preset.c_str(), dtype_name(o.dtype), o.seed,
              spec.tensors.size(), spec.num_parameters(), plan.disk_bytes, plan.files.size(), secs);
  return 0;
}

}  // namespace

void check_free_disk_space(const fs::path& dir, uint64_t bytes, uint64_t reserve) {
  fs::path probe = fs::absolute(dir);
  while (!fs::exists(probe) && probe.has_parent_path() && probe != probe.parent_path()) {
    probe = probe.parent_path();
  }
  struct statvfs st {};
  if (::statvfs(probe.c_str(), &st) != 0) {
    throw InputError(probe.string() + ": cannot query free disk space: " + std::strerror(errno));
  }
  const uint64_t avail = static_cast<uint64_t>(st.f_bavail) * st.f_frsize;
  if (bytes > avail || avail - bytes < reserve) {
    throw InputError("not enough disk space for " + dir.string() + ": the checkpoint needs " +
                     std::to_string(bytes) + " bytes (" + gib(bytes) + ") but only " +
                     std::to_string(avail) + " bytes (" + gib(avail) + ") are free on " +
                     probe.string() + "; nothing was written");
  }
}

void remove_old_checkpoint_files(const fs::path& dir) { remove_stale_checkpoint_files(dir); }

int run_make_test_model_command(const std::vector<std::string>& args) {
  Options o;
  try {
    o = parse_options(args);
  } catch (const InputError& e) {
    std::fprintf(stderr, "make-test-model: %s\n%s", e.what(), kUsage);
    return 2;
  }
  if (o.help) {
    std::fputs(kUsage, stdout);
    return 0;
  }
  try {
    return run(o);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "make-test-model: %s\n", e.what());
    return 1;
  }
}

}  // namespace gemmaserve
