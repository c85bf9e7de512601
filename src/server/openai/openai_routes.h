// vLLM's OpenAI-compatible routes: /v1/models, /v1/completions, /v1/chat/completions, /tokenize,
// /detokenize, /tokenizer_info (and their 405s), over the serving_* handlers.
#pragma once

#include "server/shared/serving_common.h"

namespace httplib {
class Server;
}

namespace gemmaserve {

void register_openai_routes(httplib::Server& s, ServingContext& ctx);

}  // namespace gemmaserve
