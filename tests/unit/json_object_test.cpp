// response_format json_object: the byte recogniser, the vocabulary trie's masks and the sampler
// that applies them.
#include <gtest/gtest.h>

#include <cstdio>
#include <limits>
#include <string>
#include <vector>

#include "core/error.h"
#include "engine/json_object_grammar.h"
#include "engine/request_sampler.h"
#include "test_support.h"
#include "tokenizer/tokenizer.h"

namespace gemmaserve {
namespace {

using Ids = std::vector<int32_t>;

// The index of the first byte the machine refuses, or -1 when it takes all of `text`.
int refused_at(const std::string& text, JsonObjectMachine* m = nullptr) {
  JsonObjectMachine local;
  JsonObjectMachine& machine = m ? *m : local;
  for (size_t i = 0; i < text.size(); ++i) {
    if (!machine.feed(static_cast<uint8_t>(text[i]))) return static_cast<int>(i);
  }
  return -1;
}

bool whole_object(const std::string& text) {
  JsonObjectMachine m;
  return refused_at(text, &m) == -1 && m.done();
}

TEST(JsonObjectMachine, TakesObjectsAndEndsExactlyAtTheirClose) {
  for (const char* ok : {
           "{}",
           R"({"a":1})",
           R"({ "a" : [1, -2.5e+3, 0, 0.25E-2, true, false, null, "x\"y\\z\u00e9\n"], "b": {}})",
           R"({"nested":{"deeper":[[[]],{"k":[{}]}]},"s":"tab\there","n":-0})",
           "{\"utf8\":\"\xc3\xa9\xe2\x82\xac\"}",
       }) {
    EXPECT_TRUE(whole_object(ok)) << ok;
    JsonObjectMachine m;
    const std::string s = ok;
    ASSERT_EQ(refused_at(s.substr(0, s.size() - 1), &m), -1) << ok;
    EXPECT_FALSE(m.done()) << ok;  // not before the last byte
    EXPECT_FALSE(m.feed('a'));     // not a value's end: refused, nothing changes
    EXPECT_TRUE(m.feed(static_cast<uint8_t>(s.back())));
    EXPECT_TRUE(m.done());
    EXPECT_FALSE(m.feed('}'));  // after the object only blank space (or the end)
    EXPECT_TRUE(m.feed('\n'));
    EXPECT_TRUE(m.done());
  }
}

TEST(JsonObjectMachine, RefusesTheFirstBadByte) {
  struct Case {
    const char* text;
    int at;
  };
  for (const Case& c : {
           Case{" {}", 0},                                      // the object opens the answer
           Case{"[1]", 0},                                      // the top level is an object
           Case{R"({"a":01})", 6},                              // no leading zeros
           Case{R"({"a" 1})", 5},                               // a colon after a key
           Case{R"({"a":tru})", 8},                             // literals are whole
           Case{R"({"a":"\q"})", 7},                            // only JSON escapes
           Case{R"({"a":"\u12G4"})", 10}, Case{R"({a:1})", 1},  // keys are strings
           Case{R"({"a":1,})", 7},                              // no trailing comma
           Case{R"({"a":[1,]})", 8}, Case{R"({"a":1])", 6},     // brackets match
           Case{R"({"a":-})", 6}, Case{R"({"a":1.})", 7}, Case{R"({"a":1e})", 7},
           Case{"{\"a\":\"\x01\"}", 6},  // control bytes are escaped in strings
       }) {
    EXPECT_EQ(refused_at(c.text), c.at) << c.text;
  }
}

TEST(JsonObjectMachine, CapsWhitespaceRunsAndDepth) {
  const std::string run(JsonObjectMachine::kMaxWhitespaceRun, ' ');
  EXPECT_TRUE(whole_object("{" + run + "\"a\":" + run + "1" + run + "}"));
  EXPECT_EQ(refused_at("{" + run + " "), JsonObjectMachine::kMaxWhitespaceRun + 1);
  // Inside strings spaces are content, not a run.
  EXPECT_TRUE(whole_object("{\"" + run + run + "\":1}"));
  std::string deep = "{\"a\":";
  for (int i = 1; i < JsonObjectMachine::kMaxDepth; ++i) deep += "[";
  EXPECT_EQ(refused_at(deep + "["), static_cast<int>(deep.size()));
  std::string closed = deep;
  for (int i = 1; i < JsonObjectMachine::kMaxDepth; ++i) closed += "]";
  EXPECT_TRUE(whole_object(closed + "}"));
}

// ids: 0 <bos> 1 <eos>, then pieces that cross JSON's structure, then the 256 byte tokens.
Tokenizer json_tokenizer() {
  return testing::pieces_tokenizer(
      {"<bos>", "<eos>", "{", "}", "\"", "{\"", "\"}", "\":", "a", "1", "\u2581", "ok"}, 2);
}

constexpr int32_t kByte0 = 12;  // <0x00>

