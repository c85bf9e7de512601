// `gemmaserve generate` end to end: the real binary on the golden tiny checkpoints.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>

#include "gemmaserve/llm.h"
#include "io/video/video_decode.h"
#include "server/shared/chat_video.h"
#include "test_support.h"
#include "tokenizer/tokenizer.h"
#include "video_test_clips.h"

namespace gemmaserve {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;
using testing::cli_binary;
using testing::run_command;
using testing::source_dir;

fs::path golden_model(const std::string& name) {
  return source_dir() / "tests/data/golden/models" / name;
}

json golden_ref(const std::string& name) {
  std::ifstream in(source_dir() / "tests/data/golden/ref" / (name + ".json"));
  return json::parse(in);
}

std::string ids_arg(const json& ids) {
  std::ostringstream s;
  for (size_t i = 0; i < ids.size(); ++i) s << (i ? "," : "") << ids[i].get<int>();
  return s.str();
}

// A small KV cache: the default (up to 4 GiB) would be allocated and zeroed at every start.
constexpr const char* kSmallCache = " --kv-cache-memory 64M";

// Runs generate and returns one parsed JSON object per output line.
std::vector<json> generate(const std::string& flags, int* exit_code = nullptr) {
  auto r = run_command(cli_binary().string() + " generate " + flags + kSmallCache + " 2>/dev/null");
  if (exit_code) *exit_code = r.exit_code;
  std::vector<json> out;
  std::istringstream lines(r.out);
  for (std::string line; std::getline(lines, line);) {
    if (!line.empty()) out.push_back(json::parse(line));
  }
  return out;
}

// The last line of stderr of a failing command (earlier lines are log output).
testing::CommandResult generate_error(const std::string& flags) {
  auto r =
      run_command(cli_binary().string() + " generate " + flags + kSmallCache + " 2>&1 >/dev/null");
  if (r.out.size() > 1) {
    size_t nl = r.out.rfind('\n', r.out.size() - 2);
    if (nl != std::string::npos) r.out = r.out.substr(nl + 1);
  }
  return r;
}

TEST(GenerateCli, GreedyTokensMatchHuggingFaceWithIgnoreEos) {
  const json ref = golden_ref("dense");
  const json& c = ref["cases"][1];  // "short"
  auto out = generate(golden_model("dense").string() + " --prompt-ids " + ids_arg(c["prompt_ids"]) +
                      " --max-tokens 16 --temperature 0 --ignore-eos --json");
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0]["prompt_token_ids"], c["prompt_ids"]);
  // Compare up to the first near-tie in the reference.
  const json& steps = c["greedy"]["steps"];
  for (size_t i = 0; i < steps.size(); ++i) {
    ASSERT_EQ(out[0]["token_ids"][i], steps[i]["token"]) << "step " << i;
    if (steps[i]["margin"].get<double>() < 1e-3) break;
  }
  EXPECT_EQ(out[0]["finish_reason"], "length");
  EXPECT_TRUE(out[0]["stop_reason"].is_null());
  EXPECT_FALSE(out[0].contains("text"));  // the fixture has no tokenizer
}

TEST(GenerateCli, StopsAtGenerationConfigEosUnlessIgnored) {
  // Make the model's own first greedy token an eos id through generation_config.json.
  const json ref = golden_ref("dense");
  const json& c = ref["cases"][1];
  const int first = c["greedy"]["new_tokens"][0];
  const int second = c["greedy"]["new_tokens"][1];
  testing::TempDir dir;
  for (const auto& e : fs::directory_iterator(golden_model("dense"))) {
    fs::copy(e.path(), dir.path() / e.path().filename());
  }
  json gen = {{"bos_token_id", 2}, {"eos_token_id", {1, second}}, {"pad_token_id", 0}};
  std::ofstream(dir.path() / "generation_config.json") << gen.dump();
  auto out = generate(dir.path().string() + " --prompt-ids " + ids_arg(c["prompt_ids"]) +
                      " --max-tokens 16 --temperature 0 --json");
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0]["token_ids"], json({first, second}));
  EXPECT_EQ(out[0]["finish_reason"], "stop");
  EXPECT_EQ(out[0]["stop_reason"], second);
  auto ignored = generate(dir.path().string() + " --prompt-ids " + ids_arg(c["prompt_ids"]) +
                          " --max-tokens 5 --temperature 0 --ignore-eos --json");
  EXPECT_EQ(ignored[0]["token_ids"].size(), 5u);
  EXPECT_EQ(ignored[0]["finish_reason"], "length");
}

