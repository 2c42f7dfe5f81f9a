/* Preloaded into every test (tests/CMakeLists.txt, MESHTRAIN_TEST_MPI_YIELD): a UCX progress call
 * that found nothing to do gives the core away (sched_yield) before the caller polls again.
 *
 * Why: the suite runs 4- and 8-rank jobs on 2 cores, and MPICH's ch4:ucx device (Debian 12's
 * mpich) waits for a message by polling ucp_worker_progress in a loop. A rank waiting in a collective
 * then holds its core until the scheduler preempts it, so every collective costs a few time slices
 * and a checkpoint save of a tiny model under 4 ranks took 10 s instead of 0.3 s. Yielding when the
 * poll found nothing changes no result: the same progress function runs as often as the waiting
 * rank gets the core, and a rank that has work runs sooner. Processes without UCX never call it. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <sched.h>

unsigned ucp_worker_progress(void* worker) {
  static unsigned (*real)(void*);
  if (real == 0) real = (unsigned (*)(void*))dlsym(RTLD_NEXT, "ucp_worker_progress");
  if (real == 0) return 0; /* no UCX below: nothing could have called this */
  const unsigned events = real(worker);
  if (events == 0) sched_yield();
  return events;
}
