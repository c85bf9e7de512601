// The offline LLM over the engine: all prompts in one batch, outputs in prompt order, exactly
// one BOS on text prompts, and text streaming / stop strings with a real tokenizer.
#include "gemmaserve/llm.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <stdexcept>

#include "cli/make_test_model_command.h"
#include "core/error.h"
#include "engine_test_support.h"
#include "tokenizer/tokenizer.h"

namespace gemmaserve::enginetest {
namespace {

namespace fs = std::filesystem;

TEST(Llm, PromptsRunAsOneBatchInPromptOrder) {
  log::set_level(log::Level::kWarning);
  LLM llm(tiny_args("dense"));
  SamplingParams p;
  p.temperature = 0;
  p.ignore_eos = true;
  p.max_tokens = 5;
  std::vector<EngineRequest> requests = varied_requests(8, llm.vocab_size(), 21, p, "x", 40);
  std::vector<Prompt> prompts;
  for (const EngineRequest& r : requests) prompts.push_back(Prompt::from_ids(r.prompt_token_ids));
  const uint64_t before = llm.num_steps();
  const std::vector<RequestOutput> together = llm.generate(prompts, p);
  const uint64_t batch_steps = llm.num_steps() - before;
  ASSERT_EQ(together.size(), prompts.size());
  uint64_t alone_steps = 0;
  for (size_t i = 0; i < prompts.size(); ++i) {
    EXPECT_EQ(together[i].prompt_token_ids, prompts[i].token_ids);
    EXPECT_TRUE(together[i].finished);
    const uint64_t s0 = llm.num_steps();
    const std::vector<RequestOutput> alone = llm.generate({prompts[i]}, p);
    alone_steps += llm.num_steps() - s0;
    expect_same_outputs(alone[0], together[i], "prompt " + std::to_string(i));
  }
  EXPECT_LT(batch_steps * 4, alone_steps);
  EXPECT_TRUE(llm.generate({}, p).empty());
  // A bad prompt anywhere refuses the whole call, naming it.
  std::vector<Prompt> bad = prompts;
  bad.push_back(Prompt::from_ids({2, 9999}));
  try {
    llm.generate(bad, p);
    FAIL() << "accepted an out-of-vocabulary id";
  } catch (const InputError& e) {
    EXPECT_STREQ(e.what(), "prompt 8 holds token id 9999, outside the vocabulary of 512 tokens");
  }
  EXPECT_EQ(llm.engine().stats().num_waiting, 0);
}

// GenerateOptions (the Python binding's hooks): parameters per prompt, vLLM's max_tokens=None,
// one on_finished call per prompt, and keep_going false aborting the call's requests.
TEST(Llm, GenerateOptionsReportAbortAndFillTheContext) {
  log::set_level(log::Level::kWarning);
  EngineArgs args = tiny_args("dense");
  args.max_model_len = 64;
  LLM llm(args);
  SamplingParams short_run;
  short_run.temperature = 0;
  short_run.ignore_eos = true;
  short_run.max_tokens = 3;
  SamplingParams to_context = short_run;
  GenerateOptions options;
  options.max_tokens_to_context = {false, true};
  std::vector<size_t> reported;
  options.on_finished = [&](size_t i, const RequestOutput& out) {
    EXPECT_TRUE(out.finished);
    reported.push_back(i);
  };
  const auto out = llm.generate({Prompt::from_ids({2, 5, 6}), Prompt::from_ids({2, 7})},
                                {short_run, to_context}, options);
  EXPECT_EQ(out[0].outputs[0].token_ids.size(), 3u);
  EXPECT_EQ(out[1].outputs[0].token_ids.size(), 62u);  // max_model_len - the prompt's 2
  std::sort(reported.begin(), reported.end());
  EXPECT_EQ(reported, (std::vector<size_t>{0, 1}));

  // keep_going false: every request of the call ends with "abort", and the engine is empty.
  // The hook is asked only while requests run: 4000 steps cannot end before the first (immediate)
  // ask, where 60 once did on a fast, idle machine.
  EngineArgs long_args = tiny_args("dense");
  long_args.max_model_len = 4096;
  LLM long_llm(long_args);
  SamplingParams long_run = to_context;
  long_run.max_tokens = 4000;
  GenerateOptions stop;
  stop.poll_interval = std::chrono::milliseconds(0);  // asked at once
  stop.keep_going = [] { return false; };
  const auto aborted =
      long_llm.generate({Prompt::from_ids({2, 5}), Prompt::from_ids({2, 6})}, {long_run}, stop);
  for (const RequestOutput& r : aborted) {
    EXPECT_EQ(r.outputs[0].finish_reason, "abort");
    EXPECT_LT(r.outputs[0].token_ids.size(), 4000u);
  }
  // A hook that throws: the requests are aborted and the exception reaches the caller.
  GenerateOptions failing;
  failing.poll_interval = std::chrono::milliseconds(0);
  failing.keep_going = []() -> bool { throw std::runtime_error("interrupted"); };
  EXPECT_THROW(long_llm.generate({Prompt::from_ids({2, 5})}, {long_run}, failing),
               std::runtime_error);
  EXPECT_EQ(long_llm.engine().stats().num_running + long_llm.engine().stats().num_waiting, 0);
  try {
    llm.generate({Prompt::from_ids({2, 5})}, {short_run, short_run}, {});
    FAIL() << "accepted two params for one prompt";
  } catch (const InputError& e) {
    EXPECT_STREQ(e.what(), "The lengths of prompts and params must be the same.");
  }
}

// A random-weight model with Gemma 4's real vocabulary, and Gemma 4's tokenizer.
class LlmWithTokenizer : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = std::make_unique<::gemmaserve::testing::TempDir>();
    ASSERT_EQ(
        run_make_test_model_command({"--preset", "tiny", "--out", (dir_->path() / "m").string()}),
        0);
  }
  static void TearDownTestSuite() { dir_.reset(); }
  // The checkpoint is written once for the suite (85 MB).
  static std::unique_ptr<::gemmaserve::testing::TempDir> dir_;
};
std::unique_ptr<::gemmaserve::testing::TempDir> LlmWithTokenizer::dir_;

