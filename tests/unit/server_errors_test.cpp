// The bad-input table against the real server: every request gets the exact status, OpenAI error
// type (and param where vLLM gives one), and the server stays healthy and keeps serving.
#include <gtest/gtest.h>

#include <future>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "server_test_support.h"
#include "test_support.h"

namespace gemmaserve::testing {
namespace {

using nlohmann::json;

constexpr const char* kKey = "test-secret";

struct BadRequest {
  BadRequest(std::string name_, std::string method_, std::string path_, std::string body_,
             int status_, std::string type_, std::optional<std::string> param_, bool auth_ = true,
             std::string message_part_ = "")
      : name(std::move(name_)),
        method(std::move(method_)),
        path(std::move(path_)),
        body(std::move(body_)),
        status(status_),
        type(std::move(type_)),
        param(std::move(param_)),
        auth(auth_),
        message_part(std::move(message_part_)) {}
  std::string name;
  std::string method;  // GET | POST
  std::string path;
  std::string body;
  int status;
  std::string type;
  std::optional<std::string> param;  // checked when set
  bool auth;
  std::string message_part;  // checked when non-empty
};

std::string chat(const std::string& extra) {
  std::string s = R"({"model":"gemma4","messages":[{"role":"user","content":"hi"}],"max_tokens":4)";
  if (!extra.empty()) s.append(",").append(extra);
  return s.append("}");
}
// A chat request whose one message holds text and an image part with this image_url value.
std::string image_chat(const std::string& image_url) {
  return R"({"model":"gemma4","max_tokens":4,"messages":[{"role":"user","content":[)"
         R"({"type":"text","text":"what is this?"},{"type":"image_url","image_url":)" +
         image_url + "}]}]}";
}
std::string completion(const std::string& extra) {
  std::string s = R"({"model":"gemma4","prompt":"hi","max_tokens":4)";
  if (!extra.empty()) s.append(",").append(extra);
  return s.append("}");
}

std::vector<BadRequest> bad_requests() {
  const std::string C = "/v1/completions", H = "/v1/chat/completions";
  const std::string png = "data:image/png;base64,iVBORw0KGgo=";
  std::string long_ids = "[";
  for (int i = 0; i < 300; ++i) {  // <bos> first: the model sees these 300 tokens, no more
    if (i > 0) long_ids += ",";
    long_ids += std::to_string(i == 0 ? 2 : 100 + i);
  }
  long_ids += "]";
  std::string invalid_utf8 = R"({"model":"gemma4","prompt":"a)";
  invalid_utf8 += "\xff\xfe";
  invalid_utf8 += R"(","max_tokens":2})";
  return {
      {"malformed json", "POST", C, "{not json", 400, "BadRequestError", std::nullopt},
      {"body not an object", "POST", C, "[1,2]", 400, "BadRequestError", std::nullopt},
      {"invalid utf-8", "POST", C, invalid_utf8, 400, "BadRequestError", std::nullopt},
      {"prompt missing", "POST", C, R"({"model":"gemma4"})", 400, "BadRequestError", "prompt"},
      {"prompt number", "POST", C, R"({"prompt":123})", 400, "BadRequestError", "prompt"},
      {"prompt empty", "POST", C, R"({"prompt":""})", 400, "BadRequestError", "prompt"},
      {"prompt empty list", "POST", C, R"({"prompt":[]})", 400, "BadRequestError", "prompt"},
      {"prompt mixed ids", "POST", C, R"({"prompt":[1,"a"]})", 400, "BadRequestError", "prompt"},
      {"prompt id out of vocab", "POST", C, R"({"prompt":[2,999999999]})", 400, "BadRequestError",
       "prompt"},
      {"max_tokens string", "POST", C, completion(R"("max_tokens":"abc")"), 400, "BadRequestError",
       "max_tokens"},
      {"max_tokens negative", "POST", C, R"({"prompt":"hi","max_tokens":-1})", 400,
       "BadRequestError", "max_tokens"},
      {"max_tokens beyond context", "POST", C, R"({"prompt":"hi","max_tokens":100000})", 400,
       "BadRequestError", "max_tokens", true, "is too large: 100000"},
      {"max_tokens huge", "POST", C, R"({"prompt":"hi","max_tokens":1000000000000})", 400,
       "BadRequestError", "max_tokens"},
      {"prompt too long", "POST", C, R"({"prompt":)" + long_ids + R"(,"max_tokens":4})", 400,
       "BadRequestError", "input_tokens", true, "You passed 300 input tokens"},
      {"temperature negative", "POST", C, completion(R"("temperature":-1)"), 400, "BadRequestError",
       std::nullopt, true, "got -1.0"},
      {"temperature string", "POST", C, completion(R"("temperature":"hot")"), 400,
       "BadRequestError", "temperature"},
      {"top_p 2", "POST", C, completion(R"("top_p":2)"), 400, "BadRequestError", std::nullopt, true,
       "got 2.0"},
      {"top_k -5", "POST", C, completion(R"("top_k":-5)"), 400, "BadRequestError", std::nullopt},
      {"n 0", "POST", C, completion(R"("n":0)"), 400, "BadRequestError", std::nullopt},
      {"presence_penalty 5", "POST", C, completion(R"("presence_penalty":5)"), 400,
       "BadRequestError", std::nullopt, true, "got 5.0"},
      {"min_tokens over max_tokens", "POST", C, completion(R"("min_tokens":10)"), 400,
       "BadRequestError", std::nullopt},
      {"logprobs below -1", "POST", C, completion(R"("logprobs":-2)"), 400, "BadRequestError",
       "logprobs", true, "`logprobs` must be a positive value or -1."},
      {"logit_bias bad key", "POST", C, completion(R"("logit_bias":{"abc":1})"), 400,
       "BadRequestError", "logit_bias"},
      {"logit_bias out of vocab", "POST", C, completion(R"("logit_bias":{"99999999":1})"), 400,
       "BadRequestError", std::nullopt},
      {"logit_bias list", "POST", C, completion(R"("logit_bias":[1,2])"), 400, "BadRequestError",
       "logit_bias"},
      {"stop number", "POST", C, completion(R"("stop":5)"), 400, "BadRequestError", "stop"},
      {"stop empty string", "POST", C, completion(R"("stop":[""])"), 400, "BadRequestError",
       std::nullopt},
      {"stream_options without stream", "POST", C,
       completion(R"("stream_options":{"include_usage":true})"), 400, "BadRequestError",
       "stream_options"},
      {"prompt_logprobs with stream", "POST", C, completion(R"("stream":true,"prompt_logprobs":1)"),
       400, "BadRequestError", "prompt_logprobs"},
      {"best_of below n", "POST", C, completion(R"("n":2,"best_of":1)"), 400, "BadRequestError",
       "best_of"},
      {"suffix", "POST", C, completion(R"("suffix":"x")"), 400, "BadRequestError", "suffix"},
      {"beam search", "POST", C, completion(R"("use_beam_search":true)"), 501,
       "NotImplementedError", std::nullopt},
      {"json_schema without a schema", "POST", C,
       completion(R"("response_format":{"type":"json_schema","json_schema":{"name":"x"}})"), 400,
       "BadRequestError", "response_format", true,
       "response_format.json_schema.schema: Field required"},
      {"json_schema with an unsupported keyword", "POST", C,
       completion(
           R"("response_format":{"type":"json_schema","json_schema":{"name":"x","schema":{"type":"integer","multipleOf":3}}})"),
       400, "BadRequestError", std::nullopt, true,
       "unsupported JSON Schema keyword(s): multipleOf"},
      {"two structured outputs", "POST", H,
       chat(R"("structured_outputs":{"regex":"a"},"guided_choice":["a"])"), 400, "BadRequestError",
       "structured_outputs", true,
       "You can only use one kind of structured outputs constraint but multiple are specified "
       "(structured_outputs, guided_choice)."},
      {"structured_outputs without a kind", "POST", C, completion(R"("structured_outputs":{})"),
       400, "BadRequestError", "structured_outputs", true,
       "You must use one kind of structured outputs constraint but none are specified."},
      {"bad guided_regex", "POST", C, completion(R"("guided_regex":"a(b")"), 400, "BadRequestError",
       std::nullopt, true, "invalid regex at position 3: missing ), unterminated subpattern"},
      {"bad guided_grammar", "POST", H, chat(R"("guided_grammar":"start ::= \"a\"")"), 400,
       "BadRequestError", std::nullopt, true, "invalid grammar: the grammar has no 'root' rule"},
      {"guided_choice not strings", "POST", C, completion(R"("guided_choice":[1])"), 400,
       "BadRequestError", "guided_choice", true,
       "guided_choice: Input should be a non-empty list of strings"},
      {"structural_tag", "POST", C,
       completion(R"("response_format":{"type":"structural_tag","format":{}})"), 501,
       "NotImplementedError", std::nullopt},
      {"json_object with a forced tool call", "POST", H,
       chat(
           R"("tools":[{"type":"function","function":{"name":"f"}}],"tool_choice":"required","response_format":{"type":"json_object"})"),
       400, "BadRequestError", "response_format", true,
       "You can only either use constraints for structured outputs or tools, not both."},
      {"unknown model", "POST", C, R"({"model":"nope","prompt":"hi"})", 404, "NotFoundError",
       "model", true, "The model `nope` does not exist."},
      {"chat unknown model", "POST", H,
       R"({"model":"nope","messages":[{"role":"user","content":"x"}]})", 404, "NotFoundError",
       "model"},
      {"messages missing", "POST", H, R"({"model":"gemma4"})", 400, "BadRequestError", "messages"},
      {"messages empty", "POST", H, R"({"messages":[]})", 400, "BadRequestError", "messages"},
      {"messages string", "POST", H, R"({"messages":"hi"})", 400, "BadRequestError", "messages"},
      {"message without role", "POST", H, R"({"messages":[{"content":"hi"}]})", 400,
       "BadRequestError", "messages"},
      {"content number", "POST", H, R"({"messages":[{"role":"user","content":5}]})", 400,
       "BadRequestError", "messages"},
      {"image url scheme", "POST", H, image_chat(R"({"url":"ftp://x/y.png"})"), 400,
       "BadRequestError", "messages", true, "The URL must be either a HTTP, data or file URL."},
      {"image url not an object", "POST", H, image_chat(R"("data:image/png;base64,AAAA")"), 400,
       "BadRequestError", "messages", true,
       "image_url content parts need image_url.url (a string)"},
      {"image detail unknown", "POST", H, image_chat(R"({"url":")" + png + R"(","detail":"x"})"),
       400, "BadRequestError", "messages", true,
       "image_url.detail: Input should be 'auto', 'low' or 'high'"},
      {"corrupt image", "POST", H, image_chat(R"({"url":")" + png + R"("})"), 400,
       "BadRequestError", "messages", true, "invalid PNG image: "},
      {"image not base64", "POST", H, image_chat(R"({"url":"data:image/png;base64,@@@@"})"), 400,
       "BadRequestError", "messages", true,
       "Invalid image data URL: the data is not valid base64."},
      {"data url not an image", "POST", H,
       image_chat(R"({"url":"data:text/plain;base64,aGVsbG8="})"), 400, "BadRequestError",
       "messages", true, "Invalid image data URL: media type 'text/plain' is not an image type"},
      {"file url without allowed path", "POST", H, image_chat(R"({"url":"file:///etc/hostname"})"),
       400, "BadRequestError", "messages", true,
       "Cannot load local files without `--allowed-local-media-path`."},
      {"mm_processor_kwargs budget", "POST", H,
       chat(R"("mm_processor_kwargs":{"max_soft_tokens":100})"), 400, "BadRequestError",
       "mm_processor_kwargs", true,
       "`max_soft_tokens` must be one of (70, 140, 280, 560, 1120), got 100."},
      {"mm_processor_kwargs list", "POST", H, chat(R"("mm_processor_kwargs":[1])"), 400,
       "BadRequestError", "mm_processor_kwargs"},
      {"tools not a list", "POST", H, chat(R"("tools":"x")"), 400, "BadRequestError", "tools"},
      {"tool without function", "POST", H, chat(R"("tools":[{"type":"function"}])"), 400,
       "BadRequestError", "tools"},
      {"tool name number", "POST", H,
       chat(R"("tools":[{"type":"function","function":{"name":5}}])"), 400, "BadRequestError",
       "tools"},
      {"tool parameters not object", "POST", H,
       chat(R"("tools":[{"type":"function","function":{"name":"f","parameters":"x"}}])"), 400,
       "BadRequestError", "tools"},
      {"tool_choice unknown", "POST", H, chat(R"("tool_choice":"sometimes")"), 400,
       "BadRequestError", "tool_choice"},
      {"tool_choice auto without tools", "POST", H, chat(R"("tool_choice":"auto")"), 400,
       "BadRequestError", "tool_choice"},
      {"named tool not passed", "POST", H,
       chat(
           R"("tools":[{"type":"function","function":{"name":"f"}}],"tool_choice":{"type":"function","function":{"name":"g"}})"),
       400, "BadRequestError", "tool_choice"},
      {"top_logprobs without logprobs", "POST", H, chat(R"("top_logprobs":2)"), 400,
       "BadRequestError", "top_logprobs"},
      {"untrusted chat_template", "POST", H, chat(R"("chat_template":"{{ messages }}")"), 400,
       "BadRequestError", "chat_template"},
      {"both generation flags", "POST", H,
       chat(R"("add_generation_prompt":true,"continue_final_message":true)"), 400,
       "BadRequestError", "continue_final_message"},
      {"unknown reasoning_effort", "POST", H, chat(R"("reasoning_effort":"extreme")"), 400,
       "BadRequestError", std::nullopt},
      {"chat_template_kwargs string", "POST", H, chat(R"("chat_template_kwargs":"x")"), 400,
       "BadRequestError", "chat_template_kwargs"},
      {"max_completion_tokens negative", "POST", H, chat(R"("max_completion_tokens":-3)"), 400,
       "BadRequestError", "max_completion_tokens"},
      {"deeply nested json", "POST", C, std::string(5000, '[') + std::string(5000, ']'), 400,
       "BadRequestError", std::nullopt, true, "nesting"},
      {"logprobs over --max-logprobs", "POST", C, completion(R"("logprobs":25)"), 400,
       "BadRequestError", std::nullopt, true, "greater than max allowed: 20"},
      {"top_logprobs -1 over --max-logprobs", "POST", H,
       chat(R"("logprobs":true,"top_logprobs":-1)"), 400, "BadRequestError", std::nullopt},
      {"n over 128", "POST", C, completion(R"("n":100000)"), 400, "BadRequestError", "n"},
      {"empty tools", "POST", H, chat(R"("tools":[])"), 400, "BadRequestError", "tools"},
      {"logprob_token_ids", "POST", C, completion(R"("logprob_token_ids":[5])"), 501,
       "NotImplementedError", std::nullopt},
      {"unknown endpoint", "POST", "/v1/nothing", "{}", 404, "Not Found", std::nullopt},
      {"wrong method", "GET", C, "", 405, "Method Not Allowed", std::nullopt},
      {"post to models", "POST", "/v1/models", "{}", 405, "Method Not Allowed", std::nullopt},
      {"detokenize bad ids", "POST", "/detokenize", R"({"tokens":[-4]})", 400, "BadRequestError",
       "tokens"},
      {"tokenize without prompt", "POST", "/tokenize", R"({"x":1})", 400, "BadRequestError",
       "prompt"},
      {"tokenize both generation flags", "POST", "/tokenize",
       R"({"messages":[{"role":"user","content":"x"}],"add_generation_prompt":true,"continue_final_message":true})",
       400, "BadRequestError", "continue_final_message", true,
       "Cannot set both `continue_final_message` and `add_generation_prompt` to True."},
      {"tokenize untrusted chat_template", "POST", "/tokenize",
       R"({"messages":[{"role":"user","content":"x"}],"chat_template":"{{ messages }}"})", 400,
       "BadRequestError", "chat_template", true, "Refused request with untrusted chat template."},
      {"detokenize unknown model", "POST", "/detokenize", R"({"model":"nope","tokens":[2]})", 404,
       "NotFoundError", "model", true, "The model `nope` does not exist."},
  };
}

class ServerErrorsTest : public TinyChatServerTest<ServerErrorsTest> {
 public:
  static std::vector<std::string> server_flags() {
    return {
        "--served-model-name", "gemma4", "other-name", "--api-key", kKey, "--max-request-size-mb",
        "1", "--max-model-len", "256", "--kv-cache-memory-bytes", "64M",
        // vLLM's GPU-only hints (one warning each) and values that are gemmaserve's behaviour.
        "--trust-remote-code", "-pp", "1", "--enforce-eager", "--compilation-config",
        R"({"cudagraph_mode": "FULL_DECODE_ONLY"})", "--dtype", "auto", "--enable-auto-tool-choice",
        "--tool-call-parser", "gemma4", "--reasoning-parser", "gemma4"};
  }

 protected:
  static httplib::Result send(const std::string& method, const std::string& path,
                              const std::string& body, bool auth) {
    httplib::Client c("127.0.0.1", server_->port());
    c.set_read_timeout(120, 0);
    httplib::Headers headers;
    if (auth) headers.emplace("Authorization", std::string("Bearer ") + kKey);
    if (method == "GET") return c.Get(path.c_str(), headers);
    return c.Post(path.c_str(), headers, body, "application/json");
  }
};

TEST_F(ServerErrorsTest, EveryBadRequestGetsItsErrorAndTheServerStaysHealthy) {
  const auto cases = bad_requests();
  ASSERT_GE(cases.size(), 40u);
  for (const BadRequest& bc : cases) {
    SCOPED_TRACE(bc.name);
    auto r = send(bc.method, bc.path, bc.body, bc.auth);
    ASSERT_TRUE(r) << "no response";
    EXPECT_EQ(r->status, bc.status) << r->body;
    json body = json::parse(r->body, nullptr, false);
    ASSERT_TRUE(body.is_object() && body.contains("error")) << r->body;
    const json& e = body["error"];
    EXPECT_EQ(e["type"], bc.type) << r->body;
    EXPECT_EQ(e["code"], bc.status);
    EXPECT_TRUE(e["message"].is_string() && !e["message"].get<std::string>().empty());
    ASSERT_TRUE(e.contains("param"));
    if (bc.param) {
      EXPECT_EQ(e["param"], *bc.param) << r->body;
    }
    if (!bc.message_part.empty()) {
      EXPECT_NE(e["message"].get<std::string>().find(bc.message_part), std::string::npos)
          << r->body;
    }
    auto health = send("GET", "/health", "", false);
    ASSERT_TRUE(health && health->status == 200) << "server unhealthy after " << bc.name;
  }
  EXPECT_TRUE(server_->running());
  // Still serving real requests, under either served name.
  for (const char* name : {"gemma4", "other-name"}) {
    auto ok =
        send("POST", "/v1/completions",
             std::string(R"({"model":")") + name + R"(","prompt":"hi","max_tokens":3})", true);
    ASSERT_TRUE(ok);
    EXPECT_EQ(ok->status, 200) << ok->body;
  }
}

TEST_F(ServerErrorsTest, GpuOnlyHintsGetOneWarningEachAndNothingSaysIgnored) {
  const std::string log = server_->log_text();
  const auto count = [&log](const std::string& part) {
    size_t n = 0;
    for (size_t at = log.find(part); at != std::string::npos; at = log.find(part, at + 1)) ++n;
    return n;
  };
  EXPECT_EQ(count("--enforce-eager: turns off CUDA graphs"), 1u) << log;
  EXPECT_EQ(count("--trust-remote-code: lets Hugging Face run"), 1u) << log;
  EXPECT_EQ(count("--compilation-config: torch.compile"), 1u) << log;
  EXPECT_EQ(count("accepted for vLLM compatibility"), 0u) << log;
  EXPECT_EQ(count("--pipeline-parallel-size"), 0u) << log;  // 1 is gemmaserve's behaviour
  EXPECT_NE(log.find("stop token ids [1,50,106]"), std::string::npos);
}

TEST_F(ServerErrorsTest, BodyOverTheLimitIs413) {
  std::string body = R"({"prompt":")" + std::string(size_t{2} << 20, 'a') + R"("})";
  auto r = send("POST", "/v1/completions", body, true);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 413);
  auto health = send("GET", "/health", "", false);
  ASSERT_TRUE(health && health->status == 200);
}

TEST_F(ServerErrorsTest, WrongApiKeyIs401AndHealthNeedsNone) {
  httplib::Client c("127.0.0.1", server_->port());
  for (const httplib::Headers& h :
       {httplib::Headers{{"Authorization", "Bearer wrong"}}, httplib::Headers{}}) {
    auto r = c.Get("/v1/models", h);
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 401);
    EXPECT_EQ(r->body, R"({"error":"Unauthorized"})");  // vLLM's body, byte for byte
  }
  auto models = send("GET", "/v1/models", "", true);
  ASSERT_TRUE(models);
  ASSERT_EQ(models->status, 200);
  json m = json::parse(models->body);
  EXPECT_EQ(m["object"], "list");
  ASSERT_EQ(m["data"].size(), 2u);
  EXPECT_EQ(m["data"][0]["id"], "gemma4");
  EXPECT_EQ(m["data"][0]["max_model_len"], 256);
  EXPECT_EQ(m["data"][0]["owned_by"], "vllm");
  auto version = c.Get("/version");
  ASSERT_TRUE(version && version->status == 200);
  EXPECT_TRUE(json::parse(version->body).contains("version"));
}

TEST_F(ServerErrorsTest, ErrorAfterValidationIsNeverAStreamWithoutDone) {
  // A streamed request that is fine ends with [DONE] and no error event.
  auto r = send("POST", "/v1/completions", completion(R"("stream":true)"), true);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_NE(r->body.find("data: [DONE]\n\n"), std::string::npos);
  EXPECT_EQ(r->body.find("\"error\""), std::string::npos);
}

}  // namespace
}  // namespace gemmaserve::testing

