// The Engine's private records (requests, their samples and images, one step's plan), shared
// by engine.cpp and engine_images.cpp. Not part of the engine's interface.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <exception>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "engine/request_sampler.h"
#include "engine/stop_checker.h"
#include "model/gemma4_model.h"

namespace gemmaserve {

// One of a request's n samples: a sequence of its own in the scheduler.
struct Engine::Sequence {
  RequestState* owner = nullptr;
  int index = 0;
  std::string scheduler_id;
  std::unique_ptr<RequestSampler> sampler;
  std::unique_ptr<StopChecker> stop;
  bool admitted = false;  // handed to the scheduler
  bool finished = false;
  bool prompt_computed = false;  // its first token was sampled
  bool wants_prompt_logprobs = false;
  int next_prompt_logprob = 1;  // first prompt position whose logprobs are still missing
};

// One image or audio clip of a request: its pixels or samples (kept to encode it again after a
// preemption), where its soft tokens go, and its rows while a prompt computation may still need
// them. Images attend within their block as the model's mask says; audio is causal.
struct Engine::RequestMedia {
  // Frees a job and counts it out of EngineStats::encodes_in_progress.
  struct JobRelease {
    std::shared_ptr<std::atomic<int64_t>> alive;
    void operator()(VisionEncodeJob* job) const {
      std::default_delete<VisionEncodeJob>()(job);
      --*alive;
    }
    void operator()(AudioEncodeJob* job) const {
      std::default_delete<AudioEncodeJob>()(job);
      --*alive;
    }
  };
  PromptImage image;
  std::optional<PromptAudio> audio;  // set for an audio clip (then `image` is empty)
  int max_soft_tokens = 0;           // the effective budget (images)
  std::string hash;                  // image_content_hash: the prefix-cache and encoder-cache key
  ImagePlaceholder where;
  // Engine thread only: the rows while a prompt computation may still need them, else the
  // encode in progress; looked_up: the encoder cache missed since rows were last dropped.
  EncodedImage rows;
  std::unique_ptr<VisionEncodeJob, JobRelease> job;
  std::unique_ptr<AudioEncodeJob, JobRelease> audio_job;  // an audio clip's encode in progress
  bool looked_up = false;
};

struct Engine::RequestState : std::enable_shared_from_this<RequestState> {
  EngineRequest request;
  OutputCallback callback;
  RequestOutput output;
  std::vector<Sequence> sequences;  // never resized after creation: Sequence* stay valid
  int num_unfinished = 0;
  bool samples_held = false;  // samples 1..n-1 wait until sample 0 computed the prompt
  bool aborted = false;       // guarded by mutex_ (also set when a step failed it)
  std::vector<std::optional<TokenLogprobs>> prompt_logprobs;  // collected across chunks
  std::vector<RequestMedia> images;  // images and audio clips, in prompt order
};

// What one forward call computes: copies of the scheduled chunks, so an abort() during the
// forward (which frees the scheduler's token lists) cannot pull data from under it.
struct Engine::StepPlan {
  struct Item {
    std::shared_ptr<RequestState> request;
    Sequence* seq = nullptr;
    std::vector<int32_t> tokens;
    int32_t start_pos = 0;
    std::array<std::vector<int32_t>, kNumAttentionTypes> tables;
    LogitsWanted logits = LogitsWanted::kNone;
    bool samples = false;
    size_t num_drafts = 0;       // speculative: the last num_drafts of `tokens` are drafts
    std::vector<size_t> images;  // indices into request->images of images in this chunk
    std::vector<EmbeddingRows> embeddings;
    std::vector<PositionRange> vision_blocks;
    std::vector<EncodedImage> rows;  // alive through the forward
  };
  // An image that stopped a chunk: its request and index.
  struct Encode {
    std::shared_ptr<RequestState> request;
    size_t image = 0;
  };
  std::vector<Item> items;
  std::vector<SequenceInput> inputs;
  int num_tokens = 0;
  std::vector<Encode> encodes;
  int64_t encoder_budget = 0;  // patch-stages
  // Image work of the step, added to the counters with the step.
  uint64_t images_encoded = 0;
  double encoder_seconds = 0;
};

// A chunk's sample, made outside the lock and applied under it: one token, or with speculative
// decoding the accepted drafts and the token after them (cut where a stop ended the sequence).
struct Engine::Sampled {
  size_t item = 0;
  size_t row = 0;  // the forward's row (logits, hidden) predicting tokens[0]
  std::vector<int32_t> tokens;
  std::vector<TokenLogprobs> logprobs;  // one per token when the request wants logprobs
  int num_accepted = 0;                 // drafts accepted (before any stop cut)
  StopUpdate update;                    // the stop checks over all of `tokens`
  std::vector<int32_t> drafts;          // proposed to follow `tokens` (next step)
};

// A step's error that concerns one sequence only: the plan's item and what went wrong.
struct Engine::StepFailure {
  size_t item = 0;
  RequestError error;
};

// The RequestError of an exception a step raised for one sequence (InputError: the request's
// own parameters).
RequestError request_error_of(const std::exception& e);

}  // namespace gemmaserve
