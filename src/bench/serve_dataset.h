// The request sets `bench serve` replays, sampled as vLLM's benchmark datasets do: `random`
// (token-exact synthetic prompts around --random-input-len) and `sharegpt` (first human turn as
// the prompt, the reply's length as the output length).
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace gemmaserve {
class Tokenizer;
}

namespace gemmaserve::bench {

struct SampleRequest {
  std::string prompt;
  int prompt_len = 0;           // prompt tokens as the server counts them (with its BOS)
  int expected_output_len = 0;  // max_tokens of the request
  std::string request_id;
};

// Tokens in a text, with or without the tokenizer's specials (BOS): a local Tokenizer or the
// server's POST /tokenize.
using TokenCounter = std::function<int(const std::string& text, bool add_special)>;
TokenCounter local_token_counter(const Tokenizer& tokenizer);

struct RandomDatasetOptions {
  int num_prompts = 1000;
  int input_len = 1024;
  int output_len = 128;
  double range_ratio = 0.0;
  int prefix_len = 0;
  uint64_t seed = 0;
  std::string request_id_prefix;
};

// vLLM's RandomDataset: input lengths uniform in [floor(L(1-r)), ceil(L(1+r))] (L excluding the
// BOS the server adds), a shared random prefix, then consecutive non-special vocabulary ids from
// a random offset, decoded to text and re-encoded until the text is exactly that many tokens.
// prompt_len counts the BOS, so a request at ratio 0 reaches the server as exactly input_len
// tokens. Throws InputError for impossible lengths.
std::vector<SampleRequest> sample_random_requests(const Tokenizer& tokenizer,
                                                  const RandomDatasetOptions& options);

// Without a local tokenizer: prompts of common English words, fitted to the target length with
// `counter` (the server's /tokenize) when given; otherwise one word is assumed to be one token and
// the server's usage gives the real counts.
std::vector<SampleRequest> sample_random_text_requests(const RandomDatasetOptions& options,
                                                       const TokenCounter* counter);

struct ShareGptEntry {
  std::string prompt;      // conversations[0].value
  std::string completion;  // conversations[1].value
};

// Reads a ShareGPT JSON file (an array of {"conversations": [{"from", "value"}, ...]}); entries
// with fewer than two turns are skipped as in vLLM. Throws InputError naming the file and entry.
std::vector<ShareGptEntry> load_sharegpt(const std::filesystem::path& path);

struct ShareGptOptions {
  int num_prompts = 1000;
  uint64_t seed = 0;
  std::optional<int> output_len;  // --sharegpt-output-len: overrides the reply's length
  bool disable_shuffle = false;
  bool no_oversample = false;
  std::string request_id_prefix;
};

// Shuffles (seeded), keeps conversations with prompt 4..1024 tokens, reply >= 4 tokens (unless
// output_len is given) and both <= 2048, and repeats random kept ones up to num_prompts.
std::vector<SampleRequest> sample_sharegpt_requests(std::vector<ShareGptEntry> entries,
                                                    const ShareGptOptions& options,
                                                    const TokenCounter& count_tokens);

}  // namespace gemmaserve::bench
