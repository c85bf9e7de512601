// The offline LLM: a synchronous wrapper over the Engine that submits every prompt at once and
// waits for all of them.
#include "gemmaserve/llm.h"

#include <condition_variable>
#include <exception>
#include <mutex>
#include <stdexcept>

#include "core/error.h"
#include "engine/data_parallel/engine_replicas.h"
#include "engine/engine.h"
#include "engine/scheduler.h"

namespace gemmaserve {

LLM::LLM(const EngineArgs& args) : replicas_(std::make_unique<EngineReplicas>(args)) {}

LLM::~LLM() = default;

const Tokenizer* LLM::tokenizer() const { return replicas_->front().tokenizer(); }
const std::vector<int32_t>& LLM::eos_token_ids() const {
  return replicas_->front().eos_token_ids();
}
int LLM::vocab_size() const { return replicas_->front().vocab_size(); }
uint64_t LLM::num_steps() const {
  uint64_t steps = 0;
  for (const EngineStats& s : replicas_->stats()) steps += s.steps;
  return steps;
}
SamplingParams LLM::default_sampling_params() const {
  return replicas_->front().default_sampling_params();
}
Engine& LLM::engine() { return replicas_->front(); }
EngineReplicas& LLM::replicas() { return *replicas_; }

std::vector<RequestOutput> LLM::generate(const std::vector<Prompt>& prompts,
                                         const SamplingParams& params) {
  return generate(prompts, std::vector<SamplingParams>{params}, GenerateOptions{});
}

std::vector<RequestOutput> LLM::generate(const std::vector<Prompt>& prompts,
                                         const std::vector<SamplingParams>& params,
                                         const GenerateOptions& options) {
  if (params.size() != 1 && params.size() != prompts.size()) {
    throw InputError("The lengths of prompts and params must be the same.");
  }
  if (!options.max_tokens_to_context.empty() &&
      options.max_tokens_to_context.size() != prompts.size()) {
    throw InputError("max_tokens_to_context must have one entry per prompt");
  }
  const Engine& engine = replicas_->front();  // prompt rules are the same in every replica
  const int vocab = engine.vocab_size();
  // Every prompt is checked before any is submitted, with errors that name the prompt.
  std::vector<std::vector<int32_t>> ids(prompts.size());
  std::vector<SamplingParams> per_prompt(prompts.size());
  for (size_t i = 0; i < prompts.size(); ++i) {
    const std::string name = "prompt " + std::to_string(i);
    ids[i] = prompts[i].text ? engine.encode_prompt(*prompts[i].text) : prompts[i].token_ids;
    if (ids[i].empty()) throw InputError(name + " is empty");
    ids[i] = engine.prompt_with_bos(std::move(ids[i]));
    for (int32_t id : ids[i]) {
      if (id < 0 || id >= vocab) {
        throw InputError(name + " holds token id " + std::to_string(id) +
                         ", outside the vocabulary of " + std::to_string(vocab) + " tokens");
      }
    }
    per_prompt[i] = params[params.size() == 1 ? 0 : i];
    // The engine expands the images itself; their soft tokens count toward the length here.
    int prompt_len = static_cast<int>(ids[i].size());
    try {
      prompt_len =
          static_cast<int>(engine
                               .expand_media_placeholders(ids[i], prompts[i].images,
                                                          prompts[i].audios, prompts[i].videos)
                               .token_ids.size());
    } catch (const InputError& e) {
      throw InputError(name + ": " + e.what());
    }
    if (!options.max_tokens_to_context.empty() && options.max_tokens_to_context[i]) {
      check_request_length(prompt_len, std::nullopt, engine.max_model_len());
      per_prompt[i].max_tokens = engine.max_model_len() - prompt_len;
    }
    per_prompt[i].validate(vocab);
    check_request_length(prompt_len, per_prompt[i].max_tokens, engine.max_model_len());
  }

  struct Collector {
    std::mutex mutex;
    std::condition_variable changed;
    size_t remaining = 0;
    std::vector<size_t> newly_finished;  // not yet reported to on_finished
    std::vector<RequestOutput> results;
  } collector;
  collector.remaining = prompts.size();
  collector.results.resize(prompts.size());
  std::vector<Submission> submissions;
  std::vector<std::string> request_ids;
  for (size_t i = 0; i < prompts.size(); ++i) {
    Submission s;
    s.request.request_id = std::to_string(next_request_++);
    s.request.prompt_token_ids = std::move(ids[i]);
    s.request.images = prompts[i].images;
    s.request.audios = prompts[i].audios;
    s.request.videos = prompts[i].videos;
    s.request.prompt = prompts[i].text;
    s.request.params = std::move(per_prompt[i]);
    s.callback = [&collector, i](const RequestOutput& output, const RequestOutputDelta&) {
      if (!output.finished) return;
      std::lock_guard<std::mutex> lock(collector.mutex);
      collector.results[i] = output;
      collector.newly_finished.push_back(i);
      --collector.remaining;
      collector.changed.notify_all();
    };
    request_ids.push_back(s.request.request_id);
    submissions.push_back(std::move(s));
  }
  replicas_->add_requests(std::move(submissions));

  // The callbacks write into `collector`: every request must end before this frame does, so an
  // exception from the caller's hooks aborts the rest and is rethrown only after that.
  std::exception_ptr failure;
  bool aborting = false;
  auto abort_unfinished = [&] {
    if (aborting) return;
    aborting = true;
    for (const std::string& id : request_ids) replicas_->abort(id);
  };
  std::unique_lock<std::mutex> lock(collector.mutex);
  while (true) {
    const bool hooks = options.on_finished || options.keep_going;
    if (hooks && !aborting) {
      collector.changed.wait_for(lock, options.poll_interval, [&] {
        return collector.remaining == 0 || !collector.newly_finished.empty();
      });
    } else {
      collector.changed.wait(lock, [&] {
        return collector.remaining == 0 || (!aborting && !collector.newly_finished.empty());
      });
    }
    std::vector<size_t> finished;
    finished.swap(collector.newly_finished);
    const bool all_done = collector.remaining == 0;
    if (aborting) {
      if (all_done) break;
      continue;
    }
    lock.unlock();
    try {
      // A request a step failed alone: the offline API raises its error, as a bad parameter.
      for (size_t i : finished) {
        if (const std::optional<RequestError>& e = collector.results[i].error) {
          if (e->bad_request) throw InputError(e->message);
          throw std::runtime_error(e->message);
        }
      }
      if (options.on_finished) {
        for (size_t i : finished) options.on_finished(i, collector.results[i]);
      }
      if (!all_done && options.keep_going && !options.keep_going()) abort_unfinished();
    } catch (...) {
      failure = std::current_exception();
      abort_unfinished();
    }
    lock.lock();
    if (all_done) break;
  }
  lock.unlock();
  if (failure) std::rethrow_exception(failure);
  return std::move(collector.results);
}

}  // namespace gemmaserve
