// _gemmaserve: the compiled half of the gemmaserve Python package. It exposes the C++ offline
// API (gemmaserve/llm.h) in process: one loaded model serves every call, the GIL is released
// while the engine runs, Ctrl+C aborts the call's requests, InputError becomes ValueError.
// The vLLM-shaped classes (LLM, SamplingParams, RequestOutput) live in the Python package.
#include <pybind11/functional.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstdlib>
#include <limits>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "cli/serve_command.h"
#include "conversions.h"
#include "core/error.h"
#include "core/logging.h"
#include "engine/engine.h"
#include "engine/image_placeholders.h"
#include "engine/tensor_parallel_ranks.h"
#include "gemmaserve/llm.h"
#include "io/media/media_connector.h"
#include "server/openai/answer_constraints.h"
#include "server/openai/openai_protocol.h"
#include "server/shared/chat_video.h"
#include "tokenizer/tokenizer.h"

namespace gemmaserve::python {
namespace {

// vLLM's structured outputs: json_object, json (a schema object or its text), regex, choice
// and grammar map to the engine's answer constraint, as the server's fields do (the engine
// compiles the spec: a bad one is an InputError, so a ValueError); structural_tag is not
// implemented.
void apply_structured_outputs(const py::handle& sp, LLM& llm, std::string_view chat_prompt,
                              SamplingParams* out) {
  py::object so = sp.attr("structured_outputs");
  if (so.is_none()) return;
  if (py::hasattr(so, "structural_tag") && !so.attr("structural_tag").is_none()) {
    throw py::value_error("structured_outputs: structural_tag is not implemented yet");
  }
  std::string kind, spec;
  const py::object dumps = py::module_::import("json").attr("dumps");
  for (const char* k : {"json", "regex", "choice", "grammar"}) {
    if (!py::hasattr(so, k) || so.attr(k).is_none()) continue;
    const py::object v = so.attr(k);
    kind = k;
    spec = py::isinstance<py::str>(v) && kind != "choice" ? v.cast<std::string>()
                                                          : dumps(v).cast<std::string>();
  }
  const Tokenizer* tok = llm.tokenizer();
  if (tok == nullptr)
    throw InputError("structured_outputs need a tokenizer, and this model has none");
  const bool gemma4 = llm.engine().model_config().model_type.rfind("gemma4", 0) == 0;
  out->answer_constraint =
      kind.empty() ? json_object_constraint(*tok, gemma4, chat_prompt)
                   : structured_output_constraint(*tok, gemma4, chat_prompt, kind, spec);
}

// One SamplingParams per entry of `params`, or per chat prompt when `chat_prompts` are given
// (constraints depend on each rendered prompt).
std::vector<SamplingParams> engine_params(const py::list& params, LLM& llm,
                                          const std::vector<std::string>& chat_prompts) {
  std::vector<SamplingParams> out;
  const size_t count = chat_prompts.empty() ? params.size() : chat_prompts.size();
  for (size_t i = 0; i < count; ++i) {
    const py::handle sp = params[params.size() == 1 ? 0 : i];
    out.push_back(sampling_params_from_python(sp));
    apply_structured_outputs(sp, llm, chat_prompts.empty() ? "" : chat_prompts[i], &out.back());
  }
  return out;
}

// The server's tool_choice "required" or a named function as the answer's forced opening.
void apply_tool_choice(const std::string& choice, const nlohmann::ordered_json& tools, LLM& llm,
                       const std::string& chat_prompt, SamplingParams* out) {
  if (choice.empty() || choice == "auto" || choice == "none") return;
  if (!tools.is_array() || tools.empty()) {
    throw InputError("tool_choice '" + choice + "' needs tools");
  }
  ChatRequest req;
  req.tools = tools;
  req.tool_choice = choice == "required" ? "required" : "function";
  if (choice != "required") {
    bool known = false;
    for (const auto& t : tools)
      known |= t.value("function", nlohmann::ordered_json::object()).value("name", "") == choice;
    if (!known) throw InputError("tool_choice names '" + choice + "', which is not in tools");
    req.tool_choice_function = choice;
  }
  if (out->answer_constraint) {
    throw InputError("tool_choice '" + choice + "' cannot be combined with structured_outputs");
  }
  const Tokenizer* tok = llm.tokenizer();
  if (tok == nullptr) throw InputError("tool_choice needs a tokenizer, and this model has none");
  out->answer_constraint = tool_choice_constraint(*tok, req, chat_prompt);
  if (!out->answer_constraint) {
    throw InputError("tool_choice '" + choice + "' needs Gemma 4's tool-call marker token");
  }
}

// f()'s result, an InputError's message prefixed with `where` ("prompt 0", "video 1").
template <typename F>
auto naming_errors(const std::string& where, F&& f) {
  try {
    return f();
  } catch (const InputError& e) {
    throw InputError(where + ": " + e.what());
  }
}

// prompts: [(text or None, ids or None, [image...], mm_processor_kwargs JSON text or None,
// [audio clip...], [video...])]. Encoded videos are decoded with the engine's loader settings
// (--media-io-kwargs, as LLM::chat) and the prompt's num_frames / fps.
std::vector<Prompt> engine_prompts(const py::list& prompts, const EngineArgs& args) {
  const VideoLoadOptions engine_load =
      engine_video_load_options(args, media::MediaConnectorOptions{});
  std::vector<Prompt> out;
  for (const py::handle item : prompts) {
    const auto [text, ids, images, kwargs_text, audios, videos] =
        item.cast<std::tuple<std::optional<std::string>, std::optional<std::vector<int32_t>>,
                             py::list, std::optional<std::string>, py::list, py::list>>();
    out.push_back(ids ? Prompt::from_ids(*ids) : Prompt::from_text(text.value_or("")));
    Prompt& prompt = out.back();
    naming_errors("prompt " + std::to_string(out.size() - 1), [&] {
      const nlohmann::json kwargs =
          kwargs_text
              ? nlohmann::json::parse(parse_json_arg(*kwargs_text, "mm_processor_kwargs").dump())
              : nlohmann::json();
      const std::optional<int> max_soft_tokens =
          parse_mm_processor_kwargs(kwargs, "mm_processor_kwargs");
      VideoLoadOptions load = engine_load;
      load.sampling = apply_video_processor_kwargs(kwargs, "mm_processor_kwargs", load.sampling);
      for (const py::handle image : images) {
        prompt.images.push_back(naming_errors("image " + std::to_string(prompt.images.size()), [&] {
          return prompt_image_from_python(image, max_soft_tokens);
        }));
      }
      for (const py::handle clip : audios) {
        prompt.audios.push_back(naming_errors("audio clip " + std::to_string(prompt.audios.size()),
                                              [&] { return prompt_audio_from_python(clip); }));
      }
      for (const py::handle video : videos) {
        prompt.videos.push_back(naming_errors("video " + std::to_string(prompt.videos.size()), [&] {
          return prompt_video_from_python(video, load);
        }));
      }
    });
  }
  return out;
}

// The offline LLM with one call at a time (LLM is not reentrant; vLLM's is not either).
class PyLLM {
 public:
  explicit PyLLM(const py::dict& args) {
    const EngineArgs a = engine_args_from_dict(args);
    py::gil_scoped_release release;
    llm_ = std::make_unique<LLM>(a);
  }

