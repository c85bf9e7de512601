#include "conversions.h"

#include <pybind11/stl.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "core/error.h"
#include "engine/image_placeholders.h"
#include "engine/speculative/speculative_config.h"
#include "io/audio/audio_decode.h"
#include "io/audio/audio_mono.h"
#include "io/audio/audio_resample.h"
#include "io/video/video_decode.h"
#include "tokenizer/tokenizer.h"

namespace gemmaserve::python {

namespace {

// obj.name cast to T, with a TypeError that names the field instead of pybind11's generic one.
template <typename T>
T field(const py::handle& obj, const char* owner, const char* name) {
  py::object value = obj.attr(name);
  try {
    return value.cast<T>();
  } catch (const py::cast_error&) {
    throw py::type_error(std::string(owner) + "." + name + " has the wrong type: " +
                         py::str(py::type::of(value).attr("__name__")).cast<std::string>() + " (" +
                         py::repr(value).cast<std::string>() + ")");
  }
}

template <typename T>
std::optional<T> optional_field(const py::handle& obj, const char* owner, const char* name) {
  if (obj.attr(name).is_none()) return std::nullopt;
  return field<T>(obj, owner, name);
}

// float32 values from their bytes (the package's tobytes()); ValueError when not whole floats.
std::vector<float> floats_of(std::string_view bytes) {
  if (bytes.size() % sizeof(float) != 0) {
    throw InputError("audio samples must be float32 bytes, got " + std::to_string(bytes.size()) +
                     " bytes");
  }
  std::vector<float> out(bytes.size() / sizeof(float));
  std::memcpy(out.data(), bytes.data(), bytes.size());
  return out;
}

py::list logprob_entries(const TokenLogprobs& logprobs, const Tokenizer* tokenizer) {
  std::vector<std::pair<int32_t, float>> entries(logprobs.begin(), logprobs.end());
  // Most likely first, the lower id among equals: the order ranks are counted in.
  std::stable_sort(entries.begin(), entries.end(),
                   [](const auto& a, const auto& b) { return a.second > b.second; });
  py::list out;
  for (const auto& [id, logprob] : entries) {
    py::object decoded = py::none();
    if (tokenizer != nullptr && tokenizer->contains(id)) {
      const int32_t one[] = {id};
      decoded = py::str(tokenizer->decode(one, /*skip_special=*/false));
    }
    out.append(py::make_tuple(id, logprob, decoded));
  }
  return out;
}

}  // namespace

EngineArgs engine_args_from_dict(const py::dict& args) {
  EngineArgs a;
  for (const auto& [key_handle, value] : args) {
    const std::string key = py::str(key_handle);
    auto get = [&](auto& target) {
      using T = std::decay_t<decltype(target)>;
      try {
        target = value.cast<T>();
      } catch (const py::cast_error&) {
        throw py::type_error("LLM(" + key +
                             "=...) has the wrong type: " + py::repr(value).cast<std::string>());
      }
    };
    if (key == "model") {
      get(a.model);
    } else if (key == "tokenizer") {
      get(a.tokenizer);
    } else if (key == "mmproj") {
      get(a.mmproj);
    } else if (key == "threads") {
      get(a.threads);
    } else if (key == "max_model_len") {
      get(a.max_model_len);
    } else if (key == "block_size") {
      get(a.block_size);
    } else if (key == "kv_cache_dtype") {
      get(a.kv_cache_dtype);
    } else if (key == "kv_cache_memory_bytes") {
      get(a.kv_cache_memory_bytes);
    } else if (key == "gpu_memory_utilization") {
      get(a.gpu_memory_utilization);
    } else if (key == "max_num_seqs") {
      get(a.max_num_seqs);
    } else if (key == "max_num_batched_tokens") {
      get(a.max_num_batched_tokens);
    } else if (key == "long_prefill_token_threshold") {
      get(a.long_prefill_token_threshold);
    } else if (key == "enable_prefix_caching") {
      get(a.enable_prefix_caching);
    } else if (key == "generation_config") {
      get(a.generation_config);
    } else if (key == "override_generation_config") {
      get(a.override_generation_config);
    } else if (key == "seed") {
      get(a.seed);
    } else if (key == "show_progress") {
      get(a.show_progress);
    } else if (key == "quantization") {
      get(a.quantization);
    } else if (key == "cpu_matmul_precision") {
      get(a.cpu_matmul_precision);
    } else if (key == "mm_processor_kwargs") {  // JSON text (json.dumps of the dict)
      std::string text;
      get(text);
      a.mm_processor_kwargs = nlohmann::json::parse(parse_json_arg(text, key).dump());
      // num_frames / fps now; the engine checks max_soft_tokens when it starts.
      apply_video_processor_kwargs(a.mm_processor_kwargs, key, {});
    } else if (key == "limit_mm_per_prompt") {  // JSON text
      std::string text;
      get(text);
      a.limit_mm_per_prompt = parse_limit_mm_per_prompt(text);
    } else if (key == "media_io_kwargs") {  // JSON text, checked here as the flag is
      std::string text;
      get(text);
      a.media_io_kwargs = nlohmann::json::parse(parse_json_arg(text, key).dump());
      apply_media_io_kwargs(a.media_io_kwargs, key, {});
    } else if (key == "max_video_seconds") {
      get(a.max_video_seconds);
    } else if (key == "mm_processor_cache_gb") {
      get(a.mm_processor_cache_gb);
    } else if (key == "structured_outputs_cache_gb") {
      get(a.structured_outputs_cache_gb);
    } else if (key == "data_parallel_size") {
      get(a.data_parallel_size);
    } else if (key == "tensor_parallel_size") {
      get(a.tensor_parallel_size);
    } else if (key == "distributed_executor_backend") {
      get(a.distributed_executor_backend);
    } else if (key == "enable_expert_parallel") {
      get(a.enable_expert_parallel);
    } else if (key == "speculative_config") {  // JSON text (json.dumps of the dict)
      get(a.speculative_config);
      parse_speculative_config(a.speculative_config);
    } else {
      throw py::type_error("unknown engine argument '" + key + "'");
    }
  }
  return a;
}

PromptImage prompt_image_from_python(const py::handle& image, std::optional<int> max_soft_tokens) {
  PromptImage out;
  out.max_soft_tokens = max_soft_tokens;
  if (py::isinstance<py::bytes>(image)) {
    const std::string bytes = image.cast<std::string>();
    out.rgb = image::decode_image(
        std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()));
    return out;
  }
  const auto [width, height, pixels] = image.cast<std::tuple<int, int, std::string>>();
  if (width <= 0 || height <= 0 ||
      pixels.size() != static_cast<size_t>(width) * static_cast<size_t>(height) * 3) {
    throw InputError("an RGB image of " + std::to_string(width) + "x" + std::to_string(height) +
                     " needs " + std::to_string(int64_t{width} * height * 3) + " bytes, got " +
                     std::to_string(pixels.size()));
  }
  out.rgb.width = width;
  out.rgb.height = height;
  out.rgb.pixels.assign(pixels.begin(), pixels.end());
  return out;
}

