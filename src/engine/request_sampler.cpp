#include "engine/request_sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>
#include <utility>

#include "core/error.h"
#include "engine/sampler.h"
#include "engine/structured/compiled_grammar.h"
#include "engine/structured/grammar_matcher.h"
#include "tokenizer/tokenizer.h"

namespace gemmaserve {

namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// Python's str.lstrip() for the whitespace a word can start with.
std::string lstrip(const std::string& s) {
  const size_t at = s.find_first_not_of(" \t\n\r\f\v");
  return at == std::string::npos ? std::string() : s.substr(at);
}

// vLLM's SamplingParams.update_from_tokenizer: each word as tokenized at the start of the text
// and after a space; the spaced form only when it is a different first token of equal length.
std::vector<std::vector<int32_t>> tokenize_bad_words(const std::vector<std::string>& words,
                                                     const Tokenizer& tokenizer, int vocab_size) {
  std::vector<std::vector<int32_t>> out;
  for (const std::string& word : words) {
    const std::string bare = lstrip(word);
    std::vector<int32_t> plain = tokenizer.encode(bare, /*add_special=*/false,
                                                  /*parse_special=*/true);
    if (plain.empty()) throw InputError("bad_words entries must tokenize to at least one token.");
    std::vector<int32_t> spaced = tokenizer.encode(" " + bare, false, true);
    const bool add_spaced =
        !spaced.empty() && spaced.front() != plain.front() && spaced.size() == plain.size();
    out.push_back(std::move(plain));
    if (add_spaced) out.push_back(std::move(spaced));
  }
  std::vector<int32_t> invalid;
  for (const auto& ids : out) {
    for (int32_t id : ids) {
      if (id < 0 || id >= vocab_size) invalid.push_back(id);
    }
  }
  if (!invalid.empty()) {
    std::string list;
    for (int32_t id : invalid) list += (list.empty() ? "" : ", ") + std::to_string(id);
    throw InputError("The model vocabulary size is " + std::to_string(vocab_size) +
                     ", but the following tokens were specified as bad: [" + list +
                     "]. All token id values should be integers satisfying: 0 <= token_id <= " +
                     std::to_string(vocab_size - 1) + ".");
  }
  return out;
}

// Whether the first answer token may instead open the leading span.
bool lead_may_open(const AnswerConstraint& c, std::span<const int32_t> output_tokens) {
  return c.lead_open >= 0 && c.lead_close >= 0 && !c.starts_inside_lead && output_tokens.empty();
}

// Sorted distinct ids.
std::vector<int32_t> distinct(std::span<const int32_t> ids) {
  std::vector<int32_t> v(ids.begin(), ids.end());
  std::sort(v.begin(), v.end());
  v.erase(std::unique(v.begin(), v.end()), v.end());
  return v;
}

}  // namespace

RequestSampler::RequestSampler(const SamplingParams& params, std::span<const int32_t> prompt_tokens,
                               std::vector<int32_t> stop_ids, const Tokenizer* tokenizer,
                               int vocab_size, uint64_t fallback_seed,
                               std::shared_ptr<const JsonTokenTrie> json_trie,
                               std::shared_ptr<const structured::CompiledGrammar> grammar)
    : params_(params),
      prompt_tokens_(distinct(prompt_tokens)),  // only membership matters (repetition penalty)
      stop_ids_(std::move(stop_ids)),
      vocab_size_(vocab_size),
      rng_(params.seed ? *params.seed : fallback_seed),
      json_trie_(std::move(json_trie)),
      grammar_(std::move(grammar)) {
  if (vocab_size_ <= 0) throw std::invalid_argument("RequestSampler: vocab_size must be positive");
  params_.validate(vocab_size_);  // every id used as an index below is then in range
  for (int32_t id : stop_ids_) {
    if (id < 0 || id >= vocab_size_) {
      throw InputError("stop token id " + std::to_string(id) + " is outside the vocabulary of " +
                       std::to_string(vocab_size_) + " tokens");
    }
  }
  // Out-of-range prompt ids cannot be penalized (the forward pass rejects them anyway).
  std::erase_if(prompt_tokens_, [&](int32_t id) { return id < 0 || id >= vocab_size_; });
  if (!params_.bad_words.empty()) {
    if (tokenizer == nullptr) throw InputError("bad_words needs a tokenizer; this model has none");
    bad_word_ids_ = tokenize_bad_words(params_.bad_words, *tokenizer, vocab_size_);
  }
  check_first_token_possible();
  if (params_.answer_constraint) never_ = distinct(params_.answer_constraint->never);
  if (params_.answer_constraint && params_.answer_constraint->json_object && !json_trie_) {
    throw InputError(
        "response_format json_object needs the model's tokenizer; this model has none");
  }
  if (params_.answer_constraint && !params_.answer_constraint->structured_kind.empty()) {
    if (!json_trie_)
      throw InputError("structured outputs need the model's tokenizer; this model has none");
    if (!grammar_)
      throw std::invalid_argument("RequestSampler: a structured kind needs its grammar");
    matcher_ = std::make_unique<structured::GrammarMatcher>(grammar_->grammar());
    grammar_state_ = std::make_unique<structured::GrammarState>();
  }
  // vLLM's API layer clamps biases to OpenAI's [-100, 100].
  for (auto& [id, bias] : params_.logit_bias) bias = std::clamp(bias, -100.0f, 100.0f);
}

