#include "cli/quality_command.h"

#include <cstdio>
#include <memory>

#include "cli/arg_parser.h"
#include "core/error.h"
#include "core/thread_pool.h"
#include "kernels/cpu/quant.h"
#include "model/gemma4_model.h"
#include "model/quantize_quality.h"
#include "model/weights.h"

namespace gemmaserve {
namespace {

constexpr const char* kUsage =
    "usage: gemmaserve bench quality MODEL_DIR --quantization q8_0|q4_0|q4_k\n"
    "                                [--prompt-len N] [--num-prompts M] [--seed S]\n"
    "                                [--threads N] [--margin F]\n"
    "Teacher-forced comparison of MODEL_DIR quantized at load against its float weights on M\n"
    "random prompts of N tokens (default 4 x 128): top-1 agreement at every position and at\n"
    "positions whose float top-1 logit beats the runner-up by more than F (default 0.1), and\n"
    "the mean KL divergence KL(float || quantized) in nats.\n";

}  // namespace

int run_quality_command(const std::vector<std::string>& args) {
  ArgParser p;
  p.value("--quantization", {"-q"}).value("--prompt-len").value("--num-prompts").value("--seed");
  p.value("--threads").value("--margin").flag("--help", {"-h"});
  std::string model;
  DType type = DType::kQ8_0;
  int prompt_len = 128, num_prompts = 4, threads = 0;
  uint64_t seed = 0;
  double margin = 0.1;
  try {
    p.parse(args, 1);
    if (p.get_flag("--help")) {
      std::fputs(kUsage, stdout);
      return 0;
    }
    if (p.positionals().size() != 1) throw InputError("expected MODEL_DIR");
    model = p.positionals()[0];
    const auto q = p.get("--quantization");
    if (!q) throw InputError("--quantization is required (q8_0, q4_0 or q4_k)");
    type = cpu::parse_quantization_type(*q, "--quantization");
    prompt_len = p.get_int("--prompt-len", prompt_len);
    num_prompts = p.get_int("--num-prompts", num_prompts);
    threads = p.get_int("--threads", 0);
    seed = static_cast<uint64_t>(p.get_int("--seed", 0));
    margin = p.get_double("--margin", margin);
    if (prompt_len <= 0 || num_prompts <= 0) {
      throw InputError("--prompt-len and --num-prompts must be positive");
    }
  } catch (const InputError& e) {
    std::fprintf(stderr, "bench quality: %s\n%s", e.what(), kUsage);
    return 2;
  }
  try {
    auto pool = std::make_shared<ThreadPool>(static_cast<size_t>(threads));
    Gemma4Model reference(load_model_weights(model), pool);
    if (reference.config().raw.contains("quantization_config")) {
      throw InputError(model + ": already quantized; compare an unquantized checkpoint");
    }
    WeightLoadOptions opts;
    opts.quantization = type;
    opts.pool = pool.get();
    Gemma4Model quantized(load_model_weights(model, nullptr, opts), pool);
    const auto prompts = random_prompts(reference.vocab_size(), num_prompts, prompt_len, seed);
    const QuantQualityReport r =
        compare_quantized(reference, quantized, prompts, static_cast<float>(margin));
    std::printf("model: %s\nquantization: %s\nprompts: %d x %d tokens (seed %llu)\n", model.c_str(),
                cpu::quantization_type_name(type), num_prompts, prompt_len,
                static_cast<unsigned long long>(seed));
    std::printf("positions: %lld\n", static_cast<long long>(r.positions));
    std::printf("top1_agreement: %.4f\n", r.agreement());
    std::printf("confident_positions (margin > %.3g): %lld\n", margin,
                static_cast<long long>(r.confident_positions));
    std::printf("confident_top1_agreement: %.4f\n", r.confident_agreement());
    std::printf("mean_kl: %.6g\nmax_kl: %.6g\n", r.mean_kl(), r.kl_max);
    return 0;
  } catch (const InputError& e) {
    std::fprintf(stderr, "bench quality: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench quality: %s\n", e.what());
    return 1;
  }
}

}  // namespace gemmaserve
