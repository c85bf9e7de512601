// Images in chat messages, in the content-part forms vLLM's chat parser accepts:
//   {"type": "image_url", "image_url": {"url": URL, "detail"?: "auto"|"low"|"high"}}
//   {"type": "input_image", "image_url": URL}          (the Responses API's form)
//   {"image_url": URL} or {"image_url": {"url": URL}}   (no type: OpenAI's undocumented form)
// The chat template sees each as {"type": "image"} (vLLM's "openai" content format; Gemma 4's
// template writes <|image|> for it); the URLs are loaded through the media room and decoded.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "gemmaserve/prompt_audio.h"
#include "gemmaserve/prompt_image.h"
#include "gemmaserve/prompt_video.h"
#include "io/image/image_decode.h"
#include "io/media/media_connector.h"

namespace gemmaserve {

struct ServingContext;

// True for a content part in one of the image forms above.
bool is_image_part(const nlohmann::ordered_json& part);

// The URL of an image part; InputError (param "messages": a 400 at the API) when malformed.
std::string image_part_url(const nlohmann::ordered_json& part);

// The URLs of the parts of `messages` that is_part picks, in order, each given by url_of.
std::vector<std::string> part_urls_of(const nlohmann::ordered_json& messages,
                                      bool (*is_part)(const nlohmann::ordered_json&),
                                      std::string (*url_of)(const nlohmann::ordered_json&));

// The URLs of every image part of `messages`, in order (400s for malformed image parts).
std::vector<std::string> image_urls_of(const nlohmann::ordered_json& messages);

// The messages as the chat template renders them: every image part becomes {"type": "image"},
// every audio part (chat_audio.h) {"type": "audio"}.
nlohmann::ordered_json messages_for_template(const nlohmann::ordered_json& messages);

// Loads and decodes each URL in order; any failure is an InputError (param "messages") with the
// media room's or the decoder's message.
std::vector<image::RgbImage> load_chat_images(const media::MediaConnector& media,
                                              const std::vector<std::string>& urls);

// A request's images for the engine: 400 (param "messages") when the model has no vision tower
// or the request is over --limit-mm-per-prompt (both before anything is fetched), then loaded
// and decoded, each with the request's mm_processor_kwargs budget.
std::vector<PromptImage> load_prompt_images(const ServingContext& ctx,
                                            const std::vector<std::string>& urls,
                                            std::optional<int> max_soft_tokens);

// `ids` with each bare <|image|> and <|audio|> expanded as the engine expands them (usage, the
// length checks, /tokenize); the engine's refusals become 400s naming messages.
std::vector<int32_t> expand_prompt_images(const ServingContext& ctx, std::span<const int32_t> ids,
                                          std::span<const PromptImage> images,
                                          std::span<const PromptAudio> audios = {},
                                          std::span<const PromptVideo> videos = {});

}  // namespace gemmaserve
