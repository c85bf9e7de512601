#include "cli/engine_flags.h"

#include <cctype>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <regex>

#include "core/error.h"
#include "engine/data_parallel/engine_replicas.h"
#include "engine/image_placeholders.h"
#include "engine/speculative/speculative_config.h"
#include "kernels/cpu/quant.h"
#include "model/gemma4_model.h"
#include "server/shared/chat_video.h"

namespace gemmaserve {
namespace {

int int_flag(const ArgParser& p, const std::string& name, int fallback) {
  const auto v = p.get(name);
  if (!v) return fallback;
  const int64_t x = parse_human_readable_int(*v, name);
  if (x > std::numeric_limits<int>::max()) {
    throw InputError(name + ": " + *v + " is too large");
  }
  return static_cast<int>(x);
}

// A cache budget in GiB: a number in [0, 1e9], 0 disabling the cache.
double cache_gib_flag(const ArgParser& p, const std::string& flag, double fallback) {
  const std::optional<std::string> text = p.get(flag);
  if (!text) return fallback;
  const double gib = p.get_double(flag, fallback);
  if (!(gib >= 0) || gib > 1e9) {
    throw InputError(flag + " must be a number of GiB in [0, 1e9], got " + *text);
  }
  return gib;
}

}  // namespace

int64_t parse_human_readable_int(const std::string& text, const std::string& flag) {
  static const std::regex kPattern(R"(\s*(-?\d+(?:\.\d+)?)([kKmMgGtT]?)\s*)");
  std::smatch m;
  const auto bad = [&](const std::string& why) {
    return InputError(flag + ": '" + text + "' " + why);
  };
  if (!std::regex_match(text, m, kPattern)) {
    throw bad("is not an integer (suffixes k/m/g/t multiply by powers of 1000, K/M/G/T by 1024)");
  }
  const std::string number = m[1].str();
  const std::string suffix = m[2].str();
  double scale = 1;
  bool binary = false;
  if (!suffix.empty()) {
    const char c = suffix[0];
    const int power =
        static_cast<int>(std::string("kmgt").find(static_cast<char>(std::tolower(c)))) + 1;
    binary = std::isupper(static_cast<unsigned char>(c));
    scale = std::pow(binary ? 1024.0 : 1000.0, power);
  }
  const bool decimal_point = number.find('.') != std::string::npos;
  if (decimal_point && (suffix.empty() || binary)) {
    throw bad("has a fraction; only the decimal suffixes k/m/g/t allow one");
  }
  const double value = std::strtod(number.c_str(), nullptr) * scale;
  if (!std::isfinite(value) || std::fabs(value) > 9.0e18) throw bad("is out of range");
  return static_cast<int64_t>(value);
}

void add_engine_flags(ArgParser& p) {
  p.value("--config");  // read by parse_with_config_file
  p.value("--tokenizer")
      .value("--mmproj")
      .value("--threads")
      .value("--max-model-len")
      .value("--block-size");
  p.value("--kv-cache-dtype");
  p.value("--kv-cache-memory-bytes", {"--kv-cache-memory"}).value("--gpu-memory-utilization");
  p.value("--max-num-seqs").value("--max-num-batched-tokens");
  p.value("--long-prefill-token-threshold").flag("--enable-prefix-caching");
  p.value("--generation-config").json("--override-generation-config").value("--seed");
  p.value("--quantization", {"-q"}).value("--cpu-matmul-precision");
  p.json("--limit-mm-per-prompt").json("--mm-processor-kwargs").value("--mm-processor-cache-gb");
  p.value("--structured-outputs-cache-gb").value("--max-audio-seconds");
  p.value("--max-video-seconds").json("--media-io-kwargs");
  p.value("--tensor-parallel-size", {"-tp"}).value("--distributed-executor-backend");
  p.flag("--enable-expert-parallel");
  p.value("--data-parallel-size", {"-dp"});
  p.json("--speculative-config");
}

EngineArgs engine_args_from_flags(const ArgParser& p, const std::string& model) {
  EngineArgs a;
  a.model = model;
  a.tokenizer = p.get("--tokenizer").value_or("");
  a.mmproj = p.get("--mmproj").value_or("");
  a.threads = p.get_int("--threads", a.threads);
  a.max_model_len = int_flag(p, "--max-model-len", a.max_model_len);
  a.block_size = p.get_int("--block-size", a.block_size);
  a.kv_cache_dtype = p.get("--kv-cache-dtype").value_or(a.kv_cache_dtype);
  if (auto v = p.get("--kv-cache-memory-bytes")) {
    a.kv_cache_memory_bytes = parse_human_readable_int(*v, "--kv-cache-memory-bytes");
  }
  if (p.has("--gpu-memory-utilization")) {
    a.gpu_memory_utilization = p.get_double("--gpu-memory-utilization", 0.0);
  }
  a.max_num_seqs = int_flag(p, "--max-num-seqs", a.max_num_seqs);
  a.max_num_batched_tokens = int_flag(p, "--max-num-batched-tokens", a.max_num_batched_tokens);
  a.long_prefill_token_threshold =
      int_flag(p, "--long-prefill-token-threshold", a.long_prefill_token_threshold);
  a.enable_prefix_caching = p.get_flag("--enable-prefix-caching", a.enable_prefix_caching);
  a.generation_config = p.get("--generation-config").value_or(a.generation_config);
  a.override_generation_config = p.get("--override-generation-config").value_or("");
  if (auto v = p.get("--seed")) {
    const int64_t seed = parse_human_readable_int(*v, "--seed");
    if (seed < 0) throw InputError("--seed must be non-negative, got " + *v);
    a.seed = static_cast<uint64_t>(seed);
  }
  if (auto v = p.get("--quantization")) {
    a.quantization = canonical_quantization_flag(*v, "--quantization");
  }
  if (auto v = p.get("--cpu-matmul-precision")) {
    a.cpu_matmul_precision =
        matmul_precision_name(parse_matmul_precision(*v, "--cpu-matmul-precision"));
  }
  if (auto v = p.get("--limit-mm-per-prompt"))
    a.limit_mm_per_prompt = parse_limit_mm_per_prompt(*v);
  if (auto v = p.get("--mm-processor-kwargs")) {
    const std::string flag = "--mm-processor-kwargs";
    try {
      a.mm_processor_kwargs = nlohmann::json::parse(*v);
    } catch (const nlohmann::json::parse_error& e) {
      throw InputError(flag + ": not valid JSON (" + std::string(e.what()) + ")");
    }
    parse_mm_processor_kwargs(a.mm_processor_kwargs, flag);
  }
  if (auto v = p.get("--media-io-kwargs")) {
    try {
      a.media_io_kwargs = nlohmann::json::parse(*v);
    } catch (const nlohmann::json::parse_error& e) {
      throw InputError("--media-io-kwargs: not valid JSON (" + std::string(e.what()) + ")");
    }
    apply_media_io_kwargs(a.media_io_kwargs, "--media-io-kwargs", {});
  }
  if (p.has("--max-video-seconds")) {
    a.max_video_seconds = p.get_double("--max-video-seconds", a.max_video_seconds);
    if (!(a.max_video_seconds > 0)) throw InputError("--max-video-seconds must be positive");
  }
  if (p.has("--max-audio-seconds")) {
    a.max_audio_seconds = p.get_double("--max-audio-seconds", a.max_audio_seconds);
  }
  a.mm_processor_cache_gb = cache_gib_flag(p, "--mm-processor-cache-gb", a.mm_processor_cache_gb);
  a.structured_outputs_cache_gb =
      cache_gib_flag(p, "--structured-outputs-cache-gb", a.structured_outputs_cache_gb);
  a.tensor_parallel_size = int_flag(p, "--tensor-parallel-size", a.tensor_parallel_size);
  if (a.tensor_parallel_size < 1) {
    throw InputError("--tensor-parallel-size must be at least 1, got " +
                     std::to_string(a.tensor_parallel_size));
  }
  a.distributed_executor_backend =
      p.get("--distributed-executor-backend").value_or(a.distributed_executor_backend);
  a.enable_expert_parallel = p.get_flag("--enable-expert-parallel", a.enable_expert_parallel);
  a.data_parallel_size = int_flag(p, "--data-parallel-size", a.data_parallel_size);
  check_data_parallel_args(a);  // before any rank starts
  if (auto v = p.get("--speculative-config")) {
    parse_speculative_config(*v);  // fails before the weights load
    a.speculative_config = *v;
  }
  return a;
}

const char* engine_flags_usage() {
  return "engine options (vLLM's names):\n"
         "  --config FILE.yaml                flags from a YAML mapping ('max-model-len: 4096';\n"
         "                                    lists, mappings for JSON flags); the command line\n"
         "                                    overrides it\n"
         "  --tokenizer PATH                  tokenizer.json, GGUF or folder (default: MODEL's)\n"
         "  --mmproj FILE                     vision projector GGUF of a GGUF MODEL (llama.cpp's)\n"
         "  --threads N                       compute threads (default: all cores)\n"
         "  --max-model-len N                 longest prompt + output (default: the config's)\n"
         "  --block-size N                    tokens per KV cache block (default 16)\n"
         "  --kv-cache-dtype T                auto|bf16|f16|f32|fp8|q8_0 (default auto: the\n"
         "                                    checkpoint's dtype, bf16 for bf16 weights)\n"
         "  --kv-cache-memory-bytes BYTES     KV cache size, e.g. 2G (alias --kv-cache-memory)\n"
         "  --gpu-memory-utilization F        else this fraction of available RAM (default:\n"
         "                                    min(4 GiB, half of it))\n"
         "  --max-num-seqs N                  most sequences per step (default 256)\n"
         "  --max-num-batched-tokens N        most tokens per step (default 2048)\n"
         "  --long-prefill-token-threshold N  most tokens of one request per step (default 0:\n"
         "                                    no cap)\n"
         "  --[no-]enable-prefix-caching      reuse cached prompt blocks (default on)\n"
         "  --generation-config auto|vllm|DIR sampling defaults source (default auto)\n"
         "  --override-generation-config JSON e.g. '{\"temperature\": 0.5}'\n"
         "  --seed N                          seeds requests that bring no seed (default 0)\n"
         "  --quantization q8_0|q4_0|q4_k     quantize the weights at load (alias -q); vLLM's\n"
         "                                   gptq, awq, compressed-tensors, gguf (and *_marlin)\n"
         "                                   name the checkpoint's own method (checked)\n"
         "  --cpu-matmul-precision f32|bf16   activations of bf16 weight products: f32 (default)\n"
         "                                    or bf16 (AVX512_BF16, ~2x prefill, not golden)\n"
         "  --limit-mm-per-prompt JSON        most items per prompt, '{\"image\": 2, \"video\": "
         "1}'\n"
         "                                    (default: no limit)\n"
         "  --mm-processor-kwargs JSON        image budget, '{\"max_soft_tokens\": 280}' (70, "
         "140,\n"
         "                                    280, 560 or 1120; requests may override)\n"
         "  --mm-processor-cache-gb F         encoded-image cache in GiB (default 4, 0 disables)\n"
         "  --max-audio-seconds F             longest audio clip (default 600); clips over 30 s\n"
         "                                    are heard in 30-second pieces, in order\n"
         "  --max-video-seconds F             longest video (default 600), from its header\n"
         "  --media-io-kwargs JSON            video loader: '{\"video\": {\"num_frames\": 32}}'\n"
         "                                    (default 32 frames; \"fps\": F caps them at F/s)\n"
         "  --structured-outputs-cache-gb F   compiled grammars + token masks cache in GiB,\n"
         "                                    least recently used out (default 1, 0 disables)\n"

         "  --tensor-parallel-size N          split the model over N ranks (alias -tp)\n"
         "  --distributed-executor-backend mp|mpi  mp (default): start the ranks on this host\n"
         "                                    via mpirun; mpi: already under mpirun -n N\n"
         "  --enable-expert-parallel          MoE: whole experts per rank (with -tp N)\n"
         "  --data-parallel-size N            N engine replicas in this process, each with\n"
         "                                    threads/N CPUs and its own KV cache (alias -dp)\n"
         "  --speculative-config JSON         speculative decoding, vLLM's keys: '{\"method\":\n"
         "                                    \"ngram\", \"num_speculative_tokens\": 4}' or\n"
         "                                    '{\"model\": DIR, \"num_speculative_tokens\": 4}'\n";
}

}  // namespace gemmaserve
