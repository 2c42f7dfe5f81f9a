// The counter with which the teams of a one-launch column sum (kernels/column_sum.hpp) find the last of
// them to finish, which then adds every chunk's partial sums: the "last block reduces" scheme of llm.c's
// LayerNorm backward and of Kokkos' own reductions, so phase 2 needs no launch of its own.
//
// One per process, in the execution space's memory: made (zero) on first use, freed at Kokkos::finalize,
// and back to zero after every launch (its last team resets it). Launches that take it must therefore
// not overlap: every kernel of a rank runs in order on its one compute stream (communication, on streams
// of its own, never sums columns).
#pragma once

#include "core/exec.hpp"

namespace meshtrain {

using ColumnSumTicket = Kokkos::View<unsigned*, MemSpace>;

ColumnSumTicket column_sum_ticket();

}  // namespace meshtrain