TEST(GenerateCli, LogprobsAndPromptLogprobs) {
  const json ref = golden_ref("dense");
  const json& c = ref["cases"][1];
  auto out = generate(golden_model("dense").string() + " --prompt-ids " + ids_arg(c["prompt_ids"]) +
                      " --max-tokens 3 --temperature 0 --ignore-eos --logprobs 512 "
                      "--prompt-logprobs 5 --json");
  ASSERT_EQ(out.size(), 1u);
  const json& lp = out[0]["logprobs"];
  ASSERT_EQ(lp.size(), 3u);
  // --logprobs equal to the vocabulary size returns the full distribution.
  ASSERT_EQ(lp[0].size(), 512u);
  double mass = 0;
  for (auto it = lp[0].begin(); it != lp[0].end(); ++it) mass += std::exp(it->get<double>());
  EXPECT_NEAR(mass, 1.0, 1e-4);
  // The greedy token is the most likely one.
  const std::string chosen = std::to_string(out[0]["token_ids"][0].get<int>());
  for (auto it = lp[0].begin(); it != lp[0].end(); ++it) {
    EXPECT_LE(it->get<double>(), lp[0][chosen].get<double>());
  }
  const json& pl = out[0]["prompt_logprobs"];
  ASSERT_EQ(pl.size(), c["prompt_ids"].size());
  EXPECT_TRUE(pl[0].is_null());
  for (size_t i = 1; i < pl.size(); ++i) {
    // Top 5 plus the actual prompt token when it is not among them.
    const std::string tok = std::to_string(c["prompt_ids"][i].get<int>());
    EXPECT_TRUE(pl[i].contains(tok));
    EXPECT_GE(pl[i].size(), 5u);
    EXPECT_LE(pl[i].size(), 6u);
    // The ids in the top 5 are the reference's top 5 at the previous position.
    for (const auto& e : c["per_position_top5"][i - 1]) {
      EXPECT_TRUE(pl[i].contains(std::to_string(e[0].get<int>()))) << "position " << i;
    }
  }
}

TEST(GenerateCli, SeveralPromptsRunTogetherAndMatchAlone) {
  const json ref = golden_ref("dense");
  std::string flags = golden_model("dense").string() +
                      " --max-tokens 4 --temperature 0 "
                      "--ignore-eos --json";
  std::string batch_flags = flags;
  std::vector<json> alone;
  for (const auto& p : ref["batch"]["prompts"]) {
    batch_flags += " --prompt-ids " + ids_arg(p["prompt_ids"]);
    alone.push_back(generate(flags + " --prompt-ids " + ids_arg(p["prompt_ids"]))[0]);
  }
  auto together = generate(batch_flags);
  ASSERT_EQ(together.size(), alone.size());
  for (size_t i = 0; i < alone.size(); ++i) EXPECT_EQ(together[i], alone[i]) << "prompt " << i;
}

TEST(GenerateCli, BadInputGetsClearErrors) {
  const std::string model = golden_model("dense").string();
  auto r = generate_error("/nonexistent/model --prompt-ids 2");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(r.out,
            "error: /nonexistent/model/config.json: missing (not a Hugging Face checkpoint "
            "folder?)\n");
  r = generate_error(model + " --prompt-ids 2,x");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(r.out, "error: --prompt-ids: 'x' is not an integer (expected a list like 2,45,67)\n");
  r = generate_error(model + " --prompt-ids 2,512");
  EXPECT_EQ(r.out, "error: prompt 0 holds token id 512, outside the vocabulary of 512 tokens\n");
  r = generate_error(model + " --prompt hello");
  EXPECT_EQ(r.out, "error: a text prompt needs a tokenizer, and " + model +
                       " has none (pass --tokenizer or use token ids)\n");
  r = generate_error(model + " --prompt-ids 2 --max-tokens 200000");
  EXPECT_EQ(r.out,
            "error: 'max_tokens' or 'max_completion_tokens' is too large: 200000. This "
            "model's maximum context length is 131072 tokens and your request has 1 input "
            "tokens (200000 > 131072 - 1).\n");
  r = generate_error(model + " --prompt-ids 2,3,4,5 --max-model-len 4");
  EXPECT_EQ(r.out,
            "error: This model's maximum context length is 4 tokens. However, your "
            "request has 4 input tokens. Please reduce the length of the input "
            "messages.\n");
  r = generate_error(model + " --prompt-ids 2 --temperature -1");
  EXPECT_EQ(r.out, "error: temperature must be non-negative, got -1.0.\n");
  r = generate_error(model + " --prompt-ids 2 --bogus");
  EXPECT_EQ(r.out, "error: unknown flag --bogus\n");
  r = generate_error(model);
  EXPECT_EQ(r.exit_code, 2);
}

