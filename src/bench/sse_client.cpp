#include "bench/sse_client.h"

#include <httplib.h>

#include <utility>

#include "core/error.h"

namespace gemmaserve::bench {
namespace {

using Clock = std::chrono::steady_clock;
using nlohmann::json;

constexpr size_t kMaxErrorBodyBytes = 4096;

double seconds_between(Clock::time_point from, Clock::time_point to) {
  return std::chrono::duration<double>(to - from).count();
}

// The human message of an OpenAI error payload ({"error": {"message": ...}} or similar).
std::string error_message_of(const json& error) {
  if (error.is_string()) return error.get<std::string>();
  if (error.is_object() && error.contains("message") && error["message"].is_string()) {
    return error["message"].get<std::string>();
  }
  return error.dump(-1, ' ', false, json::error_handler_t::replace);
}

std::string clipped(std::string_view text, size_t limit) {
  if (text.size() <= limit) return std::string(text);
  std::string out(text.substr(0, limit));
  out.append("...");
  return out;
}

// A non-200 reply as one line: "HTTP 404: model not found".
std::string describe_http_failure(int status, const std::string& body) {
  std::string message = body;
  const json parsed = json::parse(body, nullptr, false);
  if (!parsed.is_discarded() && parsed.is_object()) {
    if (parsed.contains("error")) {
      message = error_message_of(parsed["error"]);
    } else if (parsed.contains("message")) {
      message = error_message_of(parsed);
    }
  }
  std::string out = "HTTP " + std::to_string(status);
  if (!message.empty()) out.append(": ").append(clipped(message, 500));
  return out;
}

httplib::Headers to_httplib(const HttpHeaders& headers) {
  return httplib::Headers(headers.begin(), headers.end());
}

void configure(httplib::Client& client, std::chrono::seconds timeout) {
  client.set_connection_timeout(std::chrono::seconds(30));
  client.set_read_timeout(timeout);
  client.set_write_timeout(timeout);
  client.set_keep_alive(false);
}

std::string dump_body(const json& body) {
  return body.dump(-1, ' ', false, json::error_handler_t::replace);
}

HttpReply to_reply(const httplib::Result& result) {
  HttpReply reply;
  if (!result) {
    reply.error = httplib::to_string(result.error());
    return reply;
  }
  reply.status = result->status;
  reply.body = result->body;
  return reply;
}

}  // namespace

std::vector<SseEvent> SseParser::feed(std::string_view bytes) {
  std::vector<SseEvent> out;
  size_t pos = 0;
  while (pos < bytes.size()) {
    if (after_cr_ && bytes[pos] == '\n') {
      after_cr_ = false;
      ++pos;
      continue;
    }
    after_cr_ = false;
    const size_t end = bytes.find_first_of("\r\n", pos);
    if (end == std::string_view::npos) {
      line_.append(bytes.substr(pos));
      break;
    }
    line_.append(bytes.substr(pos, end - pos));
    after_cr_ = bytes[end] == '\r';
    take_line(line_, out);
    line_.clear();
    pos = end + 1;
  }
  return out;
}

std::vector<SseEvent> SseParser::finish() {
  std::vector<SseEvent> out;
  if (!line_.empty()) take_line(line_, out);
  line_.clear();
  take_line("", out);
  after_cr_ = false;
  return out;
}

void SseParser::take_line(std::string_view line, std::vector<SseEvent>& out) {
  if (line.empty()) {
    if (has_data_) out.push_back({std::move(event_), std::move(data_)});
    event_.clear();
    data_.clear();
    has_data_ = false;
    return;
  }
  if (line.front() == ':') return;  // a comment (servers send them as keep-alive pings)
  const size_t colon = line.find(':');
  std::string_view field = line.substr(0, colon);
  std::string_view value;
  if (colon != std::string_view::npos) {
    value = line.substr(colon + 1);
    if (!value.empty() && value.front() == ' ') value.remove_prefix(1);
  }
  if (field == "data") {
    if (has_data_) data_.push_back('\n');
    data_.append(value);
    has_data_ = true;
  } else if (field == "event") {
    event_.assign(value);
  }
  // "id", "retry" and unknown fields do not matter to a benchmark.
}

void CompletionStreamReader::on_bytes(std::string_view bytes, double now) {
  for (const SseEvent& event : parser_.feed(bytes)) on_event(event, now);
}

void CompletionStreamReader::on_end(double now) {
  for (const SseEvent& event : parser_.finish()) on_event(event, now);
}

void CompletionStreamReader::on_event(const SseEvent& event, double now) {
  if (done_ || !failure_.empty()) return;
  if (event.event == "error") {
    const json parsed = json::parse(event.data, nullptr, false);
    failure_ = "server sent an error event: ";
    if (!parsed.is_discarded() && parsed.is_object() && parsed.contains("error")) {
      failure_.append(error_message_of(parsed["error"]));
    } else {
      failure_.append(clipped(event.data, 500));
    }
    return;
  }
  if (event.data == "[DONE]") {
    done_ = true;
    return;
  }
  const json chunk = json::parse(event.data, nullptr, false);
  if (chunk.is_discarded() || !chunk.is_object()) {
    failure_ = "invalid JSON in stream chunk: " + clipped(event.data, 200);
    return;
  }
  if (chunk.contains("error") && !chunk["error"].is_null()) {
    failure_ = "server error in stream: " + error_message_of(chunk["error"]);
    return;
  }
  if (auto it = chunk.find("usage"); it != chunk.end() && it->is_object()) {
    if (auto c = it->find("completion_tokens"); c != it->end() && c->is_number_integer()) {
      out_.output_tokens = c->get<int>();
    }
    if (auto p = it->find("prompt_tokens"); p != it->end() && p->is_number_integer()) {
      out_.prompt_tokens = p->get<int>();
    }
  }
  auto choices = chunk.find("choices");
  if (choices == chunk.end() || !choices->is_array() || choices->empty()) return;
  const json& choice = (*choices)[0];
  std::string text;
  auto append_string = [&text](const json& holder, const char* key) {
    if (!holder.is_object()) return;
    auto v = holder.find(key);
    if (v != holder.end() && v->is_string()) text.append(v->get<std::string>());
  };
  if (chat_) {
    if (auto delta = choice.find("delta"); delta != choice.end()) {
      append_string(*delta, "reasoning_content");
      append_string(*delta, "reasoning");
      append_string(*delta, "content");
    }
  } else {
    append_string(choice, "text");
  }
  if (text.empty()) return;
  if (!first_token_seen_) {
    first_token_seen_ = true;
    out_.ttft = now;
  } else {
    out_.itl.push_back(now - last_token_time_);
  }
  last_token_time_ = now;
  ++out_.content_chunks;
  out_.generated_text.append(text);
}

RequestOutput CompletionStreamReader::result() const {
  RequestOutput r = out_;
  r.latency = last_token_time_;
  if (!failure_.empty()) {
    r.success = false;
    r.error = failure_;
  } else if (!first_token_seen_) {
    r.success = false;
    r.error =
        "Never received a valid chunk to calculate TTFT. This response will be marked as failed!";
  } else {
    r.success = true;
  }
  return r;
}

ServerUrl parse_server_url(const std::string& url) {
  const size_t scheme_end = url.find("://");
  if (scheme_end == std::string::npos) {
    throw InputError("--base-url: expected http://HOST[:PORT][/PATH], got '" + url + "'");
  }
  const std::string scheme = url.substr(0, scheme_end);
  if (scheme != "http" && scheme != "https") {
    throw InputError("--base-url: unsupported scheme '" + scheme + "' (expected http or https)");
  }
  const size_t path_start = url.find('/', scheme_end + 3);
  ServerUrl out;
  out.scheme_host_port = url.substr(0, path_start);
  if (out.scheme_host_port.size() == scheme_end + 3) {
    throw InputError("--base-url: no host in '" + url + "'");
  }
  if (path_start != std::string::npos) out.path_prefix = url.substr(path_start);
  while (!out.path_prefix.empty() && out.path_prefix.back() == '/') out.path_prefix.pop_back();
  return out;
}

HttpHeaders auth_headers(const std::string& api_key) {
  HttpHeaders headers;
  if (!api_key.empty()) headers.emplace("Authorization", "Bearer " + api_key);
  return headers;
}

HttpReply http_get(const ServerUrl& server, const std::string& path, const HttpHeaders& headers,
                   std::chrono::seconds timeout) {
  httplib::Client client(server.scheme_host_port);
  configure(client, timeout);
  return to_reply(client.Get(server.path_prefix + path, to_httplib(headers)));
}

HttpReply http_post_json(const ServerUrl& server, const std::string& path,
                         const nlohmann::json& body, const HttpHeaders& headers,
                         std::chrono::seconds timeout) {
  httplib::Client client(server.scheme_host_port);
  configure(client, timeout);
  return to_reply(client.Post(server.path_prefix + path, to_httplib(headers), dump_body(body),
                              "application/json"));
}

RequestOutput stream_request(const ServerUrl& server, const std::string& path,
                             const nlohmann::json& body, const HttpHeaders& headers, bool chat,
                             Clock::time_point benchmark_start, std::chrono::seconds timeout) {
  httplib::Client client(server.scheme_host_port);
  configure(client, timeout);
  httplib::Request request;
  request.method = "POST";
  request.path = server.path_prefix + path;
  request.headers = to_httplib(headers);
  request.set_header("Content-Type", "application/json");
  request.set_header("Accept", "text/event-stream");
  request.body = dump_body(body);

  CompletionStreamReader reader(chat);
  int status = 0;
  std::string error_body;
  const Clock::time_point sent = Clock::now();
  request.response_handler = [&status](const httplib::Response& response) {
    status = response.status;
    return true;
  };
  request.content_receiver = [&](const char* data, size_t size, uint64_t, uint64_t) {
    if (status == 200) {
      reader.on_bytes(std::string_view(data, size), seconds_between(sent, Clock::now()));
    } else if (error_body.size() < kMaxErrorBodyBytes) {
      error_body.append(data, size);
    }
    return true;
  };
  const httplib::Result result = client.send(request);
  const double ended = seconds_between(sent, Clock::now());

  RequestOutput out;
  if (status == 200) {
    reader.on_end(ended);
    out = reader.result();
    if (!result && out.success && !reader.saw_done()) {
      // The body broke off before [DONE]: what was counted is not the whole reply.
      out.success = false;
      out.error = "connection error mid-stream: " + httplib::to_string(result.error());
    }
  } else if (status != 0) {
    out.error = describe_http_failure(status, error_body);
  } else {
    out.error = "connection error: " + httplib::to_string(result.error()) + " (" +
                server.scheme_host_port + request.path + ")";
  }
  out.start_time = seconds_between(benchmark_start, sent);
  return out;
}

}  // namespace gemmaserve::bench
