// The chat page's files (src/server/chat_page/assets/), compiled into the binary by
// cmake/embed_web_assets.cmake so `gemmaserve serve` needs nothing on disk and nothing online.
#pragma once

#include <span>
#include <string_view>

namespace gemmaserve {

struct WebAsset {
  std::string_view path;  // "/index.html", "/chat.js", ...
  std::string_view content_type;
  std::string_view body;
};

std::span<const WebAsset> web_assets();

}  // namespace gemmaserve