// Every engine flag under vLLM's name; none of them changes a greedy token.
TEST(GenerateCli, EngineFlagsAreAcceptedAndDoNotChangeTokens) {
  const json ref = golden_ref("dense");
  std::string prompts;
  for (const auto& p : ref["batch"]["prompts"]) {
    prompts += " --prompt-ids " + ids_arg(p["prompt_ids"]);
  }
  const std::string base = golden_model("dense").string() + prompts +
                           " --max-tokens 6 --temperature 0 --ignore-eos --logprobs 2 --json";
  const auto plain = generate(base);
  ASSERT_EQ(plain.size(), ref["batch"]["prompts"].size());
  const auto tuned = generate(base +
                              " --block-size 4 --max-num-seqs 2 --max-num-batched-tokens 9 "
                              "--long-prefill-token-threshold 5 --no-enable-prefix-caching "
                              "--max-model-len 1k --kv-cache-memory-bytes 2M --threads 1 "
                              "--seed 3 --generation-config vllm "
                              "--override-generation-config '{\"top_k\": 3}'");
  EXPECT_EQ(plain, tuned);
}

TEST(GenerateCli, NSamplesPrintOneLinePerSample) {
  const std::string flags = golden_model("dense").string() +
                            " --prompt-ids 2,17,301,45,99,12,7,480,33,61,5,250,3,77,19,402,88,123 "
                            "--max-tokens 5 --temperature 1 --ignore-eos --json --seed 7";
  const auto out = generate(flags + " --n 3");
  ASSERT_EQ(out.size(), 3u);
  for (int k = 0; k < 3; ++k) {
    EXPECT_EQ(out[k]["index"], k);
    EXPECT_EQ(out[k]["token_ids"].size(), 5u);
  }
  // Sample 0 of n draws as a lone request with the same seed.
  EXPECT_EQ(generate(flags)[0]["token_ids"], out[0]["token_ids"]);
}

