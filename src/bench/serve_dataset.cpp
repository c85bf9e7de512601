#include "bench/serve_dataset.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <string_view>

#include "core/error.h"
#include "tokenizer/tokenizer.h"

namespace gemmaserve::bench {
namespace {

using nlohmann::json;

// Rounds of decode -> encode -> fix the length before giving up (vLLM stops after 10).
constexpr int kMaxLengthFixRounds = 64;

// ShareGPT's length filter (vLLM's is_valid_sequence defaults).
constexpr int kMinSequenceLen = 4;
constexpr int kMaxPromptLen = 1024;
constexpr int kMaxTotalLen = 2048;

struct LengthBounds {
  int low = 0;
  int high = 0;
};

LengthBounds bounds_around(int length, double ratio, int at_least) {
  LengthBounds b;
  b.low = std::max(at_least, static_cast<int>(std::floor(length * (1.0 - ratio))));
  b.high = std::max(at_least, static_cast<int>(std::ceil(length * (1.0 + ratio))));
  return b;
}

void check_random_options(const RandomDatasetOptions& o, int num_special) {
  if (o.num_prompts <= 0) throw InputError("--num-prompts must be positive");
  if (!(o.range_ratio >= 0.0 && o.range_ratio < 1.0)) {
    throw InputError("--random-range-ratio must be in [0, 1), got " +
                     std::to_string(o.range_ratio));
  }
  if (o.input_len < 0 || o.output_len < 0 || o.prefix_len < 0) {
    throw InputError(
        "--random-input-len, --random-output-len and --random-prefix-len must be >= 0");
  }
  const int real_input = std::max(0, o.input_len - num_special);
  const int min_total =
      o.prefix_len + static_cast<int>(std::floor(real_input * (1.0 - o.range_ratio)));
  if (min_total < 1) {
    throw InputError("--random-input-len is too small: with " + std::to_string(num_special) +
                     " special token(s) and --random-range-ratio " + std::to_string(o.range_ratio) +
                     " a prompt could have no tokens; raise --random-input-len or "
                     "--random-prefix-len");
  }
}

// Decodes `ids` and re-encodes until the text is exactly `target` tokens, topping up with
// `allowed` ids or cutting the excess; returns the text and its ids.
std::pair<std::string, std::vector<int32_t>> fit_prompt(const Tokenizer& tokenizer,
                                                        std::vector<int32_t> ids, size_t target,
                                                        const std::vector<int32_t>& allowed,
                                                        std::mt19937_64& rng) {
  std::uniform_int_distribution<size_t> pick(0, allowed.size() - 1);
  std::string text;
  for (int round = 0;; ++round) {
    text = tokenizer.decode(ids, /*skip_special=*/false);
    ids = tokenizer.encode(text, /*add_special=*/false, /*parse_special=*/false);
    if (ids.size() == target || round >= kMaxLengthFixRounds) break;
    if (ids.size() < target) {
      while (ids.size() < target) ids.push_back(allowed[pick(rng)]);
    } else {
      ids.resize(target);
    }
  }
  return {std::move(text), std::move(ids)};
}

std::string read_text_file(const std::filesystem::path& path, const std::string& what) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InputError(what + ": cannot read " + path.string());
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Short English words, most of them a single token in Gemma-like vocabularies.
constexpr std::string_view kCommonWords[] = {
    "the",   "of",    "and",   "to",     "in",   "is",   "you",   "that",   "it",    "he",
    "was",   "for",   "on",    "are",    "as",   "with", "his",   "they",   "at",    "be",
    "this",  "have",  "from",  "or",     "one",  "had",  "by",    "word",   "but",   "not",
    "what",  "all",   "were",  "we",     "when", "your", "can",   "said",   "there", "use",
    "an",    "each",  "which", "she",    "do",   "how",  "their", "if",     "will",  "up",
    "other", "about", "out",   "many",   "then", "them", "these", "so",     "some",  "her",
    "would", "make",  "like",  "him",    "into", "time", "has",   "look",   "two",   "more",
    "write", "go",    "see",   "number", "no",   "way",  "could", "people", "my",    "than",
    "first", "water", "been",  "call",   "who",  "oil",  "its",   "now",    "find",  "long",
    "down",  "day",   "did",   "get",    "come", "made", "may",   "part"};

}  // namespace

TokenCounter local_token_counter(const Tokenizer& tokenizer) {
  return [&tokenizer](const std::string& text, bool add_special) {
    return static_cast<int>(tokenizer.encode(text, add_special, /*parse_special=*/false).size());
  };
}

std::vector<SampleRequest> sample_random_requests(const Tokenizer& tokenizer,
                                                  const RandomDatasetOptions& o) {
  const int num_special = static_cast<int>(tokenizer.encode("", true, false).size());
  check_random_options(o, num_special);
  const int real_input = std::max(0, o.input_len - num_special);
  const LengthBounds in = bounds_around(real_input, o.range_ratio, 0);
  const LengthBounds out = bounds_around(o.output_len, o.range_ratio, 1);

  std::vector<int32_t> allowed;
  const int32_t vocab = static_cast<int32_t>(tokenizer.vocab_size());
  for (int32_t id = 0; id < vocab; ++id) {
    if (tokenizer.contains(id) && !tokenizer.is_special(id)) allowed.push_back(id);
  }
  if (allowed.empty()) throw InputError("the tokenizer has no non-special tokens to sample from");

  std::mt19937_64 rng(o.seed);
  std::uniform_int_distribution<int> input_len(in.low, in.high);
  std::uniform_int_distribution<int> output_len(out.low, out.high);
  std::uniform_int_distribution<size_t> offset(0, allowed.size() - 1);
  std::vector<int> input_lens, output_lens;
  std::vector<size_t> offsets;
  for (int i = 0; i < o.num_prompts; ++i) input_lens.push_back(input_len(rng));
  for (int i = 0; i < o.num_prompts; ++i) output_lens.push_back(output_len(rng));
  for (int i = 0; i < o.num_prompts; ++i) offsets.push_back(offset(rng));
  std::vector<int32_t> prefix;
  for (int i = 0; i < o.prefix_len; ++i) prefix.push_back(allowed[offset(rng)]);

  std::vector<SampleRequest> requests;
  for (int i = 0; i < o.num_prompts; ++i) {
    std::vector<int32_t> ids = prefix;
    for (int k = 0; k < input_lens[i]; ++k) {
      ids.push_back(allowed[(offsets[i] + static_cast<size_t>(i + k)) % allowed.size()]);
    }
    const size_t target = static_cast<size_t>(o.prefix_len + input_lens[i]);
    auto [text, fitted] = fit_prompt(tokenizer, std::move(ids), target, allowed, rng);
    SampleRequest r;
    r.prompt = std::move(text);
    r.prompt_len = static_cast<int>(fitted.size()) + num_special;
    r.expected_output_len = output_lens[i];
    r.request_id = o.request_id_prefix + std::to_string(i);
    requests.push_back(std::move(r));
  }
  return requests;
}

std::vector<SampleRequest> sample_random_text_requests(const RandomDatasetOptions& o,
                                                       const TokenCounter* counter) {
  const int num_special = counter ? (*counter)("", true) : 1;
  check_random_options(o, num_special);
  const int real_input = std::max(0, o.input_len - num_special);
  const LengthBounds in = bounds_around(real_input, o.range_ratio, 0);
  const LengthBounds out = bounds_around(o.output_len, o.range_ratio, 1);
  std::mt19937_64 rng(o.seed);
  std::uniform_int_distribution<int> input_len(in.low, in.high);
  std::uniform_int_distribution<int> output_len(out.low, out.high);
  std::uniform_int_distribution<size_t> word(0, std::size(kCommonWords) - 1);
  std::vector<std::string> prefix;
  for (int i = 0; i < o.prefix_len; ++i) prefix.push_back(std::string(kCommonWords[word(rng)]));

  std::vector<SampleRequest> requests;
  for (int i = 0; i < o.num_prompts; ++i) {
    const int target = o.prefix_len + input_len(rng);
    std::vector<std::string> chosen = prefix;
    while (static_cast<int>(chosen.size()) < target)
      chosen.push_back(std::string(kCommonWords[word(rng)]));
    auto join = [&chosen]() {
      std::string text;
      for (size_t k = 0; k < chosen.size(); ++k) {
        if (k) text.push_back(' ');
        text.append(chosen[k]);
      }
      return text;
    };
    std::string text = join();
    int tokens = target;
    if (counter) {
      for (int round = 0; round < kMaxLengthFixRounds; ++round) {
        tokens = (*counter)(text, false);
        if (tokens == target) break;
        if (tokens < target) {
          for (int k = tokens; k < target; ++k)
            chosen.push_back(std::string(kCommonWords[word(rng)]));
        } else {
          const size_t cut = std::min(chosen.size() - 1, static_cast<size_t>(tokens - target));
          chosen.resize(chosen.size() - std::max<size_t>(cut, 1));
        }
        text = join();
      }
    }
    SampleRequest r;
    r.prompt = std::move(text);
    r.prompt_len = tokens + num_special;
    r.expected_output_len = output_len(rng);
    r.request_id = o.request_id_prefix + std::to_string(i);
    requests.push_back(std::move(r));
  }
  return requests;
}

std::vector<ShareGptEntry> load_sharegpt(const std::filesystem::path& path) {
  const std::string text = read_text_file(path, "--dataset-path");
  json data;
  try {
    data = json::parse(text);
  } catch (const json::parse_error& e) {
    throw InputError("--dataset-path: " + path.string() + " is not valid JSON: " + e.what());
  }
  if (!data.is_array()) {
    throw InputError("--dataset-path: " + path.string() +
                     " must hold a JSON array of {\"conversations\": [...]} entries (ShareGPT)");
  }
  std::vector<ShareGptEntry> entries;
  for (size_t i = 0; i < data.size(); ++i) {
    const json& entry = data[i];
    const std::string where = path.string() + " entry " + std::to_string(i);
    if (!entry.is_object()) throw InputError("--dataset-path: " + where + " is not an object");
    auto conversations = entry.find("conversations");
    if (conversations == entry.end()) continue;
    if (!conversations->is_array()) {
      throw InputError("--dataset-path: " + where + ": \"conversations\" must be an array");
    }
    if (conversations->size() < 2) continue;
    ShareGptEntry e;
    for (int turn = 0; turn < 2; ++turn) {
      const json& t = (*conversations)[turn];
      if (!t.is_object() || !t.contains("value") || !t["value"].is_string()) {
        throw InputError("--dataset-path: " + where + ": conversations[" + std::to_string(turn) +
                         "] needs a string \"value\"");
      }
      (turn == 0 ? e.prompt : e.completion) = t["value"].get<std::string>();
    }
    entries.push_back(std::move(e));
  }
  if (entries.empty()) {
    throw InputError("--dataset-path: " + path.string() +
                     " has no conversation with at least two turns");
  }
  return entries;
}

std::vector<SampleRequest> sample_sharegpt_requests(std::vector<ShareGptEntry> entries,
                                                    const ShareGptOptions& o,
                                                    const TokenCounter& count_tokens) {
  if (o.num_prompts <= 0) throw InputError("--num-prompts must be positive");
  if (o.output_len && *o.output_len <= 0)
    throw InputError("--sharegpt-output-len must be positive");
  std::mt19937_64 rng(o.seed);
  if (!o.disable_shuffle) std::shuffle(entries.begin(), entries.end(), rng);
  std::vector<SampleRequest> requests;
  for (const ShareGptEntry& e : entries) {
    if (static_cast<int>(requests.size()) >= o.num_prompts) break;
    const int prompt_len = count_tokens(e.prompt, true);
    // vLLM counts the reply with the tokenizer's specials too; kept for the same output lengths.
    const int output_len = o.output_len ? *o.output_len : count_tokens(e.completion, true);
    const bool too_short =
        prompt_len < kMinSequenceLen || (!o.output_len && output_len < kMinSequenceLen);
    if (too_short || prompt_len > kMaxPromptLen || prompt_len + output_len > kMaxTotalLen) continue;
    SampleRequest r;
    r.prompt = e.prompt;
    r.prompt_len = prompt_len;
    r.expected_output_len = output_len;
    r.request_id = o.request_id_prefix + std::to_string(requests.size());
    requests.push_back(std::move(r));
  }
  if (requests.empty()) {
    throw InputError(
        "--dataset-path: no ShareGPT conversation passes the length filter (prompt 4..1024 "
        "tokens, reply >= 4 tokens, together <= 2048)");
  }
  if (!o.no_oversample && static_cast<int>(requests.size()) < o.num_prompts) {
    std::uniform_int_distribution<size_t> pick(0, requests.size() - 1);
    const size_t kept = requests.size();
    while (static_cast<int>(requests.size()) < o.num_prompts) {
      SampleRequest copy = requests[pick(rng) % kept];
      copy.request_id = o.request_id_prefix + std::to_string(requests.size());
      requests.push_back(std::move(copy));
    }
  }
  return requests;
}

}  // namespace gemmaserve::bench