  // prompts: see engine_prompts; params: one gemmaserve.SamplingParams per prompt or
  // one for all; on_finished(index, num_prompt_tokens, num_output_tokens, num_outputs) or None.
  py::list generate(const py::list& prompts, const py::list& params,
                    const std::vector<bool>& max_tokens_to_context, const py::object& on_finished) {
    const std::vector<Prompt> p = engine_prompts(prompts, llm_->engine().args());
    const std::vector<SamplingParams> sp = engine_params(params, *llm_, {});
    const GenerateOptions options = hooks(on_finished, max_tokens_to_context);
    std::vector<RequestOutput> outputs;
    {
      py::gil_scoped_release release;
      std::lock_guard<std::mutex> lock(call_mutex_);
      outputs = llm_->generate(p, sp, options);
    }
    py::list result;
    for (const RequestOutput& o : outputs) {
      result.append(request_output_to_python(o, llm_->tokenizer()));
    }
    return result;
  }

  // conversations: JSON texts of message lists; options: ChatOptions' fields (tools and
  // chat_template_kwargs as JSON text). Returns [{"output", "prompt", "messages"}].
  py::list chat(const std::vector<std::string>& conversations, const py::list& params,
                const py::dict& options, const std::vector<bool>& max_tokens_to_context,
                const py::object& on_finished) {
    std::vector<nlohmann::ordered_json> messages;
    for (size_t i = 0; i < conversations.size(); ++i) {
      messages.push_back(parse_json_arg(conversations[i], "conversation " + std::to_string(i)));
    }
    const ChatOptions chat_options = chat_options_from_dict(options);
    // Constraints (json_object, tool_choice) depend on whether the rendered prompt lets the
    // model think first, so those conversations are rendered here too.
    const std::string tool_choice =
        options.contains("tool_choice") && !options["tool_choice"].is_none()
            ? options["tool_choice"].cast<std::string>()
            : "";
    bool constrained = !tool_choice.empty() && tool_choice != "auto" && tool_choice != "none";
    for (const py::handle sp : params) constrained |= !sp.attr("structured_outputs").is_none();
    std::vector<std::string> rendered;
    if (constrained) {
      for (const auto& m : messages) rendered.push_back(llm_->render_chat(m, chat_options).text);
    }
    std::vector<SamplingParams> sp = engine_params(params, *llm_, rendered);
    for (size_t i = 0; i < rendered.size(); ++i) {
      apply_tool_choice(tool_choice, chat_options.tools, *llm_, rendered[i], &sp[i]);
    }
    const GenerateOptions options_hooks = hooks(on_finished, max_tokens_to_context);
    std::vector<ChatOutput> outputs;
    {
      py::gil_scoped_release release;
      std::lock_guard<std::mutex> lock(call_mutex_);
      outputs = llm_->chat(messages, sp, chat_options, options_hooks);
    }
    py::list result;
    for (ChatOutput& o : outputs) {
      o.output.prompt = o.prompt;
      py::list parsed;
      for (const ChatMessageOutput& m : o.messages) {
        py::list calls;
        for (const ChatToolCall& c : m.tool_calls)
          calls.append(py::make_tuple(c.id, c.name, c.arguments));
        py::dict md;
        md["content"] = m.content ? py::object(py::str(*m.content)) : py::object(py::none());
        md["reasoning"] = m.reasoning ? py::object(py::str(*m.reasoning)) : py::object(py::none());
        md["tool_calls"] = calls;
        md["finish_reason"] = m.finish_reason;
        parsed.append(md);
      }
      py::dict d;
      d["output"] = request_output_to_python(o.output, llm_->tokenizer());
      d["prompt"] = o.prompt;
      d["messages"] = parsed;
      result.append(d);
    }
    return result;
  }

