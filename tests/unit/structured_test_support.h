// Helpers shared by the structured-output tests: whole and prefix matches of a grammar, the
// brute-force vocabulary mask a walked one must equal, and answers sampled under a grammar.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "engine/json_object_grammar.h"
#include "engine/request_sampler.h"
#include "engine/structured/compiled_grammar.h"
#include "engine/structured/grammar_matcher.h"
#include "tokenizer/tokenizer.h"

namespace gemmaserve::structured {

// Whether `text` is a whole sentence of the grammar.
inline bool matches(const Grammar& g, const std::string& text) {
  GrammarMatcher m(g);
  GrammarState s = m.initial();
  return m.feed(&s, text) && s.accepting();
}

// Whether `text` can still be extended into a sentence.
inline bool prefix_ok(const Grammar& g, const std::string& text) {
  GrammarMatcher m(g);
  GrammarState s = m.initial();
  return m.feed(&s, text);
}

// The ids whose bit is set.
inline std::vector<int32_t> mask_ids(const TokenBits& bits, int vocab) {
  std::vector<int32_t> ids;
  for (int32_t id = 0; id < vocab; ++id) {
    if (bits[static_cast<size_t>(id) / 64] >> (id % 64) & 1) ids.push_back(id);
  }
  return ids;
}

// The brute-force mask: every token whose bytes (or private byte) the state takes, one by one.
inline std::vector<int32_t> brute_force(const Grammar& g, const JsonTokenTrie& trie, int vocab,
                                        const GrammarState& s) {
  std::vector<int32_t> out;
  GrammarMatcher m(g);
  for (int32_t id = 0; id < vocab; ++id) {
    if (trie.bytes(id).empty()) continue;
    GrammarState t = s;
    if (m.feed(&t, trie.bytes(id))) out.push_back(id);
  }
  for (const auto& [id, bytes] : g.private_tokens()) {
    GrammarState t = s;
    if (m.feed(&t, bytes)) out.push_back(id);
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

// Samples with random logits until the stop token 1 (or `max_tokens`), from many seeds; the
// `likely` ids (the stop token, closers) get a boost whenever the grammar allows them.
inline std::vector<std::string> sample_answers(const Tokenizer& tok, const std::string& kind,
                                               const std::string& spec, int seeds,
                                               const std::vector<int32_t>& likely, float boost,
                                               size_t max_tokens) {
  auto trie = std::make_shared<const JsonTokenTrie>(tok);
  GrammarCompiler compiler;
  const auto grammar = compiler.compile(kind, spec);
  const int vocab = static_cast<int>(tok.vocab_size());
  std::vector<std::string> answers;
  for (int seed = 0; seed < seeds; ++seed) {
    SamplingParams p;
    p.seed = static_cast<uint64_t>(seed);
    p.answer_constraint = AnswerConstraint{};
    p.answer_constraint->structured_kind = kind;
    p.answer_constraint->structured_spec = spec;
    RequestSampler s(p, {}, /*stop_ids=*/{1}, &tok, vocab, 0, trie, grammar);
    std::mt19937 rng(static_cast<uint32_t>(seed));
    std::normal_distribution<float> normal(0.0f, 2.0f);
    std::vector<float> logits(static_cast<size_t>(vocab));
    std::vector<int32_t> out;
    std::string text;
    while (out.size() < max_tokens && (out.empty() || out.back() != 1)) {
      for (float& l : logits) l = normal(rng);
      for (int32_t id : likely) logits[static_cast<size_t>(id)] += boost;
      out.push_back(s.sample(logits, out));
      if (out.back() != 1) text += trie->bytes(out.back());
    }
    EXPECT_EQ(out.back(), 1) << "seed " << seed << " did not finish: " << text;
    answers.push_back(text);
  }
  return answers;
}

}  // namespace gemmaserve::structured
