#include "engine/fault_injection.h"

#include <chrono>
#include <cstdlib>
#include <string>
#include <thread>

#include "core/logging.h"

namespace gemmaserve {

#ifdef GEMMASERVE_FAULT_INJECTION
// Read at every step (tests set the variables after other engines of the process ran).
bool engine_step_fault(uint64_t step, int replica) {
  const char* at = std::getenv("GEMMASERVE_FAULT_ENGINE_STEP");
  if (at == nullptr || *at == '\0') return false;
  const char* only = std::getenv("GEMMASERVE_FAULT_ENGINE_REPLICA");
  if (only != nullptr && *only != '\0' && std::stoi(only) != replica) return false;
  const uint64_t fail_at = std::stoull(at);
  return fail_at != 0 && step >= fail_at;
}
bool sampler_fault(std::optional<uint64_t> seed) {
  const char* at = std::getenv("GEMMASERVE_FAULT_SAMPLER_SEED");
  return seed && at != nullptr && *at != '\0' && *seed == std::stoull(at);
}
bool fault_injection_compiled() { return true; }

void model_load_fault_delay() {
  const char* env = std::getenv("GEMMASERVE_FAULT_LOAD_DELAY_MS");
  if (env == nullptr || *env == '\0') return;
  const auto delay = std::chrono::milliseconds(std::stoll(env));
  GS_LOG_INFO << "fault injection: loading the weights " << delay.count() << " ms late";
  std::this_thread::sleep_for(delay);
}
#else
bool engine_step_fault(uint64_t, int) { return false; }
bool sampler_fault(std::optional<uint64_t>) { return false; }
bool fault_injection_compiled() { return false; }
void model_load_fault_delay() {}
#endif

}  // namespace gemmaserve
