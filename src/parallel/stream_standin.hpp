// A device backend's ordering, played on a host build (issue 42, 5(a)): the stand-in runs each
// operation on an inner host Comm (MPI) but lets it take effect only where the ordering contract of
// parallel/comm.hpp says it must have, which is where a device's streams would be most unkind:
//
//   - a non-blocking operation starts at once: it reads its input as the caller's buffers hold it
//     then (a copy), and its output buffer is filled with NaNs (bytes 0xff) until its result lands;
//   - its result lands only when the compute is ordered after it: at Request::wait, never earlier.
//     A request dropped without wait() leaves the NaNs (the device would never have been ordered).
//   - at that moment the compute must have left its buffers alone in between: the input as it was
//     copied, the output still all NaN. Otherwise the compute wrote into an operation in flight, a
//     race on a device, and the wait throws std::logic_error naming the operation.
//   - blocking operations complete where they are called (the compute waits on their event).
//
// So a step that reads a result before its wait computes with NaNs, and one that writes a buffer
// in flight throws: a missing event fails, where on a host backend it would go unseen. Its own host
// waits are a device's, not the host's: none is reported (core/host_waits.hpp). Test-only, chosen by
// MESHTRAIN_STREAM_STANDIN=1 in place of the host fences of parallel/compute_ordered_comm.hpp
// (train/training_groups.cpp); the losses must equal the MPI backend's bit for bit.
#pragma once

#include "parallel/comm.hpp"

#include <memory>

namespace meshtrain {

// The operations the process's stand-ins saw (every Comm together).
struct StreamStandInCounts {
  long started = 0;    // non-blocking operations started
  long completed = 0;  // of which waited on
  long dropped = 0;    // of which dropped without wait()
};
StreamStandInCounts stream_standin_counts();

// MESHTRAIN_STREAM_STANDIN=1.
bool stream_standin_requested();

std::unique_ptr<Comm> make_stream_standin_comm(std::unique_ptr<Comm> inner);

}  // namespace meshtrain