PromptVideo prompt_video_from_python(const py::handle& video, const VideoLoadOptions& load) {
  if (py::isinstance<py::bytes>(video)) {
    const py::bytes bytes = video.cast<py::bytes>();
    const std::string_view clip = bytes;
    video::DecodedVideo decoded;
    {
      // Decoding takes a while; `bytes` holds a reference, and bytes objects never change.
      py::gil_scoped_release release;
      decoded = video::decode_video(
          std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(clip.data()), clip.size()),
          load.sampling, load.limits);
    }
    return prompt_video_of(std::move(decoded));
  }
  const auto [count, height, width, pixels, timestamps] =
      video.cast<std::tuple<int, int, int, py::bytes, std::vector<double>>>();
  const std::string_view rgb = pixels;
  const size_t frame_bytes =
      static_cast<size_t>(std::max(width, 0)) * static_cast<size_t>(std::max(height, 0)) * 3;
  // Division, not count x frame_bytes: that product could overflow.
  if (count <= 0 || frame_bytes == 0 || rgb.size() % frame_bytes != 0 ||
      rgb.size() / frame_bytes != static_cast<size_t>(count)) {
    throw InputError(std::to_string(count) + " RGB frames of " + std::to_string(width) + "x" +
                     std::to_string(height) + " need " +
                     std::to_string(int64_t{count} * width * height * 3) + " bytes, got " +
                     std::to_string(rgb.size()));
  }
  PromptVideo out;
  out.timestamps = timestamps;
  out.frames.reserve(static_cast<size_t>(count));
  for (size_t offset = 0; offset < rgb.size(); offset += frame_bytes) {
    const auto* first = reinterpret_cast<const uint8_t*>(rgb.data()) + offset;
    out.frames.push_back(image::RgbImage{width, height, {first, first + frame_bytes}});
  }
  return out;
}

