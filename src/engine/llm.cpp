// The offline LLM: a synchronous wrapper over the Engine that submits every prompt at once and
// waits for all of them.
#include "gemmaserve/llm.h"

#include <condition_variable>
#include <mutex>

#include "core/error.h"
#include "engine/engine.h"
#include "engine/scheduler.h"

namespace gemmaserve {

LLM::LLM(const EngineArgs& args) : engine_(std::make_unique<Engine>(args)) {}

LLM::~LLM() = default;

const Tokenizer* LLM::tokenizer() const { return engine_->tokenizer(); }
const std::vector<int32_t>& LLM::eos_token_ids() const { return engine_->eos_token_ids(); }
int LLM::vocab_size() const { return engine_->vocab_size(); }
uint64_t LLM::num_steps() const { return engine_->stats().steps; }
SamplingParams LLM::default_sampling_params() const { return engine_->default_sampling_params(); }
Engine& LLM::engine() { return *engine_; }

std::vector<RequestOutput> LLM::generate(const std::vector<Prompt>& prompts,
                                         const SamplingParams& params) {
  const int vocab = engine_->vocab_size();
  params.validate(vocab);
  // Every prompt is checked before any is submitted, with errors that name the prompt.
  std::vector<std::vector<int32_t>> ids(prompts.size());
  for (size_t i = 0; i < prompts.size(); ++i) {
    const std::string name = "prompt " + std::to_string(i);
    ids[i] = prompts[i].text ? engine_->encode_prompt(*prompts[i].text) : prompts[i].token_ids;
    if (ids[i].empty()) throw InputError(name + " is empty");
    ids[i] = engine_->prompt_with_bos(std::move(ids[i]));
    for (int32_t id : ids[i]) {
      if (id < 0 || id >= vocab) {
        throw InputError(name + " holds token id " + std::to_string(id) +
                         ", outside the vocabulary of " + std::to_string(vocab) + " tokens");
      }
    }
    check_request_length(static_cast<int>(ids[i].size()), params.max_tokens,
                         engine_->max_model_len());
  }

  struct Collector {
    std::mutex mutex;
    std::condition_variable done;
    size_t remaining = 0;
    std::vector<RequestOutput> results;
  } collector;
  collector.remaining = prompts.size();
  collector.results.resize(prompts.size());
  std::vector<Submission> submissions;
  for (size_t i = 0; i < prompts.size(); ++i) {
    Submission s;
    s.request.request_id = std::to_string(next_request_++);
    s.request.prompt_token_ids = std::move(ids[i]);
    s.request.prompt = prompts[i].text;
    s.request.params = params;
    s.callback = [&collector, i](const RequestOutput& output, const RequestOutputDelta&) {
      if (!output.finished) return;
      std::lock_guard<std::mutex> lock(collector.mutex);
      collector.results[i] = output;
      --collector.remaining;
      if (collector.remaining == 0) collector.done.notify_all();
    };
    submissions.push_back(std::move(s));
  }
  engine_->add_requests(std::move(submissions));
  std::unique_lock<std::mutex> lock(collector.mutex);
  collector.done.wait(lock, [&] { return collector.remaining == 0; });
  return std::move(collector.results);
}

}  // namespace gemmaserve