  py::tuple render_chat(const std::string& messages, const py::dict& options) {
    const nlohmann::ordered_json m = parse_json_arg(messages, "conversation");
    const ChatOptions o = chat_options_from_dict(options);
    RenderedChat r;
    {
      py::gil_scoped_release release;
      std::lock_guard<std::mutex> lock(call_mutex_);
      r = llm_->render_chat(m, o);
    }
    return py::make_tuple(r.text, r.token_ids);
  }

  std::optional<Tokenizer> tokenizer() const {
    if (llm_->tokenizer() == nullptr) return std::nullopt;
    return *llm_->tokenizer();
  }
  std::vector<int32_t> eos_token_ids() const { return llm_->eos_token_ids(); }
  int vocab_size() const { return llm_->vocab_size(); }
  int max_model_len() const { return llm_->engine().max_model_len(); }
  py::dict default_sampling_params() const {
    return sampling_params_to_kwargs(llm_->default_sampling_params());
  }
  std::string model_type() const { return llm_->engine().model_config().model_type; }
  // Requests the engine still holds (running or waiting): 0 after every call, aborts included.
  int num_unfinished_requests() const {
    const EngineStats s = llm_->engine().stats();
    return s.num_running + s.num_waiting;
  }
  uint64_t num_steps() const { return llm_->num_steps(); }
  // The image processor in effect (the checkpoint's config + mm_processor_kwargs), by HF's names.
  py::dict image_processor() const {
    const Gemma4ImageProcessorOptions& o = llm_->engine().image_processor();
    py::dict d;
    d["patch_size"] = o.patch_size;
    d["pooling_kernel_size"] = o.pooling_kernel_size;
    d["max_soft_tokens"] = o.max_soft_tokens;
    d["do_resize"] = o.do_resize;
    d["resample"] = o.resample;
    d["do_rescale"] = o.do_rescale;
    d["rescale_factor"] = o.rescale_factor;
    d["do_normalize"] = o.do_normalize;
    d["image_mean"] = std::vector<double>(o.image_mean.begin(), o.image_mean.end());
    d["image_std"] = std::vector<double>(o.image_std.begin(), o.image_std.end());
    d["do_convert_rgb"] = o.do_convert_rgb;
    return d;
  }