TEST_F(LlmWithTokenizer, TextPromptsGetExactlyOneBosAndStreamTheirText) {
  GS_REQUIRE_SHARED(shared);
  EngineArgs args;
  args.model = (dir_->path() / "m").string();
  args.tokenizer = (shared / "data/gemma4-tokenizer/ggml-vocab-gemma-4.gguf").string();
  args.max_model_len = 64;
  args.kv_cache_memory_bytes = 8 << 20;
  args.show_progress = false;
  log::set_level(log::Level::kWarning);
  LLM llm(args);
  const int32_t bos = llm.tokenizer()->bos_id();
  SamplingParams p;
  p.temperature = 0;
  p.ignore_eos = true;
  p.max_tokens = 10;
  const auto out =
      llm.generate({Prompt::from_text("Hello world"), Prompt::from_text("<bos>Hello world")}, p);
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0].prompt_token_ids.front(), bos);
  EXPECT_NE(out[0].prompt_token_ids[1], bos);
  EXPECT_EQ(out[0].prompt_token_ids, out[1].prompt_token_ids);
  EXPECT_EQ(out[0].prompt, "Hello world");
  const CompletionOutput& o = out[0].outputs[0];
  EXPECT_EQ(o.text, llm.tokenizer()->decode(o.token_ids, /*skip_special=*/true));

  // Streamed text deltas add up to the final text.
  Engine& engine = llm.engine();
  EngineRequest r;
  r.request_id = "stream";
  r.prompt_token_ids = out[0].prompt_token_ids;
  r.params = p;
  const RunResult run = run_together(engine, {r});
  std::string streamed;
  for (const RequestOutputDelta& d : run.deltas[0]) {
    for (const CompletionDelta& c : d.outputs) streamed += c.text;
  }
  EXPECT_EQ(streamed, run.outputs[0].outputs[0].text);
  EXPECT_EQ(run.outputs[0].outputs[0].text, o.text);

  // A stop string taken from the middle of that text ends the sequence there.
  // One whole UTF-8 character (stop strings are text, never half a character).
  ASSERT_GE(o.text.size(), 4u);
  size_t start = o.text.size() / 2;
  while ((static_cast<unsigned char>(o.text[start]) & 0xC0) == 0x80) ++start;
  size_t end = start + 1;
  while (end < o.text.size() && (static_cast<unsigned char>(o.text[end]) & 0xC0) == 0x80) ++end;
  const std::string stop = o.text.substr(start, end - start);
  p.stop = {stop};
  const auto stopped = llm.generate({Prompt::from_text("Hello world")}, p);
  const CompletionOutput& s = stopped[0].outputs[0];
  EXPECT_EQ(s.finish_reason, "stop");
  EXPECT_EQ(s.stop_reason_text, stop);
  EXPECT_EQ(s.text, o.text.substr(0, o.text.find(stop)));
}

}  // namespace
}  // namespace gemmaserve::enginetest