PromptAudio prompt_audio_from_python(const py::handle& clip) {
  const auto [bytes, channels, rate] = clip.cast<std::tuple<py::bytes, int, int>>();
  const std::vector<float> interleaved = floats_of(std::string_view(bytes));
  if (channels <= 0 || interleaved.size() % static_cast<size_t>(channels) != 0) {
    throw InputError(std::to_string(interleaved.size()) +
                     " audio samples are not whole frames of " + std::to_string(channels) +
                     " channel(s)");
  }
  const size_t frames = interleaved.size() / static_cast<size_t>(channels);
  // The decoder's duration limit: a low rate would otherwise resample to any length.
  if (rate > 0) audio::check_audio_length(static_cast<int64_t>(frames), rate);
  std::vector<float> mono;
  mono.reserve(frames);
  audio::append_mono(interleaved, channels, mono);
  return PromptAudio{audio::resample_audio(mono, rate, PromptAudio::kSampleRate)};
}

py::bytes resample_audio_bytes(const py::bytes& samples, int from_rate, int to_rate) {
  const std::vector<float> in = floats_of(std::string_view(samples));
  std::vector<float> out;
  {
    py::gil_scoped_release release;
    out = audio::resample_audio(in, from_rate, to_rate);
  }
  return py::bytes(reinterpret_cast<const char*>(out.data()), out.size() * sizeof(float));
}

SamplingParams sampling_params_from_python(const py::handle& sp) {
  constexpr const char* kOwner = "SamplingParams";
  SamplingParams p;
  p.n = field<int>(sp, kOwner, "n");
  p.presence_penalty = field<double>(sp, kOwner, "presence_penalty");
  p.frequency_penalty = field<double>(sp, kOwner, "frequency_penalty");
  p.repetition_penalty = field<double>(sp, kOwner, "repetition_penalty");
  p.temperature = field<double>(sp, kOwner, "temperature");
  p.top_p = field<double>(sp, kOwner, "top_p");
  p.top_k = field<int>(sp, kOwner, "top_k");
  p.min_p = field<double>(sp, kOwner, "min_p");
  if (auto seed = optional_field<int64_t>(sp, kOwner, "seed")) {
    p.seed = static_cast<uint64_t>(*seed);
  }
  p.stop = field<std::vector<std::string>>(sp, kOwner, "stop");
  p.stop_token_ids = field<std::vector<int32_t>>(sp, kOwner, "stop_token_ids");
  p.ignore_eos = field<bool>(sp, kOwner, "ignore_eos");
  // None (vLLM: up to max_model_len) is resolved per prompt by the caller; 16 stands in here.
  p.max_tokens = optional_field<int>(sp, kOwner, "max_tokens").value_or(16);
  p.min_tokens = field<int>(sp, kOwner, "min_tokens");
  p.logprobs = optional_field<int>(sp, kOwner, "logprobs");
  p.prompt_logprobs = optional_field<int>(sp, kOwner, "prompt_logprobs");
  p.skip_special_tokens = field<bool>(sp, kOwner, "skip_special_tokens");
  p.include_stop_str_in_output = field<bool>(sp, kOwner, "include_stop_str_in_output");
  if (auto bias = optional_field<std::map<int32_t, float>>(sp, kOwner, "logit_bias")) {
    p.logit_bias = std::move(*bias);
  }
  p.allowed_token_ids = optional_field<std::vector<int32_t>>(sp, kOwner, "allowed_token_ids");
  p.bad_words = field<std::vector<std::string>>(sp, kOwner, "bad_words");
  return p;
}

