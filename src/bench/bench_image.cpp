// `gemmaserve bench image`: images through the Engine, timed from outside as a client sees them:
// an image request alone (encode time, TTFT) per weight quantization, then a decoding request
// with an image arriving beside it, per step budget (the encoder is sliced to the budget).
#include "bench/bench_image.h"

#include <algorithm>
#include <cstdio>
#include <iostream>
#include <optional>
#include <random>
#include <sstream>

#include "bench/request_watch.h"
#include "cli/arg_parser.h"
#include "core/error.h"
#include "core/logging.h"
#include "engine/engine.h"
#include "model/test_model_presets.h"

namespace gemmaserve {
namespace {

using Clock = BenchClock;

const char* kImageUsage =
    "usage: gemmaserve bench image [MODEL_DIR] [--tower e2b|e4b|31b|26b-a4b (e2b)]\n"
    "                              [--image-size N (896)] [--budgets LIST (1048576,8192,2048)]\n"
    "                              [--quantizations LIST (none,q8_0)] [--threads N (all)]\n"
    "MODEL_DIR: a Gemma 4 checkpoint with a vision tower; without it, random weights with the\n"
    "tiny text decoder and --tower's real vision tower, written to a temporary folder. Images\n"
    "are random N x N pixels at the default 280 soft tokens. Prints, per --quantizations, one\n"
    "image request alone (the whole tower in one step): its TTFT and the encoder's seconds; then,\n"
    "per --budgets (max_num_batched_tokens), a request decoding while an image request arrives:\n"
    "the image's TTFT, the decode's tokens meanwhile and its longest inter-token gap, the\n"
    "encoder's steps and seconds.\n";

std::vector<std::string> split_list(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream in(s);
  for (std::string item; std::getline(in, item, ',');) {
    if (!item.empty()) out.push_back(item);
  }
  return out;
}

// Seeded random pixels: every image differs, so the encoder cache never answers.
PromptImage random_image(int size, uint32_t seed) {
  PromptImage im;
  im.rgb.width = size;
  im.rgb.height = size;
  im.rgb.pixels.resize(static_cast<size_t>(size) * size * 3);
  std::mt19937 rng(seed);
  for (uint8_t& p : im.rgb.pixels) p = static_cast<uint8_t>(rng() >> 24);
  return im;
}

EngineRequest request(const std::string& id, std::vector<int32_t> prompt,
                      std::vector<PromptImage> images, int max_tokens) {
  EngineRequest r = greedy_request(id, std::move(prompt), max_tokens);
  r.images = std::move(images);
  return r;
}

EngineArgs engine_args(const std::string& model, int budget, const std::string& quantization,
                       int threads) {
  EngineArgs args;
  args.model = model;
  args.max_model_len = 2048;
  args.max_num_batched_tokens = budget;
  args.show_progress = false;
  args.threads = threads;
  args.mm_processor_cache_gb = 0;
  args.quantization = quantization == "none" ? "" : quantization;
  args.kv_cache_memory_bytes = int64_t{64} << 20;
  return args;
}

std::vector<int32_t> image_prompt(const Engine& engine) {
  return {2, 100, engine.model_config().image_token_id.value(), 101};
}

void bench_alone(const std::string& model, const std::string& quantization, int size, int threads) {
  Engine engine(engine_args(model, 1 << 20, quantization, threads));
  if (!engine.has_vision()) throw InputError(model + " has no vision tower");
  RequestWatch image;
  const Clock::time_point t0 = Clock::now();
  engine.add_request(request("image", image_prompt(engine), {random_image(size, 1)}, 1),
                     image.callback());
  const double ttft = seconds_of(image.wait_done() - t0);
  const EngineStats s = engine.stats();
  std::printf("ALONE %s: image TTFT %.2f s, encoder %.2f s for %llu image(s)\n",
              quantization.c_str(), ttft, s.encoder_seconds,
              static_cast<unsigned long long>(s.images_encoded));
}

void bench_beside_decode(const std::string& model, int budget, int size, int threads) {
  Engine engine(engine_args(model, budget, "none", threads));
  RequestWatch text, image;
  engine.add_request(request("text", {2, 100, 101, 102, 103, 104, 105, 106}, {}, 1900),
                     text.callback());
  text.wait_tokens(2);
  const Clock::time_point t0 = Clock::now();
  engine.add_request(request("image", image_prompt(engine), {random_image(size, 2)}, 1),
                     image.callback());
  const Clock::time_point first = image.wait_done();
  engine.abort("text");
  text.wait_done();
  const std::vector<Clock::time_point> times = text.times();
  double longest = 0;
  int tokens = 0;
  for (size_t i = 1; i < times.size(); ++i) {
    if (times[i] < t0 || times[i - 1] > first) continue;  // gaps overlapping the image's wait
    longest = std::max(longest, seconds_of(times[i] - times[i - 1]));
    ++tokens;
  }
  const EngineStats s = engine.stats();
  std::printf(
      "BESIDE DECODE budget %d: image TTFT %.2f s; decode tokens meanwhile %d, longest gap "
      "%.2f s; encoder %llu step(s), %.2f s\n",
      budget, seconds_of(first - t0), tokens, longest,
      static_cast<unsigned long long>(s.encoder_steps), s.encoder_seconds);
}

}  // namespace

int run_bench_image(const std::vector<std::string>& args) {
  ArgParser p;
  p.value("--tower").value("--image-size").value("--budgets").value("--quantizations");
  p.value("--threads").flag("--help", {"-h"});
  p.parse(args, 1);
  if (p.get_flag("--help")) {
    std::cout << kImageUsage;
    return 0;
  }
  const int size = p.get_positive_int("--image-size", 896);
  const int threads = p.get_non_negative_int("--threads", 0);
  std::vector<int> budgets;
  for (const std::string& b : split_list(p.get("--budgets").value_or("1048576,8192,2048"))) {
    try {
      budgets.push_back(std::stoi(b));
    } catch (const std::exception&) {
      throw InputError("--budgets: '" + b + "' is not a number");
    }
  }
  const std::vector<std::string> quantizations =
      split_list(p.get("--quantizations").value_or("none,q8_0"));
  log::set_level(log::Level::kWarning);
  std::optional<TempModelDir> temp;
  std::string model;
  if (!p.positionals().empty()) {
    model = p.positionals()[0];
  } else {
    const std::string tower = p.get("--tower").value_or("e2b");
    nlohmann::json config = test_model_config("tiny");
    config["vision_config"] = test_model_config(tower)["vision_config"];
    temp.emplace("gemmaserve-bench-image");
    write_test_model_of_config(temp->path(), config, DType::kBF16, 3);
    model = temp->path().string();
    std::printf("MODEL tiny text decoder + %s vision tower, random bf16 weights\n", tower.c_str());
  }
  std::printf("IMAGE %dx%d random pixels, default soft tokens\n", size, size);
  for (const std::string& q : quantizations) bench_alone(model, q, size, threads);
  for (int budget : budgets) bench_beside_decode(model, budget, size, threads);
  return 0;
}

}  // namespace gemmaserve
