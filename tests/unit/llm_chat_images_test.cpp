// LLM::chat with image parts (vLLM's LLM.chat): the template sees <|image|>, the engine expands it
// to the image's soft tokens, and a bad image is an InputError naming messages. The tiny preset
// (it has a vision tower) with the real vocabulary and chat template.
#include <gtest/gtest.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <string>

#include "core/error.h"
#include "core/logging.h"
#include "gemmaserve/llm.h"
#include "server_test_support.h"
#include "test_support.h"

namespace gemmaserve {
namespace {

using ordered_json = nlohmann::ordered_json;

// A 24x16 PNG.
constexpr const char* kPng =
    "data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAABgAAAAQCAIAAACDRijCAAAAIElEQVR4nGNkYGjgYmCgH"
    "LEw8DNQBYwaNGrQqEEj1SAA0KAChbGsTJsAAAAASUVORK5CYII=";

ordered_json ask(const std::string& url) {
  ordered_json content = ordered_json::array();
  content.push_back({{"type", "text"}, {"text", "What is this?"}});
  if (!url.empty()) content.push_back({{"type", "image_url"}, {"image_url", {{"url", url}}}});
  return ordered_json::array({{{"role", "user"}, {"content", content}}});
}

TEST(LlmChatImages, ImagePartsReachTheEngine) {
  GS_REQUIRE_SHARED(shared);
  testing::TempDir dir;
  ASSERT_EQ(testing::make_tiny_chat_model(shared, dir.path()), "");
  EngineArgs args;
  args.model = dir.path().string();
  args.max_model_len = 1024;
  args.kv_cache_memory_bytes = 16 << 20;
  args.show_progress = false;
  log::set_level(log::Level::kWarning);
  LLM llm(args);
  SamplingParams p;
  p.temperature = 0;
  p.max_tokens = 3;
  const ChatOutput text_only = llm.chat(ask(""), p);
  const ChatOutput with_image = llm.chat(ask(kPng), p);
  EXPECT_NE(with_image.prompt.find("What is this?<|image|>"), std::string::npos)
      << with_image.prompt;
  const auto& ids = with_image.output.prompt_token_ids;
  const int32_t image_token = llm.tokenizer()->piece_to_id("<|image|>").value();
  const auto soft = std::count(ids.begin(), ids.end(), image_token);
  EXPECT_GT(soft, 1);  // expanded to the image's soft tokens
  // <|image|> -> <|image> + N x <|image|> + <image|>.
  EXPECT_EQ(ids.size(), text_only.output.prompt_token_ids.size() + static_cast<size_t>(soft) + 2);
  try {
    llm.chat(ask("data:image/png;base64,iVBORw0KGgo="), p);
    ADD_FAILURE() << "a PNG signature alone was accepted";
  } catch (const InputError& e) {
    EXPECT_EQ(e.param().value_or(""), "messages");
    EXPECT_EQ(std::string(e.what()).rfind("invalid PNG image: ", 0), 0u) << e.what();
  }
}

}  // namespace
}  // namespace gemmaserve