py::dict sampling_params_to_kwargs(const SamplingParams& p) {
  py::dict d;
  d["n"] = p.n;
  d["presence_penalty"] = p.presence_penalty;
  d["frequency_penalty"] = p.frequency_penalty;
  d["repetition_penalty"] = p.repetition_penalty;
  d["temperature"] = p.temperature;
  d["top_p"] = p.top_p;
  d["top_k"] = p.top_k;
  d["min_p"] = p.min_p;
  d["seed"] = p.seed ? py::int_(*p.seed) : py::object(py::none());
  d["stop"] = p.stop;
  d["stop_token_ids"] = p.stop_token_ids;
  d["ignore_eos"] = p.ignore_eos;
  d["max_tokens"] = p.max_tokens;
  d["min_tokens"] = p.min_tokens;
  d["logprobs"] = p.logprobs ? py::int_(*p.logprobs) : py::object(py::none());
  d["prompt_logprobs"] = p.prompt_logprobs ? py::int_(*p.prompt_logprobs) : py::object(py::none());
  d["skip_special_tokens"] = p.skip_special_tokens;
  d["include_stop_str_in_output"] = p.include_stop_str_in_output;
  d["logit_bias"] = p.logit_bias.empty() ? py::object(py::none()) : py::cast(p.logit_bias);
  d["allowed_token_ids"] = p.allowed_token_ids ? py::cast(*p.allowed_token_ids) : py::none();
  d["bad_words"] = p.bad_words;
  return d;
}

py::dict request_output_to_python(const RequestOutput& r, const Tokenizer* tokenizer) {
  py::dict d;
  d["request_id"] = r.request_id;
  d["prompt"] = r.prompt ? py::object(py::str(*r.prompt)) : py::object(py::none());
  d["prompt_token_ids"] = r.prompt_token_ids;
  if (r.prompt_logprobs) {
    py::list positions;
    for (const auto& lp : *r.prompt_logprobs) {
      positions.append(lp ? py::object(logprob_entries(*lp, tokenizer)) : py::object(py::none()));
    }
    d["prompt_logprobs"] = positions;
  } else {
    d["prompt_logprobs"] = py::none();
  }
  py::list outputs;
  for (const CompletionOutput& o : r.outputs) {
    py::dict c;
    c["index"] = o.index;
    c["text"] = py::str(o.text);
    c["token_ids"] = o.token_ids;
    if (o.logprobs) {
      py::list positions;
      for (const TokenLogprobs& lp : *o.logprobs) positions.append(logprob_entries(lp, tokenizer));
      c["logprobs"] = positions;
    } else {
      c["logprobs"] = py::none();
    }
    c["finish_reason"] = o.finish_reason ? py::object(py::str(*o.finish_reason)) : py::none();
    if (o.stop_reason_text) {
      c["stop_reason"] = py::str(*o.stop_reason_text);
    } else if (o.stop_reason_token) {
      c["stop_reason"] = py::int_(*o.stop_reason_token);
    } else {
      c["stop_reason"] = py::none();
    }
    outputs.append(c);
  }
  d["outputs"] = outputs;
  d["num_cached_tokens"] =
      r.num_cached_tokens < 0 ? py::object(py::none()) : py::object(py::int_(r.num_cached_tokens));
  return d;
}

nlohmann::ordered_json parse_json_arg(const std::string& text, const std::string& what) {
  try {
    return nlohmann::ordered_json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    throw InputError(what + " is not valid JSON: " + e.what());
  }
}

}  // namespace gemmaserve::python