TEST(JsonTokenTrie, AllowsExactlyTheTokensThatKeepTheObject) {
  const Tokenizer tok = json_tokenizer();
  const JsonTokenTrie trie(tok);
  EXPECT_EQ(trie.bytes(5), "{\"");
  EXPECT_EQ(trie.bytes(10), " ");
  EXPECT_EQ(trie.bytes(1), "");  // special tokens are never JSON
  JsonObjectMachine m;
  EXPECT_EQ(trie.allowed(m), (Ids{2, 5, kByte0 + '{'}));
  ASSERT_EQ(refused_at(R"({"a")", &m), -1);  // after a key: a colon (or blank space)
  EXPECT_EQ(trie.allowed(m),
            (Ids{10, kByte0 + '\t', kByte0 + '\n', kByte0 + '\r', kByte0 + ' ', kByte0 + ':'}));
  JsonObjectMachine in_key;
  ASSERT_EQ(refused_at(R"({"a)", &in_key), -1);
  const Ids inside = trie.allowed(in_key);  // closing the key with ":" or going on with text
  for (int32_t id : {4, 7, 8, 9, 10, 11, kByte0 + 'z', kByte0 + 0xC3}) {
    EXPECT_TRUE(std::binary_search(inside.begin(), inside.end(), id)) << id;
  }
  for (int32_t id : {0, 1, 6, kByte0 + 0x01}) {  // "} would close a key; control bytes
    EXPECT_FALSE(std::binary_search(inside.begin(), inside.end(), id)) << id;
  }
}

TEST(JsonObjectSampling, GreedyOutputIsAnObjectThenOnlyTheStop) {
  const Tokenizer tok = json_tokenizer();
  auto trie = std::make_shared<const JsonTokenTrie>(tok);
  SamplingParams p;
  p.temperature = 0;
  p.answer_constraint = AnswerConstraint{};
  p.answer_constraint->json_object = true;
  p.answer_constraint->never = {11};  // "ok"
  const int vocab = static_cast<int>(tok.vocab_size());
  RequestSampler s(p, {}, /*stop_ids=*/{1}, &tok, vocab, 0, trie);
  // The raw model prefers "ok", then "a", then "}": the mask makes that an object.
  std::vector<float> logits(static_cast<size_t>(vocab), 0.0f);
  logits[11] = 9;
  logits[8] = 5;
  logits[3] = 4;
  logits[7] = 3;
  logits[6] = 2;
  logits[1] = 1;
  Ids out;
  for (int step = 0; step < 12 && (out.empty() || out.back() != 1); ++step) {
    out.push_back(s.sample(logits, out));
  }
  std::string text;
  for (int32_t id : out) text += trie->bytes(id);
  // "{" first ("{\"" scores 0 like "{", the lower id wins), then "}" closes it; only <eos> after.
  EXPECT_EQ(text, "{}");
  EXPECT_EQ(out.back(), 1);
  EXPECT_TRUE(whole_object(text));

  // Once the object is whole and no stop token may end it (ignore_eos), blank space pads it.
  RequestSampler no_stop(p, {}, /*stop_ids=*/{}, &tok, vocab, 0, trie);
  EXPECT_EQ(no_stop.sample(logits, Ids{2, 3}), 10);  // "▁", the best blank token
  // A mask that leaves nothing (allowed_token_ids against the object) is an InputError.
  SamplingParams only_a = p;
  only_a.allowed_token_ids = Ids{8};
  RequestSampler stuck(only_a, {}, {1}, &tok, vocab, 0, trie);
  try {
    stuck.sample(logits, {});
    FAIL() << "sampled outside the object";
  } catch (const InputError& e) {
    EXPECT_STREQ(e.what(),
                 "no token can be sampled: allowed_token_ids, bad_words, min_tokens and the answer "
                 "constraint (tool_choice, response_format) mask every token");
  }
  // json_object needs the vocabulary's bytes.
  try {
    RequestSampler none(p, {}, {1}, &tok, vocab, 0, nullptr);
    FAIL() << "accepted without a trie";
  } catch (const InputError& e) {
    EXPECT_STREQ(e.what(),
                 "response_format json_object needs the model's tokenizer; this model has none");
  }
}

TEST(JsonObjectSampling, ThinkingComesFirstAndIsFree) {
  const Tokenizer tok = json_tokenizer();
  auto trie = std::make_shared<const JsonTokenTrie>(tok);
  SamplingParams p;
  p.answer_constraint = AnswerConstraint{};
  p.answer_constraint->json_object = true;
  p.answer_constraint->lead_open = 8;  // "a" opens the span here, "1" closes it
  p.answer_constraint->lead_close = 9;
  const int vocab = static_cast<int>(tok.vocab_size());
  RequestSampler s(p, {}, {1}, &tok, vocab, 0, trie);
  std::vector<float> zeros(static_cast<size_t>(vocab), 0.0f);
  const auto allowed = [&](const Ids& out) {
    Ids ids;
    const auto x = s.process(zeros, out);
    for (int i = 0; i < vocab; ++i) {
      if (x[static_cast<size_t>(i)] > -std::numeric_limits<float>::infinity()) ids.push_back(i);
    }
    return ids;
  };
  EXPECT_EQ(allowed({}), (Ids{2, 5, 8, kByte0 + '{'}));  // the object, or thinking first
  EXPECT_EQ(allowed(Ids{8, 11, 4}).size(), static_cast<size_t>(vocab));  // thinking: free
  EXPECT_EQ(allowed(Ids{8, 11, 9}), (Ids{2, 5, kByte0 + '{'}));          // then the object
  EXPECT_EQ(allowed(Ids{8, 11, 9, 2, 3}), (Ids{1}));
}

}  // namespace
}  // namespace gemmaserve
