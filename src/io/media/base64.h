// Strict base64 decoding (RFC 4648 standard alphabet, '=' padding), as Python's
// base64.b64decode(data, validate=True) that vLLM applies to data: URLs.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

namespace gemmaserve::media {

// The decoded bytes, or nullopt when `text` holds a character outside the alphabet, padding
// anywhere but at the end, or a length that is not a multiple of 4.
std::optional<std::vector<std::uint8_t>> decode_base64(std::string_view text);

}  // namespace gemmaserve::media
