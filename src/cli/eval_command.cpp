#include "cli/eval_command.h"

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "cli/arg_parser.h"
#include "core/error.h"
#include "gemmaserve/llm.h"
#include "model/checkpoint_convert.h"

namespace gemmaserve {
namespace {

namespace fs = std::filesystem;

constexpr const char* kUsage =
    "usage: gemmaserve eval arithmetic MODEL_DIR [--heldout FILE] [--weights LIST]\n"
    "                                  [--kv-cache-dtypes LIST] [--limit N] [--threads N] "
    "[--json]\n"
    "Asks MODEL_DIR \"What is A + B?\" / \"What is A - B?\" for every held-out pair of FILE\n"
    "(default MODEL_DIR/heldout.txt, lines \"A op B = R\") through the chat template, greedy,\n"
    "and counts answers equal to \"A op B = R.\" that end with finish_reason \"stop\".\n"
    "  --weights LIST          of f32, bf16, q8_0, q4_0, q4_k (default bf16,q8_0,q4_0,q4_k);\n"
    "                          bf16 and the quantized types start from a bf16 copy\n"
    "  --kv-cache-dtypes LIST  of bf16, f16, f32, fp8, q8_0 (default bf16,fp8,q8_0,f32)\n"
    "  --limit N               only the first N held-out pairs\n"
    "Prints a weights x KV-dtype accuracy table (markdown, or JSON with --json).\n";

struct Problem {
  int a = 0, b = 0, result = 0;
  char op = '+';
  std::string question() const {
    return "What is " + std::to_string(a) + " " + op + " " + std::to_string(b) + "?";
  }
  std::string answer() const {
    return std::to_string(a) + " " + op + " " + std::to_string(b) + " = " + std::to_string(result) +
           ".";
  }
};

std::vector<std::string> split_list(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream in(s);
  std::string item;
  while (std::getline(in, item, ',')) {
    if (!item.empty()) out.push_back(item);
  }
  return out;
}

std::vector<Problem> read_heldout(const fs::path& path) {
  std::ifstream in(path);
  if (!in) throw InputError(path.string() + ": cannot open the held-out list");
  std::vector<Problem> out;
  std::string line;
  int n = 0;
  while (std::getline(in, line)) {
    ++n;
    if (line.empty() || line[0] == '#') continue;
    Problem p;
    char eq = 0;
    std::istringstream s(line);
    if (!(s >> p.a >> p.op >> p.b >> eq >> p.result) || eq != '=' || (p.op != '+' && p.op != '-')) {
      throw InputError(path.string() + ":" + std::to_string(n) + ": expected \"A op B = R\"");
    }
    out.push_back(p);
  }
  if (out.empty()) throw InputError(path.string() + ": no held-out problems");
  return out;
}

struct Cell {
  std::string weights, kv;
  int correct = 0, total = 0;
  double seconds = 0;
};

Cell evaluate(const std::string& model, const std::string& weights, const std::string& kv,
              const std::vector<Problem>& problems, int threads) {
  EngineArgs args;
  args.model = model;
  args.threads = threads;
  args.kv_cache_dtype = kv;
  args.kv_cache_memory_bytes = int64_t{256} << 20;
  args.max_model_len = 256;
  args.show_progress = false;
  if (weights != "f32" && weights != "bf16") args.quantization = weights;
  LLM llm(args);
  std::vector<nlohmann::ordered_json> conversations;
  for (const Problem& p : problems) {
    conversations.push_back(
        nlohmann::ordered_json::array({{{"role", "user"}, {"content", p.question()}}}));
  }
  SamplingParams params;
  params.temperature = 0;
  params.max_tokens = 24;
  const auto t0 = std::chrono::steady_clock::now();
  const std::vector<ChatOutput> outs = llm.chat(conversations, {params}, ChatOptions{}, {});
  Cell c{weights, kv, 0, static_cast<int>(problems.size()), 0};
  c.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  for (size_t i = 0; i < outs.size(); ++i) {
    const ChatMessageOutput& m = outs[i].messages.at(0);
    if (m.finish_reason == "stop" && m.content && *m.content == problems[i].answer()) ++c.correct;
  }
  return c;
}

}  // namespace

int run_eval_command(const std::vector<std::string>& args) {
  ArgParser p;
  p.value("--heldout").value("--weights").value("--kv-cache-dtypes").value("--limit");
  p.value("--threads").flag("--json").flag("--help", {"-h"});
  p.parse(args, 2);
  if (p.get_flag("--help")) {
    std::fputs(kUsage, stdout);
    return 0;
  }
  if (p.positionals().size() != 2 || p.positionals()[0] != "arithmetic") {
    throw InputError(std::string("expected 'eval arithmetic MODEL_DIR'\n") + kUsage);
  }
  const fs::path model = p.positionals()[1];
  if (!fs::exists(model / "config.json")) {
    throw InputError(model.string() + ": no config.json (not a model folder)");
  }
  std::vector<Problem> problems = read_heldout(p.get("--heldout").value_or(model / "heldout.txt"));
  const int limit = p.get_non_negative_int("--limit", 0);
  if (limit > 0 && static_cast<size_t>(limit) < problems.size()) problems.resize(limit);
  const std::vector<std::string> weights =
      split_list(p.get("--weights").value_or("bf16,q8_0,q4_0,q4_k"));
  const std::vector<std::string> kvs =
      split_list(p.get("--kv-cache-dtypes").value_or("bf16,fp8,q8_0,f32"));
  for (const std::string& w : weights) {
    if (w != "f32" && w != "bf16" && w != "q8_0" && w != "q4_0" && w != "q4_k") {
      throw InputError("--weights: '" + w + "' is not one of f32, bf16, q8_0, q4_0, q4_k");
    }
  }
  const int threads = p.get_non_negative_int("--threads", 0);

  // bf16 and the quantized types start from a bf16 copy, as a released checkpoint would.
  const fs::path bf16_dir =
      fs::temp_directory_path() / ("gemmaserve-eval-bf16-" + std::to_string(::getpid()));
  struct Cleanup {
    fs::path dir;
    ~Cleanup() {
      std::error_code ec;
      fs::remove_all(dir, ec);
    }
  } cleanup{bf16_dir};
  bool have_bf16 = false;
  std::vector<Cell> cells;
  for (const std::string& w : weights) {
    if (w != "f32" && !have_bf16) {
      CheckpointForm form;
      form.dtype = DType::kBF16;
      convert_checkpoint(model, bf16_dir, form);
      have_bf16 = true;
    }
    for (const std::string& kv : kvs) {
      Cell c = evaluate(w == "f32" ? model.string() : bf16_dir.string(), w, kv, problems, threads);
      std::fprintf(stderr, "eval arithmetic: weights %s, kv %s: %d/%d correct (%.1fs)\n", w.c_str(),
                   kv.c_str(), c.correct, c.total, c.seconds);
      cells.push_back(c);
    }
  }
  if (p.get_flag("--json")) {
    nlohmann::ordered_json out = nlohmann::ordered_json::array();
    for (const Cell& c : cells) {
      out.push_back({{"weights", c.weights},
                     {"kv_cache_dtype", c.kv},
                     {"correct", c.correct},
                     {"total", c.total},
                     {"accuracy", c.total ? static_cast<double>(c.correct) / c.total : 0.0}});
    }
    std::printf("%s\n", out.dump(2).c_str());
    return 0;
  }
  std::printf("Held-out arithmetic, %zu problems: exact answer with finish_reason stop\n\n",
              problems.size());
  std::printf("| weights \\ KV cache |");
  for (const std::string& kv : kvs) std::printf(" %s |", kv.c_str());
  std::printf("\n|---|");
  for (size_t i = 0; i < kvs.size(); ++i) std::printf("---|");
  std::printf("\n");
  for (size_t wi = 0; wi < weights.size(); ++wi) {
    std::printf("| %s |", weights[wi].c_str());
    for (size_t ki = 0; ki < kvs.size(); ++ki) {
      const Cell& c = cells[wi * kvs.size() + ki];
      std::printf(" %.1f %% |", 100.0 * c.correct / c.total);
    }
    std::printf("\n");
  }
  return 0;
}

}  // namespace gemmaserve
