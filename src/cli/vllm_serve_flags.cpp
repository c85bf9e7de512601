#include "cli/vllm_serve_flags.h"

#include <algorithm>
#include <utility>

#include "core/error.h"
#include "core/logging.h"

namespace gemmaserve {
namespace {

constexpr FlagArity kBool = FlagArity::kBool;
constexpr FlagArity kValue = FlagArity::kValue;
constexpr FlagArity kValues = FlagArity::kValues;
constexpr FlagArity kJson = FlagArity::kJson;

// Reasons several flags share.
constexpr const char* kLora = "serves LoRA adapters; gemmaserve has no LoRA support";
constexpr const char* kMultiNode =
    "multi-node data parallelism; gemmaserve's --data-parallel-size runs every replica in this one "
    "process";
constexpr const char* kEplb =
    "expert load balancing (redundant experts moved between ranks); gemmaserve places the experts "
    "once, at load";
constexpr const char* kMultiPortLb =
    "health aggregation of multi-port external load balancing; gemmaserve's --data-parallel-size "
    "serves every replica behind one port";
constexpr const char* kTls =
    "serves HTTPS; gemmaserve speaks plain HTTP only: put a TLS-terminating proxy in front";
constexpr const char* kCudaGraphs =
    "sets the CUDA graph capture sizes; gemmaserve captures no graphs, so it changes nothing";
constexpr const char* kDualBatch =
    "dual-batch overlap of GPU compute and communication; gemmaserve has no such overlap, so it "
    "changes nothing";
constexpr const char* kMamba =
    "sizes the Mamba state cache; Gemma 4 has no Mamba layers, so it changes nothing";
constexpr const char* kCohere =
    "shapes the /cohere/v2/chat endpoint; gemmaserve has no Cohere endpoints";
constexpr const char* kGuided =
    "deprecated in vLLM (removed in 0.12); gemmaserve takes --structured-outputs-config instead";
constexpr const char* kRevision =
    "picks a Hugging Face Hub revision; gemmaserve loads local directories only (no Hugging Face "
    "Hub download)";
constexpr const char* kRope =
    "overrides the checkpoint's RoPE settings; gemmaserve runs Gemma 4's own (per layer type)";
constexpr const char* kTracing =
    "OpenTelemetry tracing; gemmaserve exports no traces (its counters are on /metrics)";
constexpr const char* kPooling =
    "configures pooling (embedding) models; gemmaserve serves generation only";

VllmFlagRule refused(std::string name, FlagArity arity, std::string why,
                     std::vector<std::string> accepted = {},
                     std::vector<std::string> aliases = {}) {
  return {std::move(name),      std::move(aliases),  arity,
          FlagPolicy::kRefused, std::move(accepted), std::move(why)};
}

VllmFlagRule hint(std::string name, FlagArity arity, std::string why,
                  std::vector<std::string> aliases = {}) {
  return {std::move(name), std::move(aliases), arity, FlagPolicy::kHintWarning, {}, std::move(why)};
}

VllmFlagRule in_effect(std::string name, FlagArity arity, std::string why) {
  return {std::move(name), {}, arity, FlagPolicy::kInEffect, {}, std::move(why)};
}

}  // namespace

const std::vector<VllmFlagRule>& vllm_flag_rules() {
  // In the order of vLLM's parser: serve's own, FrontendArgs, then EngineArgs' config groups.
  static const std::vector<VllmFlagRule> rules = {
      refused("--headless", kBool,
              "runs engine cores without an API server (multi-node data parallelism); gemmaserve "
              "runs its engine and server in one process"),
      refused("--api-server-count", kValue,
              "starts several API server processes; gemmaserve serves HTTP from one process (1 is "
              "accepted)",
              {"1"}, {"-asc"}),
      refused("--grpc", kBool, "serves gRPC instead of HTTP; gemmaserve has the HTTP server only"),
      refused("--data-parallel-supervisor-port", kValue, kMultiPortLb),
      refused("--dp-supervisor-probe-interval-s", kValue, kMultiPortLb),
      refused("--dp-supervisor-probe-timeout-s", kValue, kMultiPortLb),
      refused("--dp-supervisor-probe-failure-threshold", kValue, kMultiPortLb),
      refused("--data-parallel-multi-port-external-lb", kBool, kMultiPortLb),
      refused("--uds", kValue,
              "listens on a Unix domain socket; gemmaserve listens on TCP only (--host, --port)"),
      in_effect("--disable-uvicorn-access-log", kBool,
                "gemmaserve writes no access log, so there is none to disable"),
      in_effect("--disable-access-log-for-endpoints", kValue,
                "gemmaserve writes no access log, so there is none to filter"),
      refused("--ssl-keyfile", kValue, kTls),
      refused("--ssl-certfile", kValue, kTls),
      refused("--ssl-ca-certs", kValue, kTls),
      refused("--ssl-cert-reqs", kValue, kTls),
      refused("--ssl-ciphers", kValue, kTls),
      refused("--enable-ssl-refresh", kBool, kTls),
      refused("--root-path", kValue,
              "the path prefix a proxy adds (FastAPI root_path); gemmaserve serves its routes at "
              "/: let the proxy strip the prefix"),
      refused("--middleware", kValues, "imports Python ASGI middleware; gemmaserve runs no Python"),
      in_effect("--disable-fastapi-docs", kBool,
                "gemmaserve serves no /docs, /redoc or /openapi.json"),
      refused("--h11-max-incomplete-event-size", kValue,
              "tunes h11's request size limits; gemmaserve's limits are fixed (64 KiB of headers) "
              "or --max-request-size-mb (the body)"),
      refused("--h11-max-header-count", kValue,
              "tunes h11's header count limit; gemmaserve's header limit is fixed (64 KiB)"),
      refused("--enable-offline-docs", kBool,
              "serves the API docs pages from bundled assets; gemmaserve serves no docs pages"),
      hint("--enable-flash-late-interaction", kBool,
           "runs late-interaction scoring (MaxSim) on the GPU; gemmaserve has no GPU and no /score "
           "endpoint, so it changes nothing"),
      refused("--lora-modules", kValues, kLora),
      refused("--response-role", kValue,
              "names the role of chat answers; gemmaserve answers as assistant only (assistant is "
              "accepted)",
              {"assistant"}, {}),
      refused("--exclude-tools-when-tool-choice-none", kBool,
              "leaves the tools out of the prompt when tool_choice is none; gemmaserve always "
              "renders them"),
      refused("--tool-parser-plugin", kValue,
              "loads a Python tool parser; gemmaserve runs no Python (parsers: gemma4, none)"),
      refused("--tool-server", kValue,
              "connects tool servers for the Responses API; gemmaserve has no tool server and no "
              "/v1/responses"),
      refused("--log-config-file", kValue,
              "configures Python logging from a file; gemmaserve logs to stderr (level: "
              "--uvicorn-log-level)"),
      in_effect("--max-log-len", kValue,
                "gemmaserve's request log lines hold counts, never prompt text or ids"),
      refused("--enable-per-request-metrics", kBool,
              "adds per-request timing metrics to responses; gemmaserve's responses leave metrics "
              "null"),
      refused("--enable-server-load-tracking", kBool,
              "counts requests in flight for the /load endpoint; gemmaserve has no /load (see "
              "/metrics)"),
      refused(
          "--enable-log-outputs", kBool,
          "logs the generated text of each request; gemmaserve's request log holds counts only"),
      refused("--enable-log-deltas", kBool,
              "shapes --enable-log-outputs, which gemmaserve does not support"),
      refused("--cohere-is-reasoning-model", kBool, kCohere),
      refused("--cohere-format", kValue, kCohere),
      refused("--log-error-stack", kBool,
              "logs the Python stack of error responses; gemmaserve has no Python stacks (internal "
              "errors are logged with their message)"),
      refused("--tokens-only", kBool,
              "serves only the tokens-in, tokens-out endpoint of disaggregated setups; gemmaserve "
              "serves the whole API"),
      refused("--fingerprint-mode", kValue,
              "fills system_fingerprint with the vLLM version and a config hash; gemmaserve leaves "
              "it null (none is accepted)",
              {"none"}, {}),
      refused(
          "--fingerprint-value", kValue,
          "the system_fingerprint of --fingerprint-mode custom, which gemmaserve does not support"),
      refused("--runner", kValue,
              "picks a pooling or draft model runner; gemmaserve runs generative models only "
              "(auto, generate are accepted)",
              {"auto", "generate"}, {}),
      refused("--convert", kValue,
              "converts the model into an embedding, classification or reward model; gemmaserve "
              "serves generation only (auto, none are accepted)",
              {"auto", "none"}, {}),
      refused("--task", kValue,
              "deprecated in vLLM (--runner, --convert); gemmaserve serves generation only (auto, "
              "generate are accepted)",
              {"auto", "generate"}, {}),
      refused("--tokenizer-mode", kValue,
              "picks the slow, Mistral or a custom tokenizer; gemmaserve reads tokenizer.json and "
              "GGUF vocabularies itself (auto, hf are accepted)",
              {"auto", "hf"}, {}),
      hint("--trust-remote-code", kBool,
           "lets Hugging Face run a checkpoint's own Python code; Gemma 4 needs none (in vLLM "
           "either), so it changes nothing"),
      refused("--dtype", kValue,
              "casts the weights and activations; gemmaserve keeps the checkpoint's weights and "
              "computes in float32 (auto, float32, float are accepted; bf16 products: "
              "--cpu-matmul-precision bf16)",
              {"auto", "float32", "float"}, {}),
      refused("--hf-config-path", kValue,
              "reads config.json from another path or Hub repository; gemmaserve reads MODEL_DIR's "
              "config.json"),
      refused("--revision", kValue, kRevision),
      refused("--code-revision", kValue, kRevision),
      refused("--tokenizer-revision", kValue, kRevision),
      refused("--rope-scaling", kJson, kRope),
      refused("--rope-theta", kValue, kRope),
      hint("--enforce-eager", kBool,
           "turns off CUDA graphs and torch.compile; gemmaserve compiles no graphs, so it changes "
           "nothing"),
      refused("--logprobs-mode", kValue,
              "returns logits or processed logprobs; gemmaserve returns raw logprobs (raw_logprobs "
              "is accepted)",
              {"raw_logprobs"}, {}),
      refused(
          "--disable-sliding-window", kBool,
          "runs the sliding-window layers with full attention; gemmaserve keeps Gemma 4's window"),
      hint("--disable-cascade-attn", kBool,
           "turns off cascade attention, a GPU kernel for shared prefixes; gemmaserve has none, so "
           "it changes nothing"),
      refused("--skip-tokenizer-init", kBool,
              "runs without a tokenizer (token ids in and out); gemmaserve's routes need the "
              "tokenizer"),
      refused("--enable-prompt-embeds", kBool,
              "accepts prompt embeddings as input; gemmaserve takes text, token ids and images"),
      refused("--config-format", kValue,
              "reads Mistral-format configs; gemmaserve reads Hugging Face config.json (auto, hf "
              "are accepted)",
              {"auto", "hf"}, {}),
      refused("--hf-token", kValue,
              "the Hugging Face Hub token for downloads; gemmaserve loads local directories only "
              "(no Hugging Face Hub download)"),
      refused("--hf-overrides", kJson,
              "overrides config.json fields; gemmaserve runs the checkpoint's config as it is"),
      refused("--pooler-config", kJson, kPooling),
      refused("--override-pooler-config", kJson, kPooling),
      refused("--logits-processor-pattern", kValue,
              "allows Python logits processors by name; gemmaserve runs no Python"),
      refused("--enable-sleep-mode", kBool,
              "frees GPU memory while asleep (/sleep, /wake_up); gemmaserve has no sleep mode"),
      refused("--model-impl", kValue,
              "runs the model through the Transformers backend; gemmaserve has its own Gemma 4 "
              "only (auto, vllm are accepted)",
              {"auto", "vllm"}, {}),
      refused("--override-attention-dtype", kValue,
              "casts the attention computation; gemmaserve's attention computes in float32"),
      refused("--logits-processors", kValues,
              "loads Python logits processors; gemmaserve runs no Python"),
      refused("--io-processor-plugin", kValue,
              "loads a Python plugin for pooling inputs and outputs; gemmaserve runs no Python"),
      refused("--load-format", kValue,
              "picks another weight loader (pt, npcache, dummy, tensorizer, bitsandbytes, ...); "
              "gemmaserve reads safetensors (auto, safetensors are accepted)",
              {"auto", "safetensors"}, {}),
      refused("--download-dir", kValue,
              "where Hub downloads go; gemmaserve loads local directories only (no Hugging Face "
              "Hub download)"),
      refused("--safetensors-load-strategy", kValue,
              "chooses how safetensors files are read; gemmaserve always memory-maps them"),
      refused("--model-loader-extra-config", kJson,
              "options of the chosen weight loader; gemmaserve has one loader, without options"),
      refused("--ignore-patterns", kValues,
              "file patterns the loader skips; gemmaserve reads only the files it knows (config, "
              "safetensors, tokenizer, templates)"),
      refused("--use-tqdm-on-load", kBool,
              "hides the weight-loading progress bar; gemmaserve's load messages cannot be "
              "switched off (true is accepted)",
              {"true"}, {}),
      refused("--pt-load-map-location", kValue,
              "the device map of .pt checkpoints; gemmaserve reads safetensors"),
      refused("--guided-decoding-backend", kValue, kGuided),
      refused("--guided-decoding-disable-fallback", kValue, kGuided),
      refused("--guided-decoding-disable-any-whitespace", kValue, kGuided),
      refused("--guided-decoding-disable-additional-properties", kValue, kGuided),
      refused("--pipeline-parallel-size", kValue,
              "splits the layers over pipeline stages; gemmaserve splits by tensor parallelism "
              "only (1 is accepted)",
              {"1"}, {"-pp"}),
      refused("--decode-context-parallel-size", kValue,
              "splits the KV cache of decodes over ranks; gemmaserve keeps each sequence's KV "
              "cache whole (1 is accepted)",
              {"1"}, {"-dcp"}),
      refused("--data-parallel-rank", kValue, kMultiNode, {}, {"-dpn"}),
      refused("--data-parallel-start-rank", kValue, kMultiNode, {}, {"-dpr"}),
      refused("--data-parallel-size-local", kValue, kMultiNode, {}, {"-dpl"}),
      refused("--data-parallel-address", kValue, kMultiNode, {}, {"-dpa"}),
      refused("--data-parallel-rpc-port", kValue, kMultiNode, {}, {"-dpp"}),
      refused("--data-parallel-backend", kValue,
              "runs the replicas as processes (mp) or Ray actors; gemmaserve's replicas are "
              "threads of one process",
              {}, {"-dpb"}),
      refused("--data-parallel-hybrid-lb", kBool, kMultiNode),
      hint("--all2all-backend", kValue,
           "picks the GPU all-to-all kernels of expert parallelism; gemmaserve's ranks exchange "
           "through MPI, so it changes nothing"),
      hint("--enable-dbo", kBool, kDualBatch),
      hint("--dbo-decode-token-threshold", kValue, kDualBatch),
      hint("--dbo-prefill-token-threshold", kValue, kDualBatch),
      hint("--disable-nccl-for-dp-synchronization", kBool,
           "NCCL is a GPU library; gemmaserve's replicas synchronize inside one process, so it "
           "changes nothing"),
      refused("--enable-eplb", kBool, kEplb),
      refused("--eplb-config", kJson, kEplb),
      refused("--expert-placement-strategy", kValue, kEplb),
      refused("--num-redundant-experts", kValue, kEplb),
      refused("--eplb-window-size", kValue, kEplb),
      refused("--eplb-step-interval", kValue, kEplb),
      refused("--eplb-log-balancedness", kBool, kEplb),
      refused("--max-parallel-loading-workers", kValue,
              "loads the model in batches of workers to save RAM; gemmaserve's ranks memory-map "
              "the weights"),
      refused("--ray-workers-use-nsight", kBool,
              "profiles Ray workers with Nsight; gemmaserve does not use Ray"),
      hint("--disable-custom-all-reduce", kBool,
           "turns off vLLM's CUDA all-reduce kernel; gemmaserve all-reduces through MPI, so it "
           "changes nothing"),
      refused("--worker-cls", kValue, "a Python worker class; gemmaserve runs no Python"),
      refused("--worker-extension-cls", kValue,
              "a Python worker extension; gemmaserve runs no Python"),
      refused("--enable-multimodal-encoder-data-parallel", kBool,
              "deprecated in vLLM (--mm-encoder-tp-mode data); gemmaserve has no such mode"),
      hint("--swap-space", kValue,
           "CPU swap space of a GPU KV cache, unused by vLLM V1 (it preempts by recompute, as "
           "gemmaserve does), so it changes nothing"),
      refused("--num-gpu-blocks-override", kValue,
              "fixes the number of KV cache blocks; gemmaserve sizes its cache by "
              "--kv-cache-memory-bytes"),
      refused("--prefix-caching-hash-algo", kValue,
              "picks a faster, non-cryptographic block hash; gemmaserve always hashes blocks with "
              "SHA-256 (sha256, sha256_cbor are accepted)",
              {"sha256", "sha256_cbor"}, {}),
      hint("--cpu-offload-gb", kValue,
           "keeps part of the weights in CPU memory instead of the GPU's; gemmaserve's weights are "
           "all in CPU memory, so it changes nothing"),
      in_effect("--calculate-kv-scales", kBool,
                "gemmaserve's fp8 KV cache always computes its scales at run time (one per row)"),
      in_effect(
          "--kv-sharing-fast-prefill", kBool,
          "gemmaserve always runs the KV-shared layers only for the rows whose logits are wanted"),
      hint("--mamba-cache-dtype", kValue, kMamba),
      hint("--mamba-ssm-cache-dtype", kValue, kMamba),
      hint("--mamba-block-size", kValue, kMamba),
      refused("--enable-mm-embeds", kBool,
              "accepts precomputed image embeddings as input; gemmaserve takes images only"),
      refused("--mm-processor-cache-type", kValue,
              "shares processed inputs between processes through shared memory; gemmaserve is one "
              "process with an LRU cache (lru is accepted)",
              {"lru"}, {}),
      refused("--mm-shm-cache-max-object-size-mb", kValue,
              "sizes the objects of the shared-memory cache, which gemmaserve does not have"),
      refused("--mm-encoder-tp-mode", kValue,
              "chooses how the vision encoder is split over tensor-parallel ranks; gemmaserve's "
              "split is fixed"),
      hint("--mm-encoder-attn-backend", kValue,
           "picks the GPU attention kernel of the vision encoder; gemmaserve has one CPU kernel, "
           "so it changes nothing"),
      refused("--interleave-mm-strings", kBool,
              "places images at image markers inside text parts; gemmaserve places them where "
              "their content parts are"),
      hint("--skip-mm-profiling", kBool,
           "skips the GPU memory profiling run with images; gemmaserve does no profiling run, so "
           "it changes nothing"),
      refused("--video-pruning-rate", kValue,
              "prunes redundant video tokens (Efficient Video Sampling) on the models built for "
              "it; Gemma 4 is not one, in vLLM or here (0 is accepted)",
              {"0", "0.0"}, {}),
      refused("--enable-lora", kBool, kLora),
      refused("--max-loras", kValue, kLora),
      refused("--max-lora-rank", kValue, kLora),
      refused("--lora-extra-vocab-size", kValue, kLora),
      refused("--lora-dtype", kValue, kLora),
      refused("--max-cpu-loras", kValue, kLora),
      refused("--default-mm-loras", kJson, kLora),
      refused("--fully-sharded-loras", kBool, kLora),
      refused("--show-hidden-metrics-for-version", kValue,
              "shows metrics hidden since a vLLM version; gemmaserve's /metrics hides none"),
      refused("--otlp-traces-endpoint", kValue, kTracing),
      refused("--collect-detailed-traces", kValue, kTracing),
      refused("--max-num-partial-prefills", kValue,
              "caps the prompts that prefill in chunks at once; gemmaserve's scheduler (as vLLM "
              "V1's) gives any prompt the budget left, with no such cap"),
      refused("--max-long-partial-prefills", kValue,
              "caps the long prompts that prefill in chunks at once; gemmaserve's scheduler (as "
              "vLLM V1's) has no such cap"),
      refused("--num-lookahead-slots", kValue,
              "reserves KV slots for speculative tokens by hand; gemmaserve reserves them from "
              "--speculative-config"),
      refused("--enable-chunked-prefill", kBool,
              "turns chunked prefill off; gemmaserve always chunks long prompts (true is accepted)",
              {"true"}, {}),
      in_effect("--disable-chunked-mm-input", kBool,
                "gemmaserve never splits an image's tokens over two steps"),
      refused("--scheduler-cls", kValue, "a Python scheduler class; gemmaserve runs no Python"),
      refused("--disable-hybrid-kv-cache-manager", kBool,
              "gives every layer a full-length KV cache; gemmaserve always keeps one group per "
              "attention type"),
      hint("--async-scheduling", kBool,
           "overlaps scheduling with GPU execution; gemmaserve's engine thread schedules between "
           "its CPU steps, so it changes nothing"),
      hint("--cudagraph-capture-sizes", kValues, kCudaGraphs),
      hint("--cuda-graph-sizes", kValues, kCudaGraphs),
      hint("--max-cudagraph-capture-size", kValue, kCudaGraphs),
      refused("--kv-transfer-config", kJson,
              "moves KV caches between instances (disaggregated prefill); gemmaserve has no KV "
              "transfer"),
      refused("--kv-events-config", kJson, "publishes KV cache events; gemmaserve publishes none"),
      hint("--compilation-config", kJson,
           "torch.compile and CUDA graph settings; gemmaserve compiles nothing at run time, so it "
           "changes nothing",
           {"-O"}),
      refused("--additional-config", kJson,
              "settings for platform plugins; gemmaserve has no plugins"),
      in_effect("--disable-log-stats", kBool,
                "gemmaserve logs no periodic stats lines (/metrics has them)"),
      refused("--aggregate-engine-logging", kBool,
              "aggregates the periodic per-engine stats log, which gemmaserve does not write (see "
              "/metrics)"),
  };
  return rules;
}

void declare_vllm_flag_rules(ArgParser& parser) {
  for (const VllmFlagRule& r : vllm_flag_rules()) {
    switch (r.arity) {
      case FlagArity::kBool:
        parser.flag(r.name, r.aliases);
        break;
      case FlagArity::kValue:
        parser.value(r.name, r.aliases);
        break;
      case FlagArity::kValues:
        parser.list(r.name, r.aliases);
        break;
      case FlagArity::kJson:
        parser.json(r.name, r.aliases);
        break;
    }
  }
}

void apply_vllm_flag_rules(const ArgParser& parser) {
  for (const VllmFlagRule& r : vllm_flag_rules()) {
    if (!parser.has(r.name)) continue;
    std::vector<std::string> given;
    if (r.arity == FlagArity::kBool) {
      given.push_back(parser.get_flag(r.name) ? "true" : "false");
    } else {
      given = parser.all(r.name);
    }
    const bool accepted = std::all_of(given.begin(), given.end(), [&](const std::string& v) {
      return std::find(r.accepted_values.begin(), r.accepted_values.end(), v) !=
             r.accepted_values.end();
    });
    if (accepted || r.policy == FlagPolicy::kInEffect) continue;
    if (r.policy == FlagPolicy::kRefused) throw InputError(r.name + ": " + r.why);
    GS_LOG_WARNING << r.name << ": " << r.why;
  }
}

}  // namespace gemmaserve
