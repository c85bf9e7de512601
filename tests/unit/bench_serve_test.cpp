// `bench serve`: the SSE parser at every split point, stream timing, numpy-compatible statistics,
// token-exact random prompts, ShareGPT parsing, and whole runs against a fake OpenAI server
// (library and CLI) with injected failures.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmath>
#include <fstream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "bench/serve_benchmark.h"
#include "bench/serve_dataset.h"
#include "bench/serve_metrics.h"
#include "bench/sse_client.h"
#include "core/error.h"
#include "test_support.h"
#include "tokenizer/tokenizer.h"

namespace gemmaserve::bench {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using testing::TempDir;

// ---------------------------------------------------------------------------------------------
// SSE parser

const std::string kStream =
    ": ping\r\n"
    "data: {\"a\":1}\n\n"
    "event: message\r\n"
    "data:{\"b\":2}\r\n"
    "\r\n"
    "data: line one\n"
    "data: line two\n"
    "id: 7\n"
    "\n"
    "data: cr only\r\r"
    "event: error\n"
    "data: {\"error\":{\"message\":\"boom\"}}\n\n"
    "data: [DONE]\n\n";

std::vector<SseEvent> expected_events() {
  return {{"", "{\"a\":1}"},
          {"message", "{\"b\":2}"},
          {"", "line one\nline two"},
          {"", "cr only"},
          {"error", "{\"error\":{\"message\":\"boom\"}}"},
          {"", "[DONE]"}};
}

void expect_events(const std::vector<SseEvent>& got, const std::string& context) {
  const std::vector<SseEvent> want = expected_events();
  ASSERT_EQ(got.size(), want.size()) << context;
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ(got[i].event, want[i].event) << context << " event " << i;
    EXPECT_EQ(got[i].data, want[i].data) << context << " event " << i;
  }
}

std::vector<SseEvent> parse_pieces(const std::vector<std::string_view>& pieces) {
  SseParser parser;
  std::vector<SseEvent> all;
  for (std::string_view piece : pieces) {
    for (SseEvent& e : parser.feed(piece)) all.push_back(std::move(e));
  }
  for (SseEvent& e : parser.finish()) all.push_back(std::move(e));
  return all;
}

TEST(SseParser, WholeStream) { expect_events(parse_pieces({kStream}), "whole"); }

TEST(SseParser, EverySplitPoint) {
  const std::string_view s = kStream;
  for (size_t cut = 0; cut <= s.size(); ++cut) {
    expect_events(parse_pieces({s.substr(0, cut), s.substr(cut)}), "cut " + std::to_string(cut));
  }
}

TEST(SseParser, EveryPairOfSplitPoints) {
  const std::string_view s = kStream;
  for (size_t a = 0; a <= s.size(); a += 3) {
    for (size_t b = a; b <= s.size(); ++b) {
      expect_events(parse_pieces({s.substr(0, a), s.substr(a, b - a), s.substr(b)}),
                    "cuts " + std::to_string(a) + "," + std::to_string(b));
    }
  }
}

TEST(SseParser, ByteByByte) {
  std::vector<std::string_view> bytes;
  const std::string_view s = kStream;
  for (size_t i = 0; i < s.size(); ++i) bytes.push_back(s.substr(i, 1));
  expect_events(parse_pieces(bytes), "bytes");
}

TEST(SseParser, FinalEventWithoutBlankLine) {
  auto events = parse_pieces({"data: {\"x\":1}\n\ndata: [DONE]"});
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[1].data, "[DONE]");
  events = parse_pieces({"data: a\n"});
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].data, "a");
  EXPECT_TRUE(parse_pieces({": only a comment\n\n\n"}).empty());
}

// ---------------------------------------------------------------------------------------------
// Stream reader: timings from known arrival times

std::string completion_chunk(const std::string& text) {
  return "data: " + json({{"choices", {{{"index", 0}, {"text", text}}}}}).dump() + "\n\n";
}
std::string chat_chunk(const json& delta) {
  return "data: " + json({{"choices", {{{"index", 0}, {"delta", delta}}}}}).dump() + "\n\n";
}
std::string usage_chunk(int prompt, int completion) {
  return "data: " +
         json({{"choices", json::array()},
               {"usage", {{"prompt_tokens", prompt}, {"completion_tokens", completion}}}})
             .dump() +
         "\n\n";
}

