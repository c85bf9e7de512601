// Python <-> C++ conversions for the _gemmaserve extension: EngineArgs from a dict, the engine's
// SamplingParams from a gemmaserve.SamplingParams object, outputs as plain dicts and lists (the
// Python package wraps them in vLLM's classes).
#pragma once

#include <pybind11/pybind11.h>

#include <nlohmann/json.hpp>
#include <optional>

#include "gemmaserve/llm.h"
#include "server/shared/chat_video.h"

namespace gemmaserve::python {

namespace py = pybind11;

// EngineArgs from {field: value} with EngineArgs' field names; TypeError names a bad value.
EngineArgs engine_args_from_dict(const py::dict& args);

// One multi_modal_data image as the package passes it: encoded bytes (decoded as the server
// decodes an image_url) or (width, height, RGB bytes) from a PIL image. ValueError for bad data.
PromptImage prompt_image_from_python(const py::handle& image, std::optional<int> max_soft_tokens);

// One multi_modal_data audio clip as the package passes it: (float32 samples as bytes, in C order
// of (frames, channels), channels, sample rate), averaged to mono as np.mean over the channels
// and resampled to 16 kHz as the server's decoder does (io/audio). ValueError for bad data.
PromptAudio prompt_audio_from_python(const py::handle& clip);

// One multi_modal_data video as the package passes it: an encoded clip (bytes, decoded by
// io/video with `load` as LLM::chat decodes a video_url) or (frame count, height, width, RGB
// bytes of the frames in order, each frame's time in seconds). ValueError for bad data.
PromptVideo prompt_video_from_python(const py::handle& video, const VideoLoadOptions& load);

// float32 samples (bytes) resampled from from_rate to to_rate with the server's resampler
// (libsoxr as librosa's soxr_hq); equal rates return them unchanged. ValueError for bad rates.
py::bytes resample_audio_bytes(const py::bytes& samples, int from_rate, int to_rate);

// The engine's parameters from a gemmaserve.SamplingParams (its attributes, vLLM's names). The
// structured-output constraint is not set here (it needs the tokenizer; see the module).
SamplingParams sampling_params_from_python(const py::handle& params);

// The generation-config defaults as gemmaserve.SamplingParams keyword arguments.
py::dict sampling_params_to_kwargs(const SamplingParams& params);

// A finished request as {"request_id", "prompt", "prompt_token_ids", "prompt_logprobs",
// "outputs": [{"index", "text", "token_ids", "logprobs", "finish_reason", "stop_reason"}],
// "num_cached_tokens"}. Logprobs are lists of (token_id, logprob, decoded_token) per position,
// most likely first; decoded_token is None without a tokenizer.
py::dict request_output_to_python(const RequestOutput& output, const Tokenizer* tokenizer);

// JSON text (from Python's json.dumps) to JSON, keeping key order; ValueError names `what`.
nlohmann::ordered_json parse_json_arg(const std::string& text, const std::string& what);

}  // namespace gemmaserve::python
