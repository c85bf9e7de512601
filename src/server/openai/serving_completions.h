// POST /v1/completions as vLLM serves it: text or token-id prompts (batched), n samples, echo
// with prompt logprobs (lm-eval's loglikelihood requests), the legacy logprobs shape, streaming.
#pragma once

#include <nlohmann/json.hpp>

#include "server/shared/serving_common.h"

namespace gemmaserve {

// Throws ApiError / InputError for a bad request (before any streaming starts).
ServingResponse serve_completion(ServingContext& ctx, const nlohmann::ordered_json& body);

}  // namespace gemmaserve