TEST(CompletionStreamReader, CompletionTimings) {
  CompletionStreamReader r(/*chat=*/false);
  r.on_bytes(completion_chunk("Hel"), 0.25);
  r.on_bytes(completion_chunk(""), 0.30);  // an empty text is no token
  r.on_bytes(completion_chunk("lo"), 0.40);
  const std::string third = completion_chunk(" world");
  r.on_bytes(third.substr(0, 10), 0.5);  // split chunk: completes at the later time
  r.on_bytes(third.substr(10), 0.70);
  r.on_bytes(usage_chunk(5, 3) + "data: [DONE]\n\n", 0.9);
  r.on_end(1.0);
  const RequestOutput out = r.result();
  ASSERT_TRUE(out.success) << out.error;
  EXPECT_EQ(out.generated_text, "Hello world");
  EXPECT_DOUBLE_EQ(out.ttft, 0.25);
  ASSERT_EQ(out.itl.size(), 2u);
  EXPECT_NEAR(out.itl[0], 0.15, 1e-12);
  EXPECT_NEAR(out.itl[1], 0.30, 1e-12);
  EXPECT_DOUBLE_EQ(out.latency, 0.70);  // the last token chunk, not the usage chunk
  EXPECT_EQ(out.output_tokens, 3);
  EXPECT_EQ(out.prompt_tokens, 5);
  EXPECT_EQ(out.content_chunks, 3);
  EXPECT_TRUE(r.saw_done());
}

TEST(CompletionStreamReader, ChatSkipsRoleChunkAndCountsReasoning) {
  CompletionStreamReader r(/*chat=*/true);
  r.on_bytes(chat_chunk({{"role", "assistant"}, {"content", ""}}), 0.1);
  r.on_bytes(chat_chunk({{"reasoning_content", "hmm"}}), 0.2);
  r.on_bytes(chat_chunk({{"content", "Hi"}}), 0.5);
  r.on_bytes("data: [DONE]\n\n", 0.6);
  const RequestOutput out = r.result();
  ASSERT_TRUE(out.success);
  EXPECT_DOUBLE_EQ(out.ttft, 0.2);
  ASSERT_EQ(out.itl.size(), 1u);
  EXPECT_NEAR(out.itl[0], 0.3, 1e-12);
  EXPECT_FALSE(out.output_tokens.has_value());
  EXPECT_EQ(out.content_chunks, 2);
}

TEST(CompletionStreamReader, Failures) {
  {
    CompletionStreamReader r(false);
    r.on_bytes(completion_chunk("a"), 0.1);
    r.on_bytes("data: {\"error\": {\"message\": \"out of KV cache\", \"code\": 500}}\n\n", 0.2);
    EXPECT_FALSE(r.result().success);
    EXPECT_NE(r.result().error.find("out of KV cache"), std::string::npos) << r.result().error;
  }
  {
    CompletionStreamReader r(false);
    r.on_bytes("event: error\ndata: {\"error\": {\"message\": \"bad\"}}\n\n", 0.1);
    EXPECT_NE(r.result().error.find("bad"), std::string::npos);
  }
  {
    CompletionStreamReader r(false);
    r.on_bytes("data: {not json\n\n", 0.1);
    EXPECT_NE(r.result().error.find("invalid JSON"), std::string::npos);
  }
  {
    CompletionStreamReader r(false);
    r.on_bytes(usage_chunk(3, 0) + "data: [DONE]\n\n", 0.1);
    EXPECT_FALSE(r.result().success);
    EXPECT_NE(r.result().error.find("Never received a valid chunk"), std::string::npos);
  }
}

TEST(ServerUrl, Parsing) {
  ServerUrl u = parse_server_url("http://127.0.0.1:8000");
  EXPECT_EQ(u.scheme_host_port, "http://127.0.0.1:8000");
  EXPECT_EQ(u.path_prefix, "");
  u = parse_server_url("https://api.example.com/prefix/");
  EXPECT_EQ(u.scheme_host_port, "https://api.example.com");
  EXPECT_EQ(u.path_prefix, "/prefix");
  EXPECT_THROW(parse_server_url("localhost:8000"), InputError);
  EXPECT_THROW(parse_server_url("ftp://x"), InputError);
}

// ---------------------------------------------------------------------------------------------
// Statistics, checked against numpy's results for the same numbers

TEST(ServeMetrics, NumpyPercentilesAndMoments) {
  // np.percentile([15, 20, 35, 40, 50], [0, 40, 50, 99, 100]) = [15, 29, 35, 49.6, 50]
  const std::vector<double> v = {50, 15, 40, 20, 35};
  EXPECT_DOUBLE_EQ(percentile(v, 0), 15.0);
  EXPECT_DOUBLE_EQ(percentile(v, 40), 29.0);
  EXPECT_DOUBLE_EQ(percentile(v, 50), 35.0);
  EXPECT_NEAR(percentile(v, 99), 49.6, 1e-12);
  EXPECT_DOUBLE_EQ(percentile(v, 100), 50.0);
  // np.percentile([1, 2, 3, 4], 99) = 3.97; np.median = 2.5
  EXPECT_NEAR(percentile({1, 2, 3, 4}, 99), 3.97, 1e-12);
  EXPECT_DOUBLE_EQ(median({4, 1, 3, 2}), 2.5);
  EXPECT_DOUBLE_EQ(median({3, 1, 2}), 2.0);
  // np.std([2, 4, 4, 4, 5, 5, 7, 9]) = 2.0 (population)
  EXPECT_DOUBLE_EQ(population_stddev({2, 4, 4, 4, 5, 5, 7, 9}), 2.0);
  EXPECT_DOUBLE_EQ(mean({2, 4, 4, 4, 5, 5, 7, 9}), 5.0);
  // vLLM's `values or 0`: an empty sample summarizes to zeros.
  EXPECT_EQ(percentile({}, 99), 0.0);
  EXPECT_EQ(median({}), 0.0);
  EXPECT_EQ(percentile_word(99), "99");
  EXPECT_EQ(percentile_word(99.9), "99.9");
}

