// The collective watchdog (share/docs/usage.md, The collective watchdog): a thread per rank that
// watches the rank's waits (core/watched_wait.hpp) and, when one has lasted parallel.timeout
// seconds, asks the other ranks of its group what they are doing, prints one line naming the wait
// and the ranks that have not arrived, and ends the job with exit code 5 (MPI_Abort: mpiexec
// returns 5; srun returns 137, so the line also goes to the file MESHTRAIN_WATCHDOG_REPORT names),
// instead of leaving it hanging until the scheduler's time limit.
//
// The questions travel over the watchdog's own duplicate of the world, as non-blocking messages
// with a grace period: a stopped rank, or one whose node is gone, cannot hold up the asker; it is
// reported as not answering. Every rank's watchdog answers questions while it runs, whatever its
// main thread is blocked in (MPI is initialised with MPI_THREAD_MULTIPLE, src/main.cpp).
#pragma once

#include "core/mpi_check.hpp"

#include <mpi.h>

#include <atomic>
#include <thread>

namespace meshtrain {

class Watchdog {
 public:
  // How long the watchdog waits for the answers, and then goes on answering the others' questions
  // before it ends the job (they time out at about the same moment, and ask this rank too).
  static constexpr double grace_s = 2.0;
  // How often it looks at the waits and the questions.
  static constexpr double poll_s = 0.05;

  // Collective over `world` (all of MPI_COMM_WORLD, in its order). timeout_s = 0: off, nothing is
  // made and nothing runs.
  Watchdog(MPI_Comm world, double timeout_s);
  ~Watchdog();  // stops the thread
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

 private:
  class Monitor;
  double timeout_s_;
  mpi::OwnedComm comm_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace meshtrain
