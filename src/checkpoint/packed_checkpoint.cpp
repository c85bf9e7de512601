#include "checkpoint/packed_checkpoint.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <fstream>
#include <mutex>
#include <thread>
#include <utility>

#include "checkpoint/awq.h"
#include "checkpoint/compressed_tensors.h"
#include "checkpoint/gptq.h"
#include "core/error.h"
#include "core/logging.h"
#include "core/thread_pool.h"

namespace gemmaserve {
namespace {

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

nlohmann::ordered_json read_ordered_json(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InputError(path.string() + ": cannot open");
  try {
    return nlohmann::ordered_json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    throw InputError(path.string() + ": malformed JSON: " + e.what());
  }
}

PackedPlan plan_method(const std::string& method, const Checkpoint& base,
                       const QuantizationConfig& config) {
  if (method == "gptq") return plan_gptq(base, config);
  if (method == "awq") return plan_awq(base, config);
  return plan_compressed_tensors(base, config);
}

// GEMMASERVE_PACKED_WEIGHTS=f32 converts every module to F32 (exact: checks a checkpoint
// against a float reference); unset or "auto": the kernel dtypes.
bool packed_weights_as_f32() {
  const char* v = std::getenv("GEMMASERVE_PACKED_WEIGHTS");
  const std::string value = v ? ascii_lower(v) : "";
  if (value.empty() || value == "auto") return false;
  if (value == "f32") return true;
  throw InputError("GEMMASERVE_PACKED_WEIGHTS: unknown value '" + std::string(v) +
                   "' (expected auto or f32)");
}

// Converts every module on all cores (modules differ in size: each thread takes the next).
std::vector<ConvertedLinear> convert_all(const std::vector<std::unique_ptr<PackedLinear>>& m,
                                         bool as_f32) {
  std::vector<ConvertedLinear> out(m.size());
  const size_t threads =
      std::min<size_t>(m.size(), std::max<size_t>(1, std::thread::hardware_concurrency()));
  std::atomic<size_t> next{0};
  std::mutex mu;
  std::exception_ptr error;
  auto work = [&](size_t, size_t) {
    for (size_t i; (i = next.fetch_add(1)) < m.size();) {
      try {
        // Experts are fused into one matrix per layer (model/expert_fusion.h): one column order.
        out[i] = m[i]->convert(as_f32, m[i]->module().find(".experts.") == std::string::npos);
      } catch (...) {
        const std::lock_guard<std::mutex> lock(mu);
        if (!error) error = std::current_exception();
        next = m.size();
      }
    }
  };
  if (threads <= 1) {
    work(0, 1);
  } else {
    ThreadPool pool(threads);
    pool.parallel_for(threads, work);
  }
  if (error) std::rethrow_exception(error);
  return out;
}

std::string mib(size_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f MiB", static_cast<double>(bytes) / (1 << 20));
  return buf;
}

}  // namespace

std::string packed_method_name(const std::string& quant_method) {
  const std::string m = ascii_lower(quant_method);
  if (m == "gptq" || m == "awq") return m;
  if (m == "compressed-tensors" || m == "compressed_tensors") return "compressed-tensors";
  return "";
}

std::optional<QuantizationConfig> packed_quantization_config(const std::filesystem::path& dir,
                                                             const nlohmann::json& config,
                                                             const std::string& config_source) {
  if (!config.is_object()) return std::nullopt;
  auto it = config.find("quantization_config");
  if (it != config.end() && !it->is_null()) {
    if (!it->is_object() || !it->contains("quant_method") || !(*it)["quant_method"].is_string() ||
        packed_method_name((*it)["quant_method"].get<std::string>()).empty()) {
      return std::nullopt;  // gemmaserve's own, or refused by stored_quantization
    }
    QuantizationConfig q{nlohmann::ordered_json::parse(it->dump()), config_source};
    std::error_code ec;
    if (std::filesystem::is_regular_file(config_source, ec)) {
      const nlohmann::ordered_json file = read_ordered_json(config_source);
      if (file.is_object() && file.contains("quantization_config")) {
        q.json = file["quantization_config"];
      }
    }
    return q;
  }
  const std::filesystem::path gptq = dir / "quantize_config.json";
  std::error_code ec;
  if (!std::filesystem::is_regular_file(gptq, ec)) return std::nullopt;
  QuantizationConfig q{read_ordered_json(gptq), gptq.string()};
  if (!q.json.is_object()) throw InputError(gptq.string() + ": must hold a JSON object");
  const std::string method = config_string(q, q.json, "quant_method").value_or("gptq");
  if (packed_method_name(method) != "gptq") {
    throw_config_error(q, "quant_method", "'" + method + "' in quantize_config.json (GPTQ's file)");
  }
  return q;
}

PackedCheckpoint::PackedCheckpoint(std::shared_ptr<const Checkpoint> base,
                                   QuantizationConfig config)
    : base_(std::move(base)) {
  const auto start = std::chrono::steady_clock::now();
  if (!config.json.is_object()) throw_config_error(config, "", "must be an object");
  const std::string quant_method =
      config_string(config, config.json, "quant_method").value_or("gptq");
  method_ = packed_method_name(quant_method);
  if (method_.empty()) {
    throw_config_error(config, "quant_method",
                       "'" + quant_method + "' is not gptq, awq or compressed-tensors");
  }
  plan_ = plan_method(method_, *base_, config);
  for (const auto& [name, v] : base_->tensors()) {
    if (plan_.consumed.count(name)) continue;
    for (const std::string& suffix : plan_.suffixes) {
      if (ends_with(name, suffix)) {
        throw InputError(v->file.string() + ": tensor '" + name + "' belongs to no module the " +
                         method_ + " reader converts (its other packed tensors are missing)");
      }
    }
  }

  const std::vector<ConvertedLinear> converted =
      convert_all(plan_.modules, packed_weights_as_f32());
  summary_.method = method_;
  built_.reserve(2 * converted.size());
  for (size_t i = 0; i < converted.size(); ++i) {
    const PackedLinear& m = *plan_.modules[i];
    const ConvertedLinear& c = converted[i];
    CheckpointTensor t;
    t.name = m.module() + ".weight";
    t.dtype = c.dtype;
    t.shape = {m.rows(), m.cols()};
    t.data = c.data.get();
    t.nbytes = c.nbytes;
    t.file = m.file();
    owners_[t.name] = c.data;
    summary_.modules.push_back({t.name, c.dtype, c.exact, c.reason, c.max_rel_error,
                                m.packed_bytes(), c.nbytes, c.input_perm != nullptr});
    built_.push_back(std::move(t));
    if (c.input_perm) {
      CheckpointTensor p;
      p.name = m.module() + ".input_perm";  // model/tensor_binder.h binds it with the weight
      p.dtype = DType::kI32;
      p.shape = {m.cols()};
      p.data = reinterpret_cast<const std::byte*>(c.input_perm.get());
      p.nbytes = static_cast<size_t>(m.cols()) * sizeof(int32_t);
      p.file = m.file();
      owners_[p.name] = c.input_perm;
      built_.push_back(std::move(p));
    }
  }
  for (const auto& [name, v] : base_->tensors()) {
    if (!plan_.consumed.count(name)) index_.emplace(name, v);
  }
  for (const CheckpointTensor& t : built_) {
    if (!index_.emplace(t.name, &t).second) {
      throw InputError(t.file.string() + ": tensor '" + t.name +
                       "' is stored both packed and as a float weight");
    }
  }
  summary_.seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  GS_LOG_INFO << base_->path().string() << ": " << summary_.text();
}

std::map<std::string, std::shared_ptr<const void>> PackedCheckpoint::take_built_tensors() const {
  return std::exchange(owners_, {});
}

std::string PackedSummary::text() const {
  struct Count {
    int exact = 0, inexact = 0;
  };
  std::map<DType, Count> by_dtype;
  std::map<std::string, int> reasons;
  double worst = 0.0;
  size_t before = 0, after = 0;
  int permuted = 0;
  for (const PackedModuleReport& m : modules) {
    permuted += m.permuted ? 1 : 0;
    Count& c = by_dtype[m.dtype];
    (m.exact ? c.exact : c.inexact) += 1;
    if (!m.reason.empty()) ++reasons[m.reason];
    if (!m.exact) worst = std::max(worst, m.max_rel_error);
    before += m.packed_bytes;
    after += m.bytes;
  }
  std::string s = method + ": " + std::to_string(modules.size()) + " packed modules ->";
  const char* sep = " ";
  for (const auto& [dtype, c] : by_dtype) {
    s += sep + std::string(dtype_name(dtype)) + " " + std::to_string(c.exact + c.inexact) + " (";
    if (c.exact) s += std::to_string(c.exact) + " exact";
    if (c.exact && c.inexact) s += ", ";
    if (c.inexact) s += std::to_string(c.inexact) + " inexact";
    s += ")";
    sep = ", ";
  }
  if (!reasons.empty()) {
    s += "; because";
    sep = " ";
    for (const auto& [why, n] : reasons) {
      s += sep + why + " (" + std::to_string(n) + ")";
      sep = ", ";
    }
  }
  if (permuted) {
    s += "; act-order: " + std::to_string(permuted) +
         " with their columns sorted by group once (inputs gathered to match)";
  }
  if (worst > 0.0) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "; inexact ones' max relative error %.2e", worst);
    s += buf;
  }
  char secs[32];
  std::snprintf(secs, sizeof secs, "%.2f s", seconds);
  return s + "; weights " + mib(before) + " packed -> " + mib(after) + " in " + secs;
}

}  // namespace gemmaserve
