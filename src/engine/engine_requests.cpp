// The engine's requests in: prompts (BOS, image placeholders), per-request state and sampling
// setup, admission to the scheduler (all or none), aborts, and the stats snapshot.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <iterator>
#include <set>

#include "core/error.h"
#include "core/logging.h"
#include "engine/engine.h"
#include "engine/engine_state.h"
#include "engine/request_sampler.h"
#include "engine/scheduler.h"
#include "engine/speculative/speculative_decoding.h"
#include "engine/stop_checker.h"
#include "engine/structured/compiled_grammar.h"
#include "model/gemma4_image_processor.h"
#include "model/gemma4_model.h"
#include "parallel/communicator.h"
#include "tokenizer/tokenizer.h"

namespace gemmaserve {
namespace {

// SplitMix64: spreads (engine seed, request number) into independent generator seeds.
uint64_t mix_seed(uint64_t seed, uint64_t n) {
  uint64_t z = seed + 0x9E3779B97F4A7C15ULL * (n + 1);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

}  // namespace

int Engine::vocab_size() const { return model_->vocab_size(); }
const ModelConfig& Engine::model_config() const { return model_->config(); }
SamplingParams Engine::default_sampling_params() const {
  return apply_generation_defaults(generation_);
}

std::vector<int32_t> Engine::encode_prompt(const std::string& text) const {
  if (!tokenizer_) {
    throw InputError("a text prompt needs a tokenizer, and " + args_.model +
                     " has none (pass --tokenizer or use token ids)");
  }
  return prompt_with_bos(tokenizer_->encode(text, /*add_special=*/false, /*parse_special=*/true));
}

std::vector<int32_t> Engine::prompt_with_bos(std::vector<int32_t> ids) const {
  const int32_t bos = tokenizer_ ? tokenizer_->bos_id() : -1;
  if (bos < 0) return ids;
  const auto first_other =
      std::find_if(ids.begin(), ids.end(), [bos](int32_t id) { return id != bos; });
  if (first_other == ids.begin()) {
    ids.insert(ids.begin(), bos);
  } else {
    ids.erase(ids.begin() + 1, first_other);
  }
  return ids;
}

// ---- Images -----------------------------------------------------------------------------------

bool Engine::has_vision() const {
  return model_->config().vision.has_value() || model_->config().unified_vision.has_value();
}

Gemma4ImageProcessorOptions Engine::image_processor_options(int max_soft_tokens) const {
  Gemma4ImageProcessorOptions options = image_processor_;
  options.max_soft_tokens = max_soft_tokens;
  // The unified embedder takes merged patches, one per soft token.
  if (model_->config().unified_vision) options = merged_patch_options(options);
  return options;
}

int Engine::image_soft_tokens(const PromptImage& image) const {
  if (!has_vision()) {
    throw InputError("This model does not accept image input: " + args_.model +
                     " has no vision encoder.");
  }
  return soft_tokens_at(image.rgb.width, image.rgb.height,
                        image.max_soft_tokens.value_or(image_processor_.max_soft_tokens));
}

int Engine::soft_tokens_at(int width, int height, int max_soft_tokens) const {
  validate_gemma4_max_soft_tokens(max_soft_tokens);
  const ModelConfig& c = model_->config();
  const int table = c.vision ? c.vision->position_embedding_size : c.unified_vision->mm_posemb_size;
  return gemma4_image_soft_tokens(image_processor_options(max_soft_tokens), table, width, height);
}

ExpandedPrompt Engine::expand_image_placeholders(std::span<const int32_t> ids,
                                                 std::span<const PromptImage> images) const {
  const ModelConfig& config = model_->config();
  if (!has_vision()) {
    if (!images.empty()) {
      throw InputError("This model does not accept image input: " + args_.model +
                       " has no vision encoder.");
    }
    return ExpandedPrompt{std::vector<int32_t>(ids.begin(), ids.end()), {}};
  }
  check_image_limit(args_.limit_mm_per_prompt, images.size());
  std::vector<int> soft_tokens;
  for (const PromptImage& image : images) soft_tokens.push_back(image_soft_tokens(image));
  const ImageTokenIds tokens{config.image_token_id.value_or(-1), config.boi_token_id.value_or(-1),
                             config.eoi_token_id.value_or(-1)};
  return gemmaserve::expand_image_placeholders(ids, soft_tokens, tokens);
}

// ---- Audio ------------------------------------------------------------------------------------

bool Engine::has_audio() const { return model_->accepts_audio(); }

int Engine::audio_soft_tokens(size_t samples) const {
  if (!has_audio()) {
    throw InputError("This model does not accept audio input: " + args_.model +
                     " has no audio embedder.");
  }
  if (samples == 0) throw InputError("an audio clip must hold at least one sample");
  const int64_t n = model_->audio_soft_tokens(static_cast<int64_t>(samples));
  if (n > max_model_len_) {
    throw InputError("an audio clip of " + std::to_string(samples) + " samples is " +
                     std::to_string(n) + " soft tokens, more than max_model_len (" +
                     std::to_string(max_model_len_) + ")");
  }
  return static_cast<int>(n);
}

std::vector<audio::SampleRange> Engine::audio_pieces(std::span<const float> samples) const {
  const double seconds = static_cast<double>(samples.size()) / PromptAudio::kSampleRate;
  if (seconds > args_.max_audio_seconds) {
    char text[96];
    std::snprintf(text, sizeof text,
                  "an audio clip of %.1f s is longer than --max-audio-seconds (%g s)", seconds,
                  args_.max_audio_seconds);
    throw InputError(text);
  }
  return audio::split_audio(samples);
}

namespace {

// `ids` with the i-th <|audio|> repeated pieces[i] times (one per piece of a long clip); unchanged
// when the count of <|audio|> differs from the clips (the expansion then says so).
std::vector<int32_t> repeat_audio_placeholders(std::span<const int32_t> ids, int32_t placeholder,
                                               std::span<const size_t> pieces) {
  const auto bare = static_cast<size_t>(std::count(ids.begin(), ids.end(), placeholder));
  std::vector<int32_t> out(ids.begin(), ids.end());
  if (bare != pieces.size()) return out;
  out.clear();
  size_t clip = 0;
  for (const int32_t id : ids) {
    const size_t copies = id == placeholder ? pieces[clip++] : 1;
    out.insert(out.end(), copies, id);
  }
  return out;
}

}  // namespace

// ---- Video ------------------------------------------------------------------------------------

namespace {

// Python's float // and % for a non-negative number of seconds (HF formats with them).
std::pair<int64_t, int64_t> python_minutes_seconds(double t) {
  const double mod = std::fmod(t, 60.0);
  const double div = (t - mod) / 60.0;
  double floordiv = std::floor(div);
  if (div - floordiv > 0.5) floordiv += 1.0;
  return {static_cast<int64_t>(floordiv), static_cast<int64_t>(mod)};
}

}  // namespace

std::vector<PromptImage> Engine::video_frames_as_images(PromptVideo video) {
  const int budget = video.max_soft_tokens.value_or(PromptVideo::kDefaultMaxSoftTokens);
  std::vector<PromptImage> frames;
  frames.reserve(video.frames.size());
  for (image::RgbImage& f : video.frames) frames.push_back(PromptImage{std::move(f), budget});
  return frames;
}

void Engine::check_accepts_video() const {
  if (!has_vision() || !model_->config().video_token_id) {
    throw InputError("This model does not accept video input: " + args_.model +
                     " has no vision encoder.");
  }
}

std::vector<int32_t> Engine::video_frame_ids(const PromptVideo& video) const {
  const ModelConfig& c = model_->config();
  check_accepts_video();
  if (video.frames.empty()) throw InputError("a video must hold at least one frame");
  if (video.timestamps.size() != video.frames.size()) {
    throw InputError("a video has " + std::to_string(video.frames.size()) + " frames but " +
                     std::to_string(video.timestamps.size()) + " timestamps; give one per frame");
  }
  if (!tokenizer_) {
    throw InputError("video input needs a tokenizer for its frames' timestamps, and " +
                     args_.model + " has none (pass --tokenizer)");
  }
  const int budget = video.max_soft_tokens.value_or(PromptVideo::kDefaultMaxSoftTokens);
  std::vector<int32_t> ids;
  for (size_t i = 0; i < video.frames.size(); ++i) {
    const double t = video.timestamps[i];
    if (!std::isfinite(t) || t < 0 || t > 1e9) {
      throw InputError("a video frame's timestamp must be a non-negative number of seconds");
    }
    const auto [minutes, seconds] = python_minutes_seconds(t);
    char stamp[48];
    std::snprintf(stamp, sizeof stamp, "%s%02lld:%02lld ", i == 0 ? "" : " ",
                  static_cast<long long>(minutes), static_cast<long long>(seconds));
    const std::vector<int32_t> text = tokenizer_->encode(stamp, /*add_special=*/false,
                                                         /*parse_special=*/false);
    ids.insert(ids.end(), text.begin(), text.end());
    ids.push_back(c.boi_token_id.value_or(-1));
    const image::RgbImage& frame = video.frames[i];
    ids.insert(ids.end(), static_cast<size_t>(soft_tokens_at(frame.width, frame.height, budget)),
               *c.video_token_id);
    ids.push_back(c.eoi_token_id.value_or(-1));
  }
  return ids;
}

ExpandedPrompt Engine::expand_media_placeholders(std::span<const int32_t> ids,
                                                 std::span<const PromptImage> images,
                                                 std::span<const PromptAudio> audios,
                                                 std::span<const PromptVideo> videos) const {
  const ModelConfig& config = model_->config();
  const int32_t video_token = config.video_token_id.value_or(-1);
  const bool any_video_token = std::find(ids.begin(), ids.end(), video_token) != ids.end();
  if (videos.empty() && !any_video_token) return expand_image_and_audio(ids, images, audios);
  if (!videos.empty()) check_accepts_video();  // the model's refusal comes first
  check_video_limit(args_.limit_mm_per_prompt, videos.size());
  std::vector<std::vector<int32_t>> layouts;
  for (const PromptVideo& v : videos) layouts.push_back(video_frame_ids(v));
  const MediaTokens tokens{video_token,
                           config.boi_token_id.value_or(-1),
                           config.eoi_token_id.value_or(-1),
                           "<|video|>",
                           "<|image>",
                           "video"};
  const std::vector<int32_t> with_videos = replace_media_placeholders(ids, layouts, tokens);
  ExpandedPrompt out = expand_image_and_audio(with_videos, images, audios);
  for (const ImagePlaceholder& run : placeholder_runs(out.token_ids, video_token)) {
    out.placeholders.push_back(run);
  }
  return out;
}

ExpandedPrompt Engine::expand_image_and_audio(std::span<const int32_t> ids,
                                              std::span<const PromptImage> images,
                                              std::span<const PromptAudio> audios) const {
  const ModelConfig& config = model_->config();
  if (audios.empty() || !config.audio_token_id) {
    if (!audios.empty()) audio_soft_tokens(audios.front().samples.size());  // the refusal
    return expand_image_placeholders(ids, images);
  }
  check_audio_limit(args_.limit_mm_per_prompt, audios.size());
  std::vector<int> soft_tokens;
  std::vector<size_t> pieces_per_clip;
  for (const PromptAudio& a : audios) {
    if (a.samples.empty()) audio_soft_tokens(0);  // the refusal of an empty clip
    const std::vector<audio::SampleRange> pieces = audio_pieces(a.samples);
    pieces_per_clip.push_back(pieces.size());
    for (const audio::SampleRange& p : pieces) soft_tokens.push_back(audio_soft_tokens(p.size()));
  }
  const std::vector<int32_t> repeated =
      repeat_audio_placeholders(ids, *config.audio_token_id, pieces_per_clip);
  const MediaTokens tokens{*config.audio_token_id,
                           config.boa_token_id.value_or(-1),
                           config.eoa_token_id.value_or(-1),
                           "<|audio|>",
                           "<|audio>",
                           "audio clip"};
  // A mismatch is reported in the clips the caller gave, not in their pieces.
  if (repeated.size() == ids.size() && soft_tokens.size() != audios.size()) {
    std::vector<int> per_clip(audios.size(), 0);
    gemmaserve::expand_media_placeholders(ids, per_clip, tokens);  // throws the mismatch
  }
  const ExpandedPrompt with_audio =
      gemmaserve::expand_media_placeholders(repeated, soft_tokens, tokens);
  // Images expand after the clips; the clips' runs are found again in the final ids.
  ExpandedPrompt out = expand_image_placeholders(with_audio.token_ids, images);
  for (const ImagePlaceholder& run : placeholder_runs(out.token_ids, *config.audio_token_id)) {
    out.placeholders.push_back(run);
  }
  return out;
}

// ---- Requests in ------------------------------------------------------------------------------

std::vector<Engine::RequestMedia> Engine::prepare_prompt(EngineRequest& r) const {
  if (r.prompt_token_ids.empty()) throw InputError("The decoder prompt cannot be empty");
  r.prompt_token_ids = prompt_with_bos(std::move(r.prompt_token_ids));
  ExpandedPrompt expanded =
      expand_media_placeholders(r.prompt_token_ids, r.images, r.audios, r.videos);
  r.prompt_token_ids = std::move(expanded.token_ids);
  // A long clip is heard in pieces, one media item (and span) each.
  std::vector<PromptAudio> pieces;
  for (PromptAudio& clip : r.audios) {
    const std::vector<audio::SampleRange> ranges = audio_pieces(clip.samples);
    if (ranges.size() == 1) {
      pieces.push_back(std::move(clip));
      continue;
    }
    for (const audio::SampleRange& p : ranges) {
      pieces.push_back(PromptAudio{
          std::vector<float>(clip.samples.begin() + p.begin, clip.samples.begin() + p.end)});
    }
  }
  r.audios = std::move(pieces);
  std::vector<PromptImage> frames;  // every video's frames, in order: images at the video budget
  for (PromptVideo& v : r.videos) {
    std::vector<PromptImage> f = video_frames_as_images(std::move(v));
    std::move(f.begin(), f.end(), std::back_inserter(frames));
  }
  r.videos.clear();
  std::vector<RequestMedia> media(r.images.size() + r.audios.size() + frames.size());
  for (size_t i = 0; i < r.images.size(); ++i) {
    RequestMedia& image = media[i];
    image.image = std::move(r.images[i]);
    image.max_soft_tokens = image.image.max_soft_tokens.value_or(image_processor_.max_soft_tokens);
    image.hash = image_content_hash(image.image.rgb, image.max_soft_tokens);
    image.where = expanded.placeholders[i];
  }
  for (size_t i = 0; i < r.audios.size(); ++i) {
    RequestMedia& clip = media[r.images.size() + i];
    clip.audio = std::move(r.audios[i]);
    clip.hash = audio_content_hash(clip.audio->samples);
    clip.where = expanded.placeholders[r.images.size() + i];
  }
  const size_t first_frame = r.images.size() + r.audios.size();
  for (size_t i = 0; i < frames.size(); ++i) {
    RequestMedia& frame = media[first_frame + i];
    frame.image = std::move(frames[i]);
    frame.max_soft_tokens = *frame.image.max_soft_tokens;
    frame.hash = image_content_hash(frame.image.rgb, frame.max_soft_tokens);
    frame.where = expanded.placeholders[first_frame + i];
  }
  // The scheduler walks a request's media in prompt order.
  std::sort(media.begin(), media.end(), [](const RequestMedia& a, const RequestMedia& b) {
    return a.where.offset < b.where.offset;
  });
  r.images.clear();
  r.audios.clear();
  return media;
}

std::shared_ptr<Engine::RequestState> Engine::make_request_state(
    Submission submission, std::vector<RequestMedia> images,
    std::shared_ptr<const structured::CompiledGrammar> grammar) {
  EngineRequest& r = submission.request;
  const int vocab = model_->vocab_size();
  if (r.request_id.empty()) throw InputError("request id must not be empty");
  if (requests_.count(r.request_id) > 0) {
    throw InputError("request id '" + r.request_id + "' is already in use");
  }
  r.params.validate(vocab);
  if (r.prompt_token_ids.empty()) throw InputError("The decoder prompt cannot be empty");
  for (int32_t id : r.prompt_token_ids) {
    if (id < 0 || id >= vocab) {
      throw InputError("Token id " + std::to_string(id) + " is out of vocabulary");
    }
  }
  const int prompt_len = static_cast<int>(r.prompt_token_ids.size());
  check_request_length(prompt_len, r.params.max_tokens, max_model_len_);

  auto state = std::make_shared<RequestState>();
  state->output.request_id = r.request_id;
  state->output.prompt = r.prompt;
  state->output.prompt_token_ids = r.prompt_token_ids;
  if (r.params.prompt_logprobs) state->prompt_logprobs.push_back(std::nullopt);
  std::vector<int32_t> stop_ids = r.params.stop_token_ids;
  if (!r.params.ignore_eos) stop_ids.insert(stop_ids.end(), eos_ids_.begin(), eos_ids_.end());
  std::sort(stop_ids.begin(), stop_ids.end());
  stop_ids.erase(std::unique(stop_ids.begin(), stop_ids.end()), stop_ids.end());

  const int n = r.params.n;
  state->sequences.resize(static_cast<size_t>(n));
  for (int k = 0; k < n; ++k) {
    Sequence& seq = state->sequences[static_cast<size_t>(k)];
    seq.owner = state.get();
    seq.index = k;
    SamplingParams params = r.params;
    if (params.seed) params.seed = *params.seed + static_cast<uint64_t>(k);
    const bool bytes =
        params.answer_constraint && (params.answer_constraint->json_object || grammar != nullptr);
    seq.sampler = std::make_unique<RequestSampler>(
        params, r.prompt_token_ids, stop_ids, tokenizer_.get(), vocab,
        mix_seed(args_.seed, next_sequence_ + static_cast<uint64_t>(k)),
        bytes ? json_trie() : nullptr, grammar);
    seq.stop =
        std::make_unique<StopChecker>(params, std::set<int32_t>(stop_ids.begin(), stop_ids.end()),
                                      tokenizer_.get(), prompt_len, max_model_len_);
    seq.wants_prompt_logprobs = k == 0 && r.params.prompt_logprobs.has_value();
    CompletionOutput out;
    out.index = k;
    if (r.params.logprobs) out.logprobs.emplace();
    state->output.outputs.push_back(std::move(out));
  }
  state->num_unfinished = n;
  state->images = std::move(images);
  state->request = std::move(submission.request);
  state->callback = std::move(submission.callback);
  return state;
}

void Engine::admit_sequence(RequestState& request, Sequence& seq) {
  const EngineRequest& r = request.request;
  NewRequest nr;
  nr.request_id = std::to_string(next_sequence_++);
  nr.prompt_token_ids = r.prompt_token_ids;
  nr.max_tokens = r.params.max_tokens;
  nr.priority = r.priority;
  nr.hash_extras.cache_salt = r.cache_salt;
  for (const RequestMedia& image : request.images) {
    nr.hash_extras.multimodal.push_back(
        {image.where.offset, image.where.length, image.hash, image.audio.has_value()});
  }
  nr.skip_prefix_cache = seq.wants_prompt_logprobs;
  seq.scheduler_id = nr.request_id;
  scheduler_->add_request(std::move(nr));
  seq.admitted = true;
  sequences_[seq.scheduler_id] = &seq;
}

void Engine::add_request(EngineRequest request, OutputCallback callback) {
  std::vector<Submission> one;
  one.push_back(Submission{std::move(request), std::move(callback)});
  add_requests(std::move(one));
}

void Engine::add_requests(std::vector<Submission> submissions) {
  std::vector<std::vector<RequestMedia>> images;
  for (Submission& s : submissions) images.push_back(prepare_prompt(s.request));
  // Structured-output specs compile before the lock: the step loop never waits on them.
  std::vector<std::shared_ptr<const structured::CompiledGrammar>> grammars(submissions.size());
  for (size_t i = 0; i < submissions.size(); ++i) {
    const auto& c = submissions[i].request.params.answer_constraint;
    if (!c || c->structured_kind.empty()) continue;
    grammars[i] = grammars_->compile(c->structured_kind, c->structured_spec);
    json_trie();
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (failure_) throw std::runtime_error("the engine stopped after an error: " + *failure_);
    if (stopping_) throw std::runtime_error("the engine is shutting down");
    std::vector<std::shared_ptr<RequestState>> added;
    try {
      for (size_t i = 0; i < submissions.size(); ++i) {
        std::shared_ptr<RequestState> state = make_request_state(
            std::move(submissions[i]), std::move(images[i]), std::move(grammars[i]));
        const int n = static_cast<int>(state->sequences.size());
        const int prompt_len = static_cast<int>(state->request.prompt_token_ids.size());
        // Holding samples back only pays when the prompt has a full block to share.
        state->samples_held =
            n > 1 && args_.enable_prefix_caching && prompt_len - 1 >= args_.block_size;
        requests_[state->request.request_id] = state;
        added.push_back(state);
        admit_sequence(*state, state->sequences[0]);
        if (state->samples_held) {
          num_held_samples_ += n - 1;
        } else {
          for (int k = 1; k < n; ++k) admit_sequence(*state, state->sequences[k]);
        }
      }
    } catch (...) {
      // All or none: forget what this call already queued.
      for (const auto& state : added) {
        for (Sequence& seq : state->sequences) {
          if (!seq.admitted) continue;
          scheduler_->abort(seq.scheduler_id);
          sequences_.erase(seq.scheduler_id);
        }
        if (state->samples_held) num_held_samples_ -= static_cast<int>(state->sequences.size()) - 1;
        requests_.erase(state->request.request_id);
      }
      throw;
    }
    ++change_count_;
  }
  wake_.notify_all();
}

bool Engine::abort(const std::string& request_id) {
  bool found;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    found = abort_locked(request_id);
  }
  if (found) wake_.notify_all();
  return found;
}

bool Engine::abort_locked(const std::string& request_id) {
  auto it = requests_.find(request_id);
  if (it == requests_.end()) return false;
  std::shared_ptr<RequestState> state = it->second;
  requests_.erase(it);
  state->aborted = true;
  for (Sequence& seq : state->sequences) {
    if (!seq.admitted || seq.finished) continue;
    scheduler_->abort(seq.scheduler_id);  // frees its blocks now
    sequences_.erase(seq.scheduler_id);
    if (speculative_) speculative_ended_.push_back(seq.scheduler_id);
  }
  if (state->samples_held) {
    num_held_samples_ -= static_cast<int>(state->sequences.size()) - 1;
    state->samples_held = false;
  }
  aborted_.push_back(std::move(state));
  ++change_count_;
  return true;
}

void Engine::fail_request_locked(RequestState& request, RequestError error) {
  if (request.aborted) return;  // a sibling sample's failure or an abort ended it already
  GS_LOG_WARNING << "request " << request.request.request_id
                 << " failed in a step and ends with finish_reason \"error\": " << error.message
                 << "; the engine goes on serving the others";
  request.output.error = std::move(error);
  abort_locked(request.request.request_id);
}

RequestError request_error_of(const std::exception& e) {
  return RequestError{e.what(), dynamic_cast<const InputError*>(&e) != nullptr};
}

void Engine::abort_all_locked() {
  std::vector<std::string> ids;
  for (const auto& [id, state] : requests_) ids.push_back(id);
  for (const std::string& id : ids) abort_locked(id);
}

std::optional<std::string> Engine::failure() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return failure_;
}

