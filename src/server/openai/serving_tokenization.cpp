#include "server/openai/serving_tokenization.h"

#include <cstdint>
#include <vector>

#include "core/error.h"
#include "engine/image_placeholders.h"
#include "server/openai/openai_protocol.h"
#include "server/openai/request_fields.h"
#include "server/shared/api_error.h"
#include "server/shared/chat_audio.h"
#include "server/shared/chat_images.h"
#include "server/shared/chat_rendering.h"
#include "server/shared/chat_video.h"
#include "tokenizer/tokenizer.h"

namespace gemmaserve {
namespace {

using ordered_json = nlohmann::ordered_json;

const Tokenizer& require_tokenizer(const ServingContext& ctx) {
  const Tokenizer* tok = ctx.engine.tokenizer();
  if (tok == nullptr) throw bad_request("this model has no tokenizer");
  return *tok;
}

std::optional<std::string> model_field(const ordered_json& body) {
  if (body.contains("model") && body["model"].is_string()) return body["model"].get<std::string>();
  return std::nullopt;
}

nlohmann::json plain_field(const ordered_json& body, const char* key) {
  const auto it = body.find(key);
  return it == body.end() ? nlohmann::json() : nlohmann::json(*it);
}

std::vector<int32_t> chat_prompt_ids(const ServingContext& ctx, const Tokenizer& tok,
                                     const ordered_json& body) {
  ChatPromptInput in;
  const ordered_json& messages = body["messages"];
  if (!messages.is_array() || messages.empty()) {
    throw bad_request("messages must be a non-empty list", "messages");
  }
  // Images count as the engine expands them, so /tokenize agrees with usage.prompt_tokens.
  std::optional<int> budget;
  if (body.contains("mm_processor_kwargs")) {
    try {
      budget = parse_mm_processor_kwargs(nlohmann::json(body["mm_processor_kwargs"]),
                                         "mm_processor_kwargs");
    } catch (const InputError& e) {
      throw bad_request(e.what(), "mm_processor_kwargs");
    }
  }
  const std::vector<PromptImage> images = load_prompt_images(ctx, image_urls_of(messages), budget);
  const std::vector<PromptAudio> audios = load_prompt_audios(ctx, audio_urls_of(messages));
  const std::vector<PromptVideo> videos =
      load_prompt_videos(ctx, video_urls_of(messages),
                         video_load_options(ctx, plain_field(body, "media_io_kwargs"),
                                            plain_field(body, "mm_processor_kwargs")));
  in.messages = messages_for_template(messages);
  in.tools = body.value("tools", ordered_json(nullptr));
  in.add_generation_prompt = body.value("add_generation_prompt", true);
  in.continue_final_message = body.value("continue_final_message", false);
  if (in.add_generation_prompt && in.continue_final_message) {
    throw bad_request(kBothGenerationFlagsMessage, "continue_final_message");
  }
  in.default_kwargs = ctx.options.default_chat_template_kwargs;
  in.kwargs = body.value("chat_template_kwargs", ordered_json::object());
  in.gemma4 = ctx.gemma4;
  in.add_special_tokens = body.value("add_special_tokens", false);
  in.content_format = ctx.options.chat_template_content_format;
  std::optional<std::string> request_template;
  if (body.contains("chat_template") && !body["chat_template"].is_null()) {
    if (!body["chat_template"].is_string()) {
      throw bad_request("chat_template: Input should be a valid string", "chat_template");
    }
    request_template = body["chat_template"].get<std::string>();
  }
  std::optional<ChatTemplate> storage;
  const ChatTemplate& tmpl = select_chat_template(ctx, request_template, storage);
  return expand_prompt_images(
      ctx, ctx.engine.prompt_with_bos(render_chat_prompt(tmpl, tok, in).token_ids), images, audios,
      videos);
}

}  // namespace

ordered_json serve_tokenize(const ServingContext& ctx, const ordered_json& body) {
  if (!body.is_object()) throw bad_request("The request body must be a JSON object.");
  const Tokenizer& tok = require_tokenizer(ctx);
  check_model_name(ctx, model_field(body));
  std::vector<int32_t> ids;
  if (body.contains("messages")) {
    ids = chat_prompt_ids(ctx, tok, body);
  } else if (body.contains("prompt") && body["prompt"].is_string()) {
    const std::string& text = body["prompt"].get_ref<const std::string&>();
    // vLLM's default (true) gives the prompt the model sees: one <bos> first (the engine's rule).
    // false gives the text's own tokens, as vLLM and Hugging Face do, so pieces concatenate.
    RequestFields fields(body);
    if (fields.get_bool("add_special_tokens").value_or(true)) {
      ids = ctx.engine.encode_prompt(text);
    } else {
      ids = tok.encode(text, /*add_special=*/false, /*parse_special=*/true);
    }
  } else {
    throw bad_request("prompt: Input should be a valid string (or pass messages)", "prompt");
  }
  ordered_json out;
  out["count"] = ids.size();
  out["max_model_len"] = ctx.engine.max_model_len();
  out["tokens"] = ids;
  if (body.value("return_token_strs", false)) {
    ordered_json strs = ordered_json::array();
    for (int32_t id : ids) strs.push_back(std::string(tok.id_to_piece(id)));
    out["token_strs"] = std::move(strs);
  } else {
    out["token_strs"] = nullptr;
  }
  return out;
}

ordered_json serve_detokenize(const ServingContext& ctx, const ordered_json& body) {
  if (!body.is_object() || !body.contains("tokens") || !body["tokens"].is_array()) {
    throw bad_request("tokens: Input should be a valid list of token ids", "tokens");
  }
  const Tokenizer& tok = require_tokenizer(ctx);
  check_model_name(ctx, model_field(body));
  std::vector<int32_t> ids;
  for (const auto& t : body["tokens"]) {
    if (!t.is_number_integer()) throw bad_request("tokens must be integers", "tokens");
    const int64_t id = t.get<int64_t>();
    if (id < 0 || id >= ctx.engine.vocab_size()) {
      throw bad_request("Token id " + std::to_string(id) + " is out of vocabulary", "tokens");
    }
    ids.push_back(static_cast<int32_t>(id));
  }
  return ordered_json{{"prompt", tok.decode(ids, false)}};
}

}  // namespace gemmaserve
