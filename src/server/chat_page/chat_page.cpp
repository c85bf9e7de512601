#include "server/chat_page/chat_page.h"

#include <httplib.h>

#include <string>

#include "server/chat_page/web_assets.h"

namespace gemmaserve {

void register_chat_page(httplib::Server& server) {
  for (const WebAsset& asset : web_assets()) {
    const std::string path = asset.path == "/index.html" ? "/" : std::string(asset.path);
    server.Get(path, [&asset](const httplib::Request&, httplib::Response& res) {
      // no-cache: a browser revalidates, so a rebuilt server never shows a stale page.
      res.set_header("Cache-Control", "no-cache");
      res.set_header("X-Content-Type-Options", "nosniff");
      res.set_content(asset.body.data(), asset.body.size(), std::string(asset.content_type));
    });
  }
}

}  // namespace gemmaserve
