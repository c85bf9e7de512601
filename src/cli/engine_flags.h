// The engine flags every model-running command accepts (generate, bench, serve), under vLLM's
// names, declared and read in one place so the commands cannot drift apart.
#pragma once

#include <cstdint>
#include <string>

#include "cli/arg_parser.h"
#include "gemmaserve/llm.h"

namespace gemmaserve {

// Declares --config (see cli/config_file.h), --tokenizer, --threads, --max-model-len, --block-size,
// --kv-cache-memory-bytes (alias --kv-cache-memory), --gpu-memory-utilization, --max-num-seqs,
// --max-num-batched-tokens, --long-prefill-token-threshold, --[no-]enable-prefix-caching,
// --generation-config, --override-generation-config, --seed, --quantization and
// --cpu-matmul-precision, --limit-mm-per-prompt, --mm-processor-kwargs,
// --mm-processor-cache-gb and --structured-outputs-cache-gb.
void add_engine_flags(ArgParser& parser);

// EngineArgs for `model` from the parsed flags; InputError for malformed values.
EngineArgs engine_args_from_flags(const ArgParser& parser, const std::string& model);

// Usage lines for the flags above.
const char* engine_flags_usage();

// Parses "4096", "4k" (10^3), "4K" (2^10), "1.5g", "2G", ... like vLLM's human_readable_int.
// InputError naming `flag` otherwise.
int64_t parse_human_readable_int(const std::string& text, const std::string& flag);

}  // namespace gemmaserve