 private:
  // Progress and Ctrl+C: both run on the calling thread with the GIL taken back for the call. A
  // pending KeyboardInterrupt (or an exception from on_finished) ends the C++ call, which aborts
  // the call's requests before the exception reaches Python.
  static GenerateOptions hooks(const py::object& on_finished, const std::vector<bool>& to_context) {
    GenerateOptions o;
    o.max_tokens_to_context = to_context;
    o.poll_interval = std::chrono::milliseconds(50);
    o.keep_going = [] {
      py::gil_scoped_acquire gil;
      if (PyErr_CheckSignals() != 0) throw py::error_already_set();
      return true;
    };
    if (!on_finished.is_none()) {
      o.on_finished = [&on_finished](size_t index, const RequestOutput& out) {
        size_t generated = 0;
        for (const CompletionOutput& c : out.outputs) generated += c.token_ids.size();
        py::gil_scoped_acquire gil;
        on_finished(index, out.prompt_token_ids.size(), generated, out.outputs.size());
      };
    }
    return o;
  }

  static ChatOptions chat_options_from_dict(const py::dict& d) {
    ChatOptions o;
    if (d.contains("tools") && !d["tools"].is_none()) {
      o.tools = parse_json_arg(d["tools"].cast<std::string>(), "tools");
    }
    if (d.contains("add_generation_prompt")) {
      o.add_generation_prompt = d["add_generation_prompt"].cast<bool>();
    }
    if (d.contains("continue_final_message")) {
      o.continue_final_message = d["continue_final_message"].cast<bool>();
    }
    if (d.contains("chat_template") && !d["chat_template"].is_none()) {
      o.chat_template = d["chat_template"].cast<std::string>();
    }
    if (d.contains("chat_template_kwargs") && !d["chat_template_kwargs"].is_none()) {
      o.chat_template_kwargs =
          parse_json_arg(d["chat_template_kwargs"].cast<std::string>(), "chat_template_kwargs");
    }
    if (d.contains("reasoning_effort") && !d["reasoning_effort"].is_none()) {
      o.reasoning_effort = d["reasoning_effort"].cast<std::string>();
    }
    if (d.contains("parse_output")) o.parse_output = d["parse_output"].cast<bool>();
    if (d.contains("chat_template_content_format")) {
      o.chat_template_content_format = d["chat_template_content_format"].cast<std::string>();
    }
    return o;
  }

  std::unique_ptr<LLM> llm_;
  std::mutex call_mutex_;
};

// SamplingParams checks that need no model (vLLM checks these when the object is built); the
// vocabulary checks run again in generate.
void validate_sampling_params(const py::handle& sp) {
  SamplingParams p = sampling_params_from_python(sp);
  if (sp.attr("max_tokens").is_none()) p.max_tokens = std::numeric_limits<int>::max();
  p.stop_token_ids.clear();
  p.logit_bias.clear();
  if (p.allowed_token_ids && !p.allowed_token_ids->empty()) p.allowed_token_ids.reset();
  p.validate(std::numeric_limits<int>::max());
}

}  // namespace
}  // namespace gemmaserve::python

