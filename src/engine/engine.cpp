#include "engine/engine.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <exception>
#include <filesystem>

#include "core/error.h"
#include "core/logging.h"
#include "core/progress_bar.h"
#include "core/python_text.h"
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
#include "model/gemma4_model.h"
#include "model/gemma4_processor_config.h"
#include "model/kv_cache.h"
#include "model/weights.h"
#include "parallel/communicator.h"
#include "parallel/rank_launch.h"
#include "tokenizer/tokenizer.h"

namespace gemmaserve {
namespace {

constexpr size_t kProgressMinBytes = size_t{512} << 20;  // smaller loads finish too fast to show
constexpr uint64_t kNotStalled = ~uint64_t{0};

// A cache budget given in GiB, in bytes; InputError unless finite and >= 0.
uint64_t cache_bytes(double gib, const char* flag) {
  if (!(gib >= 0) || !std::isfinite(gib) || gib > 1e9) {
    throw InputError(std::string(flag) + " must be a number of GiB in [0, 1e9], got " +
                     python_float_repr(gib));
  }
  return static_cast<uint64_t>(gib * 1073741824.0);
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
  cache_bytes(a.mm_processor_cache_gb, "--mm-processor-cache-gb");
  cache_bytes(a.structured_outputs_cache_gb, "--structured-outputs-cache-gb");
  if (!(a.max_audio_seconds > 0) || !std::isfinite(a.max_audio_seconds)) {
    throw InputError("--max-audio-seconds must be a positive number of seconds, got " +
                     std::to_string(a.max_audio_seconds));
  }
  if (!(a.max_video_seconds > 0) || !std::isfinite(a.max_video_seconds)) {
    throw InputError("--max-video-seconds must be a positive number of seconds, got " +
                     python_float_repr(a.max_video_seconds));
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
      grammars_(std::make_unique<structured::GrammarCompiler>(
          cache_bytes(args.structured_outputs_cache_gb, "--structured-outputs-cache-gb"))),
      encoder_cache_(cache_bytes(args.mm_processor_cache_gb, "--mm-processor-cache-gb")) {
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
  if (!args_.mmproj.empty()) load_options.mmproj = fs::path(args_.mmproj);
  load_options.pool = pool_.get();  // converts GGUF types without a kernel, quantizes
  std::unique_ptr<ProgressBar> quant_bar;
  if (!args_.quantization.empty()) {
    apply_quantization_flag(args_.quantization, "--quantization", &load_options);
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
  const std::optional<fs::path> gguf = gguf_model_file(dir);
  model_source_ = gguf.value_or(dir);
  if (weights.config.vision) {
    image_processor_ = load_gemma4_image_processor_config(dir, *weights.config.vision);
  } else if (weights.config.unified_vision) {
    image_processor_ = load_gemma4_image_processor_config(
        dir, image_processor_geometry(*weights.config.unified_vision));
  }
  image_processor_.max_soft_tokens =
      parse_mm_processor_kwargs(args_.mm_processor_kwargs, "--mm-processor-kwargs")
          .value_or(image_processor_.max_soft_tokens);

  // A GGUF model carries its tokenizer; --tokenizer overrides it.
  const fs::path tok_path = args_.tokenizer.empty() ? model_source_ : fs::path(args_.tokenizer);
  if (!args_.tokenizer.empty() || gguf || fs::exists(dir / "tokenizer.json")) {
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
  const bool audio_tower = weights.config.audio.has_value();
  model_ = std::make_unique<Gemma4Model>(std::move(weights), pool_, model_options, communicator);
  if (audio_tower) model_->set_audio_feature_options(load_gemma4_audio_feature_config(dir));
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

// ---- The step loop ----------------------------------------------------------------------------

void Engine::run_loop() {
  ForwardOutput forward;
  StepPlan plan;
  std::vector<Sampled> sampled;
  std::vector<StepFailure> failed;  // sequences whose step raised for them alone
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
      if (engine_step_fault(++steps_started, args_.data_parallel_rank))
        throw std::runtime_error("injected engine fault");
      run_encoder(&plan);
      attach_images(&plan);
      sampled.clear();
      failed.clear();
      if (!plan.inputs.empty()) {
        forward.return_hidden = speculative_ && speculative_->proposer().wants_hidden_states();
        model_->forward(plan.inputs, *cache_, &forward);
        sample_step(plan, forward, &sampled, &failed);
        propose_drafts(plan, forward, &sampled, &failed);
      }
    } catch (const std::exception& e) {
      // What reaches here touched shared state (the forward pass, the KV cache, the encoder).
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
    for (StepFailure& f : failed)
      fail_request_locked(*plan.items[f.item].request, std::move(f.error));
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
  if (speculative_) {
    // A preempted sequence's draft state goes with its blocks; it re-drafts when it resumes.
    for (const std::string& id : out.preempted) speculative_ended_.push_back(id);
  }
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
                         std::vector<Sampled>* out, std::vector<StepFailure>* failed) {
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
    const size_t first_row = row;
    size_t last_row = row;
    if (item.logits == LogitsWanted::kAll) {
      last_row = row + item.tokens.size() - 1;
      row += item.tokens.size();
    } else {
      ++row;
    }
    if (item.logits == LogitsWanted::kAll) {
      try {
        const int prompt_len = static_cast<int>(r.prompt_token_ids.size());
        for (size_t j = 0; j < item.tokens.size(); ++j) {
          const int target = item.start_pos + static_cast<int>(j) + 1;
          if (target >= seq.next_prompt_logprob && target < prompt_len) {
            item.request->prompt_logprobs.push_back(RequestSampler::logprobs(
                row_span(first_row + j), *r.params.prompt_logprobs, r.prompt_token_ids[target]));
            seq.next_prompt_logprob = target + 1;
          }
        }
      } catch (const std::exception& e) {
        failed->push_back({i, request_error_of(e)});
        continue;
      }
    }
    if (!item.samples) continue;
    Sampled s;
    s.item = i;
    out->push_back(std::move(s));
    rows.push_back(last_row - item.num_drafts);
  }
  // Each sequence draws from its own generator, so sequences can be sampled on any thread; a
  // full-vocabulary pass per sequence is the largest per-step cost outside the model.
  std::vector<std::optional<RequestError>> errors(out->size());
  const auto sample_range = [&](size_t begin, size_t end) {
    for (size_t k = begin; k < end; ++k) {
      Sampled& s = (*out)[k];
      const size_t num_rows = plan.items[s.item].num_drafts + 1;
      try {
        sample_item(
            plan, std::span<const float>(forward.logits).subspan(rows[k] * vocab, num_rows * vocab),
            &s);
      } catch (const std::exception& e) {
        errors[k] = request_error_of(e);
      }
    }
  };
  if (out->size() > 1 && pool_->size() > 1) {
    pool_->parallel_for(out->size(), sample_range);
  } else {
    sample_range(0, out->size());
  }
  for (size_t k = 0; k < out->size(); ++k) {
    Sampled& s = (*out)[k];
    s.row = rows[k];
    if (errors[k]) continue;
    StopChecker& stop = *plan.items[s.item].seq->stop;
    try {
      for (size_t j = 0; j < s.tokens.size(); ++j) {
        StopUpdate u = stop.append(s.tokens[j]);
        u.text_delta = s.update.text_delta + u.text_delta;
        s.update = std::move(u);
        if (!s.update.finished) continue;
        s.tokens.resize(j + 1);  // accepted drafts past a stop are dropped
        if (s.logprobs.size() > j + 1) s.logprobs.resize(j + 1);
        break;
      }
    } catch (const std::exception& e) {
      errors[k] = request_error_of(e);
    }
  }
  // The failed samples leave the step; the others keep their order.
  size_t kept = 0;
  for (size_t k = 0; k < out->size(); ++k) {
    if (errors[k]) {
      failed->push_back({(*out)[k].item, std::move(*errors[k])});
    } else {
      if (kept != k) (*out)[kept] = std::move((*out)[k]);
      ++kept;
    }
  }
  out->resize(kept);
}

void Engine::apply_step(StepPlan& plan, std::vector<Sampled>& sampled,
                        std::vector<Emission>* emit) {
  emit->clear();
  std::vector<StepResult> results;
  for (const Sampled& s : sampled) {
    const StepPlan::Item& item = plan.items[s.item];
    if (item.request->aborted) {
      // propose_drafts may have drafted for it after its abort was queued: forget it again.
      if (speculative_) speculative_ended_.push_back(item.seq->scheduler_id);
      continue;
    }
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
        for (RequestMedia& image : state->images) {  // a recompute fetches them again
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
    const char* reason = state->output.error ? "error" : "abort";
    for (Sequence& seq : state->sequences) {
      if (seq.finished) continue;
      seq.finished = true;
      CompletionOutput& out = state->output.outputs[static_cast<size_t>(seq.index)];
      out.finish_reason = reason;
      CompletionDelta d;
      d.index = seq.index;
      d.finish_reason = reason;
      e.delta.outputs.push_back(std::move(d));
    }
    state->num_unfinished = 0;
    state->output.finished = true;
    e.delta.finished = true;
    ++(state->output.error ? counters_.requests_failed : counters_.requests_aborted);
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

}  // namespace gemmaserve