RequestSampler::~RequestSampler() = default;

void RequestSampler::check_first_token_possible() const {
  if (!params_.allowed_token_ids || params_.max_tokens == 0) return;
  // Masked at the first step whatever the logits: one-token bad words always, stop ids while
  // min_tokens is not reached.
  std::vector<int32_t> banned;
  for (const std::vector<int32_t>& word : bad_word_ids_) {
    if (word.size() == 1) banned.push_back(word.front());
  }
  if (params_.min_tokens > 0) banned.insert(banned.end(), stop_ids_.begin(), stop_ids_.end());
  banned = distinct(banned);
  for (int32_t id : *params_.allowed_token_ids) {
    if (!std::binary_search(banned.begin(), banned.end(), id)) return;
  }
  throw InputError(
      "allowed_token_ids leaves no token to sample: each of its ids is a one-token bad word or "
      "a stop token (eos or stop_token_ids, masked while fewer than min_tokens=" +
      std::to_string(params_.min_tokens) + " tokens were generated).");
}

int32_t RequestSampler::sample(std::span<const float> raw_logits,
                               std::span<const int32_t> output_tokens) {
  return sample_processed(process(raw_logits, output_tokens), params_.temperature, params_.top_k,
                          params_.top_p, params_.min_p, rng_);
}

