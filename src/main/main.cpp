// gemmaserve command-line entry point: dispatches subcommands and turns errors into exit codes.
#include <cstdio>
#include <exception>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "bench/bench_command.h"
#include "cli/chat_template_command.h"
#include "cli/eval_command.h"
#include "cli/generate_command.h"
#include "cli/make_test_model_command.h"
#include "cli/preprocess_image_command.h"
#include "cli/quantize_command.h"
#include "cli/serve_command.h"
#include "cli/tokenize_command.h"
#include "core/error.h"
#include "parallel/rank_launch.h"

namespace {

constexpr const char* kUsage =
    "usage: gemmaserve <command> [options]\n"
    "commands:\n"
    "  serve MODEL_DIR           OpenAI-compatible HTTP server (vLLM's routes and flags)\n"
    "  generate MODEL_DIR        generate from text or token-id prompts\n"
    "  bench throughput|latency  offline benchmarks on random prompts (tokens/s, pp/tg, roofline)\n"
    "  bench serve               load an OpenAI-compatible server like 'vllm bench serve'\n"
    "  bench membw|peak|matmul   memory read bandwidth; arithmetic peaks; matmul kernel rates\n"
    "  tokenize --tokenizer P    print the token ids of a text\n"
    "  detokenize --tokenizer P  print the text of token ids\n"
    "  export-tokenizer          write a Hugging Face tokenizer.json from a GGUF vocabulary\n"
    "  make-test-model           write a random-weight checkpoint of a Gemma 4 variant\n"
    "  quantize IN_DIR OUT_DIR   write a q8_0/q4_0/q4_k quantized copy of a checkpoint\n"
    "  bench quality MODEL_DIR   quantized weights or bf16 activations vs f32 (top-1, KL)\n"
    "  render-chat-template      render a chat template over conversations (JSON)\n"
    "  preprocess-image FILE     decode an image; print Gemma 4's resize and soft-token count\n"
    "  eval arithmetic MODEL_DIR the demo model's held-out arithmetic accuracy per weight/KV type\n"
    "  --version                 print the version\n"
    "run 'gemmaserve <command> --help' for a command's options\n";

}  // namespace

int main(int argc, char** argv) {
  using Command = std::function<int(const std::vector<std::string>&)>;
  const std::map<std::string, Command> commands = {
      {"serve", gemmaserve::run_serve_command},
      {"generate", gemmaserve::run_generate_command},
      {"bench", gemmaserve::run_bench_command},
      {"tokenize", gemmaserve::run_tokenize_command},
      {"detokenize", gemmaserve::run_detokenize_command},
      {"export-tokenizer", gemmaserve::run_export_tokenizer_command},
      {"make-test-model", gemmaserve::run_make_test_model_command},
      {"quantize", gemmaserve::run_quantize_command},
      {"render-chat-template", gemmaserve::run_render_chat_template_command},
      {"preprocess-image", gemmaserve::run_preprocess_image_command},
      {"eval", gemmaserve::run_eval_command},
  };
  if (argc < 2 || std::string(argv[1]) == "--help" || std::string(argv[1]) == "-h") {
    std::fputs(kUsage, argc < 2 ? stderr : stdout);
    return argc < 2 ? 2 : 0;
  }
  const std::string name = argv[1];
  if (name == "--version") {
    std::printf("gemmaserve %s\n", GEMMASERVE_VERSION);
    return 0;
  }
  auto it = commands.find(name);
  if (it == commands.end()) {
    std::fprintf(stderr, "gemmaserve: unknown command '%s'\n%s", name.c_str(), kUsage);
    return 2;
  }
  try {
    return it->second(std::vector<std::string>(argv + 2, argv + argc));
  } catch (const gemmaserve::InputError& e) {
    // Every tensor-parallel rank checks the same flags and checkpoint: rank 0 alone reports a
    // bad one (e.g. heads not divisible by the rank count), once.
    if (gemmaserve::mpirun_rank() == 0) std::fprintf(stderr, "error: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "internal error: %s\n", e.what());
    return 1;
  }
}
