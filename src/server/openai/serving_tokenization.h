// POST /tokenize and POST /detokenize (vLLM's serving_tokenization): request bodies -> the
// token ids the model sees, or text, with vLLM's checks and messages.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "server/shared/serving_common.h"

namespace gemmaserve {

nlohmann::ordered_json serve_tokenize(const ServingContext& ctx,
                                      const nlohmann::ordered_json& body);
nlohmann::ordered_json serve_detokenize(const ServingContext& ctx,
                                        const nlohmann::ordered_json& body);

}  // namespace gemmaserve
