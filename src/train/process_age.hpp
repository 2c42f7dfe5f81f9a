// How long this process has existed: the start-up line measures from the moment the launcher
// started the rank, not from main(), so that MPI's and Kokkos' initialisation count too.
#pragma once

namespace meshtrain {

// Seconds since the kernel started this process (10 ms resolution), or a negative number where
// that is not known (no /proc).
double process_age_s();

}  // namespace meshtrain
