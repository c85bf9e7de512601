#include "server/openai/openai_routes.h"

#include <httplib.h>

#include "server/http/route_helpers.h"
#include "server/openai/serving_chat.h"
#include "server/openai/serving_completions.h"
#include "server/openai/serving_tokenization.h"
#include "server/openai/serving_transcription.h"
#include "tokenizer/tokenizer.h"

namespace gemmaserve {
namespace {

// The multipart form of a speech-to-text request (a urlencoded body gives fields only); a field
// sent twice becomes an array, as timestamp_granularities[] is.
SpeechForm speech_form(const httplib::Request& req) {
  SpeechForm form;
  auto add = [&form](const std::string& name, const std::string& value) {
    nlohmann::ordered_json& fields = form.fields;
    if (!fields.contains(name)) {
      fields[name] = value;
    } else {
      if (!fields[name].is_array()) fields[name] = nlohmann::ordered_json::array({fields[name]});
      fields[name].push_back(value);
    }
  };
  for (const auto& [name, part] : req.files) {
    const bool upload = !part.filename.empty() || !part.content_type.empty();
    if (name == "file") {
      form.file_is_text = form.file_is_text || !upload;
      if (upload) form.file = part.content;
      continue;
    }
    add(name, part.content);
  }
  if (!req.is_multipart_form_data()) {
    for (const auto& [name, value] : req.params) {
      if (name == "file") {
        form.file_is_text = true;
      } else {
        add(name, value);
      }
    }
  }
  return form;
}

}  // namespace

void register_openai_routes(httplib::Server& s, ServingContext& ctx) {
  s.Get("/v1/models", [&ctx](const httplib::Request&, httplib::Response& res) {
    const int64_t now = unix_time_now();  // vLLM's ModelCard: the time of the call
    nlohmann::ordered_json data = nlohmann::ordered_json::array();
    for (const std::string& name : ctx.options.served_model_names) {
      nlohmann::ordered_json perm;
      perm["id"] = random_request_id("modelperm-");
      perm["object"] = "model_permission";
      perm["created"] = now;
      perm["allow_create_engine"] = false;
      perm["allow_sampling"] = true;
      perm["allow_logprobs"] = true;
      perm["allow_search_indices"] = false;
      perm["allow_view"] = true;
      perm["allow_fine_tuning"] = false;
      perm["organization"] = "*";
      perm["group"] = nullptr;
      perm["is_blocking"] = false;
      nlohmann::ordered_json m;
      m["id"] = name;
      m["object"] = "model";
      m["created"] = now;
      m["owned_by"] = "vllm";
      m["root"] = ctx.engine.args().model;
      m["parent"] = nullptr;
      m["max_model_len"] = ctx.engine.max_model_len();
      m["permission"] = nlohmann::ordered_json::array({perm});
      data.push_back(std::move(m));
    }
    send_json(res, 200, nlohmann::ordered_json{{"object", "list"}, {"data", data}});
  });
  s.Post("/v1/completions", [&ctx](const httplib::Request& req, httplib::Response& res) {
    guarded(res,
            [&] { send_serving_response(res, serve_completion(ctx, parse_generation_body(req))); });
  });
  s.Post("/v1/chat/completions", [&ctx](const httplib::Request& req, httplib::Response& res) {
    guarded(res, [&] { send_serving_response(res, serve_chat(ctx, parse_generation_body(req))); });
  });
  s.Post("/v1/audio/transcriptions", [&ctx](const httplib::Request& req, httplib::Response& res) {
    guarded(res, [&] {
      send_serving_response(res,
                            serve_speech_to_text(ctx, speech_form(req), SpeechTask::kTranscribe));
    });
  });
  s.Post("/v1/audio/translations", [&ctx](const httplib::Request& req, httplib::Response& res) {
    guarded(res, [&] {
      send_serving_response(res,
                            serve_speech_to_text(ctx, speech_form(req), SpeechTask::kTranslate));
    });
  });
  s.Post("/tokenize", [&ctx](const httplib::Request& req, httplib::Response& res) {
    guarded(res, [&] { send_json(res, 200, serve_tokenize(ctx, parse_body(req))); });
  });
  s.Post("/detokenize", [&ctx](const httplib::Request& req, httplib::Response& res) {
    guarded(res, [&] { send_json(res, 200, serve_detokenize(ctx, parse_body(req))); });
  });
  // vLLM serves it only with --enable-tokenizer-info-endpoint: it shows the chat template.
  if (ctx.options.enable_tokenizer_info_endpoint) {
    s.Get("/tokenizer_info", [&ctx](const httplib::Request&, httplib::Response& res) {
      guarded(res, [&] {
        const Tokenizer* tok = ctx.engine.tokenizer();
        if (tok == nullptr) throw bad_request("this model has no tokenizer");
        nlohmann::ordered_json out;
        out["tokenizer_class"] = "GemmaTokenizer";
        out["bos_token"] = ctx.bos_token;
        out["eos_token"] = ctx.eos_token;
        out["pad_token"] = "<pad>";
        out["chat_template"] = ctx.chat_template
                                   ? nlohmann::ordered_json(ctx.chat_template->source())
                                   : nlohmann::ordered_json(nullptr);
        out["model_max_length"] = ctx.engine.max_model_len();
        send_json(res, 200, out);
      });
    });
    answer_other_methods(s, {"/tokenizer_info"}, /*posted=*/false);
  }
  answer_other_methods(s,
                       {"/v1/completions", "/v1/chat/completions", "/v1/audio/transcriptions",
                        "/v1/audio/translations", "/tokenize", "/detokenize"},
                       /*posted=*/true);
  answer_other_methods(s, {"/v1/models"}, /*posted=*/false);
}

}  // namespace gemmaserve