TEST(ServeMetrics, TpotItlE2elArithmetic) {
  EXPECT_FALSE(time_per_output_token(1.0, 0.1, 1).valid);
  const Tpot t = time_per_output_token(1.0, 0.1, 10);
  ASSERT_TRUE(t.valid);
  EXPECT_NEAR(t.seconds, 0.1, 1e-12);

  RequestOutput a;  // 4 tokens: ttft 0.2, gaps 0.1, 0.1, 0.2 -> latency 0.6
  a.success = true;
  a.start_time = 0.0;
  a.ttft = 0.2;
  a.itl = {0.1, 0.1, 0.2};
  a.latency = 0.6;
  RequestOutput b;  // 2 tokens: ttft 0.4, gap 0.3 -> latency 0.7
  b.success = true;
  b.start_time = 0.5;
  b.ttft = 0.4;
  b.itl = {0.3};
  b.latency = 0.7;
  RequestOutput c;  // failed
  c.error = "HTTP 500";
  const BenchmarkMetrics m = calculate_metrics({a, b, c}, {10, 20, 30}, {4, 2, 0}, 2.0, {50, 99});
  EXPECT_EQ(m.completed, 2);
  EXPECT_EQ(m.failed, 1);
  EXPECT_EQ(m.total_input, 30);
  EXPECT_EQ(m.total_output, 6);
  EXPECT_DOUBLE_EQ(m.request_throughput, 1.0);
  EXPECT_DOUBLE_EQ(m.output_throughput, 3.0);
  EXPECT_DOUBLE_EQ(m.total_token_throughput, 18.0);
  EXPECT_NEAR(m.ttft.mean_ms, 300.0, 1e-9);
  // TPOT: a (0.6-0.2)/3, b (0.7-0.4)/1 -> mean (133.33 + 300) / 2
  EXPECT_NEAR(m.tpot.mean_ms, (400.0 / 3 + 300.0) / 2, 1e-9);
  // ITL pooled over requests: [0.1, 0.1, 0.2, 0.3]; np.percentile(..., 99) = 0.297
  EXPECT_NEAR(m.itl.mean_ms, 175.0, 1e-9);
  EXPECT_NEAR(m.itl.median_ms, 150.0, 1e-9);
  ASSERT_EQ(m.itl.percentiles_ms.size(), 2u);
  EXPECT_NEAR(m.itl.percentiles_ms[1].second, 297.0, 1e-9);
  EXPECT_NEAR(m.e2el.mean_ms, 650.0, 1e-9);
  EXPECT_NEAR(m.e2el.std_ms, 50.0, 1e-9);
  // [0, 0.6) and [0.5, 1.2) overlap.
  EXPECT_EQ(m.max_concurrent_requests, 2);
  // Token times 0.2, 0.3, 0.4, 0.6 (a) and 0.9, 1.2 (b): 5 in the first second.
  EXPECT_DOUBLE_EQ(m.max_output_tokens_per_s, 5.0);
}

TEST(ServeBenchmark, ArrivalOffsets) {
  EXPECT_EQ(arrival_offsets(3, INFINITY, 1.0, 0), std::vector<double>(3, 0.0));
  const std::vector<double> poisson = arrival_offsets(50, 10.0, 1.0, 7);
  ASSERT_EQ(poisson.size(), 50u);
  EXPECT_NEAR(poisson.back(), 5.0, 1e-9);  // rescaled to count / rate
  for (size_t i = 1; i < poisson.size(); ++i) EXPECT_GE(poisson[i], poisson[i - 1]);
  EXPECT_EQ(poisson, arrival_offsets(50, 10.0, 1.0, 7));
  const std::vector<double> uniform = arrival_offsets(4, 2.0, INFINITY, 0);
  EXPECT_NEAR(uniform[0], 0.5, 1e-12);
  EXPECT_NEAR(uniform[3], 2.0, 1e-12);
  EXPECT_THROW(arrival_offsets(4, 0.0, 1.0, 0), InputError);
  EXPECT_THROW(arrival_offsets(4, 1.0, 0.0, 0), InputError);
}

