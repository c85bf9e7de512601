// Test-only faults: with the CMake option GEMMASERVE_FAULT_INJECTION (off in normal builds), the
// environment variable GEMMASERVE_FAULT_ENGINE_STEP=N makes the engine thread's Nth step (and
// every later one) throw, so tests can see what a failed engine looks like from outside (/health,
// requests); GEMMASERVE_FAULT_ENGINE_REPLICA=R limits that to data-parallel replica R.
// GEMMASERVE_FAULT_SAMPLER_SEED=N makes sampling every request with seed N throw (a step error
// of one sequence: that request alone must end, with finish_reason "error").
// GEMMASERVE_FAULT_LOAD_DELAY_MS=N makes loading the model's weights take N ms longer, so tests
// can signal a server while it loads.
#pragma once

#include <cstdint>
#include <optional>

namespace gemmaserve {

// Whether the step numbered `step` (1 = the first) of replica `replica`'s engine must fail.
// Always false when the build has no fault injection.
bool engine_step_fault(uint64_t step, int replica);

// Whether sampling a request with this seed must fail. Always false without fault injection.
bool sampler_fault(std::optional<uint64_t> seed);

// Whether this build has the fault hooks (tests of failures need them).
bool fault_injection_compiled();

// Sleeps GEMMASERVE_FAULT_LOAD_DELAY_MS, after logging that it does. Nothing when the build has
// no fault injection.
void model_load_fault_delay();

}  // namespace gemmaserve
