// `gemmaserve tokenize`, `detokenize` and `export-tokenizer`. Bad input throws InputError, which
// main() reports on stderr with exit code 2. The run_* forms print to `out` (for tests).
#pragma once

#include <ostream>
#include <string>
#include <vector>

namespace gemmaserve {

// tokenize --tokenizer PATH [--json] [--add-special] [--no-parse-special] -- TEXT
//   prints "2,9259,1902" (or {"tokens": [...]} with --json);
// tokenize --tokenizer PATH --jsonl FILE  tokenizes each line of FILE (a JSON string; "-" reads
//   stdin) and prints one {"tokens": [...]} line per input line.
int run_tokenize_command(const std::vector<std::string>& args);
int run_tokenize(const std::vector<std::string>& args, std::ostream& out);

// detokenize --tokenizer PATH [--json] [--skip-special] -- 2,45,67
//   prints the text exactly (or {"text": "..."} with --json).
int run_detokenize_command(const std::vector<std::string>& args);
int run_detokenize(const std::vector<std::string>& args, std::ostream& out);

// export-tokenizer --from GGUF --out PATH
//   writes the tokenizer.json Hugging Face would have for the GGUF vocabulary; PATH ending in
//   .json is the file, anything else a folder that gets tokenizer.json and tokenizer_config.json.
int run_export_tokenizer_command(const std::vector<std::string>& args);
int run_export_tokenizer(const std::vector<std::string>& args, std::ostream& out);

}  // namespace gemmaserve
