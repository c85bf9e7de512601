#include "server/openai/openai_protocol.h"

#include <algorithm>
#include <cmath>
#include <string_view>

#include "core/error.h"
#include "core/python_text.h"
#include "engine/image_placeholders.h"
#include "server/openai/request_fields.h"
#include "server/openai/structured_output_fields.h"
#include "server/shared/api_error.h"
#include "server/shared/chat_audio.h"
#include "server/shared/chat_images.h"
#include "server/shared/chat_video.h"

namespace gemmaserve {
namespace {

using ordered_json = nlohmann::ordered_json;

constexpr int kMaxSamplesPerRequest = 128;
// Sequences one completions request may start (prompts x n).
constexpr size_t kMaxSequencesPerRequest = 4096;
// vLLM's VLLM_MAX_STOP_STRINGS default (OpenAI's limit too): every stop string is searched for
// after every token.
constexpr size_t kMaxStopStrings = 4;
// vLLM's VLLM_MAX_NUM_BAD_WORDS default: each is tokenized and masked on every step.
constexpr size_t kMaxBadWords = 128;

// vLLM keeps cache salts free of the characters cache backends use as separators.
constexpr std::string_view kSaltForbidden("@/\\\0", 4);

// Python's len() of a UTF-8 string.
size_t characters(const std::string& s) {
  size_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

ApiError not_implemented(const std::string& message) {
  return ApiError(501, "NotImplementedError", message);
}

// Sampling and shared fields, in vLLM's names; `chat` selects the chat-only spellings.
void parse_generation_fields(RequestFields& f, GenerationRequest& r, bool chat) {
  r.model = f.get_string("model");
  SamplingParams& p = r.params;
  if (auto v = f.get_int32("n")) p.n = *v;
  // OpenAI's own limit; also keeps one request from allocating unbounded sampler state.
  if (p.n > kMaxSamplesPerRequest) {
    throw bad_request("n must be at most " + std::to_string(kMaxSamplesPerRequest) + ", got " +
                          std::to_string(p.n) + ".",
                      "n");
  }
  if (auto v = f.get_double("temperature")) p.temperature = *v;
  if (auto v = f.get_double("top_p")) p.top_p = *v;
  if (auto v = f.get_int32("top_k")) p.top_k = *v;
  if (auto v = f.get_double("min_p")) p.min_p = *v;
  if (auto v = f.get_double("presence_penalty")) p.presence_penalty = *v;
  if (auto v = f.get_double("frequency_penalty")) p.frequency_penalty = *v;
  if (auto v = f.get_double("repetition_penalty")) p.repetition_penalty = *v;
  if (auto v = f.get_int("seed")) p.seed = static_cast<uint64_t>(*v);
  if (auto v = f.get_string_list("stop")) {
    if (v->size() > kMaxStopStrings) {
      throw bad_request("stop: List should have at most " + std::to_string(kMaxStopStrings) +
                            " items after validation, not " + std::to_string(v->size()),
                        "stop");
    }
    p.stop = *v;
  }
  if (auto v = f.get_int_list("stop_token_ids")) p.stop_token_ids = *v;
  if (auto v = f.get_bool("include_stop_str_in_output")) p.include_stop_str_in_output = *v;
  if (auto v = f.get_bool("ignore_eos")) p.ignore_eos = *v;
  if (auto v = f.get_int32("min_tokens")) p.min_tokens = *v;
  if (auto v = f.get_int_list("allowed_token_ids")) p.allowed_token_ids = *v;
  if (auto v = f.get_string_list("bad_words", false)) {
    if (v->size() > kMaxBadWords) {
      throw bad_request("Too many bad words: " + std::to_string(v->size()) +
                            ". The max number is " + std::to_string(kMaxBadWords) + ".",
                        "bad_words");
    }
    p.bad_words = *v;
  }
  if (auto v = f.get_bool("skip_special_tokens")) p.skip_special_tokens = *v;
  if (auto v = f.get_bool("spaces_between_special_tokens")) p.spaces_between_special_tokens = *v;
  if (auto v = f.get_int32("prompt_logprobs")) {
    if (*v < -1) {
      throw bad_request("`prompt_logprobs` must be a positive value or -1.", "prompt_logprobs");
    }
    p.prompt_logprobs = *v;
  }
  if (const auto* bias = f.raw("logit_bias")) {
    if (!bias->is_object()) {
      throw bad_request("logit_bias: Input should be a valid dictionary", "logit_bias");
    }
    for (auto it = bias->begin(); it != bias->end(); ++it) {
      const ordered_json key = it.key();
      int64_t id = 0;
      try {
        id = json_to_int(key, "logit_bias");
      } catch (const ApiError&) {
        throw bad_request("logit_bias: invalid token id '" + it.key() +
                              "': keys must be token ids written as integers",
                          "logit_bias");
      }
      const double b = json_to_double(it.value(), "logit_bias");
      if (!std::isfinite(b)) throw bad_request("logit_bias values must be finite", "logit_bias");
      if (id < 0 || id > INT32_MAX) {
        throw bad_request("token_id(s) [" + std::to_string(id) +
                              "] in logit_bias contain out-of-vocab token ids.",
                          "logit_bias");
      }
      // vLLM clamps each bias to [-100, 100].
      p.logit_bias[static_cast<int32_t>(id)] = static_cast<float>(std::clamp(b, -100.0, 100.0));
    }
  }
  std::optional<int> max_tokens = f.get_int32("max_tokens");
  if (chat) {
    if (auto v = f.get_int32("max_completion_tokens")) max_tokens = v;
  }
  r.max_tokens = max_tokens;
  if (r.max_tokens && *r.max_tokens < 0) {
    throw bad_request("max_tokens must be at least 1, got " + std::to_string(*r.max_tokens) + ".",
                      chat ? "max_completion_tokens" : "max_tokens");
  }
  if (auto v = f.get_bool("stream")) r.stream = *v;
  if (const auto* so = f.raw("stream_options")) {
    if (!r.stream) {
      throw bad_request("Stream options can only be defined when `stream=True`.", "stream_options");
    }
    if (!so->is_object()) {
      throw bad_request("stream_options: Input should be a valid dictionary", "stream_options");
    }
    RequestFields sf(*so);
    r.stream_options.include_usage = sf.get_bool("include_usage").value_or(false);
    r.stream_options.continuous_usage_stats = sf.get_bool("continuous_usage_stats").value_or(false);
  }
  if (p.prompt_logprobs && (*p.prompt_logprobs > 0 || *p.prompt_logprobs == -1) && r.stream) {
    throw bad_request("`prompt_logprobs` are not available when `stream=True`.", "prompt_logprobs");
  }
  if (auto v = f.get_int32("priority")) r.priority = *v;
  r.cache_salt = f.get_string("cache_salt");
  if (r.cache_salt && r.cache_salt->empty()) {
    throw bad_request("Parameter 'cache_salt' must be a non-empty string if provided.",
                      "cache_salt");
  }
  if (r.cache_salt && (characters(*r.cache_salt) > 128 ||
                       r.cache_salt->find_first_of(kSaltForbidden) != std::string::npos)) {
    throw bad_request(
        "Parameter 'cache_salt' must be at most 128 characters and must not contain '@', '/', "
        "'\\\\', or NUL.",
        "cache_salt");
  }
  r.request_id = f.get_string("request_id");
  r.add_special_tokens = f.get_bool("add_special_tokens");
  if (auto v = f.get_bool("echo")) r.echo = *v;
  if (auto v = f.get_bool("return_token_ids")) r.return_token_ids = *v;
  if (auto v = f.get_bool("return_tokens_as_token_ids")) r.return_tokens_as_token_ids = *v;
  if (auto v = f.get_int32("truncate_prompt_tokens")) {
    if (*v < -1 || *v == 0) {
      throw bad_request("truncate_prompt_tokens must be -1 or a positive integer, got " +
                            std::to_string(*v) + ".",
                        "truncate_prompt_tokens");
    }
    r.truncate_prompt_tokens = *v;
  }
  if (auto side = f.get_string("truncation_side")) {
    if (*side != "left" && *side != "right") {
      throw bad_request("truncation_side: Input should be 'left' or 'right'", "truncation_side");
    }
    r.truncate_keeps_first = *side == "right";
  }
  if (auto v = f.get_int32("best_of")) {
    if (*v < p.n) {
      throw bad_request("best_of must be greater than or equal to n, got n=" + std::to_string(p.n) +
                            " and best_of=" + std::to_string(*v) + ".",
                        "best_of");
    }
    if (*v != p.n) throw not_implemented("best_of > n is not supported (vLLM V1 dropped it).");
  }
  if (f.get_bool("use_beam_search").value_or(false)) {
    throw not_implemented("Beam search is not supported by gemmaserve yet.");
  }
  f.get_double("length_penalty");  // beam search only
  f.get_string("user");            // OpenAI's end-user id: accepted and ignored, as vLLM
  const StructuredOutputRequest structured = parse_structured_output_fields(f);
  r.json_object = structured.json_object;
  r.structured_kind = structured.kind;
  r.structured_spec = structured.spec;
  r.disable_any_whitespace = structured.disable_any_whitespace;
  r.whitespace_pattern = structured.whitespace_pattern;
  if (f.raw("logits_processors") != nullptr) {
    throw not_implemented("logits_processors are not supported by gemmaserve.");
  }
  // Fields that change the output and that gemmaserve cannot honour yet: refused, not ignored.
  if (f.raw("logprob_token_ids") != nullptr) {
    throw not_implemented("logprob_token_ids is not supported by gemmaserve yet.");
  }
  if (f.get_bool("watermarking").value_or(false)) {
    throw not_implemented("watermarking is not supported by gemmaserve yet.");
  }
  if (f.raw("repetition_detection") != nullptr) {
    throw not_implemented("repetition_detection is not supported by gemmaserve yet.");
  }
  if (auto budget = f.get_int("thinking_token_budget"); budget && *budget != -1) {
    throw not_implemented("thinking_token_budget is not supported by gemmaserve yet.");
  }
}

PromptInput token_prompt(const ordered_json& list) {
  PromptInput p;
  for (const auto& e : list) {
    if (!e.is_number_integer()) {
      throw bad_request("prompt: a token-id prompt must hold integers only", "prompt");
    }
    const int64_t id = e.get<int64_t>();
    if (id < 0 || id > INT32_MAX) {
      throw bad_request("Token id " + std::to_string(id) + " is out of vocabulary", "prompt");
    }
    p.token_ids.push_back(static_cast<int32_t>(id));
  }
  if (p.token_ids.empty()) throw bad_request("The decoder prompt cannot be empty", "prompt");
  return p;
}

std::vector<PromptInput> parse_prompts(const ordered_json* prompt) {
  if (prompt == nullptr) {
    throw bad_request("Either prompt or prompt_embeds must be provided and non-empty.", "prompt");
  }
  std::vector<PromptInput> out;
  if (prompt->is_string()) {
    out.push_back(PromptInput{prompt->get<std::string>(), {}});
  } else if (prompt->is_array() && !prompt->empty()) {
    const ordered_json& first = prompt->front();
    if (first.is_number()) {
      out.push_back(token_prompt(*prompt));
    } else {
      for (const auto& e : *prompt) {
        if (e.is_string()) {
          out.push_back(PromptInput{e.get<std::string>(), {}});
        } else if (e.is_array()) {
          out.push_back(token_prompt(e));
        } else {
          throw bad_request("prompt: each entry must be a string or a list of token ids", "prompt");
        }
      }
    }
  } else if (prompt->is_array()) {
    throw bad_request("Either prompt or prompt_embeds must be provided and non-empty.", "prompt");
  } else {
    throw bad_request(
        "prompt: Input should be a string, a list of strings, a list of token ids "
        "or a list of token-id lists",
        "prompt");
  }
  for (const PromptInput& p : out) {
    if (p.text && p.text->empty()) {
      throw bad_request("The decoder prompt cannot be empty", "prompt");
    }
  }
  return out;
}

// Checks the message list's shape; returns the image parts' URLs in order.
std::vector<std::string> check_messages(const ordered_json& messages) {
  if (!messages.is_array()) throw bad_request("messages: Input should be a valid list", "messages");
  if (messages.empty()) throw bad_request("messages must contain at least one message", "messages");
  std::vector<std::string> image_urls;
  for (const auto& m : messages) {
    if (!m.is_object()) throw bad_request("messages: each message must be an object", "messages");
    if (!m.contains("role") || !m["role"].is_string()) {
      throw bad_request("messages: each message needs a 'role' string", "messages");
    }
    if (!m.contains("content")) continue;
    const ordered_json& c = m["content"];
    if (c.is_null() || c.is_string()) continue;
    if (!c.is_array()) {
      throw bad_request("messages: content must be a string or a list of content parts",
                        "messages");
    }
    for (const auto& part : c) {
      if (is_image_part(part)) {
        image_urls.push_back(image_part_url(part));
        continue;
      }
      if (part.is_string()) continue;  // vLLM takes a bare string as a text part
      if (!part.is_object() || !part.contains("type") || !part["type"].is_string()) {
        throw bad_request("messages: each content part needs a 'type'", "messages");
      }
      const std::string type = part["type"].get<std::string>();
      // vLLM's text part types, each with its text under this key.
      const char* text_key = type == "refusal"    ? "refusal"
                             : type == "thinking" ? "thinking"
                             : (type == "text" || type == "input_text" || type == "output_text")
                                 ? "text"
                                 : nullptr;
      if (text_key != nullptr) {
        if (!part.contains(text_key) || !part[text_key].is_string()) {
          throw bad_request("messages: " + type + " content parts need a '" + text_key + "' string",
                            "messages");
        }
      } else if (is_audio_part(part)) {
        audio_part_url(part);  // a malformed part is a 400 here
      } else if (is_video_part(part)) {
        video_part_url(part);  // a malformed part is a 400 here
      } else {
        throw bad_request("Unknown content part type '" + type + "'", "messages");
      }
    }
  }
  return image_urls;
}

void check_tools(const ordered_json& tools) {
  if (!tools.is_array()) throw bad_request("tools: Input should be a valid list", "tools");
  for (const auto& t : tools) {
    if (!t.is_object() || t.value("type", std::string("function")) != "function" ||
        !t.contains("function") || !t["function"].is_object()) {
      throw bad_request("tools: each tool must be {\"type\": \"function\", \"function\": {...}}",
                        "tools");
    }
    const ordered_json& fn = t["function"];
    if (!fn.contains("name") || !fn["name"].is_string() || fn["name"].get<std::string>().empty()) {
      throw bad_request("tools: function.name must be a non-empty string", "tools");
    }
    if (fn.contains("parameters") && !fn["parameters"].is_null() && !fn["parameters"].is_object()) {
      throw bad_request("tools: function.parameters must be a JSON Schema object", "tools");
    }
    if (fn.contains("description") && !fn["description"].is_null() &&
        !fn["description"].is_string()) {
      throw bad_request("tools: function.description must be a string", "tools");
    }
  }
}

// vLLM's check_tool_usage: its rules and messages.
void parse_tool_choice(RequestFields& f, ChatRequest& r) {
  const ordered_json* tc = f.raw("tool_choice");
  const bool has_tools = r.tools.is_array() && !r.tools.empty();
  if (tc == nullptr) {
    r.tool_choice = has_tools ? "auto" : "none";
    return;
  }
  if (tc->is_string() && tc->get<std::string>() == "none") {
    r.tool_choice = "none";
    return;
  }
  if (!has_tools) {
    throw bad_request("When using `tool_choice`, `tools` must be set.", "tool_choice");
  }
  if (tc->is_string() && (*tc == "auto" || *tc == "required")) {
    r.tool_choice = tc->get<std::string>();
    return;
  }
  if (!tc->is_object()) {
    const std::string shown = tc->is_string() ? tc->get<std::string>() : tc->dump();
    throw bad_request("Invalid value for `tool_choice`: " + shown +
                          "! Only named tools, \"none\", \"auto\" or \"required\" are supported.",
                      "tool_choice");
  }
  const std::string usage =
      "Correct usage: `{\"type\": \"function\", \"function\": {\"name\": \"my_function\"}}`";
  const auto fn = tc->find("function");
  if (fn == tc->end() || !fn->is_object()) {
    const std::string shown = fn == tc->end() || fn->is_null() ? "None" : fn->dump();
    throw bad_request("Invalid value for `function`: `" + shown + "` in `tool_choice`! " + usage,
                      "tool_choice.function");
  }
  const auto name = fn->find("name");
  if (name == fn->end()) {
    throw bad_request("Expected field `name` in `function` in `tool_choice`! " + usage,
                      "tool_choice.function.name");
  }
  if (!name->is_string() || name->get<std::string>().empty()) {
    const std::string shown = name->is_string() ? "" : name->dump();
    throw bad_request("Invalid `name` in `function`: `" + shown + "` in `tool_choice`! " + usage,
                      "tool_choice.function.name");
  }
  r.tool_choice = "function";
  r.tool_choice_function = name->get<std::string>();
  bool found = false;
  for (const auto& t : r.tools) found = found || t["function"]["name"] == *r.tool_choice_function;
  if (!found) {
    throw bad_request(
        "The tool specified in `tool_choice` does not match any of the specified `tools`",
        "tool_choice");
  }
}

}  // namespace

CompletionRequest parse_completion_request(const ordered_json& body,
                                           const SamplingParams& defaults) {
  RequestFields f(body);
  CompletionRequest r;
  r.params = defaults;
  parse_generation_fields(f, r, /*chat=*/false);
  // Completions default to 16 tokens, an explicit null too (vLLM's normalize_null_max_tokens).
  if (!r.max_tokens) r.max_tokens = 16;
  r.prompts = parse_prompts(f.raw("prompt"));
  if (r.prompts.size() * static_cast<size_t>(std::max(r.params.n, 1)) > kMaxSequencesPerRequest) {
    throw bad_request("A request may start at most " + std::to_string(kMaxSequencesPerRequest) +
                          " sequences (prompts x n); split the batch.",
                      "prompt");
  }
  if (f.raw("prompt_embeds") != nullptr) {
    throw not_implemented("prompt_embeds are not supported by gemmaserve.");
  }
  if (f.raw("suffix") != nullptr) throw bad_request("suffix is not currently supported", "suffix");
  if (auto v = f.get_int32("logprobs")) {
    if (*v < -1) throw bad_request("`logprobs` must be a positive value or -1.", "logprobs");
    r.logprobs = *v;
    r.params.logprobs = *v;
  }
  // vLLM: echo with logprobs and no prompt_logprobs asks for prompt logprobs of the same size.
  if (r.echo && r.logprobs && !r.params.prompt_logprobs) r.params.prompt_logprobs = r.logprobs;
  r.ignored_fields = f.unread();
  return r;
}

ChatRequest parse_chat_request(const ordered_json& body, const SamplingParams& defaults) {
  RequestFields f(body);
  ChatRequest r;
  r.params = defaults;
  parse_generation_fields(f, r, /*chat=*/true);
  const ordered_json* messages = f.raw("messages");
  if (messages == nullptr) throw bad_request("messages: Field required", "messages");
  r.image_urls = check_messages(*messages);
  r.audio_urls = audio_urls_of(*messages);
  r.video_urls = video_urls_of(*messages);
  r.messages = *messages;
  if (const auto* tools = f.raw("tools")) {
    check_tools(*tools);
    if (tools->empty()) {
      throw bad_request(
          "`tools` must not be an empty array. Either provide at least one tool or omit the field "
          "entirely.",
          "tools");
    }
    r.tools = *tools;
  }
  parse_tool_choice(f, r);
  r.parallel_tool_calls = f.get_bool("parallel_tool_calls").value_or(true);
  if (auto v = f.get_bool("logprobs")) r.logprobs = *v;
  // vLLM's default is 0; an explicit null leaves it unset (echo then asks no prompt logprobs).
  const bool top_logprobs_null = body.contains("top_logprobs") && body["top_logprobs"].is_null();
  r.top_logprobs = f.get_int32("top_logprobs");
  if (r.top_logprobs) {
    if (*r.top_logprobs < -1) {
      throw bad_request("`top_logprobs` must be a positive value or -1.", "top_logprobs");
    }
    if (*r.top_logprobs != 0 && !r.logprobs) {
      throw bad_request("when using `top_logprobs`, `logprobs` must be set to true.",
                        "top_logprobs");
    }
  }
  if (r.logprobs) r.params.logprobs = r.top_logprobs.value_or(0);
  // vLLM: chat echo without prompt_logprobs asks for prompt logprobs of top_logprobs' size.
  if (r.echo && !r.params.prompt_logprobs && !top_logprobs_null) {
    r.params.prompt_logprobs = r.top_logprobs.value_or(0);
  }
  if (auto v = f.get_bool("add_generation_prompt")) r.add_generation_prompt = *v;
  if (auto v = f.get_bool("continue_final_message")) r.continue_final_message = *v;
  if (r.add_generation_prompt && r.continue_final_message) {
    throw bad_request(kBothGenerationFlagsMessage, "continue_final_message");
  }
  if (const auto* kw = f.raw("chat_template_kwargs")) {
    if (!kw->is_object()) {
      throw bad_request("chat_template_kwargs: Input should be a valid dictionary",
                        "chat_template_kwargs");
    }
    r.chat_template_kwargs = *kw;
  }
  r.chat_template = f.get_string("chat_template");
  r.reasoning_effort = f.get_string("reasoning_effort");
  if (auto v = f.get_bool("include_reasoning")) r.include_reasoning = *v;
  if (const auto* docs = f.raw("documents")) {
    if (!docs->is_array())
      throw bad_request("documents: Input should be a valid list", "documents");
    r.documents = *docs;
  }
  if (const auto* kw = f.raw("mm_processor_kwargs")) {
    try {
      r.max_soft_tokens = parse_mm_processor_kwargs(nlohmann::json(*kw), "mm_processor_kwargs");
    } catch (const InputError& e) {
      throw bad_request(e.what(), "mm_processor_kwargs");
    }
    r.mm_processor_kwargs = nlohmann::json(*kw);
  }
  if (const auto* kw = f.raw("media_io_kwargs")) {
    try {
      apply_media_io_kwargs(nlohmann::json(*kw), "media_io_kwargs", {});
    } catch (const InputError& e) {
      throw bad_request(e.what(), "media_io_kwargs");
    }
    r.media_io_kwargs = nlohmann::json(*kw);
  }
  if (auto v = f.get_bool("return_prompt_text")) r.return_prompt_text = *v;
  r.ignored_fields = f.unread();
  return r;
}

void apply_server_request_defaults(const ServerOptions& options, const ordered_json& body,
                                   GenerationRequest& request) {
  const auto as_ids = body.find("return_tokens_as_token_ids");
  if (as_ids == body.end() || as_ids->is_null()) {
    request.return_tokens_as_token_ids = options.return_tokens_as_token_ids;
  }
  if (options.enable_force_include_usage && request.stream) {
    request.stream_options.include_usage = true;
  }
}

}  // namespace gemmaserve