TEST(ServeBenchmark, RequestBodies) {
  ServeBenchmarkConfig c;
  c.model = "m";
  c.ignore_eos = true;
  c.extra_body = {{"temperature", 0.0}};
  SampleRequest r{"hi", 3, 16, "id-0"};
  json body = build_request_body(c, r);
  EXPECT_EQ(body["prompt"], "hi");
  EXPECT_EQ(body["max_tokens"], 16);
  EXPECT_EQ(body["stream"], true);
  EXPECT_EQ(body["stream_options"]["include_usage"], true);
  EXPECT_EQ(body["ignore_eos"], true);
  EXPECT_EQ(body["temperature"], 0.0);
  c.backend = "openai-chat";
  body = build_request_body(c, r);
  EXPECT_EQ(body["messages"][0]["role"], "user");
  EXPECT_EQ(body["messages"][0]["content"][0]["text"], "hi");
  EXPECT_EQ(body["max_completion_tokens"], 16);
  EXPECT_THROW(validate_backend("openai-chat", "/v1/completions"), InputError);
  EXPECT_THROW(validate_backend("tgi", "/generate"), InputError);
  EXPECT_NO_THROW(validate_backend("vllm", "/v1/completions"));
}

// ---------------------------------------------------------------------------------------------
// Random dataset: exact token counts with the real Gemma 4 vocabulary

TEST(RandomDataset, ExactLengthsWithGemma4Tokenizer) {
  GS_REQUIRE_SHARED(shared);
  const Tokenizer tok =
      Tokenizer::from_path(shared / "data/gemma4-tokenizer/ggml-vocab-gemma-4.gguf");
  for (int input_len : {2, 3, 17, 256, 1024}) {
    RandomDatasetOptions o;
    o.num_prompts = 12;
    o.input_len = input_len;
    o.output_len = 32;
    o.seed = static_cast<uint64_t>(input_len);
    o.request_id_prefix = "r-";
    const std::vector<SampleRequest> reqs = sample_random_requests(tok, o);
    ASSERT_EQ(reqs.size(), 12u);
    for (const SampleRequest& r : reqs) {
      EXPECT_EQ(r.prompt_len, input_len);
      EXPECT_EQ(tok.encode(r.prompt, true, false).size(), static_cast<size_t>(input_len))
          << "input_len " << input_len;
      EXPECT_EQ(r.expected_output_len, 32);
    }
    EXPECT_EQ(reqs[3].request_id, "r-3");
  }
}

TEST(RandomDataset, RangeRatioPrefixAndSeeds) {
  GS_REQUIRE_SHARED(shared);
  const Tokenizer tok =
      Tokenizer::from_path(shared / "data/gemma4-tokenizer/ggml-vocab-gemma-4.gguf");
  RandomDatasetOptions o;
  o.num_prompts = 40;
  o.input_len = 101;  // 100 sampled tokens + BOS
  o.output_len = 128;
  o.range_ratio = 0.5;
  o.prefix_len = 7;
  const std::vector<SampleRequest> reqs = sample_random_requests(tok, o);
  std::string shared_prefix;
  for (const SampleRequest& r : reqs) {
    EXPECT_EQ(tok.encode(r.prompt, true, false).size(), static_cast<size_t>(r.prompt_len));
    EXPECT_GE(r.prompt_len, 7 + 50 + 1);
    EXPECT_LE(r.prompt_len, 7 + 150 + 1);
    EXPECT_GE(r.expected_output_len, 64);
    EXPECT_LE(r.expected_output_len, 192);
  }
  // Deterministic per seed, different across seeds.
  EXPECT_EQ(sample_random_requests(tok, o)[5].prompt, reqs[5].prompt);
  o.seed = 1;
  EXPECT_NE(sample_random_requests(tok, o)[5].prompt, reqs[5].prompt);
  // No prompt can be empty.
  o.input_len = 1;
  o.prefix_len = 0;
  o.range_ratio = 0.0;
  EXPECT_THROW(sample_random_requests(tok, o), InputError);
  o.input_len = 10;
  o.range_ratio = 1.0;
  EXPECT_THROW(sample_random_requests(tok, o), InputError);
}

TEST(RandomDataset, WordPromptsFittedByCounter) {
  // A counter where every word is one token and specials add one.
  const TokenCounter words = [](const std::string& text, bool add_special) {
    int n = 0;
    bool in_word = false;
    for (char c : text) {
      if (c != ' ' && !in_word) ++n;
      in_word = c != ' ';
    }
    return n + (add_special ? 1 : 0);
  };
  RandomDatasetOptions o;
  o.num_prompts = 5;
  o.input_len = 33;
  o.output_len = 8;
  for (const SampleRequest& r : sample_random_text_requests(o, &words)) {
    EXPECT_EQ(r.prompt_len, 33);
    EXPECT_EQ(words(r.prompt, true), 33);
  }
  EXPECT_EQ(sample_random_text_requests(o, nullptr).size(), 5u);
}

// ---------------------------------------------------------------------------------------------
// ShareGPT files

fs::path write_file(const fs::path& path, const std::string& text) {
  std::ofstream(path) << text;
  return path;
}

// One token per word plus one for BOS when specials are added.
int count_words(const std::string& text, bool add_special) {
  int n = 0;
  bool in_word = false;
  for (char c : text) {
    if (c != ' ' && !in_word) ++n;
    in_word = c != ' ';
  }
  return n + (add_special ? 1 : 0);
}

