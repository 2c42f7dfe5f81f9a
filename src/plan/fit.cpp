// The fit rule and the search for the largest micro-batch (plan/fit.hpp).
#include "plan/fit.hpp"

#include "core/accumulation.hpp"
#include "core/byte_units.hpp"
#include "core/errors.hpp"
#include "core/model_sizes.hpp"
#include "parallel/topology.hpp"
#include "plan/planner.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <numeric>

namespace meshtrain {
namespace {

// Whether c fits: the sizes, then the memory.
bool fits(const Config& c, int world, const Cluster& cluster) {
  try {
    require_sizes_fit(c.model, c.train.micro_batch, c.parallel.ep);
  } catch (const InputError&) {
    return false;
  }
  return make_plan(c, world, cluster, RankCoverage::ends).fits;
}

// Whether `micro` sequences per micro-batch fit.
bool fits_at(const Config& cfg, int world, const Cluster& cluster, int dp, int micro) {
  return fits(with_micro_batch(cfg, dp, micro), world, cluster);
}

// Whether model.seq_len = T fits, at cfg's micro-batch.
bool fits_at_seq_len(const Config& cfg, int world, const Cluster& cluster, int T) {
  Config c = cfg;
  c.model.seq_len = T;
  return fits(c, world, cluster);
}

// The largest n in [1, most] with fits(n), for a fits that holds up to some n and not beyond (0 when
// fits(1) fails): doubling, then bisection between the last n that fits and the first that does not.
template <class Fits>
int largest_fitting(std::int64_t most, Fits fits) {
  if (most < 1 || !fits(1)) return 0;
  std::int64_t good = 1, bad = 2;
  while (bad <= most && fits(int(bad))) {
    good = bad;
    bad *= 2;
  }
  bad = std::min(bad, most + 1);
  while (bad - good > 1) {
    const std::int64_t mid = good + (bad - good) / 2;
    if (fits(int(mid))) {
      good = mid;
    } else {
      bad = mid;
    }
  }
  return int(good);
}

// Under sequence parallelism the B·T token rows divide over tp (core/model_sizes.hpp's residual_rows):
// the step of B (or T) that keeps them divisible for the other, `other`; 1 without it.
int rows_step(const Config& c, int other) {
  const int tp = c.parallel.tp;
  if (!c.model.sequence_parallel || tp <= 1) return 1;
  return tp / std::gcd(std::max(other, 1), tp);
}

// The step of model.seq_len: under context parallelism whole 2·cp chunks (core/model_sizes.hpp's
// local_positions, T = 2·cp·k), whose B·T/cp = 2·B·k rows sequence parallelism divides over tp.
int seq_len_step(const Config& c) {
  const int cp = c.parallel.cp;
  if (cp <= 1) return rows_step(c, c.train.micro_batch);
  return 2 * cp * rows_step(c, 2 * c.train.micro_batch);
}

// largest_fitting over the multiples of `step`: the largest n · step ≤ most that fits.
template <class Fits>
int largest_fitting_multiple(std::int64_t most, int step, Fits fits) {
  return step * largest_fitting(most / step, [&](int n) { return fits(n * step); });
}

// "82.1 MiB", "1.50 GiB".
std::string memory_text(double bytes) {
  return bytes < GiB ? fmt::format("{:.1f} MiB", bytes / (1024.0 * 1024.0)) : fmt::format("{:.2f} GiB", bytes / GiB);
}

}  // namespace

Cluster training_cluster(const Config& cfg, int ranks_on_node, bool device_memory) {
  Cluster c = cluster_preset(device_memory ? "h200-sxm-8" : "local");
  c.preset = device_memory ? "this GPU" : "this machine";
  c.ranks_per_node = ranks_on_node;
  if (cfg.train.memory_gib > 0) {
    c.device_memory_bytes = cfg.train.memory_gib * GiB;
  } else if (device_memory) {
    c.device_memory_bytes = 0;  // unknown here: not checked
  }
  return c;
}

Config with_micro_batch(const Config& cfg, int dp, int micro) {
  Config c = cfg;
  const int accum = accumulation_steps(cfg, dp);
  c.train.micro_batch = micro;
  c.train.global_batch = int(std::int64_t(micro) * dp * accum);
  return c;
}

int largest_micro_batch(const Config& cfg, int world, const Cluster& cluster) {
  const int dp = Topology::resolve(cfg.parallel, cfg.model, world).dp;
  // global_batch = micro · dp · accum is an int too.
  const std::int64_t per_micro = std::int64_t(dp) * accumulation_steps(cfg, dp);
  const std::int64_t most = std::numeric_limits<int>::max() / per_micro;
  return largest_fitting_multiple(most, rows_step(cfg, int(local_positions(cfg.model))),
                                  [&](int micro) { return fits_at(cfg, world, cluster, dp, micro); });
}

int largest_seq_len(const Config& cfg, int world, const Cluster& cluster) {
  // The token rows B·T are an int (require_sizes_fit refuses more), so no T past int max / B fits.
  const std::int64_t most = std::numeric_limits<int>::max() / std::max(1, cfg.train.micro_batch);
  return largest_fitting_multiple(most, seq_len_step(cfg),
                                  [&](int T) { return fits_at_seq_len(cfg, world, cluster, T); });
}

void require_fits_memory(const Config& cfg, int world, const Cluster& cluster, const std::string& origin) {
  if (cluster.device_memory_bytes <= 0) return;
  const Plan plan = make_plan(cfg, world, cluster, RankCoverage::ends);
  if (plan.fits) return;
  const int largest = largest_micro_batch(cfg, world, cluster);
  const int ranks = cluster.ranks_on_node(plan.limiting_rank, world);
  const std::string where = cluster.host_only ? fmt::format("this node ({} rank{})", ranks, ranks == 1 ? "" : "s")
                                              : fmt::format("rank {}'s GPU", plan.limiting_rank);
  const std::string allowed = cfg.train.memory_gib > 0
                                  ? fmt::format("train.memory_gib = {} allows", cfg.train.memory_gib)
                                  : std::string(cluster.host_only ? "this machine has" : "the GPU has");
  input_error(
      "{}: the model ({} parameters) with micro_batch {} needs {} on {} for weights, gradients, optimizer state, "
      "activations and the runtime (as `meshtrain plan` counts them), more than {} ({}): {}",
      origin, parameter_count(cfg.model).value(), cfg.train.micro_batch, memory_text(double(plan.needed_bytes)), where,
      allowed, memory_text(double(plan.capacity_bytes)),
      largest > 0 ? fmt::format("the largest micro_batch that fits is {}; reduce train.micro_batch or model.*", largest)
                  : std::string("not even micro_batch 1 fits; reduce model.* or use more ranks"));
}

}  // namespace meshtrain