TEST(GenerateCli, StartupLogsTheKvCachePlan) {
  auto r = run_command(cli_binary().string() + " generate " + golden_model("dense").string() +
                       " --prompt-ids 2,3 --max-tokens 1 --max-model-len 512" + kSmallCache +
                       " 2>&1 >/dev/null");
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_NE(r.out.find("KV cache: 64.0 MiB in blocks of 16 tokens"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("KV cache size: "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("Maximum concurrency for 512 tokens per request: "), std::string::npos)
      << r.out;
}

TEST(GenerateCli, BadEngineFlagsGetClearErrors) {
  const std::string model = golden_model("dense").string() + " --prompt-ids 2";
  EXPECT_EQ(generate_error(model + " --max-num-seqs 0").out,
            "error: --max-num-seqs must be positive, got 0\n");
  // Directly: generate_error() appends its own --kv-cache-memory, and the last one wins.
  EXPECT_EQ(run_command(cli_binary().string() + " generate " + model +
                        " --kv-cache-memory 1.5G 2>&1 >/dev/null")
                .out,
            "error: --kv-cache-memory-bytes: '1.5G' has a fraction; only the decimal suffixes "
            "k/m/g/t allow one\n");
  EXPECT_EQ(generate_error(model + " --generation-config /nonexistent").out,
            "error: --generation-config: '/nonexistent' is not 'auto', 'vllm' or a folder\n");
}

// bench throughput / latency run end to end and report tokens/s (tiny sizes: this is not a
// measurement).
TEST(BenchCli, ThroughputAndLatencyReportTokensPerSecond) {
  testing::TempDir dir;
  const std::string common = golden_model("dense").string() +
                             " --max-model-len 64 --kv-cache-memory 4M --output-json " +
                             (dir.path() / "out.json").string();
  auto r = run_command(cli_binary().string() + " bench throughput " + common +
                       " --input-len 8 --output-len 4 --num-prompts 6 2>/dev/null");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_NE(r.out.find("Throughput: "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("Total num output tokens:  24"), std::string::npos) << r.out;
  json j = json::parse(std::ifstream(dir.path() / "out.json"));
  EXPECT_EQ(j["num_requests"], 6);
  EXPECT_EQ(j["total_num_tokens"], 6 * (8 + 4));
  EXPECT_GT(j["tokens_per_second"].get<double>(), 0);

  r = run_command(cli_binary().string() + " bench latency " + common +
                  " --input-len 8 --output-len 4 --batch-size 3 --num-iters 3 "
                  "--num-iters-warmup 1 2>/dev/null");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_NE(r.out.find("Avg latency: "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("50% percentile latency: "), std::string::npos) << r.out;
  j = json::parse(std::ifstream(dir.path() / "out.json"));
  EXPECT_EQ(j["latencies"].size(), 3u);
  EXPECT_GT(j["output_tokens_per_second"].get<double>(), 0);

  r = run_command(cli_binary().string() + " bench sideways " + common + " 2>&1");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.out.find("unknown benchmark 'sideways'"), std::string::npos) << r.out;
}

// --image goes to the next bare <|image|> of the prompts: the JSON shows the expanded prompt
// (<|image> + 60 soft tokens + <image|> for a 20x12 image at 70), and a step budget smaller than
// the image gives the same tokens.
TEST(GenerateCli, ImagesExpandTheirPlaceholders) {
  const std::string images = (source_dir() / "tests/data/images").string();
  const std::string flags = golden_model("vision").string() +
                            " --prompt-ids 2,178,507,214 --prompt-ids 2,507,30,507 --image " +
                            images + "/noise_20x12.png --image " + images +
                            "/gradient_16x16.png --image " + images +
                            "/noise_20x12.png --mm-processor-kwargs '{\"max_soft_tokens\": 70}' "
                            "--max-tokens 4 --temperature 0 --json";
  int code = -1;
  const std::vector<json> out = generate(flags, &code);
  ASSERT_EQ(code, 0);
  ASSERT_EQ(out.size(), 2u);
  const auto prompt = out[0]["prompt_token_ids"].get<std::vector<int>>();
  ASSERT_EQ(prompt.size(), 3u + 1 + 60 + 1);
  EXPECT_EQ(prompt[2], 505);
  EXPECT_EQ(prompt[3], 507);
  EXPECT_EQ(prompt[63], 506);
  EXPECT_EQ(prompt[64], 214);
  EXPECT_EQ(out[1]["prompt_token_ids"].size(), 1u + (1 + 64 + 1) + 1 + (1 + 60 + 1));
  EXPECT_EQ(out[0]["token_ids"].size(), 4u);
  const std::vector<json> small = generate(flags + " --max-num-batched-tokens 8");
  ASSERT_EQ(small.size(), 2u);
  EXPECT_EQ(small[0]["token_ids"], out[0]["token_ids"]);
  EXPECT_EQ(small[1]["token_ids"], out[1]["token_ids"]);

  auto r = generate_error(golden_model("vision").string() + " --prompt-ids 2,30 --image " + images +
                          "/noise_20x12.png");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_EQ(r.out,
            "error: --image: 1 image(s) given but the prompts hold only 0 <|image|> token(s)\n");
  r = generate_error(golden_model("vision").string() + " --prompt-ids 2,507 --image " + images +
                     "/missing.png");
  EXPECT_EQ(r.out, "error: --image " + images + "/missing.png: cannot be read\n");
}

// --audio goes to the next bare <|audio|> of the prompts, in order: on the audio fixture (an
// audio tower) the expanded prompts and greedy tokens are transformers' (speech_s16: one clip;
// two_audio: two clips, so the third --audio goes to the second prompt's second placeholder).
TEST(GenerateCli, AudioFillsItsPlaceholdersAsTransformersDoes) {
  const json ref = golden_ref("audio");
  const std::string audio = (source_dir() / "tests/data/audio").string();
  std::map<std::string, json> cases;
  for (const json& c : ref["cases"]) cases[c["name"]] = c;
  const json& one = cases.at("speech_s16");
  const json& two = cases.at("two_audio");
  int code = -1;
  const std::vector<json> out = generate(
      golden_model("audio").string() + " --prompt-ids " + ids_arg(one["prompt_ids_placeholder"]) +
          " --prompt-ids " + ids_arg(two["prompt_ids_placeholder"]) + " --audio " + audio +
          "/speech_16k_mono_s16.wav --audio " + audio + "/speech_16k_mono_s16.wav --audio " +
          audio + "/sweep_16k_mono_f32.wav --max-tokens 16 --temperature 0 --ignore-eos --json",
      &code);
  ASSERT_EQ(code, 0);
  ASSERT_EQ(out.size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    const json& c = i == 0 ? one : two;
    SCOPED_TRACE(c["name"].get<std::string>());
    EXPECT_EQ(out[i]["prompt_token_ids"], c["prompt_ids"]);
    const json& steps = c["greedy"]["steps"];
    for (size_t k = 0; k < steps.size(); ++k) {
      ASSERT_EQ(out[i]["token_ids"][k], steps[k]["token"]) << "step " << k;
      if (steps[k]["margin"].get<double>() < 1e-3) break;  // a near-tie: either token is right
    }
  }

  const std::string model = golden_model("audio").string() + " --prompt-ids 2,237,511 ";
  auto r = generate_error(model + "--audio " + audio + "/blip_16k_mono_s16.wav --audio " + audio +
                          "/blip_16k_mono_s16.wav");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_EQ(r.out,
            "error: --audio: 2 audio clip(s) given but the prompts hold only 1 <|audio|> "
            "token(s)\n");
  r = generate_error(model + "--audio " + audio + "/missing.wav");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_EQ(r.out, "error: --audio " + audio + "/missing.wav: cannot be read\n");
  const std::string png = (source_dir() / "tests/data/images/gradient_16x16.png").string();
  r = generate_error(model + "--audio " + png);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_EQ(r.out.rfind("error: --audio " + png + ": ", 0), 0u) << r.out;
  // A model without an audio tower says so.
  r = generate_error(golden_model("vision").string() + " --prompt-ids 2,511 --audio " + audio +
                     "/blip_16k_mono_s16.wav");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.out.find("does not accept audio input"), std::string::npos) << r.out;
}

// Writes `bytes` to `path` and returns the path.
std::string write_file(const fs::path& path, const std::vector<std::uint8_t>& bytes) {
  std::ofstream(path, std::ios::binary)
      .write(reinterpret_cast<const char*>(bytes.data()),
             static_cast<std::streamsize>(bytes.size()));
  return path.string();
}

// --video goes to the next bare <|video|> of the prompts, in order, decoded and sampled as the
// server decodes a video_url (--media-io-kwargs num_frames 4 here): the prompts and greedy tokens
// are the offline API's for the same clips decoded in this process. On the vision fixture (with
// the demo tokenizer for the timestamps) each 64x48 frame is 'mm:ss' + <|image> + 63 x <|video|>
// + <image|>.
TEST(GenerateCli, VideosFillTheirPlaceholdersAsTheServerDecodesThem) {
  testing::TempDir dir;
  testing::ClipSpec quick;  // 10 frames at 24 fps: frames 0, 3, 6, 9 sampled, all at 00:00
  quick.frames = 10;
  testing::ClipSpec slow;  // 6 frames at 2 fps: frames 0, 1, 3, 5 at 0, 0.5, 1.5 and 2.5 s
  slow.frames = 6;
  slow.rate_num = 2;
  const std::vector<std::uint8_t> quick_bytes = testing::make_test_clip(quick);
  const std::vector<std::uint8_t> slow_bytes = testing::make_test_clip(slow);
  const std::string quick_path = write_file(dir.path() / "quick.mp4", quick_bytes);
  const std::string slow_path = write_file(dir.path() / "slow.mp4", slow_bytes);
  const std::string model = golden_model("vision").string();
  const std::string tokenizer = (source_dir() / "models/gemma4-demo").string();
  int code = -1;
  const std::vector<json> out = generate(
      model + " --tokenizer " + tokenizer +
          " --prompt-ids 2,178,508,214 --prompt-ids 2,508,30,508 --video " + quick_path +
          " --video " + slow_path + " --video " + quick_path +
          " --media-io-kwargs '{\"video\": {\"num_frames\": 4}}' --max-tokens 4 --temperature 0"
          " --ignore-eos --json",
      &code);
  ASSERT_EQ(code, 0);
  ASSERT_EQ(out.size(), 2u);
  const auto first = out[0]["prompt_token_ids"].get<std::vector<int>>();
  EXPECT_EQ(std::count(first.begin(), first.end(), 505), 4);
  EXPECT_EQ(std::count(first.begin(), first.end(), 508), 4 * 63);
  EXPECT_EQ(std::vector<int>(first.begin(), first.begin() + 2), std::vector<int>({2, 178}));
  EXPECT_EQ(first.back(), 214);
  const auto second = out[1]["prompt_token_ids"].get<std::vector<int>>();
  EXPECT_EQ(std::count(second.begin(), second.end(), 505), 8);

  EngineArgs args;
  args.model = model;
  args.tokenizer = tokenizer;
  args.kv_cache_memory_bytes = int64_t{64} << 20;
  LLM llm(args);
  // The slow clip's last two frames are a second apart: their timestamps are in the prompt.
  for (const char* stamp : {" 00:01 ", " 00:02 "}) {
    const std::vector<int32_t> ids = llm.tokenizer()->encode(stamp, false, false);
    EXPECT_NE(std::search(second.begin(), second.end(), ids.begin(), ids.end()), second.end())
        << stamp;
  }
  video::VideoSampling four;
  four.num_frames = 4;
  auto load = [&](const std::vector<std::uint8_t>& bytes) {
    return prompt_video_of(video::decode_video(bytes, four));
  };
  std::vector<Prompt> prompts = {Prompt::from_ids({2, 178, 508, 214}),
                                 Prompt::from_ids({2, 508, 30, 508})};
  prompts[0].videos = {load(quick_bytes)};
  prompts[1].videos = {load(slow_bytes), load(quick_bytes)};
  SamplingParams greedy;
  greedy.temperature = 0;
  greedy.max_tokens = 4;
  greedy.ignore_eos = true;
  const std::vector<RequestOutput> want = llm.generate(prompts, greedy);
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(out[i]["prompt_token_ids"], json(want[i].prompt_token_ids)) << "prompt " << i;
    EXPECT_EQ(out[i]["token_ids"], json(want[i].outputs[0].token_ids)) << "prompt " << i;
  }
}

TEST(GenerateCli, BadVideosGetClearErrors) {
  testing::TempDir dir;
  const std::vector<std::uint8_t> clip = testing::make_test_clip({});
  const std::string path = write_file(dir.path() / "clip.mp4", clip);
  const std::string half =
      write_file(dir.path() / "half.mp4", {clip.begin(), clip.begin() + clip.size() / 2});
  const std::string model = golden_model("vision").string();
  const std::string flags = model + " --tokenizer " +
                            (source_dir() / "models/gemma4-demo").string() +
                            " --prompt-ids 2,178,508,214 --max-tokens 2 --video ";
  auto r = generate_error(flags + (dir.path() / "missing.mp4").string());
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(r.out,
            "error: --video " + (dir.path() / "missing.mp4").string() + ": cannot be read\n");
  const std::string png = (source_dir() / "tests/data/images/gradient_16x16.png").string();
  r = generate_error(flags + png);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(r.out, "error: --video " + png +
                       ": The file is not a video this server can read (expected MP4, MOV, WebM, "
                       "MKV, AVI, GIF or WebP)\n");
  r = generate_error(flags + half);
  EXPECT_EQ(r.exit_code, 2);
  // Where the mdat box would end depends on the encoder's output; the file's size does not.
  const std::regex truncated("error: --video " + half +
                             ": The video is truncated or corrupt: its 'mdat' box ends at byte "
                             "[0-9]+ but the file has " +
                             std::to_string(clip.size() / 2) + " bytes\n");
  EXPECT_TRUE(std::regex_match(r.out, truncated)) << r.out;
  r = generate_error(flags + path + " --video " + path);
  EXPECT_EQ(r.out,
            "error: --video: 2 video(s) given but the prompts hold only 1 <|video|> token(s)\n");
  // Without a tokenizer the frames' timestamps have no text.
  r = generate_error(model + " --prompt-ids 2,178,508,214 --video " + path);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(r.out,
            "error: prompt 0: video input needs a tokenizer for its frames' timestamps, and " +
                model + " has none (pass --tokenizer)\n");
}

}  // namespace
}  // namespace gemmaserve
