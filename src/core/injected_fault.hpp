// Faults the tests inject into a real run (share/docs/design.md, Injected faults), so that the
// paths a cluster's faults take can be exercised without waiting for a cluster to have them.
//
//   MESHTRAIN_INJECT_FAULT=nan_gradient@3           every rank, at step 3 (1-based, the step being computed)
//   MESHTRAIN_INJECT_FAULT=skip_collective@2:1      only world rank 1, at step 2
//   MESHTRAIN_INJECT_FAULT=nan_gradient@3,nan_gradient@4
//
// Unset (the normal case) nothing is armed and every query is a lookup in an empty list. A name
// the code does not know is refused at start, so a misspelt test fails instead of passing quietly.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace meshtrain {

struct InjectedFault {
  std::string name;
  std::int64_t step = 0;  // 1-based step at which it fires
  int rank = -1;          // world rank it fires on (-1: every rank)
};

// The names of the faults the code knows; parse_injected_faults refuses any other.
inline constexpr std::string_view injected_fault_names[] = {
    "nan_gradient",     // the first gradient element becomes NaN after backward (train.nonfinite)
    "inf_loss",         // the step's loss becomes +Inf (train.nonfinite)
    "skip_collective",  // the rank skips the step's loss all-reduce over dp, and waits elsewhere (the watchdog)
    "stall",            // the rank sleeps 3 × parallel.timeout (4 s when off) at the step's start (the watchdog)
    "stall_in_save",    // the rank sleeps 3 × parallel.timeout before its first tensor of step STEP's save
    "unreserved_save",  // the save of step STEP reserves no space first, as without fallocate (a full disk)
};

// Parses the variable's text; InputError naming the entry and the valid forms on bad text.
std::vector<InjectedFault> parse_injected_faults(std::string_view text);

// The faults of MESHTRAIN_INJECT_FAULT, parsed once per process.
const std::vector<InjectedFault>& injected_faults();

// Whether fault `name` fires at `step` on world rank `world_rank`.
bool fault_fires(std::string_view name, std::int64_t step, int world_rank);

}  // namespace meshtrain