std::span<const float> RequestSampler::process(std::span<const float> raw_logits,
                                               std::span<const int32_t> output_tokens) {
  if (static_cast<int>(raw_logits.size()) != vocab_size_) {
    throw std::invalid_argument("RequestSampler: got " + std::to_string(raw_logits.size()) +
                                " logits for a vocabulary of " + std::to_string(vocab_size_));
  }
  work_.assign(raw_logits.begin(), raw_logits.end());
  std::vector<float>& x = work_;

  auto keep_only = [&](std::span<const int32_t> ids) {
    kept_.clear();  // reused: a JSON mask can hold most of the vocabulary every step
    for (int32_t id : ids) kept_.push_back(x[id]);
    std::fill(x.begin(), x.end(), kNegInf);
    for (size_t i = 0; i < kept_.size(); ++i) x[ids[i]] = kept_[i];
  };
  if (params_.allowed_token_ids) keep_only(*params_.allowed_token_ids);
  if (matcher_) {
    apply_grammar(output_tokens, x);
  } else if (params_.answer_constraint && params_.answer_constraint->json_object) {
    // Nothing left (a mask that cannot happen with byte tokens in the vocabulary) stays an
    // error rather than a free, broken object.
    if (const std::vector<int32_t>* next = json_next_tokens(output_tokens)) keep_only(*next);
  } else if (params_.answer_constraint) {
    const std::vector<int32_t> next = forced_next_tokens(*params_.answer_constraint, output_tokens);
    if (!next.empty()) keep_only(next);
  }

  // A bad word's last token is banned when the output ends with the rest of the word.
  for (const std::vector<int32_t>& word : bad_word_ids_) {
    const size_t prefix = word.size() - 1;
    if (prefix > output_tokens.size()) continue;
    if (std::equal(word.begin(), word.end() - 1, output_tokens.end() - prefix)) {
      x[word.back()] = kNegInf;
    }
  }

  if (static_cast<int>(output_tokens.size()) < params_.min_tokens) {
    for (int32_t id : stop_ids_) x[id] = kNegInf;
  }

  for (const auto& [id, bias] : params_.logit_bias) x[id] += bias;

  const bool repetition = params_.repetition_penalty != 1.0;
  const bool frequency = params_.frequency_penalty != 0.0;
  const bool presence = params_.presence_penalty != 0.0;
  if (repetition || frequency || presence) {
    std::vector<int32_t> out(output_tokens.begin(), output_tokens.end());
    std::sort(out.begin(), out.end());
    if (repetition) {
      // HF/vLLM: shrink toward zero once per token seen in the prompt or the output.
      const float r = static_cast<float>(params_.repetition_penalty);
      std::vector<int32_t> seen;
      std::set_union(prompt_tokens_.begin(), prompt_tokens_.end(), out.begin(), out.end(),
                     std::back_inserter(seen));
      seen.erase(std::unique(seen.begin(), seen.end()), seen.end());
      for (int32_t id : seen) {
        if (id < 0 || id >= vocab_size_) continue;
        x[id] = x[id] > 0 ? x[id] / r : x[id] * r;
      }
    }
    // OpenAI's definition: frequency scales with the count, presence is paid once.
    for (size_t i = 0; i < out.size();) {
      size_t j = i;
      while (j < out.size() && out[j] == out[i]) ++j;
      const int32_t id = out[i];
      if (id >= 0 && id < vocab_size_) {
        x[id] -= static_cast<float>(params_.frequency_penalty * static_cast<double>(j - i) +
                                    params_.presence_penalty);
      }
      i = j;
    }
  }

  return x;
}

std::optional<size_t> RequestSampler::answer_start(const AnswerConstraint& c,
                                                   std::span<const int32_t> output_tokens) {
  const bool has_lead = c.lead_open >= 0 && c.lead_close >= 0;
  const bool opens_lead = has_lead && !c.starts_inside_lead && !output_tokens.empty() &&
                          output_tokens.front() == c.lead_open;
  if (!has_lead || !(c.starts_inside_lead || opens_lead)) return 0;
  const auto close =
      std::find(output_tokens.begin() + (opens_lead ? 1 : 0), output_tokens.end(), c.lead_close);
  if (close == output_tokens.end()) return std::nullopt;  // still inside the span: free
  return static_cast<size_t>(close - output_tokens.begin()) + 1;
}

std::vector<int32_t> RequestSampler::forced_next_tokens(const AnswerConstraint& forced,
                                                        std::span<const int32_t> output_tokens) {
  const std::optional<size_t> start = answer_start(forced, output_tokens);
  if (!start) return {};
  const std::span<const int32_t> answer = output_tokens.subspan(*start);
  std::vector<int32_t> next;
  for (const std::vector<int32_t>& choice : forced.prefix_choices) {
    if (choice.size() <= answer.size()) {
      if (std::equal(choice.begin(), choice.end(), answer.begin())) return {};  // one is whole
      continue;
    }
    if (std::equal(answer.begin(), answer.end(), choice.begin())) {
      next.push_back(choice[answer.size()]);
    }
  }
  if (lead_may_open(forced, output_tokens)) next.push_back(forced.lead_open);
  std::sort(next.begin(), next.end());
  next.erase(std::unique(next.begin(), next.end()), next.end());
  return next;
}

