// LLM::chat, the offline chat API: lives with the server because it reuses the server's chat
// rendering and output parsing, so offline and online chat cannot drift apart.
#include <algorithm>

#include "core/error.h"
#include "engine/engine.h"
#include "gemmaserve/llm.h"
#include "server/shared/chat_audio.h"
#include "server/shared/chat_images.h"
#include "server/shared/chat_output_parser.h"
#include "server/shared/chat_rendering.h"
#include "server/shared/chat_video.h"
#include "tokenizer/chat_template/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace gemmaserve {

namespace {

bool is_gemma4(Engine& e) { return e.model_config().model_type.rfind("gemma4", 0) == 0; }

}  // namespace

RenderedChat LLM::render_chat(const nlohmann::ordered_json& messages, const ChatOptions& options) {
  Engine& e = engine();
  const Tokenizer* tok = e.tokenizer();
  if (tok == nullptr) throw InputError("chat needs a tokenizer, and this model has none");
  if (!messages.is_array() || messages.empty()) {
    throw InputError("messages must be a non-empty list");
  }
  std::optional<std::string> source = options.chat_template;
  if (!source) source = load_chat_template(e.model_source());
  if (!source) throw InputError(e.args().model + " has no chat template; pass one in options");
  const ChatTemplate tmpl = ChatTemplate::parse(*source, "chat template");
  ChatPromptInput in;
  in.messages = messages_for_template(messages);
  in.tools = options.tools.is_array() ? options.tools : nlohmann::ordered_json(nullptr);
  in.add_generation_prompt = options.add_generation_prompt;
  in.continue_final_message = options.continue_final_message;
  in.kwargs = options.chat_template_kwargs;
  in.reasoning_effort = options.reasoning_effort;
  in.gemma4 = is_gemma4(e);
  in.content_format = parse_content_format_option(options.chat_template_content_format);
  ChatPrompt prompt = render_chat_prompt(tmpl, *tok, in);
  return {std::move(prompt.text), std::move(prompt.token_ids)};
}

ChatOutput LLM::chat(const nlohmann::ordered_json& messages, const SamplingParams& params,
                     const ChatOptions& options) {
  return std::move(chat({messages}, {params}, options, GenerateOptions{}).front());
}

std::vector<ChatOutput> LLM::chat(const std::vector<nlohmann::ordered_json>& conversations,
                                  const std::vector<SamplingParams>& params,
                                  const ChatOptions& options,
                                  const GenerateOptions& generate_options) {
  if (params.size() != 1 && params.size() != conversations.size()) {
    throw InputError("The lengths of prompts and params must be the same.");
  }
  const bool parsing = is_gemma4(engine()) && options.parse_output;
  std::vector<ChatOutput> outs(conversations.size());
  std::vector<Prompt> prompts;
  std::vector<SamplingParams> per_prompt;
  // vLLM's LLM.chat loads image and audio parts with its MediaConnector defaults: data: and
  // http(s) URLs.
  const media::MediaConnector media;
  for (size_t i = 0; i < conversations.size(); ++i) {
    RenderedChat prompt = render_chat(conversations[i], options);
    outs[i].prompt = std::move(prompt.text);
    prompts.push_back(Prompt::from_ids(std::move(prompt.token_ids)));
    for (image::RgbImage& rgb : load_chat_images(media, image_urls_of(conversations[i]))) {
      prompts.back().images.push_back(PromptImage{std::move(rgb), std::nullopt});
    }
    prompts.back().audios =
        load_chat_audios(media, audio_urls_of(conversations[i]), engine().args().max_audio_seconds);
    prompts.back().videos =
        load_chat_videos(media, video_urls_of(conversations[i]),
                         engine_video_load_options(engine().args(), media.options()));
    per_prompt.push_back(params[params.size() == 1 ? 0 : i]);
    if (parsing) per_prompt.back().skip_special_tokens = false;  // the parsers read the markers
  }
  std::vector<RequestOutput> generated = generate(prompts, per_prompt, generate_options);
  const bool tools = options.tools.is_array() && !options.tools.empty();
  for (size_t i = 0; i < outs.size(); ++i) {
    ChatOutput& out = outs[i];
    out.output = std::move(generated[i]);
    ChatParseOptions parse;
    parse.parse_reasoning = parsing;
    parse.parse_tools = parsing && tools;
    parse.strip_markers = parsing;
    parse.starts_in_thought_channel = parsing && prompt_ends_in_open_thought_channel(out.prompt);
    for (const CompletionOutput& o : out.output.outputs) {
      ChatMessageParts parts = parse_chat_output(o.text, parse);
      ChatMessageOutput m;
      m.content = std::move(parts.content);
      m.reasoning = std::move(parts.reasoning);
      for (const ToolCall& c : parts.tool_calls) {
        m.tool_calls.push_back({c.id, c.name, c.arguments});
      }
      const std::string reason = o.finish_reason.value_or("stop");
      m.finish_reason = !m.tool_calls.empty() && reason == "stop" ? "tool_calls" : reason;
      out.messages.push_back(std::move(m));
    }
  }
  return outs;
}

}  // namespace gemmaserve
