// Images in chat messages, in the content-part forms vLLM's chat parser accepts:
//   {"type": "image_url", "image_url": {"url": URL, "detail"?: "auto"|"low"|"high"}}
//   {"type": "input_image", "image_url": URL}          (the Responses API's form)
//   {"image_url": URL} or {"image_url": {"url": URL}}   (no type: OpenAI's undocumented form)
// The chat template sees each as {"type": "image"} (vLLM's "openai" content format; Gemma 4's
// template writes <|image|> for it); the URLs are loaded through the media room and decoded.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "io/image/image_decode.h"
#include "io/media/media_connector.h"

namespace gemmaserve {

// True for a content part in one of the image forms above.
bool is_image_part(const nlohmann::ordered_json& part);

// The URL of an image part; a 400 (param "messages") when the part is malformed.
std::string image_part_url(const nlohmann::ordered_json& part);

// The messages as the chat template renders them: every image part becomes {"type": "image"}.
nlohmann::ordered_json messages_for_template(const nlohmann::ordered_json& messages);

// Loads and decodes each URL in order; any failure is a 400 (param "messages") with the media
// room's or the decoder's message.
std::vector<image::RgbImage> load_chat_images(const media::MediaConnector& media,
                                              const std::vector<std::string>& urls);

}  // namespace gemmaserve