const std::vector<int32_t>* RequestSampler::json_next_tokens(
    std::span<const int32_t> output_tokens) {
  const AnswerConstraint& c = *params_.answer_constraint;
  const std::optional<size_t> start = answer_start(c, output_tokens);
  if (!start) return nullptr;  // thinking: free
  if (json_fed_ < *start || json_fed_ > output_tokens.size()) {
    json_ = JsonObjectMachine();  // the answer (re)starts here
    json_fed_ = *start;
  }
  for (; json_fed_ < output_tokens.size(); ++json_fed_) {
    for (char b : json_trie_->bytes(output_tokens[json_fed_])) {
      json_.feed(static_cast<uint8_t>(b));
    }
  }
  // A whole object ends with a stop token; where none may come yet (ignore_eos without
  // stop_token_ids, min_tokens not reached) blank space pads it.
  const bool may_stop =
      !stop_ids_.empty() && static_cast<int>(output_tokens.size()) >= params_.min_tokens;
  if (json_.done() && may_stop) return &stop_ids_;
  // The first token may also open the thought channel: a state of its own.
  const bool lead = lead_may_open(c, output_tokens);
  const std::string key = json_.key() + (lead ? "L" : "");
  auto it = json_cache_.find(key);
  if (it == json_cache_.end()) {
    // A handful of states recur (inside a string at one depth, after a value, ...).
    std::vector<int32_t> next = json_trie_->allowed(json_);
    std::erase_if(next,
                  [&](int32_t id) { return std::binary_search(never_.begin(), never_.end(), id); });
    if (lead) next.push_back(c.lead_open);
    // The ids' capacity, the key's, the map node (three links, colour, the pair).
    const size_t bytes = next.capacity() * sizeof(int32_t) + key.capacity() + 4 * sizeof(void*) +
                         sizeof(std::pair<const std::string, std::vector<int32_t>>);
    if (json_cache_bytes_ + bytes > kMaxJsonCacheBytes) {
      json_cache_.clear();
      json_cache_bytes_ = 0;
    }
    json_cache_bytes_ += bytes;
    it = json_cache_.emplace(key, std::move(next)).first;
  }
  return &it->second;
}

void RequestSampler::apply_grammar(std::span<const int32_t> output_tokens, std::vector<float>& x) {
  const AnswerConstraint& c = *params_.answer_constraint;
  const std::optional<size_t> start = answer_start(c, output_tokens);
  if (!start) return;  // thinking: free
  if (grammar_fed_ < *start || grammar_fed_ > output_tokens.size() || grammar_state_->dead()) {
    *grammar_state_ = matcher_->initial();  // the answer (re)starts here
    grammar_fed_ = *start;
  }
  for (; grammar_fed_ < output_tokens.size(); ++grammar_fed_) {
    // Only masked tokens get here, so the grammar takes every byte.
    matcher_->feed(grammar_state_.get(),
                   grammar_->token_bytes(*json_trie_, output_tokens[grammar_fed_]));
  }
  const bool may_stop =
      !stop_ids_.empty() && static_cast<int>(output_tokens.size()) >= params_.min_tokens;
  const bool whole = grammar_state_->accepting();
  if (whole && !grammar_state_->can_continue() && !may_stop) return;  // nothing can end it: free
  // The stop tokens once the answer is whole, the thought channel before it starts.
  std::vector<int32_t> extra;
  if (whole) extra = stop_ids_;
  if (lead_may_open(c, output_tokens)) extra.push_back(c.lead_open);
  kept_.clear();
  for (int32_t id : extra) kept_.push_back(x[id]);
  if (grammar_state_->can_continue()) {
    const std::shared_ptr<const structured::TokenBits> bits =
        grammar_->allowed(*json_trie_, vocab_size_, *grammar_state_, matcher_.get());
    // A word at a time: most are all allowed (inside strings) or all masked.
    for (size_t w = 0; w < bits->size(); ++w) {
      const uint64_t m = (*bits)[w];
      if (m == ~0ull) continue;
      const size_t base = w * 64, end = std::min(base + 64, x.size());
      if (m == 0) {
        std::fill(x.begin() + static_cast<long>(base), x.begin() + static_cast<long>(end), kNegInf);
        continue;
      }
      for (size_t i = base; i < end; ++i) {
        if ((m >> (i - base) & 1) == 0) x[i] = kNegInf;
      }
    }
    for (int32_t id : never_) x[id] = kNegInf;
  } else {
    std::fill(x.begin(), x.end(), kNegInf);
  }
  for (size_t i = 0; i < extra.size(); ++i) x[extra[i]] = kept_[i];
}

TokenLogprobs RequestSampler::logprobs(std::span<const float> raw_logits, int k, int32_t chosen) {
  return top_logprobs(raw_logits, k, chosen);
}

}  // namespace gemmaserve