json conversation(const std::string& human, const std::string& gpt) {
  return {{"id", "x"},
          {"conversations",
           {{{"from", "human"}, {"value", human}}, {{"from", "gpt"}, {"value", gpt}}}}};
}

TEST(ShareGpt, ParsesFiltersAndOversamples) {
  TempDir tmp;
  json data = json::array();
  data.push_back(conversation("one two three four", "a b c d e f"));  // prompt 5, output 7
  data.push_back(conversation("hi", "a b c d e"));                    // prompt 2: too short
  data.push_back(conversation("five six seven eight nine", "x y"));   // output 3: too short
  data.push_back({{"id", "lonely"}, {"conversations", {{{"from", "human"}, {"value", "q"}}}}});
  data.push_back({{"id", "no conversations"}});
  const fs::path path = write_file(tmp.path() / "sg.json", data.dump());
  const std::vector<ShareGptEntry> entries = load_sharegpt(path);
  ASSERT_EQ(entries.size(), 3u);  // the one-turn and turn-less entries are skipped
  EXPECT_EQ(entries[0].prompt, "one two three four");

  ShareGptOptions o;
  o.num_prompts = 4;
  o.request_id_prefix = "s-";
  std::vector<SampleRequest> reqs = sample_sharegpt_requests(entries, o, count_words);
  ASSERT_EQ(reqs.size(), 4u);  // one kept conversation, oversampled to 4
  for (size_t i = 0; i < reqs.size(); ++i) {
    EXPECT_EQ(reqs[i].prompt, "one two three four");
    EXPECT_EQ(reqs[i].prompt_len, 5);
    EXPECT_EQ(reqs[i].expected_output_len, 7);
    EXPECT_EQ(reqs[i].request_id, "s-" + std::to_string(i));
  }
  o.no_oversample = true;
  EXPECT_EQ(sample_sharegpt_requests(entries, o, count_words).size(), 1u);
  // --sharegpt-output-len lifts the reply-length filter and sets max_tokens.
  o.output_len = 3;
  o.disable_shuffle = true;
  reqs = sample_sharegpt_requests(entries, o, count_words);
  ASSERT_EQ(reqs.size(), 2u);
  EXPECT_EQ(reqs[1].prompt, "five six seven eight nine");
  EXPECT_EQ(reqs[1].expected_output_len, 3);
}