PYBIND11_MODULE(_gemmaserve, m) {
  namespace py = pybind11;
  using gemmaserve::Tokenizer;
  using gemmaserve::python::PyLLM;
  m.doc() = "gemmaserve's C++ engine; use the gemmaserve package (LLM, SamplingParams) instead.";
  m.attr("__version__") = GEMMASERVE_VERSION;

  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const gemmaserve::InputError& e) {
      PyErr_SetString(PyExc_ValueError, e.what());
    }
  });

  py::class_<Tokenizer>(m, "Tokenizer", "The engine's tokenizer (tokenizer.json or GGUF).")
      .def_static("from_path", &Tokenizer::from_path, py::arg("path"),
                  "Loads a tokenizer.json, a GGUF vocabulary or a folder holding tokenizer.json.")
      .def("encode", &Tokenizer::encode, py::arg("text"), py::arg("add_special"),
           py::arg("parse_special"))
      .def(
          "decode",
          [](const Tokenizer& t, const std::vector<int32_t>& ids, bool skip_special) {
            return t.decode(ids, skip_special);
          },
          py::arg("ids"), py::arg("skip_special"))
      .def("id_to_piece",
           [](const Tokenizer& t, int32_t id) { return std::string(t.id_to_piece(id)); })
      .def("piece_to_id",
           [](const Tokenizer& t, const std::string& piece) { return t.piece_to_id(piece); })
      .def("vocab_size", &Tokenizer::vocab_size)
      .def("contains", &Tokenizer::contains)
      .def("bos_id", &Tokenizer::bos_id)
      .def("eos_ids", &Tokenizer::eos_ids)
      .def("is_special", &Tokenizer::is_special)
      .def("adds_bos", &Tokenizer::adds_bos);

  py::class_<PyLLM>(m, "Engine", "A loaded model and its engine (gemmaserve::LLM).")
      .def(py::init<const py::dict&>(), py::arg("args"))
      .def("generate", &PyLLM::generate, py::arg("prompts"), py::arg("params"),
           py::arg("max_tokens_to_context"), py::arg("on_finished"))
      .def("chat", &PyLLM::chat, py::arg("conversations"), py::arg("params"), py::arg("options"),
           py::arg("max_tokens_to_context"), py::arg("on_finished"))
      .def("render_chat", &PyLLM::render_chat, py::arg("messages"), py::arg("options"))
      .def("tokenizer", &PyLLM::tokenizer)
      .def("eos_token_ids", &PyLLM::eos_token_ids)
      .def("vocab_size", &PyLLM::vocab_size)
      .def("max_model_len", &PyLLM::max_model_len)
      .def("default_sampling_params", &PyLLM::default_sampling_params)
      .def("model_type", &PyLLM::model_type)
      .def("num_unfinished_requests", &PyLLM::num_unfinished_requests)
      .def("num_steps", &PyLLM::num_steps)
      .def("image_processor", &PyLLM::image_processor);

  m.def("resample_audio", &gemmaserve::python::resample_audio_bytes, py::arg("samples"),
        py::arg("from_rate"), py::arg("to_rate"),
        "float32 samples (bytes) resampled with the engine's resampler (libsoxr HQ, librosa's "
        "soxr_hq length); returns float32 bytes.");
  m.def("validate_sampling_params", &gemmaserve::python::validate_sampling_params,
        py::arg("params"), "Raises ValueError for a field out of range (vLLM's messages).");
  m.def(
      "serve",
      [](const std::vector<std::string>& args) {
        py::gil_scoped_release release;
        return gemmaserve::run_serve_command(args);
      },
      py::arg("args"), "Runs `gemmaserve serve ARGS...` in this process; returns the exit code.");
  m.def(
      "run_tensor_parallel_follower_and_exit",
      [](const py::dict& args) {
        const gemmaserve::EngineArgs a = gemmaserve::python::engine_args_from_dict(args);
        py::gil_scoped_release release;
        int status = 0;
        try {
          gemmaserve::run_tensor_parallel_follower(a);
        } catch (const gemmaserve::InputError&) {
          status = 2;  // a bad argument: rank 0 checks the same ones and reports it, once
        }
        // exit(), not Python's os._exit: static destructors finalise MPI, which mpirun expects.
        std::exit(status);
      },
      py::arg("args"),
      "Serves this mpirun rank (not 0) as a tensor-parallel follower of rank 0's LLM until rank "
      "0's engine ends, then ends the process (the script after LLM(...) is rank 0's alone).");
  m.def(
      "log",
      [](int level, const std::string& message) {
        const auto lvl = static_cast<gemmaserve::log::Level>(level);
        if (lvl >= gemmaserve::log::level()) gemmaserve::log::write(lvl, message);
      },
      py::arg("level"), py::arg("message"),
      "Writes a line to the engine's log (0 debug, 1 info, 2 warning, 3 error).");
  m.def(
      "set_log_level",
      [](const std::string& name) {
        gemmaserve::log::set_level(gemmaserve::log::parse_level(name));
      },
      py::arg("level"), "Sets the engine's log level: debug|info|warning|error|critical|off.");
}
