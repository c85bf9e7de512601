#include "cli/generate_command.h"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <optional>

#include "cli/arg_parser.h"
#include "cli/config_file.h"
#include "cli/engine_flags.h"
#include "cli/tensor_parallel_launch.h"
#include "core/error.h"
#include "core/logging.h"
#include "engine/engine.h"
#include "gemmaserve/llm.h"
#include "io/audio/audio_decode.h"
#include "io/image/image_decode.h"
#include "io/video/video_decode.h"
#include "server/shared/chat_video.h"

namespace gemmaserve {
namespace {

constexpr const char* kUsage =
    "usage: gemmaserve generate MODEL_DIR (--prompt TEXT | --prompt-ids 2,45,67)... [options]\n"
    "All prompts are submitted together as one batch.\n"
    "sampling options (vLLM's SamplingParams):\n"
    "  --max-tokens N (16)  --min-tokens N  --n N  --temperature T  --top-p P  --top-k K\n"
    "  --min-p P  --presence-penalty X  --frequency-penalty X  --repetition-penalty X\n"
    "  --seed S (also the engine seed)  --ignore-eos  --stop TEXT...  --stop-token-ids IDS\n"
    "  --logprobs K  --prompt-logprobs K  --[no-]skip-special-tokens\n"
    "images (repeatable): --image FILE (PNG, JPEG, WebP, GIF) goes to the next bare <|image|>\n"
    "  token of the prompts, in order; each becomes <|image> + N x <|image|> + <image|>\n"
    "audio (repeatable): --audio FILE (WAV, FLAC, MP3, OGG Vorbis, Opus; mixed to mono and\n"
    "  resampled to 16 kHz) goes to the next bare <|audio|> token of the prompts, in order;\n"
    "  each becomes <|audio> + N x <|audio|> + <audio|> (N: one per 40 ms, 750 at most: the\n"
    "  model hears the first 30 s); the model needs an audio tower (E2B, E4B) or embedder (12B)\n"
    "videos (repeatable): --video FILE (MP4/MOV, WebM/MKV, animated GIF or WebP) goes to the\n"
    "  next bare <|video|> token, in order; its frames are sampled as the server samples them\n"
    "  (--media-io-kwargs '{\"video\": {\"num_frames\": 32}}', the default) and each becomes\n"
    "  'mm:ss' + <|image> + N x <|video|> + <image|> at 70 soft tokens; the timestamps need a\n"
    "  tokenizer (the checkpoint's or --tokenizer) and the frames a vision tower\n"
    "output: text per completion, or one JSON object per completion with --json\n";

nlohmann::json logprobs_json(const TokenLogprobs& lp) {
  nlohmann::json o = nlohmann::json::object();
  for (const auto& [id, v] : lp) o[std::to_string(id)] = v;
  return o;
}

nlohmann::json completion_json(const RequestOutput& r, const CompletionOutput& o, bool has_text,
                               bool several) {
  nlohmann::json j;
  j["prompt_token_ids"] = r.prompt_token_ids;
  if (several) j["index"] = o.index;
  j["token_ids"] = o.token_ids;
  if (has_text) j["text"] = o.text;
  if (o.logprobs) {
    j["logprobs"] = nlohmann::json::array();
    for (const auto& lp : *o.logprobs) j["logprobs"].push_back(logprobs_json(lp));
  }
  if (r.prompt_logprobs) {
    j["prompt_logprobs"] = nlohmann::json::array();
    for (const auto& lp : *r.prompt_logprobs) {
      j["prompt_logprobs"].push_back(lp ? logprobs_json(*lp) : nlohmann::json(nullptr));
    }
  }
  j["finish_reason"] = o.finish_reason ? nlohmann::json(*o.finish_reason) : nlohmann::json();
  if (o.stop_reason_text) {
    j["stop_reason"] = *o.stop_reason_text;
  } else if (o.stop_reason_token) {
    j["stop_reason"] = *o.stop_reason_token;
  } else {
    j["stop_reason"] = nullptr;
  }
  return j;
}

// The bytes of a media file named by `flag`.
std::vector<std::uint8_t> read_media_file(const std::string& flag, const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InputError(flag + " " + path + ": cannot be read");
  return std::vector<std::uint8_t>((std::istreambuf_iterator<char>(in)), {});
}

// The decoded pixels of an --image file, as the server decodes an image_url.
PromptImage read_image_file(const std::string& path) {
  const std::vector<std::uint8_t> bytes = read_media_file("--image", path);
  try {
    return PromptImage{image::decode_image(bytes), std::nullopt};
  } catch (const InputError& e) {
    throw InputError("--image " + path + ": " + e.what());
  }
}

// The 16 kHz mono samples of an --audio file, as the server decodes an input_audio part.
PromptAudio read_audio_file(const std::string& path) {
  const std::vector<std::uint8_t> bytes = read_media_file("--audio", path);
  try {
    return PromptAudio{audio::load_audio(bytes).samples};
  } catch (const InputError& e) {
    throw InputError("--audio " + path + ": " + e.what());
  }
}

// The sampled frames of a --video file, decoded as the server decodes a video_url part.
PromptVideo read_video_file(const std::string& path, const VideoLoadOptions& options) {
  const std::vector<std::uint8_t> bytes = read_media_file("--video", path);
  try {
    return prompt_video_of(video::decode_video(bytes, options.sampling, options.limits));
  } catch (const InputError& e) {
    throw InputError("--video " + path + ": " + e.what());
  }
}

// One modality's files and where they go: Prompt::*field, one per bare `token` of the prompts.
template <typename Item>
struct MediaFlag {
  const char* flag;         // "--image"
  const char* items;        // "image(s)", in the error
  const char* placeholder;  // "<|image|>"
  std::optional<int> token;
  std::vector<Item> Prompt::*field;
  std::vector<Item> files;
};

// Deals the files out to the prompts in the order of their bare placeholder tokens; more files
// than placeholders is an error here (fewer is the engine's, per prompt).
template <typename Item>
void deal_media(MediaFlag<Item> media, const std::vector<std::vector<int32_t>>& prompt_ids,
                std::vector<Prompt>* prompts) {
  size_t next = 0;
  for (size_t i = 0; i < prompts->size(); ++i) {
    const std::vector<int32_t>& ids = prompt_ids[i];
    const auto wanted =
        static_cast<size_t>(media.token ? std::count(ids.begin(), ids.end(), *media.token) : 0);
    for (size_t k = 0; k < wanted && next < media.files.size(); ++k) {
      ((*prompts)[i].*media.field).push_back(std::move(media.files[next++]));
    }
  }
  if (next < media.files.size()) {
    throw InputError(std::string(media.flag) + ": " + std::to_string(media.files.size()) + " " +
                     media.items + " given but the prompts hold only " + std::to_string(next) +
                     " " + media.placeholder + " token(s)");
  }
}

// Each modality's files, in flag order.
struct MediaFiles {
  std::vector<PromptImage> images;
  std::vector<PromptAudio> audios;
  std::vector<PromptVideo> videos;
};

void attach_media(LLM& llm, MediaFiles files, std::vector<Prompt>* prompts) {
  if (files.images.empty() && files.audios.empty() && files.videos.empty()) return;
  std::vector<std::vector<int32_t>> ids;
  for (const Prompt& prompt : *prompts) {
    ids.push_back(prompt.text ? llm.engine().encode_prompt(*prompt.text) : prompt.token_ids);
  }
  const ModelConfig& config = llm.engine().model_config();
  deal_media<PromptImage>({"--image", "image(s)", "<|image|>", config.image_token_id,
                           &Prompt::images, std::move(files.images)},
                          ids, prompts);
  deal_media<PromptAudio>({"--audio", "audio clip(s)", "<|audio|>", config.audio_token_id,
                           &Prompt::audios, std::move(files.audios)},
                          ids, prompts);
  deal_media<PromptVideo>({"--video", "video(s)", "<|video|>", config.video_token_id,
                           &Prompt::videos, std::move(files.videos)},
                          ids, prompts);
}

// Generates what the parsed flags ask and prints it.
int run_generate(const ArgParser& p) {
  if (p.positionals().size() != 1) {
    throw InputError("generate needs MODEL_DIR\n" + std::string(kUsage));
  }
  if (p.all("--prompt").empty() && p.all("--prompt-ids").empty()) {
    throw InputError("generate needs --prompt TEXT or --prompt-ids IDS\n" + std::string(kUsage));
  }
  // Flags are checked before the (possibly slow) load so mistakes fail fast.
  const EngineArgs ea = engine_args_from_flags(p, p.positionals()[0]);
  if (run_as_tensor_parallel_follower(ea)) return 0;
  std::vector<Prompt> prompts;
  for (const auto& t : p.all("--prompt")) prompts.push_back(Prompt::from_text(t));
  for (const auto& s : p.all("--prompt-ids")) {
    auto ids = parse_int_list(s, "--prompt-ids");
    prompts.push_back(Prompt::from_ids(std::vector<int32_t>(ids.begin(), ids.end())));
  }
  std::vector<int32_t> stop_ids;
  for (const auto& s : p.all("--stop-token-ids")) {
    for (int id : parse_int_list(s, "--stop-token-ids")) stop_ids.push_back(id);
  }
  MediaFiles files;
  for (const auto& path : p.all("--image")) files.images.push_back(read_image_file(path));
  for (const auto& path : p.all("--audio")) files.audios.push_back(read_audio_file(path));
  // The server's loader settings, with the media room's default video size cap (vLLM's LLM's).
  const VideoLoadOptions video_options =
      engine_video_load_options(ea, media::MediaConnectorOptions{});
  for (const auto& path : p.all("--video")) {
    files.videos.push_back(read_video_file(path, video_options));
  }
  LLM llm(ea);
  attach_media(llm, std::move(files), &prompts);

  SamplingParams sp = llm.default_sampling_params();
  sp.n = p.get_int("--n", sp.n);
  sp.max_tokens = p.get_int("--max-tokens", sp.max_tokens);
  sp.min_tokens = p.get_int("--min-tokens", sp.min_tokens);
  sp.temperature = p.get_double("--temperature", sp.temperature);
  sp.top_p = p.get_double("--top-p", sp.top_p);
  sp.top_k = p.get_int("--top-k", sp.top_k);
  sp.min_p = p.get_double("--min-p", sp.min_p);
  sp.presence_penalty = p.get_double("--presence-penalty", sp.presence_penalty);
  sp.frequency_penalty = p.get_double("--frequency-penalty", sp.frequency_penalty);
  sp.repetition_penalty = p.get_double("--repetition-penalty", sp.repetition_penalty);
  if (p.has("--seed")) sp.seed = ea.seed;
  sp.ignore_eos = p.get_flag("--ignore-eos");
  sp.skip_special_tokens = p.get_flag("--skip-special-tokens", true);
  if (p.has("--logprobs")) sp.logprobs = p.get_int("--logprobs", 0);
  if (p.has("--prompt-logprobs")) sp.prompt_logprobs = p.get_int("--prompt-logprobs", 0);
  for (const auto& s : p.all("--stop")) sp.stop.push_back(s);
  sp.stop_token_ids = stop_ids;

  const bool json = p.get_flag("--json");
  const bool has_text = llm.tokenizer() != nullptr;
  for (const RequestOutput& r : llm.generate(prompts, sp)) {
    for (const CompletionOutput& o : r.outputs) {
      if (json) {
        // Invalid UTF-8 from byte-level tokens is replaced rather than aborting the dump.
        std::cout << completion_json(r, o, has_text, sp.n > 1)
                         .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace)
                  << "\n";
      } else if (has_text) {
        std::cout << o.text << "\n";
      } else {
        for (size_t i = 0; i < o.token_ids.size(); ++i) {
          std::cout << (i ? "," : "") << o.token_ids[i];
        }
        std::cout << "\n";
      }
    }
  }
  const EngineStats st = llm.engine().stats();
  GS_LOG_INFO << "generate: " << st.steps << " steps, " << st.prompt_tokens << " prompt and "
              << st.generation_tokens << " generated tokens, " << st.computed_tokens
              << " computed, prefix cache hits " << st.prefix_cache_hits << "/"
              << st.prefix_cache_queries << " tokens, " << st.preemptions << " preemptions"
              << (st.images_encoded + st.mm_cache_hits > 0
                      ? ", " + std::to_string(st.images_encoded) +
                            " images, audio clips and video frames encoded in " +
                            std::to_string(st.encoder_seconds) + " s, encoder cache hits " +
                            std::to_string(st.mm_cache_hits) + "/" +
                            std::to_string(st.mm_cache_queries)
                      : std::string());
  return 0;
}

}  // namespace

int run_generate_command(const std::vector<std::string>& args) {
  ArgParser p;
  add_engine_flags(p);
  p.list("--prompt").list("--prompt-ids").value("--max-tokens").value("--min-tokens");
  p.value("--n").value("--temperature").value("--top-p").value("--top-k").value("--min-p");
  p.value("--presence-penalty").value("--frequency-penalty").value("--repetition-penalty");
  p.value("--logprobs").value("--prompt-logprobs").list("--stop").list("--stop-token-ids");
  p.list("--image").list("--audio").list("--video");
  p.flag("--ignore-eos").flag("--json").flag("--help", {"-h"}).flag("--skip-special-tokens");
  const ConfigFileFlags config = parse_with_config_file(p, args, 1);
  if (p.get_flag("--help")) {
    std::cout << kUsage << engine_flags_usage();
    return 0;
  }
  return config.explaining([&] { return run_generate(p); });
}

}  // namespace gemmaserve
