// Test-only: the pointer audit (share/docs/design.md, Parallelism). A Comm decorator that refuses
// any call whose buffer is not inside one live allocation of the execution space's memory space,
// the memory a device backend (NCCL) needs: a host scalar or std::vector handed to a group
// collective then fails on CPU runs too, where the MPI backend would take it silently.
//
//   MESHTRAIN_POINTER_AUDIT=1   the training groups (dp, tp, pp, ep, edp, tied) are audited
//
// Unset or 0, nothing is audited. Empty buffers (bytes 0) are not checked: no backend reads them.
//
// This file knows no Kokkos (parallel/ is host code); the caller passes the test of "inside a live
// allocation" (train/live_allocations.hpp records them through Kokkos Tools).
#pragma once

#include "parallel/comm.hpp"

#include <cstddef>
#include <functional>
#include <memory>
#include <string>

namespace meshtrain {

// Whether MESHTRAIN_POINTER_AUDIT asks for the audit (read once); InputError on a value other than 0 or 1.
bool pointer_audit_requested();

// Whether [data, data + bytes) lies inside one live allocation of the memory the audit accepts.
using LiveMemoryTest = std::function<bool(const void* data, std::size_t bytes)>;

// `inner`, whose every call first checks its buffers with `inside`: std::logic_error naming the
// operation, `group` and the pointer when one fails; the call is then not made.
std::unique_ptr<Comm> make_pointer_audit(std::unique_ptr<Comm> inner, std::string group, LiveMemoryTest inside);

}  // namespace meshtrain