std::string load_error(const fs::path& path) {
  try {
    load_sharegpt(path);
  } catch (const InputError& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(ShareGpt, BadFilesGiveClearErrors) {
  TempDir tmp;
  const fs::path missing = tmp.path() / "missing.json";
  EXPECT_NE(load_error(missing).find("cannot read " + missing.string()), std::string::npos);
  const fs::path broken = write_file(tmp.path() / "broken.json", "[{\"conversations\": [");
  EXPECT_NE(load_error(broken).find("is not valid JSON"), std::string::npos) << load_error(broken);
  const fs::path object = write_file(tmp.path() / "object.json", "{\"conversations\": []}");
  EXPECT_NE(load_error(object).find("must hold a JSON array"), std::string::npos);
  const fs::path bad_conv =
      write_file(tmp.path() / "bad_conv.json", "[{\"conversations\": \"hello\"}]");
  EXPECT_NE(load_error(bad_conv).find("entry 0: \"conversations\" must be an array"),
            std::string::npos)
      << load_error(bad_conv);
  const fs::path bad_value = write_file(
      tmp.path() / "bad_value.json",
      "[{\"conversations\": [{\"from\": \"human\", \"value\": \"q\"}, {\"from\": \"gpt\"}]}]");
  EXPECT_NE(load_error(bad_value).find("conversations[1] needs a string \"value\""),
            std::string::npos)
      << load_error(bad_value);
  const fs::path empty = write_file(tmp.path() / "empty.json", "[]");
  EXPECT_NE(load_error(empty).find("no conversation with at least two turns"), std::string::npos);
  // Everything filtered out by length.
  ShareGptOptions o;
  o.num_prompts = 2;
  EXPECT_THROW(sample_sharegpt_requests({{"a", "b"}}, o, count_words), InputError);
}

// ---------------------------------------------------------------------------------------------
// A fake OpenAI server: streams `max_tokens` chunks ("tok ") 2 ms apart, each split across two
// writes, then usage and [DONE]. A prompt containing "http-fail" gets HTTP 500; "stream-fail"
// gets an error chunk after two tokens.

class FakeOpenAiServer {
 public:
  FakeOpenAiServer() {
    server_.Get("/v1/models", [](const httplib::Request&, httplib::Response& res) {
      res.set_content(R"({"object":"list","data":[{"id":"fake-model","root":"fake-root"}]})",
                      "application/json");
    });
    server_.Post("/tokenize", [](const httplib::Request& req, httplib::Response& res) {
      const json body = json::parse(req.body);
      const int n =
          count_words(body["prompt"].get<std::string>(), body.value("add_special_tokens", true));
      res.set_content(json({{"count", n}, {"max_model_len", 4096}}).dump(), "application/json");
    });
    auto stream = [this](bool chat) {
      return [this, chat](const httplib::Request& req, httplib::Response& res) {
        {
          std::lock_guard lock(mutex_);
          ++requests_;
          last_auth_ = req.get_header_value("Authorization");
        }
        const json body = json::parse(req.body);
        const std::string prompt =
            chat ? body["messages"][0]["content"][0]["text"].get<std::string>()
                 : body["prompt"].get<std::string>();
        if (prompt.find("http-fail") != std::string::npos) {
          res.status = 500;
          res.set_content(R"({"error":{"message":"injected failure","code":500}})",
                          "application/json");
          return;
        }
        const bool fail_mid = prompt.find("stream-fail") != std::string::npos;
        const int tokens = body.value(chat ? "max_completion_tokens" : "max_tokens", 4);
        const int prompt_tokens = count_words(prompt, true);
        res.set_chunked_content_provider("text/event-stream", [=](size_t, httplib::DataSink& sink) {
          auto send = [&sink](const std::string& event) {
            const size_t half = event.size() / 2;
            sink.write(event.data(), half);
            sink.write(event.data() + half, event.size() - half);
          };
          if (chat) send(chat_chunk({{"role", "assistant"}, {"content", ""}}));
          for (int i = 0; i < tokens; ++i) {
            std::this_thread::sleep_for(std::chrono::milliseconds(2));
            if (fail_mid && i == 2) {
              send("data: {\"error\": {\"message\": \"injected stream error\"}}\n\n");
              break;
            }
            send(chat ? chat_chunk({{"content", "tok "}}) : completion_chunk("tok "));
          }
          if (!fail_mid) send(usage_chunk(prompt_tokens, tokens));
          send("data: [DONE]\n\n");
          sink.done();
          return true;
        });
      };
    };
    server_.Post("/v1/completions", stream(false));
    server_.Post("/v1/chat/completions", stream(true));
    port_ = server_.bind_to_any_port("127.0.0.1");
    thread_ = std::thread([this] { server_.listen_after_bind(); });
  }
  ~FakeOpenAiServer() {
    server_.stop();
    thread_.join();
  }
  int port() const { return port_; }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }
  int requests() const {
    std::lock_guard lock(mutex_);
    return requests_;
  }
  std::string last_auth() const {
    std::lock_guard lock(mutex_);
    return last_auth_;
  }

 private:
  httplib::Server server_;
  int port_ = 0;
  std::thread thread_;
  mutable std::mutex mutex_;
  int requests_ = 0;
  std::string last_auth_;
};

std::vector<SampleRequest> fake_requests() {
  return {{"alpha beta", 3, 5, "q-0"},
          {"please http-fail now", 4, 5, "q-1"},
          {"gamma", 2, 3, "q-2"},
          {"a stream-fail here", 4, 6, "q-3"},
          {"delta epsilon zeta", 4, 1, "q-4"}};
}

TEST(ServeBenchmarkRun, AgainstFakeServerCompletions) {
  FakeOpenAiServer server;
  ServeBenchmarkConfig c;
  c.server = parse_server_url(server.url());
  c.model = "fake-model";
  c.api_key = "sekret";
  c.max_concurrency = 2;
  c.show_progress = false;
  c.percentile_metrics = {"ttft", "tpot", "itl", "e2el", "client_queue_time"};
  c.metric_percentiles = {50, 99};
  const ServeBenchmarkRun run = run_serve_benchmark(c, fake_requests(), nullptr);
  EXPECT_EQ(server.requests(), 5);
  EXPECT_EQ(server.last_auth(), "Bearer sekret");
  EXPECT_EQ(run.metrics.completed, 3);
  EXPECT_EQ(run.metrics.failed, 2);
  EXPECT_EQ(run.output_lens, (std::vector<int>{5, 0, 3, 0, 1}));
  EXPECT_EQ(run.metrics.total_output, 9);
  EXPECT_EQ(run.metrics.total_input, 3 + 2 + 4);  // usage.prompt_tokens of the successes
  EXPECT_NE(run.outputs[1].error.find("HTTP 500: injected failure"), std::string::npos)
      << run.outputs[1].error;
  EXPECT_NE(run.outputs[3].error.find("injected stream error"), std::string::npos);
  EXPECT_EQ(run.outputs[0].generated_text, "tok tok tok tok tok ");
  EXPECT_EQ(run.outputs[0].itl.size(), 4u);
  EXPECT_EQ(run.outputs[4].itl.size(), 0u);
  for (const RequestOutput& o : run.outputs) {
    if (!o.success) continue;
    EXPECT_GT(o.ttft, 0.0);
    EXPECT_GE(o.latency, o.ttft);
    for (double gap : o.itl) EXPECT_GE(gap, 0.0);
  }
  EXPECT_LE(run.metrics.max_concurrent_requests, 2);
  EXPECT_GT(run.duration, 0.0);

  const std::string report = format_report(c, run);
  EXPECT_NE(report.find("============ Serving Benchmark Result ============\n"), std::string::npos)
      << report;
  EXPECT_NE(report.find("Successful requests:                     3         \n"), std::string::npos)
      << report;
  EXPECT_NE(report.find("Failed requests:                         2         \n"),
            std::string::npos);
  EXPECT_NE(report.find("Error 0: HTTP 500: injected failure"), std::string::npos);
  EXPECT_NE(report.find("Maximum request concurrency:             2"), std::string::npos);
  EXPECT_NE(report.find("---------------Time to First Token----------------\n"), std::string::npos)
      << report;
  EXPECT_NE(report.find("P50 TTFT (ms):"), std::string::npos);
  EXPECT_NE(report.find("-----Time per Output Token (excl. 1st token)------\n"), std::string::npos);
  EXPECT_NE(report.find("Mean E2EL (ms):"), std::string::npos);
  EXPECT_NE(report.find("P99 Client Queue Time (ms):"), std::string::npos);
  EXPECT_EQ(report.substr(report.size() - 51), std::string(50, '=') + "\n");

  const nlohmann::ordered_json saved = result_json(c, run, {{"backend", "openai"}}, true);
  EXPECT_EQ(saved.begin().key(), "backend");
  EXPECT_EQ(saved["completed"], 3);
  EXPECT_EQ(saved["failed"], 2);
  EXPECT_EQ(saved["total_output_tokens"], 9);
  EXPECT_EQ(saved["output_lens"].size(), 5u);
  EXPECT_EQ(saved["errors"][1], run.outputs[1].error);
  EXPECT_EQ(saved["itls"][0].size(), 4u);
  for (const char* key :
       {"mean_ttft_ms", "median_ttft_ms", "std_ttft_ms", "p99_ttft_ms", "p50_tpot_ms",
        "mean_itl_ms", "p99_e2el_ms", "mean_client_queue_time_ms"}) {
    EXPECT_TRUE(saved.contains(key)) << key;
  }
  const nlohmann::ordered_json brief = result_json(c, run, {}, false);
  EXPECT_FALSE(brief.contains("ttfts"));
  EXPECT_TRUE(brief.contains("latencies"));
}

TEST(ServeBenchmarkRun, AgainstFakeServerChatWithoutUsage) {
  FakeOpenAiServer server;
  ServeBenchmarkConfig c;
  c.backend = "openai-chat";
  c.endpoint = "/v1/chat/completions";
  c.server = parse_server_url(server.url());
  c.model = "fake-model";
  c.show_progress = false;
  c.request_rate = 200.0;
  const std::vector<SampleRequest> reqs = {{"one two", 3, 4, "c-0"}, {"three", 2, 2, "c-1"}};
  const ServeBenchmarkRun run = run_serve_benchmark(c, reqs, nullptr);
  ASSERT_EQ(run.metrics.completed, 2) << run.outputs[0].error;
  EXPECT_EQ(run.outputs[0].generated_text, "tok tok tok tok ");
  EXPECT_EQ(run.outputs[0].itl.size(), 3u);  // the role-only chunk is no token
  EXPECT_EQ(run.metrics.total_output, 6);
}

// A local port nothing listens on: bound to port 0 to learn a free number, then closed.
int closed_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t len = sizeof(addr);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    ::close(fd);
    return 1;
  }
  ::close(fd);
  return ntohs(addr.sin_port);
}

