// The measured model of the runtime's resident memory, and the token shards' share.
#include "plan/runtime_overhead.hpp"

#include <algorithm>
#include <glob.h>
#include <sys/stat.h>

namespace meshtrain {
namespace {

// Measured 2026-11-29 with bench/measure_runtime_overhead.py on this project's development machine
// (Debian 12, MPICH 4.0.2 ch4:ucx, OpenBLAS 0.3.21 pthreads, HDF5 1.10 parallel, Kokkos Serial,
// release build): a 2-layer d_model 16 model trained for 3 steps at 1, 2, 4 and 8 ranks on one
// node, in layouts dp, tp and pp; peak RSS of every rank (/usr/bin/time) minus the trainer's
// planned categories and the shard, fitted by least squares as base + per_peer · (ranks on the
// node − 1): base 35.4 MiB, 0.11 MiB per peer; worst residual 1.2 MiB (tp and pp groups add
// about 1 MiB that the fit leaves out).
constexpr std::int64_t base_bytes = 37'144'000;
constexpr std::int64_t per_peer_bytes = 112'000;

}  // namespace

std::int64_t runtime_overhead_bytes(int ranks_on_node, int /*world*/) {
  return base_bytes + per_peer_bytes * (ranks_on_node > 1 ? ranks_on_node - 1 : 0);
}

std::int64_t collective_scratch_bytes(int dp, int zero, double bucket_mb, std::int64_t grad_bytes) {
  // Measured 2026-11-29 (tests/plan/test_plan_rss.py, case dp2): L4 C512 with 48.8 MiB of fp32
  // gradients in 25 MiB buckets peaked 20–25 MiB above the planned categories at dp 2, 0 at dp 1.
  // ZeRO's blocking reduce-scatters of one unit showed no such scratch.
  if (dp < 2 || zero > 0) return 0;
  return std::min<std::int64_t>(std::int64_t(bucket_mb * (1 << 20)), grad_bytes);
}

std::int64_t token_data_bytes(const std::string& data_train) {
  if (data_train.empty()) return 0;
  glob_t matches{};
  std::int64_t bytes = 0;
  if (::glob(data_train.c_str(), 0, nullptr, &matches) == 0) {
    for (std::size_t i = 0; i < matches.gl_pathc; ++i) {
      struct stat st {};
      if (::stat(matches.gl_pathv[i], &st) == 0 && S_ISREG(st.st_mode)) bytes += st.st_size;
    }
  }
  ::globfree(&matches);
  return bytes;
}

}  // namespace meshtrain
