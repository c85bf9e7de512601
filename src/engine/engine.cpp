#include "engine/engine.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <set>

#include "core/error.h"
#include "core/logging.h"
#include "core/progress_bar.h"
#include "core/thread_pool.h"
#include "engine/engine_state.h"
#include "engine/fault_injection.h"
#include "engine/request_sampler.h"
#include "engine/scheduler.h"
#include "engine/speculative/speculative_decoding.h"
#include "engine/stop_checker.h"
#include "engine/structured/compiled_grammar.h"
#include "engine/tensor_parallel_ranks.h"
#include "kernels/cpu/line_prefetch.h"
#include "kernels/cpu/quant.h"
#include "model/gemma4_image_processor.h"
#include "model/gemma4_model.h"
#include "model/kv_cache.h"
#include "model/weights.h"
#include "parallel/communicator.h"
#include "parallel/rank_launch.h"
#include "tokenizer/tokenizer.h"

namespace gemmaserve {
namespace {

constexpr size_t kProgressMinBytes = size_t{512} << 20;  // smaller loads finish too fast to show
constexpr uint64_t kNotStalled = ~uint64_t{0};

// SplitMix64: spreads (engine seed, request number) into independent generator seeds.
uint64_t mix_seed(uint64_t seed, uint64_t n) {
  uint64_t z = seed + 0x9E3779B97F4A7C15ULL * (n + 1);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

void check_args(const EngineArgs& a) {
  if (a.threads < 0) throw InputError("--threads must be >= 0, got " + std::to_string(a.threads));
  if (a.block_size <= 0) {
    throw InputError("--block-size must be positive, got " + std::to_string(a.block_size));
  }
  if (a.max_model_len < 0) {
    throw InputError("--max-model-len must be positive, got " + std::to_string(a.max_model_len));
  }
  if (a.max_num_seqs <= 0) {
    throw InputError("--max-num-seqs must be positive, got " + std::to_string(a.max_num_seqs));
  }
  if (a.max_num_batched_tokens <= 0) {
    throw InputError("--max-num-batched-tokens must be positive, got " +
                     std::to_string(a.max_num_batched_tokens));
  }
  if (a.long_prefill_token_threshold < 0) {
    throw InputError("--long-prefill-token-threshold must be >= 0, got " +
                     std::to_string(a.long_prefill_token_threshold));
  }
  cpu::parse_kv_dtype(a.kv_cache_dtype, DType::kBF16);  // fails before the weights load
  parse_speculative_config(a.speculative_config);
  parse_matmul_precision(a.cpu_matmul_precision, "--cpu-matmul-precision");
  parse_mm_processor_kwargs(a.mm_processor_kwargs, "--mm-processor-kwargs");
  if (!(a.mm_processor_cache_gb >= 0)) {
    throw InputError("--mm-processor-cache-gb must be >= 0, got " +
                     std::to_string(a.mm_processor_cache_gb));
  }
  for (const auto& [modality, limit] : a.limit_mm_per_prompt) {
    if (limit < 0) {
      throw InputError("--limit-mm-per-prompt: the limit of '" + modality + "' must be >= 0, got " +
                       std::to_string(limit));
    }
  }
}

// Logs the matmul precision in effect, warning when bf16 was asked for but cannot apply.
void log_matmul_precision(cpu::MatmulPrecision asked, const ModelWeights& weights) {
  if (asked == cpu::MatmulPrecision::kF32) {
    GS_LOG_INFO << "CPU matmul precision: f32 activations";
    return;
  }
  const Bf16ActivationCoverage c = bf16_activation_coverage(weights);
  if (!c.unavailable_reason.empty()) {
    GS_LOG_WARNING << "--cpu-matmul-precision bf16 cannot apply: " << c.unavailable_reason
                   << "; CPU matmul precision: f32 activations";
  } else if (c.bf16_matrices < c.matrices) {
    GS_LOG_INFO << "CPU matmul precision: bf16 activations for " << c.bf16_matrices << " of "
                << c.matrices << " weight matrices (the others are not bf16 and keep their path)";
  } else {
    GS_LOG_INFO << "CPU matmul precision: bf16 activations (AVX512_BF16) for all " << c.matrices
                << " weight matrices";
  }
}

}  // namespace

Engine::Engine(const EngineArgs& args)
    : args_(args),
      grammars_(std::make_unique<structured::GrammarCompiler>()),
      encoder_cache_(
          static_cast<uint64_t>(std::max(0.0, args.mm_processor_cache_gb) * 1073741824.0)) {
  namespace fs = std::filesystem;
  check_args(args_);
  // Workers and the engine thread each on their own CPU (vLLM's CPU backend binds too);
  // GEMMASERVE_CPU_BIND=none leaves placement to the OS.
  const char* bind_env = std::getenv("GEMMASERVE_CPU_BIND");
  const std::string bind = bind_env ? bind_env : "";
  if (!bind.empty() && bind != "auto" && bind != "none") {
    throw InputError("GEMMASERVE_CPU_BIND must be auto or none, got '" + bind + "'");
  }
  // GEMMASERVE_LINE_PREFETCH and _PREFETCH_AHEAD are read by the first product: a bad value
  // fails here instead.
  if (const char* v = std::getenv("GEMMASERVE_LINE_PREFETCH"); v != nullptr && *v != '\0') {
    cpu::parse_once_line_prefetch(v);
  }
  if (const char* v = std::getenv("GEMMASERVE_PREFETCH_AHEAD"); v != nullptr && *v != '\0') {
    cpu::parse_once_prefetch_distance(v);
  }
  default_max_soft_tokens_ =
      parse_mm_processor_kwargs(args_.mm_processor_kwargs, "--mm-processor-kwargs").value_or(280);
  bool pin = bind != "none";
  std::shared_ptr<Communicator> communicator = join_tensor_parallel_ranks(args_, &pin);
  // Data-parallel replicas pin side by side (replica r from CPU r x threads); unpinned when
  // they outnumber the CPUs.
  if (args_.data_parallel_size > allowed_cpu_count()) pin = false;
  pool_ = std::make_shared<ThreadPool>(
      static_cast<size_t>(args_.threads), pin,
      static_cast<size_t>(args_.data_parallel_rank) * static_cast<size_t>(args_.threads));
  const fs::path dir(args_.model);
  std::unique_ptr<ProgressBar> bar;
  WeightLoadOptions load_options;
  if (communicator) {
    load_options.tensor_parallel_rank = communicator->rank();
    load_options.tensor_parallel_size = communicator->size();
    load_options.expert_parallel = args_.enable_expert_parallel;
  }
  std::unique_ptr<ProgressBar> quant_bar;
  if (!args_.quantization.empty()) {
    load_options.quantization = cpu::parse_quantization_type(args_.quantization, "--quantization");
    load_options.pool = pool_.get();
    load_options.quantize_progress = [&](size_t done, size_t total) {
      if (!quant_bar) {
        quant_bar =
            std::make_unique<ProgressBar>("quantizing to " + args_.quantization, total,
                                          args_.show_progress && total >= kProgressMinBytes);
      }
      quant_bar->update(done);
    };
  }
  model_load_fault_delay();
  ModelWeights weights = load_model_weights(
      dir,
      [&](size_t done, size_t total) {
        if (!bar) {
          bar = std::make_unique<ProgressBar>("loading weights", total,
                                              args_.show_progress && total >= kProgressMinBytes);
        }
        bar->update(done);
      },
      load_options);
  if (quant_bar) quant_bar->finish();
  if (bar) bar->finish();

  const fs::path tok_path = args_.tokenizer.empty() ? dir : fs::path(args_.tokenizer);
  if (!args_.tokenizer.empty() || fs::exists(dir / "tokenizer.json")) {
    tokenizer_ = std::make_unique<Tokenizer>(Tokenizer::from_path(tok_path));
  } else {
    GS_LOG_INFO << dir.string() << ": no tokenizer.json; only token-id prompts will work";
  }

  generation_ =
      resolve_generation_defaults(dir, args_.generation_config, args_.override_generation_config);
  const SamplingParams defaults = apply_generation_defaults(generation_);
  if (generation_.temperature || generation_.top_p || generation_.top_k || generation_.min_p ||
      generation_.repetition_penalty || generation_.max_tokens) {
    GS_LOG_INFO << "default sampling parameters from " << generation_.source
                << ": temperature=" << defaults.temperature << " top_p=" << defaults.top_p
                << " top_k=" << defaults.top_k << " min_p=" << defaults.min_p
                << " repetition_penalty=" << defaults.repetition_penalty
                << " max_tokens=" << defaults.max_tokens;
  }
  eos_ids_ = collect_eos_token_ids(load_generation_config(dir), weights.config,
                                   tokenizer_ ? tokenizer_->eos_ids() : std::vector<int32_t>{},
                                   generation_);

  const TextConfig& text = weights.config.text;
  max_model_len_ = args_.max_model_len > 0 ? args_.max_model_len : text.max_position_embeddings;
  if (max_model_len_ > text.max_position_embeddings) {
    throw InputError("User-specified max_model_len (" + std::to_string(max_model_len_) +
                     ") is greater than the derived max_model_len (max_position_embeddings=" +
                     std::to_string(text.max_position_embeddings) + " in model's config.json).");
  }
  const cpu::KvDtype kv_dtype =
      cpu::parse_kv_dtype(args_.kv_cache_dtype, weights.embed_tokens.dtype);
  // Measured after the weights are mapped, so their resident pages are already accounted for.
  const KvCacheBudget budget =
      choose_kv_cache_budget(args_, text, max_model_len_, available_memory_bytes(), kv_dtype);
  KvCachePlanOptions opt;
  opt.block_size = args_.block_size;
  opt.kv_dtype = kv_dtype;
  opt.memory_bytes = budget.bytes;
  opt.max_model_len = max_model_len_;
  opt.max_num_batched_tokens =
      args_.long_prefill_token_threshold > 0
          ? std::min(args_.long_prefill_token_threshold, args_.max_num_batched_tokens)
          : args_.max_num_batched_tokens;
  plan_ = plan_kv_cache(text, opt);
  GS_LOG_INFO << "KV cache budget " << budget.bytes << " bytes (" << budget.reason << ")";
  for (const std::string& line : plan_.summary_lines()) GS_LOG_INFO << line;

  cache_ = std::make_unique<KvCache>(text, plan_.num_blocks, args_.block_size, kv_dtype);
  SchedulerConfig sc;
  sc.max_num_seqs = args_.max_num_seqs;
  sc.max_num_batched_tokens = args_.max_num_batched_tokens;
  sc.max_model_len = max_model_len_;
  sc.long_prefill_token_threshold = args_.long_prefill_token_threshold;
  sc.image_ready = [this](const std::string& id, size_t image) { return image_ready(id, image); };
  scheduler_ = std::make_unique<Scheduler>(
      sc, KvCacheManager(text, plan_.num_blocks, args_.block_size, args_.enable_prefix_caching));
  Gemma4ModelOptions model_options;
  model_options.matmul_precision =
      parse_matmul_precision(args_.cpu_matmul_precision, "--cpu-matmul-precision");
  log_matmul_precision(model_options.matmul_precision, weights);
  model_ = std::make_unique<Gemma4Model>(std::move(weights), pool_, model_options, communicator);
  SpeculativeTarget spec_target;
  spec_target.vocab_size = model_->vocab_size();
  spec_target.max_model_len = max_model_len_;
  spec_target.kv_tokens = plan_.num_tokens;
  spec_target.kv_dtype = kv_dtype;
  spec_target.pool = pool_;
  spec_target.weights = &model_->weights();
  spec_target.cache = cache_.get();
  speculative_ = make_speculative_decoding(args_, spec_target);
  thread_ = std::thread([this] { run_loop(); });
}

Engine::~Engine() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
    abort_all_locked();
  }
  wake_.notify_all();
  thread_.join();
}

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

