// POST /v1/chat/completions as vLLM serves it: the chat template, Gemma 4 reasoning and tool-call
// parsing, chat logprobs, and vLLM's chunk sequence when streaming (role, deltas, finish, usage).
#pragma once

#include <nlohmann/json.hpp>

#include "server/shared/serving_common.h"

namespace gemmaserve {

// Throws ApiError / InputError for a bad request (before any streaming starts).
ServingResponse serve_chat(ServingContext& ctx, const nlohmann::ordered_json& body);

}  // namespace gemmaserve