EngineStats Engine::stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  EngineStats s = counters_;
  s.encodes_in_progress = encodes_alive_->load();
  s.encoder_cache_bytes = encoder_cache_.bytes();
  s.encoder_cache_entries = encoder_cache_.size();
  s.structured_output_cache_bytes = grammars_->cache().bytes();
  s.structured_output_cache_entries = grammars_->cache().size();
  s.num_running = scheduler_->num_running();
  s.num_waiting = scheduler_->num_waiting() + num_held_samples_;
  const KvCacheManager& kv = scheduler_->kv_cache();
  s.kv_cache_usage = kv.usage();
  for (int t = 0; t < kNumAttentionTypes; ++t) {
    const KvBlockPool* pool = kv.pool(static_cast<AttentionType>(t));
    if (!pool) continue;
    s.kv_blocks_total[t] = pool->num_blocks();
    s.kv_blocks_in_use[t] = pool->num_blocks() - pool->num_free_blocks();
  }
  const SchedulerStats ss = scheduler_->stats();
  s.prefix_cache_queries = ss.prefix_cache_queries;
  s.prefix_cache_hits = ss.prefix_cache_hits;
  s.computed_tokens = ss.scheduled_tokens;
  s.preemptions = ss.preemptions;
  const CommunicatorStats comm = model_->communication_stats();
  s.tp_collectives = comm.calls;
  s.tp_bytes_sent = comm.bytes_sent;
  s.tp_seconds = comm.seconds;
  if (speculative_) {
    const SpeculativeStats spec = speculative_->stats();
    s.spec_decode_num_drafts = spec.num_drafts;
    s.spec_decode_num_draft_tokens = spec.num_draft_tokens;
    s.spec_decode_num_accepted_tokens = spec.num_accepted_tokens;
    s.spec_decode_num_accepted_tokens_per_pos = spec.accepted_per_position;
  }
  return s;
}

std::shared_ptr<const JsonTokenTrie> Engine::json_trie() {
  if (!tokenizer_) return nullptr;  // RequestSampler refuses json_object then
  std::call_once(json_trie_once_, [&] {
    const auto start = std::chrono::steady_clock::now();
    json_trie_ = std::make_shared<const JsonTokenTrie>(*tokenizer_);
    GS_LOG_INFO << "json_object: vocabulary byte trie built in "
                << std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count()
                << " s";
  });
  return json_trie_;
}

}  // namespace gemmaserve
