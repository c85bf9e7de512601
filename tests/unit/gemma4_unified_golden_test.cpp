// Golden tests of the unified Gemma 4 (the 12B layout, no vision or audio encoder) against
// Hugging Face float32: the `unified` fixture's text cases and batch, its images from the PNG
// files through the checkpoint's own image processor config (pixels against the processor's
// output), and the mask rule (every layer, the whole image block whatever the window).
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <set>

#include "core/error.h"
#include "gemma4_golden_checks.h"
#include "io/image/image_decode.h"
#include "model/gemma4_image_processor.h"
#include "model/gemma4_processor_config.h"
#include "unified_golden_inputs.h"

namespace gemmaserve::golden {
namespace {

const std::filesystem::path kModel = golden_dir() / "models" / "unified";

struct UnifiedFixture {
  static constexpr const char* kName = "unified";
};
class UnifiedGolden : public MediaGoldenSuite<UnifiedFixture> {};

TEST_F(UnifiedGolden, ConfigIsTheUnifiedFamily) {
  const ModelConfig& c = model_->config();
  EXPECT_EQ(c.family, ModelFamily::kGemma4Unified);
  EXPECT_EQ(c.architecture, "Gemma4UnifiedForConditionalGeneration");
  ASSERT_TRUE(c.unified_vision && c.unified_audio);
  EXPECT_FALSE(c.vision);
  EXPECT_EQ(c.unified_vision->model_patch_size(), 8);
  EXPECT_EQ(c.unified_vision->mm_embed_dim, 48);
  EXPECT_EQ(c.unified_audio->audio_embed_dim, 32);
  EXPECT_EQ(c.text.hidden_size_per_layer_input, 0);
  EXPECT_EQ(c.text.use_bidirectional_attention, "vision");
  EXPECT_EQ(*c.boa_token_id, 509);
  EXPECT_EQ(*c.eoa_token_id, 510);
  EXPECT_EQ(*c.audio_token_id, 511);
  // Sliding layers: 2 KV heads of 16; full layers: 1 KV head of 32, V from K.
  EXPECT_EQ(c.text.layers[0].num_kv_heads, 2);
  EXPECT_EQ(c.text.layers[3].num_kv_heads, 1);
  EXPECT_EQ(c.text.layers[3].head_dim, 32);
  EXPECT_TRUE(c.text.layers[3].k_eq_v);
}

TEST_F(UnifiedGolden, TextCasesAndBatch) {
  GoldenOptions opt;
  std::vector<RefCase> text;
  for (const auto& c : ref_->at("cases")) {
    if (c.at("kind") == "text" || c.at("kind") == "text-batch") text.push_back(parse_case(c));
  }
  ASSERT_EQ(text.size(), 8u);
  PagedRunner runner(*model_, 5, 512);
  std::vector<const RefCase*> all;
  for (const RefCase& c : text) {
    check_prefill(*model_, runner, "unified", c, opt);
    all.push_back(&c);
  }
  check_greedy(*model_, runner, "unified", all, opt);
}

// The processor's merged 8x8 patches (resize included) against HF's pixel_values bit for bit.
TEST_F(UnifiedGolden, ProcessedPixelsMatchTheProcessor) {
  const Gemma4ImageProcessorOptions options =
      merged_patch_options(load_gemma4_image_processor_config(
          kModel, image_processor_geometry(*model_->config().unified_vision)));
  EXPECT_EQ(options.patch_size, 8);
  EXPECT_EQ(options.max_soft_tokens, 70);
  int checked = 0;
  for (const auto& img : ref_->at("processed_images").at("images")) {
    SCOPED_TRACE(img.at("file").get<std::string>());
    const Gemma4ImagePatches p = unified_patches(img.at("file").get<std::string>(), options);
    const int n = img.at("num_soft_tokens").get<int>();
    ASSERT_EQ(p.num_soft_tokens, n);
    const auto want_size = img.at("target_size_wh").get<std::vector<int>>();
    EXPECT_EQ(p.resized_width, want_size[0]);
    EXPECT_EQ(p.resized_height, want_size[1]);
    const std::vector<float> want = read_f32(golden_dir() / "ref" / "unified-pixels" /
                                             img.at("pixel_values_file").get<std::string>());
    ASSERT_EQ(want.size(), static_cast<size_t>(n) * 192);
    EXPECT_EQ(0, std::memcmp(p.pixel_values.data(), want.data(), want.size() * sizeof(float)));
    const auto& pos = img.at("image_position_ids");
    for (int i = 0; i < n; ++i) {
      EXPECT_EQ(p.position_ids[2 * static_cast<size_t>(i)], pos[i][0].get<int>()) << i;
      EXPECT_EQ(p.position_ids[2 * static_cast<size_t>(i) + 1], pos[i][1].get<int>()) << i;
    }
    // Padding rows up to the budget, at (-1, -1).
    EXPECT_EQ(p.position_ids.size(), 2u * 70);
    if (n < 70) {
      EXPECT_EQ(p.position_ids.back(), -1);
    }
    ++checked;
  }
  EXPECT_EQ(checked, 5);
}

// Every case of the given kinds from its media files: the placeholder expansion, last logits,
// every position's top-5 (media positions included) and the greedy tokens. Returns the count.
int check_media_cases(Gemma4Model& model, const nlohmann::json& ref,
                      const std::set<std::string>& kinds) {
  GoldenOptions opt;
  opt.position_tol = 3e-4f;
  const UnifiedInputs inputs(model, kModel);
  PagedRunner runner(model, 16, 1024);
  int cases = 0;
  for (const auto& c : ref.at("cases")) {
    if (!kinds.count(c.at("kind").get<std::string>())) continue;
    SCOPED_TRACE(c.at("name").get<std::string>());
    const RefCase r = parse_case(c);
    // The reference's own float32 round-off (its distance to float64) is up to 8e-5 at the last
    // position of audio_only (300 audio tokens): allow twice it where that exceeds 1e-4.
    const auto& roundoff = c.at("reference_f32_vs_f64_max_abs_logit_diff");
    opt.tol = std::max(1e-4f, 2.0f * roundoff.at("last_prompt_position").get<float>());
    const UnifiedInputs::Prompt p = inputs.prompt(c);
    EXPECT_EQ(p.tokens, r.prompt) << "placeholder expansion";
    check_prefill(model, runner, "unified", r, opt, &p.inputs);
    check_greedy(model, runner, "unified", {&r}, opt, {p.inputs});
    ++cases;
  }
  return cases;
}

TEST_F(UnifiedGolden, ImageCasesMatchReference) {
  EXPECT_EQ(check_media_cases(*model_, *ref_, {"image"}), 12);
}

// Raw 32-sample frames, one soft token each, causal; with and without images.
TEST_F(UnifiedGolden, AudioCasesMatchReference) {
  for (const auto& c : ref_->at("cases")) {
    for (const auto& a : c.value("audio", nlohmann::json::array())) {
      EXPECT_EQ(model_->audio_soft_tokens(a.at("num_samples").get<int64_t>()),
                a.at("num_soft_tokens").get<int64_t>());
    }
  }
  EXPECT_EQ(check_media_cases(*model_, *ref_, {"audio", "audio+image"}), 8);
}

// The fixture's mixed batch (text, image, audio, both; 7 to 311 tokens) in one ragged step:
// each row bitwise equal to its prompt alone, and the greedy tokens of each.
TEST_F(UnifiedGolden, MixedBatchIsBitwiseEqualToAlone) {
  const UnifiedInputs inputs(*model_, kModel);
  std::vector<std::string> members;
  for (const auto& b : ref_->at("batches")) {
    if (b.at("name") == "mixed_batch") members = b.at("members").get<std::vector<std::string>>();
  }
  ASSERT_EQ(members.size(), 6u);
  const int V = model_->vocab_size();
  PagedRunner runner(*model_, 16, 2048);
  std::vector<UnifiedInputs::Prompt> prompts;
  std::vector<RefCase> refs;
  for (const std::string& m : members) {
    prompts.push_back(inputs.prompt(case_json(m)));
    refs.push_back(parse_case(case_json(m)));
  }
  std::vector<std::vector<float>> alone;
  for (const UnifiedInputs::Prompt& p : prompts) {
    const int id = runner.add_sequence();
    alone.push_back(runner.step({id}, {p.tokens}, LogitsWanted::kLast, {p.inputs}).logits);
    runner.free_sequence(id);
  }
  std::vector<int> ids;
  std::vector<std::vector<int32_t>> toks;
  std::vector<PagedRunner::ImageInputs> ins;
  for (const UnifiedInputs::Prompt& p : prompts) {
    ids.push_back(runner.add_sequence());
    toks.push_back(p.tokens);
    ins.push_back(p.inputs);
  }
  const ForwardOutput out = runner.step(ids, toks, LogitsWanted::kLast, ins);
  ASSERT_EQ(out.rows, 6);
  for (size_t i = 0; i < members.size(); ++i) {
    EXPECT_EQ(0, std::memcmp(&out.logits[i * V], alone[i].data(), sizeof(float) * V)) << members[i];
    EXPECT_LE(max_abs_diff(&out.logits[i * V], refs[i].last_logits.data(), V), 1e-4f) << members[i];
  }
  for (int id : ids) runner.free_sequence(id);
  std::vector<const RefCase*> cases;
  for (const RefCase& r : refs) cases.push_back(&r);
  check_greedy(*model_, runner, "unified", cases, GoldenOptions{}, ins);
}

// Image tokens see their whole image in every layer, beyond the 16-token window: treating the
// block as Gemma 4 does (sliding layers only, windowed) or causally moves the logits.
TEST_F(UnifiedGolden, ImageBlockIsWholeInEveryLayer) {
  const UnifiedInputs inputs(*model_, kModel);
  const auto& c = case_json("tall_3x290");  // 70 soft tokens, window 16
  const UnifiedInputs::Prompt p = inputs.prompt(c);
  const RefCase ref = parse_case(c);
  PagedRunner runner(*model_, 16, 512);
  const int V = model_->vocab_size();
  const int id = runner.add_sequence();
  const ForwardOutput whole = runner.step({id}, {p.tokens}, LogitsWanted::kLast, {p.inputs});
  runner.free_sequence(id);
  EXPECT_LE(max_abs_diff(whole.logits.data(), ref.last_logits.data(), static_cast<size_t>(V)),
            1e-4f);
  PagedRunner::ImageInputs causal = p.inputs;
  causal.blocks.clear();
  const int cid = runner.add_sequence();
  const ForwardOutput moved = runner.step({cid}, {p.tokens}, LogitsWanted::kLast, {causal});
  EXPECT_GT(max_abs_diff(moved.logits.data(), ref.last_logits.data(), static_cast<size_t>(V)),
            1.0f);
}

// Prefill in chunks that keep each image whole, then token by token: the one-shot logits.
TEST_F(UnifiedGolden, ChunkedPrefillMatchesOneShot) {
  const UnifiedInputs inputs(*model_, kModel);
  const UnifiedInputs::Prompt p = inputs.prompt(case_json("two_images"));
  ASSERT_EQ(p.inputs.blocks.size(), 2u);
  const int V = model_->vocab_size();
  PagedRunner runner(*model_, 5, 512);
  const int one = runner.add_sequence();
  const std::vector<float> one_shot =
      runner.step({one}, {p.tokens}, LogitsWanted::kAll, {p.inputs}).logits;
  runner.free_sequence(one);
  const auto n = static_cast<int32_t>(p.tokens.size());
  const int id = runner.add_sequence();
  float worst = 0.0f;
  for (int32_t pos = 0; pos < n;) {
    int32_t e = pos + 1;
    for (const PositionRange& b : p.inputs.blocks) {
      if (pos == b.begin) e = b.end;  // a block goes in one step
    }
    const std::vector<int32_t> part(p.tokens.begin() + pos, p.tokens.begin() + e);
    const ForwardOutput o = runner.step({id}, {part}, LogitsWanted::kAll, {p.inputs});
    worst = std::max(worst, max_abs_diff(o.logits.data(), &one_shot[pos * size_t(V)],
                                         static_cast<size_t>(e - pos) * V));
    pos = e;
  }
  EXPECT_LE(worst, 1e-4f);
}

}  // namespace
}  // namespace gemmaserve::golden
