#include "engine/fault_injection.h"

#include <cstdlib>
#include <string>

namespace gemmaserve {

#ifdef GEMMASERVE_FAULT_INJECTION
bool engine_step_fault(uint64_t step) {
  static const uint64_t fail_at = [] {
    const char* env = std::getenv("GEMMASERVE_FAULT_ENGINE_STEP");
    return env != nullptr && *env != '\0' ? std::stoull(env) : uint64_t{0};
  }();
  return fail_at != 0 && step >= fail_at;
}
#else
bool engine_step_fault(uint64_t) { return false; }
#endif

}  // namespace gemmaserve
