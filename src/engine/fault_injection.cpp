#include "engine/fault_injection.h"

#include <chrono>
#include <cstdlib>
#include <string>
#include <thread>

#include "core/logging.h"

namespace gemmaserve {

#ifdef GEMMASERVE_FAULT_INJECTION
bool engine_step_fault(uint64_t step) {
  static const uint64_t fail_at = [] {
    const char* env = std::getenv("GEMMASERVE_FAULT_ENGINE_STEP");
    return env != nullptr && *env != '\0' ? std::stoull(env) : uint64_t{0};
  }();
  return fail_at != 0 && step >= fail_at;
}

void model_load_fault_delay() {
  const char* env = std::getenv("GEMMASERVE_FAULT_LOAD_DELAY_MS");
  if (env == nullptr || *env == '\0') return;
  const auto delay = std::chrono::milliseconds(std::stoll(env));
  GS_LOG_INFO << "fault injection: loading the weights " << delay.count() << " ms late";
  std::this_thread::sleep_for(delay);
}
#else
bool engine_step_fault(uint64_t) { return false; }
void model_load_fault_delay() {}
#endif

}  // namespace gemmaserve
