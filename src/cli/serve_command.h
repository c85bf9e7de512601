// `gemmaserve serve`: the OpenAI-compatible HTTP server, a drop-in for `vllm serve`.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "cli/arg_parser.h"
#include "gemmaserve/llm.h"
#include "server/shared/server_options.h"

namespace gemmaserve {

// What `serve` runs, read from its arguments before anything loads.
struct ServeSetup {
  std::string model;
  ServerOptions options;
  EngineArgs engine_args;
};

// Every flag `serve` accepts, declared (docs/PROTOCOL.md's serve flag table lists each).
ArgParser serve_arg_parser();

// Parses `serve`'s arguments: refuses (InputError) and warns as the flag table says, loads
// nothing. nullopt after printing the usage for --help.
std::optional<ServeSetup> parse_serve_args(const std::vector<std::string>& args);

int run_serve_command(const std::vector<std::string>& args);

}  // namespace gemmaserve
