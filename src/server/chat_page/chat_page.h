// The browser chat page at GET / (src/server/chat_page/assets/, compiled in): served without the
// API key, as vLLM serves its /docs; the page itself asks for the key when /v1 answers 401.
#pragma once

namespace httplib {
class Server;
}

namespace gemmaserve {

// Registers GET / (index.html) and GET /<file> for the page's other files.
void register_chat_page(httplib::Server& server);

}  // namespace gemmaserve
