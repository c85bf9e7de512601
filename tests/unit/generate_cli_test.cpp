// `gemmaserve generate` end to end: the real binary on the golden tiny checkpoints.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "test_support.h"

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

// Runs generate and returns one parsed JSON object per output line.
std::vector<json> generate(const std::string& flags, int* exit_code = nullptr) {
  auto r = run_command(cli_binary().string() + " generate " + flags + " 2>/dev/null");
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
  auto r = run_command(cli_binary().string() + " generate " + flags + " 2>&1 >/dev/null");
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
  std::string flags = golden_model("dense").string() + " --max-tokens 4 --temperature 0 "
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
  EXPECT_EQ(r.out, "error: /nonexistent/model/config.json: missing (not a Hugging Face checkpoint "
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
  EXPECT_EQ(r.out, "error: This model's maximum context length is 131072 tokens. However, you "
                   "requested 200001 tokens (1 in the messages, 200000 in the completion). "
                   "Please reduce the length of the messages or completion.\n");
  r = generate_error(model + " --prompt-ids 2 --temperature -1");
  EXPECT_EQ(r.out, "error: temperature must be non-negative, got -1.000000.\n");
  r = generate_error(model + " --prompt-ids 2 --bogus");
  EXPECT_EQ(r.out, "error: unknown flag --bogus\n");
  r = generate_error(model);
  EXPECT_EQ(r.exit_code, 2);
}

}  // namespace
}  // namespace gemmaserve