TEST(ServeBenchmarkRun, ConnectionRefusedIsAFailedRequest) {
  const int port = closed_port();
  ServeBenchmarkConfig c;
  c.server = parse_server_url("http://127.0.0.1:" + std::to_string(port));
  c.model = "m";
  c.show_progress = false;
  c.request_timeout = std::chrono::seconds(20);
  const ServeBenchmarkRun run = run_serve_benchmark(c, {{"x", 2, 2, "r-0"}}, nullptr);
  EXPECT_EQ(run.metrics.failed, 1);
  EXPECT_NE(run.outputs[0].error.find("connection error"), std::string::npos)
      << run.outputs[0].error;
  EXPECT_NE(format_report(c, run).find("WARNING: All requests failed."), std::string::npos);
}

// ---------------------------------------------------------------------------------------------
// The CLI end to end

TEST(BenchServeCli, ShareGptAgainstFakeServerSavesVllmJson) {
  FakeOpenAiServer server;
  TempDir tmp;
  json data = json::array();
  data.push_back(conversation("alpha beta gamma delta", "w w w w w"));
  data.push_back(conversation("please http-fail now ok", "w w w w w"));
  data.push_back(conversation("one two three four five", "w w w w w w w"));
  const fs::path dataset = write_file(tmp.path() / "sg.json", data.dump());
  const std::string cmd = testing::cli_binary().string() + " bench serve --port " +
                          std::to_string(server.port()) +
                          " --dataset-name sharegpt --dataset-path " + dataset.string() +
                          " --num-prompts 3 --disable-shuffle --max-concurrency 2"
                          " --temperature 0 --percentile-metrics ttft,tpot,itl,e2el"
                          " --metric-percentiles 50,90,99 --disable-tqdm --save-result"
                          " --save-detailed --result-dir " +
                          (tmp.path() / "results").string() + " --result-filename out.json 2>&1";
  const auto r = testing::run_command(cmd);
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_NE(r.out.find("First model name: fake-model, first model id: fake-root"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("counting tokens with the server's POST /tokenize"), std::string::npos);
  EXPECT_NE(r.out.find("Successful requests:                     2"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("Failed requests:                         1"), std::string::npos);
  EXPECT_NE(r.out.find("Error 0: HTTP 500: injected failure"), std::string::npos);
  EXPECT_NE(r.out.find("P90 ITL (ms):"), std::string::npos);
  EXPECT_NE(r.out.find("Median E2EL (ms):"), std::string::npos);

  std::ifstream in(tmp.path() / "results" / "out.json");
  ASSERT_TRUE(in.good());
  const json saved = json::parse(in);
  EXPECT_EQ(saved["backend"], "openai");
  EXPECT_EQ(saved["model_id"], "fake-model");
  EXPECT_EQ(saved["num_prompts"], 3);
  EXPECT_EQ(saved["request_rate"], "inf");
  EXPECT_EQ(saved["max_concurrency"], 2);
  EXPECT_EQ(saved["completed"], 2);
  EXPECT_EQ(saved["failed"], 1);
  // Output lengths are each reply's tokens with BOS (vLLM's count): 6 and 8.
  EXPECT_EQ(saved["output_lens"], json({6, 0, 8}));
  EXPECT_EQ(saved["total_output_tokens"], 14);
  EXPECT_EQ(saved["input_lens"], json({5, 5, 6}));
  EXPECT_EQ(saved["total_input_tokens"], 11);
  EXPECT_EQ(saved["ttfts"].size(), 3u);
  EXPECT_EQ(saved["itls"][2].size(), 7u);
  EXPECT_EQ(saved["errors"][0], "");
  EXPECT_NE(saved["errors"][1].get<std::string>().find("injected failure"), std::string::npos);
  for (const char* key : {"duration", "request_throughput", "output_throughput",
                          "total_token_throughput", "mean_ttft_ms", "median_ttft_ms", "p99_ttft_ms",
                          "p90_tpot_ms", "p50_itl_ms", "mean_e2el_ms"}) {
    EXPECT_TRUE(saved.contains(key)) << key;
  }
}

TEST(BenchServeCli, RandomPromptsWithTinyCheckpointTokenizer) {
  GS_REQUIRE_SHARED(shared);
  FakeOpenAiServer server;
  TempDir tmp;
  const std::string bin = testing::cli_binary().string();
  const fs::path model = tmp.path() / "tiny";
  auto r = testing::run_command(bin + " make-test-model --preset tiny --out " + model.string() +
                                " 2>&1");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  r = testing::run_command(bin + " export-tokenizer --from " +
                           (shared / "data/gemma4-tokenizer/ggml-vocab-gemma-4.gguf").string() +
                           " --out " + model.string() + " 2>&1");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  r = testing::run_command(bin + " bench serve --base-url " + server.url() +
                           " --model fake-model --tokenizer " + model.string() +
                           " --random-input-len 64 --random-output-len 6 --num-prompts 4"
                           " --request-rate 100 --burstiness 0.5 --disable-tqdm 2>&1");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_NE(r.out.find("Successful requests:                     4"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("Total generated tokens:                  24"), std::string::npos);
  EXPECT_NE(r.out.find("Request rate configured (RPS):           100.00"), std::string::npos);
  EXPECT_NE(r.out.find("Burstiness factor: 0.5 (Gamma distribution)"), std::string::npos);
  // The fake /tokenize counts words, not Gemma tokens: the first prompt shows the mismatch.
  EXPECT_NE(r.out.find("WARNING: tokenizer mismatch (server="), std::string::npos);
}

TEST(BenchServeCli, BadInputsExitWithClearErrors) {
  FakeOpenAiServer server;
  TempDir tmp;
  const std::string base = testing::cli_binary().string() + " bench serve --port " +
                           std::to_string(server.port()) + " --model m ";
  auto r = testing::run_command(base + "--dataset-name sharegpt --dataset-path " +
                                (tmp.path() / "nope.json").string() + " 2>&1");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.out.find("error: --dataset-path: cannot read"), std::string::npos) << r.out;
  r = testing::run_command(base + "--backend openai-chat --endpoint /v1/completions 2>&1");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.out.find("chat/completions"), std::string::npos) << r.out;
  r = testing::run_command(base + "--request-rate fast 2>&1");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.out.find("--request-rate expects a positive number or inf"), std::string::npos);
  r = testing::run_command(base + "--percentile-metrics ttft,foo 2>&1");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.out.find("unknown metric 'foo'"), std::string::npos);
  r = testing::run_command(testing::cli_binary().string() + " bench serve --help");
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_NE(r.out.find("usage: gemmaserve bench serve"), std::string::npos);
}

}  // namespace
}  // namespace gemmaserve::bench