bool Engine::has_vision() const { return model_->config().vision.has_value(); }

int Engine::image_soft_tokens(const PromptImage& image) const {
  if (!has_vision()) {
    throw InputError("This model does not accept image input: " + args_.model +
                     " has no vision encoder.");
  }
  const int budget = image.max_soft_tokens.value_or(default_max_soft_tokens_);
  validate_gemma4_max_soft_tokens(budget);
  return gemma4_image_soft_tokens(*model_->config().vision, image.rgb.width, image.rgb.height,
                                  budget);
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

// ---- Requests in ------------------------------------------------------------------------------

std::vector<Engine::RequestImage> Engine::prepare_prompt(EngineRequest& r) const {
  if (r.prompt_token_ids.empty()) throw InputError("The decoder prompt cannot be empty");
  r.prompt_token_ids = prompt_with_bos(std::move(r.prompt_token_ids));
  ExpandedPrompt expanded = expand_image_placeholders(r.prompt_token_ids, r.images);
  r.prompt_token_ids = std::move(expanded.token_ids);
  std::vector<RequestImage> images(r.images.size());
  for (size_t i = 0; i < images.size(); ++i) {
    RequestImage& image = images[i];
    image.image = std::move(r.images[i]);
    image.max_soft_tokens = image.image.max_soft_tokens.value_or(default_max_soft_tokens_);
    image.hash = image_content_hash(image.image.rgb, image.max_soft_tokens);
    image.where = expanded.placeholders[i];
  }
  r.images.clear();
  return images;
}

std::shared_ptr<Engine::RequestState> Engine::make_request_state(
    Submission submission, std::vector<RequestImage> images,
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
  for (const RequestImage& image : request.images) {
    nr.hash_extras.multimodal.push_back({image.where.offset, image.where.length, image.hash});
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
  std::vector<std::vector<RequestImage>> images;
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

// ---- The step loop ----------------------------------------------------------------------------

void Engine::run_loop() {
  ForwardOutput forward;
  StepPlan plan;
  std::vector<Sampled> sampled;
  std::vector<Emission> emissions;
  uint64_t stalled_at = kNotStalled;  // change_count_ when a schedule came back empty
  uint64_t steps_started = 0;
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    wake_.wait(lock, [&] {
      return stopping_ || !aborted_.empty() ||
             (!failure_ && scheduler_->has_unfinished_requests() && stalled_at != change_count_);
    });
    take_aborted(&emissions);
    if (!emissions.empty()) {
      lock.unlock();
      deliver(emissions);
      lock.lock();
      continue;
    }
    if (stopping_) break;
    if (!plan_step(&plan)) {
      // Nothing fits now; a new request or an abort changes that (no busy wait).
      GS_LOG_WARNING << "engine: unfinished requests but nothing could be scheduled";
      stalled_at = change_count_;
      continue;
    }
    stalled_at = kNotStalled;
    lock.unlock();
    try {
      if (engine_step_fault(++steps_started)) throw std::runtime_error("injected engine fault");
      run_encoder(&plan);
      attach_images(&plan);
      sampled.clear();
      if (!plan.inputs.empty()) {
        forward.return_hidden = speculative_ && speculative_->proposer().wants_hidden_states();
        model_->forward(plan.inputs, *cache_, &forward);
        sample_step(plan, forward, &sampled);
        propose_drafts(plan, forward, &sampled);
      }
    } catch (const std::exception& e) {
      lock.lock();
      GS_LOG_ERROR << "engine step failed: " << e.what() << "; aborting every request";
      failure_ = e.what();
      abort_all_locked();
      continue;
    }
    lock.lock();
    if (!plan.inputs.empty()) ++counters_.steps;
    if (!plan.encodes.empty()) ++counters_.encoder_steps;
    counters_.images_encoded += plan.images_encoded;
    counters_.encoder_seconds += plan.encoder_seconds;
    apply_step(plan, sampled, &emissions);
    lock.unlock();
    deliver(emissions);
    // An aborted request's state (and its encode job) goes with its last reference.
    plan.items.clear();
    plan.encodes.clear();
    lock.lock();
  }
}

bool Engine::plan_step(StepPlan* plan) {
  plan->items.clear();
  plan->inputs.clear();
  plan->num_tokens = 0;
  plan->images_encoded = 0;
  plan->encoder_seconds = 0;
  plan->encodes.clear();
  const SchedulerOutput out = scheduler_->schedule();
  for (const auto& [id, image] : out.waiting_for_images) {
    RequestState& state = *sequences_.at(id)->owner;
    // A named copy: clang 14 cannot capture a structured binding in a lambda.
    const auto wanted = image;
    const bool listed = std::any_of(plan->encodes.begin(), plan->encodes.end(), [&](auto& e) {
      return e.request.get() == &state && e.image == wanted;
    });
    if (!listed) plan->encodes.push_back({state.shared_from_this(), image});
  }
  plan->encoder_budget = args_.max_num_batched_tokens - out.num_scheduled_tokens;
  if (out.empty()) return !plan->encodes.empty();
  for (const ScheduledChunk& chunk : out.scheduled) {
    Sequence* seq = sequences_.at(chunk.request_id);
    RequestState& state = *seq->owner;
    StepPlan::Item item;
    item.request = state.shared_from_this();
    item.seq = seq;
    item.tokens.assign(chunk.tokens.begin(), chunk.tokens.end());
    item.tokens.insert(item.tokens.end(), chunk.draft_tokens.begin(), chunk.draft_tokens.end());
    item.num_drafts = chunk.draft_tokens.size();
    item.start_pos = chunk.start_pos;
    for (int t = 0; t < kNumAttentionTypes; ++t) {
      item.tables[t].assign(chunk.block_tables[t].begin(), chunk.block_tables[t].end());
    }
    item.samples = chunk.samples;
    const int32_t chunk_end = chunk.start_pos + static_cast<int32_t>(chunk.tokens.size());
    for (size_t k = 0; k < state.images.size(); ++k) {
      const ImagePlaceholder& where = state.images[k].where;
      if (where.offset < chunk_end && where.offset + where.length > chunk.start_pos) {
        item.images.push_back(k);
      }
    }
    // Rows for prompt logprobs: positions p predict p + 1; prompt targets still missing.
    const int prompt_len = static_cast<int>(state.request.prompt_token_ids.size());
    const int first_pos = chunk.start_pos;
    const int last_pos = chunk.start_pos + static_cast<int>(chunk.tokens.size()) - 1;
    const bool wants_rows = seq->wants_prompt_logprobs && seq->next_prompt_logprob < prompt_len &&
                            first_pos <= prompt_len - 2 && last_pos >= seq->next_prompt_logprob - 1;
    item.logits = wants_rows || item.num_drafts > 0
                      ? LogitsWanted::kAll
                      : (chunk.samples ? LogitsWanted::kLast : LogitsWanted::kNone);
    if (seq->index == 0 && state.output.num_cached_tokens < 0) {
      state.output.num_cached_tokens = scheduler_->request(chunk.request_id)->num_cached_tokens;
    }
    plan->num_tokens += static_cast<int>(chunk.tokens.size());
    plan->items.push_back(std::move(item));
  }
  // Spans last: items no longer move.
  for (const StepPlan::Item& item : plan->items) {
    SequenceInput in;
    in.tokens = item.tokens;
    in.start_pos = item.start_pos;
    for (int t = 0; t < kNumAttentionTypes; ++t) in.block_tables[t] = item.tables[t];
    in.logits = item.logits;
    plan->inputs.push_back(in);
  }
  return true;
}

void Engine::sample_step(const StepPlan& plan, const ForwardOutput& forward,
                         std::vector<Sampled>* out) {
  out->clear();
  const size_t vocab = static_cast<size_t>(model_->vocab_size());
  size_t row = 0;
  std::vector<size_t> rows;  // first logits row of each entry of *out (drafts have more)
  for (size_t i = 0; i < plan.items.size(); ++i) {
    const StepPlan::Item& item = plan.items[i];
    if (item.logits == LogitsWanted::kNone) continue;
    Sequence& seq = *item.seq;
    const EngineRequest& r = item.request->request;
    const auto row_span = [&](size_t k) {
      return std::span<const float>(forward.logits.data() + k * vocab, vocab);
    };
    size_t last_row = row;
    if (item.logits == LogitsWanted::kAll) {
      const int prompt_len = static_cast<int>(r.prompt_token_ids.size());
      for (size_t j = 0; j < item.tokens.size(); ++j) {
        const int target = item.start_pos + static_cast<int>(j) + 1;
        if (target >= seq.next_prompt_logprob && target < prompt_len) {
          item.request->prompt_logprobs.push_back(RequestSampler::logprobs(
              row_span(row + j), *r.params.prompt_logprobs, r.prompt_token_ids[target]));
          seq.next_prompt_logprob = target + 1;
        }
      }
      last_row = row + item.tokens.size() - 1;
      row += item.tokens.size();
    } else {
      ++row;
    }
    if (!item.samples) continue;
    Sampled s;
    s.item = i;
    out->push_back(std::move(s));
    rows.push_back(last_row - item.num_drafts);
  }
  // Each sequence draws from its own generator, so sequences can be sampled on any thread; a
  // full-vocabulary pass per sequence is the largest per-step cost outside the model.
  std::vector<std::exception_ptr> errors(out->size());
  const auto sample_range = [&](size_t begin, size_t end) {
    for (size_t k = begin; k < end; ++k) {
      Sampled& s = (*out)[k];
      const size_t num_rows = plan.items[s.item].num_drafts + 1;
      try {
        sample_item(
            plan, std::span<const float>(forward.logits).subspan(rows[k] * vocab, num_rows * vocab),
            &s);
      } catch (...) {
        errors[k] = std::current_exception();
      }
    }
  };
  if (out->size() > 1 && pool_->size() > 1) {
    pool_->parallel_for(out->size(), sample_range);
  } else {
    sample_range(0, out->size());
  }
  for (size_t k = 0; k < out->size(); ++k) {
    if (errors[k]) std::rethrow_exception(errors[k]);
    Sampled& s = (*out)[k];
    s.row = rows[k];
    StopChecker& stop = *plan.items[s.item].seq->stop;
    for (size_t j = 0; j < s.tokens.size(); ++j) {
      StopUpdate u = stop.append(s.tokens[j]);
      u.text_delta = s.update.text_delta + u.text_delta;
      s.update = std::move(u);
      if (!s.update.finished) continue;
      s.tokens.resize(j + 1);  // accepted drafts past a stop are dropped
      if (s.logprobs.size() > j + 1) s.logprobs.resize(j + 1);
      break;
    }
  }
}

void Engine::apply_step(StepPlan& plan, std::vector<Sampled>& sampled,
                        std::vector<Emission>* emit) {
  emit->clear();
  std::vector<StepResult> results;
  for (const Sampled& s : sampled) {
    const StepPlan::Item& item = plan.items[s.item];
    if (item.request->aborted) continue;
    StepResult result{item.seq->scheduler_id, s.tokens.back(), s.update.finished};
    result.accepted_drafts.assign(s.tokens.begin(), s.tokens.end() - 1);
    results.push_back(std::move(result));
    if (speculative_) speculative_->record(static_cast<int>(item.num_drafts), s.num_accepted);
  }
  const std::vector<FinishedRequest> finished = scheduler_->update(results);
  for (Sampled& s : sampled) {
    const StepPlan::Item& item = plan.items[s.item];
    if (item.request->aborted || s.update.finished || s.drafts.empty()) continue;
    scheduler_->set_draft_tokens(item.seq->scheduler_id, std::move(s.drafts));
  }
  if (speculative_) {
    for (const FinishedRequest& f : finished) speculative_ended_.push_back(f.request_id);
  }

  std::map<RequestState*, size_t> emission_of;
  const auto delta_of = [&](RequestState* state) -> RequestOutputDelta& {
    auto [it, inserted] = emission_of.emplace(state, emit->size());
    if (inserted) emit->push_back(Emission{state->shared_from_this(), {}});
    return (*emit)[it->second].delta;
  };
  const auto completion_delta_of = [&](RequestState* state, int index) -> CompletionDelta& {
    RequestOutputDelta& d = delta_of(state);
    for (CompletionDelta& c : d.outputs) {
      if (c.index == index) return c;
    }
    d.outputs.push_back(CompletionDelta{});
    d.outputs.back().index = index;
    return d.outputs.back();
  };
  const auto finish = [&](Sequence& seq) {
    seq.finished = true;
    --seq.owner->num_unfinished;
    const std::optional<std::string>& reason =
        seq.owner->output.outputs[static_cast<size_t>(seq.index)].finish_reason;
    if (reason == "stop") ++counters_.requests_finished_stop;
    if (reason == "length") ++counters_.requests_finished_length;
  };

  for (Sampled& s : sampled) {
    StepPlan::Item& item = plan.items[s.item];
    RequestState* state = item.request.get();
    if (state->aborted) continue;
    Sequence& seq = *item.seq;
    CompletionOutput& out = state->output.outputs[static_cast<size_t>(seq.index)];
    CompletionDelta& d = completion_delta_of(state, seq.index);
    out.token_ids.insert(out.token_ids.end(), s.tokens.begin(), s.tokens.end());
    d.token_ids.insert(d.token_ids.end(), s.tokens.begin(), s.tokens.end());
    out.text += s.update.text_delta;
    d.text += s.update.text_delta;
    if (out.logprobs) {
      out.logprobs->insert(out.logprobs->end(), s.logprobs.begin(), s.logprobs.end());
      d.logprobs.insert(d.logprobs.end(), std::make_move_iterator(s.logprobs.begin()),
                        std::make_move_iterator(s.logprobs.end()));
    }
    counters_.generation_tokens += s.tokens.size();
    if (!seq.prompt_computed) {
      seq.prompt_computed = true;
      const bool all_computed =
          std::all_of(state->sequences.begin(), state->sequences.end(),
                      [](const Sequence& other) { return other.prompt_computed; });
      if (all_computed) {
        for (RequestImage& image : state->images) {  // a recompute fetches them again
          image.rows.reset();
          image.looked_up = false;
        }
      }
      counters_.prompt_tokens += state->request.prompt_token_ids.size();
      if (seq.wants_prompt_logprobs) {
        state->output.prompt_logprobs = state->prompt_logprobs;
        delta_of(state).prompt_logprobs = state->prompt_logprobs;
      }
      if (seq.index == 0 && state->samples_held) {
        // Sample 0's full prompt blocks are cached now: the others start from them.
        state->samples_held = false;
        num_held_samples_ -= static_cast<int>(state->sequences.size()) - 1;
        for (size_t k = 1; k < state->sequences.size(); ++k) {
          admit_sequence(*state, state->sequences[k]);
        }
      }
    }
    if (s.update.finished) {
      out.finish_reason = s.update.finish_reason;
      out.stop_reason_text = s.update.stop_reason_text;
      out.stop_reason_token = s.update.stop_reason_token;
      d.finish_reason = out.finish_reason;
      d.stop_reason_text = out.stop_reason_text;
      d.stop_reason_token = out.stop_reason_token;
      finish(seq);
    }
  }
  for (const FinishedRequest& f : finished) {
    auto it = sequences_.find(f.request_id);
    if (it == sequences_.end()) continue;
    Sequence& seq = *it->second;
    sequences_.erase(it);
    if (seq.finished) continue;
    // The scheduler's own length cap (max_tokens / max_model_len) got there first.
    CompletionOutput& out = seq.owner->output.outputs[static_cast<size_t>(seq.index)];
    out.finish_reason = "length";
    completion_delta_of(seq.owner, seq.index).finish_reason = "length";
    finish(seq);
  }
  for (Emission& e : *emit) {
    RequestState& state = *e.request;
    if (state.num_unfinished > 0) continue;
    state.output.finished = true;
    e.delta.finished = true;
    requests_.erase(state.request.request_id);
  }
}

void Engine::take_aborted(std::vector<Emission>* emit) {
  emit->clear();
  for (std::shared_ptr<RequestState>& state : aborted_) {
    Emission e{state, {}};
    for (Sequence& seq : state->sequences) {
      if (seq.finished) continue;
      seq.finished = true;
      CompletionOutput& out = state->output.outputs[static_cast<size_t>(seq.index)];
      out.finish_reason = "abort";
      CompletionDelta d;
      d.index = seq.index;
      d.finish_reason = "abort";
      e.delta.outputs.push_back(std::move(d));
    }
    state->num_unfinished = 0;
    state->output.finished = true;
    e.delta.finished = true;
    ++counters_.requests_aborted;
    emit->push_back(std::move(e));
  }
  aborted_.clear();
}

void Engine::deliver(std::vector<Emission>& emissions) {
  for (Emission& e : emissions) {
    if (!e.request->callback) continue;
    try {
      e.request->callback(e.request->output, e.delta);
    } catch (const std::exception& ex) {
      GS_LOG_ERROR << "output callback of request " << e.request->request.request_id
                   << " threw: " << ex.what();
    }
  }
  emissions.clear();
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