namespace gemmaserve::testing {
namespace {

double metric_value(int port, const std::string& name) {
  httplib::Client c("127.0.0.1", port);
  auto r = c.Get("/metrics");
  if (!r) return -1;
  std::istringstream lines(r->body);
  std::string line;
  while (std::getline(lines, line)) {
    if (line.rfind(name + "{", 0) == 0) return std::stod(line.substr(line.rfind(' ') + 1));
  }
  return -1;
}

bool wait_for_metric(int port, const std::string& name, double value) {
  for (int i = 0; i < 600; ++i) {
    if (metric_value(port, name) >= value) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return false;
}

TEST(ServerOverloadTest, OverTheWaitingLimitIs503WithRetryAfter) {
  GS_REQUIRE_SHARED(shared);
  TempDir dir;
  ASSERT_EQ(make_tiny_chat_model(shared, dir.path() / "model"), "");
  ServerProcess server(
      dir.path() / "model",
      {"--served-model-name", "gemma4", "--max-num-seqs", "1", "--max-waiting-requests", "1",
       "--max-model-len", "512", "--kv-cache-memory-bytes", "32M"},
      dir.path() / "server.log");
  ASSERT_TRUE(server.wait_healthy()) << server.log_text();
  const int port = server.port();
  const std::string long_body =
      R"({"model":"gemma4","prompt":"go on","max_tokens":200,"ignore_eos":true})";
  auto run = [port, long_body] {
    httplib::Client c("127.0.0.1", port);
    c.set_read_timeout(300, 0);
    auto r = c.Post("/v1/completions", long_body, "application/json");
    return r ? r->status : -1;
  };
  auto first = std::async(std::launch::async, run);
  ASSERT_TRUE(wait_for_metric(port, "vllm:num_requests_running", 1));
  auto second = std::async(std::launch::async, run);
  ASSERT_TRUE(wait_for_metric(port, "vllm:num_requests_waiting", 1));
  httplib::Client c("127.0.0.1", port);
  auto over = c.Post("/v1/completions", R"({"prompt":"hi","max_tokens":2})", "application/json");
  ASSERT_TRUE(over);
  EXPECT_EQ(over->status, 503) << over->body;
  EXPECT_EQ(over->get_header_value("Retry-After"), "1");
  EXPECT_EQ(nlohmann::json::parse(over->body)["error"]["type"], "ServiceUnavailableError");
  EXPECT_EQ(first.get(), 200);
  EXPECT_EQ(second.get(), 200);
  auto after = c.Post("/v1/completions", R"({"prompt":"hi","max_tokens":2})", "application/json");
  ASSERT_TRUE(after);
  EXPECT_EQ(after->status, 200);
}

}  // namespace
}  // namespace gemmaserve::testing

namespace gemmaserve::testing {
namespace {

TEST(ServeCommandTest, FlagMistakesFailFastWithAMessage) {
  const std::string bin = cli_binary().string();
  auto help = run_command(bin + " serve --help");
  EXPECT_EQ(help.exit_code, 0);
  EXPECT_NE(help.out.find("--served-model-name"), std::string::npos);
  EXPECT_NE(help.out.find("--max-num-batched-tokens"), std::string::npos);  // engine flags too
  auto no_model = run_command(bin + " serve 2>&1");
  EXPECT_EQ(no_model.exit_code, 2);
  EXPECT_NE(no_model.out.find("serve needs MODEL_DIR"), std::string::npos);
  auto bad_kwargs =
      run_command(bin + " serve /nonexistent --default-chat-template-kwargs '[1]' 2>&1");
  EXPECT_EQ(bad_kwargs.exit_code, 2);
  EXPECT_NE(bad_kwargs.out.find("--default-chat-template-kwargs: must be a JSON object"),
            std::string::npos)
      << bad_kwargs.out;
  auto bad_so = run_command(bin + " serve /nonexistent --structured-outputs-config " +
                            "'{\"disable_any_whitespace\": 1}' 2>&1");
  EXPECT_EQ(bad_so.exit_code, 2);
  EXPECT_NE(bad_so.out.find("--structured-outputs-config: disable_any_whitespace must be true or "
                            "false"),
            std::string::npos)
      << bad_so.out;
  auto bad_parser = run_command(bin + " serve /nonexistent --reasoning-parser deepseek_r1 2>&1");
  EXPECT_EQ(bad_parser.exit_code, 2);
  EXPECT_NE(bad_parser.out.find("unknown parser 'deepseek_r1'"), std::string::npos)
      << bad_parser.out;
  auto missing_template =
      run_command(bin + " serve /nonexistent --chat-template /no/such/template.jinja 2>&1");
  EXPECT_EQ(missing_template.exit_code, 2);
  EXPECT_NE(missing_template.out.find("looks like a path"), std::string::npos)
      << missing_template.out;
  auto unknown = run_command(bin + " serve /nonexistent --no-such-flag 2>&1");
  EXPECT_EQ(unknown.exit_code, 2);
  EXPECT_NE(unknown.out.find("unknown flag --no-such-flag"), std::string::npos);
}

}  // namespace
}  // namespace gemmaserve::testing
