/* Preloaded into every test (tests/CMakeLists.txt, MESHTRAIN_TEST_MPI_YIELD): a UCX progress call
 * that found nothing to do gives the core away before the caller polls again: sched_yield at first,
 * and after 64 empty polls in a row a 50 µs sleep.
 *
 * Why: the suite runs 4- and 8-rank jobs on 2 cores, and MPICH's ch4:ucx device (Debian 12's
 * mpich) waits for a message by polling ucp_worker_progress in a loop. A rank waiting in a collective
 * then holds its core until the scheduler preempts it, so every collective costs time slices: a
 * 4-rank run of a tiny model saved its checkpoint in 10 s instead of 0.4 s. The same progress
 * function still runs whenever the waiting rank has the core, so no message, order or result
 * changes; a rank that has work runs sooner. Processes without UCX never call it. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <sched.h>
#include <time.h>

unsigned ucp_worker_progress(void* worker) {
  static unsigned (*real)(void*);
  static __thread unsigned idle; /* empty polls in a row, per thread (the watchdog polls too) */
  if (real == 0) real = (unsigned (*)(void*))dlsym(RTLD_NEXT, "ucp_worker_progress");
  if (real == 0) return 0; /* no UCX below: nothing could have called this */
  const unsigned events = real(worker);
  if (events != 0) {
    idle = 0;
  } else if (++idle < 64) {
    sched_yield();
  } else {
    const struct timespec pause = {0, 50000};
    nanosleep(&pause, 0);
  }
  return events;
}
