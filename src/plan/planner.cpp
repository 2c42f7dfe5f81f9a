// Assembles plans: memory per rank, fit against the devices or nodes, step time; and the search.
#include "plan/planner.hpp"

#include "core/accumulation.hpp"
#include "core/errors.hpp"
#include "model/parameters.hpp"
#include "plan/memory_plan.hpp"
#include "plan/runtime_overhead.hpp"

#include <algorithm>
#include <map>

namespace meshtrain {
Plan make_plan(const Config& cfg, int world, const Cluster& cluster, RankCoverage coverage) {
  Plan plan;
  plan.cfg = cfg;
  plan.cluster = cluster;
  plan.layout = Topology::resolve(cfg.parallel, cfg.model, world);
  const Layout& grid = plan.layout;
  plan.accum = accumulation_steps(cfg, grid.dp);

  const std::int64_t data = token_data_bytes(cfg.data.train);
  // Under RankCoverage::ends, data-parallel ranks 2 … dp−2 take the figures of dp rank 1.
  std::map<std::pair<int, int>, MemoryBytes> middle;  // (tp_rank, pp_rank) → dp rank 1's memory
  auto memory_of = [&](const GridPosition& at) {
    const bool is_middle = at.dp_rank >= 1 && at.dp_rank <= grid.dp - 2;
    if (coverage == RankCoverage::every || !is_middle) return planned_rank_memory(cfg, grid, at);
    const auto key = std::pair{at.tp_rank, at.pp_rank};
    auto it = middle.find(key);
    if (it == middle.end()) it = middle.emplace(key, planned_rank_memory(cfg, grid, at)).first;
    return it->second;
  };
  plan.ranks.reserve(world);
  for (int r = 0; r < world; ++r) {
    RankPlan rp;
    rp.rank = r;
    rp.position = Topology::position(grid, r);
    rp.memory = memory_of(rp.position);
    // The reduced gradients are fp32 whatever the precision (the 16-bit copy's move into fp32 first).
    const std::int64_t fp32_grads =
        cfg.train.precision == Precision::fp32 ? rp.memory[MemoryCategory::grads] : rp.memory[MemoryCategory::master];
    rp.runtime_bytes = runtime_overhead_bytes(cluster.ranks_on_node(r, world), world) +
                       collective_scratch_bytes(grid.dp, cfg.parallel.zero, cfg.parallel.bucket_mb, fp32_grads);
    rp.data_bytes = data;
    if (cluster.host_only) {
      rp.peak_rss = rp.memory.total() + rp.runtime_bytes + rp.data_bytes;
      rp.device_bytes = rp.peak_rss;
    } else {
      rp.peak_rss = rp.runtime_bytes + rp.data_bytes;
      rp.device_bytes = rp.memory.total() + std::int64_t(cluster.device_reserve_bytes);
    }
    plan.ranks.push_back(rp);
  }

  plan.capacity_bytes = std::int64_t(cluster.device_memory_bytes);
  if (cluster.host_only) {
    // The node's ranks together; the token pages are the page cache's, held once per node.
    std::map<int, std::int64_t> node_bytes;
    for (const RankPlan& rp : plan.ranks) {
      auto [it, fresh] = node_bytes.try_emplace(cluster.node_of(rp.rank), data);
      it->second += rp.device_bytes - rp.data_bytes;
    }
    for (const auto& [node, bytes] : node_bytes) {
      if (bytes > plan.needed_bytes) {
        plan.needed_bytes = bytes;
        plan.limiting_rank = node * std::max(1, cluster.ranks_per_node);
      }
    }
  } else {
    for (const RankPlan& rp : plan.ranks) {
      if (rp.device_bytes > plan.needed_bytes) {
        plan.needed_bytes = rp.device_bytes;
        plan.limiting_rank = rp.rank;
      }
    }
  }
  plan.fits = plan.needed_bytes <= plan.capacity_bytes;

  plan.step = predict_step_time(cfg, grid, cluster);
  plan.tokens_per_step = double(cfg.train.global_batch) * cfg.model.seq_len;
  plan.tokens_per_s = plan.tokens_per_step / plan.step.total_s();
  plan.model_flops_per_s = plan.tokens_per_s * flops_per_token(ParameterLayout(cfg.model));
  return plan;
}

std::vector<Layout> valid_layouts(const Config& cfg, int world) {
  std::vector<Layout> layouts;
  for (int tp = 1; tp <= world; ++tp) {
    if (world % tp != 0) continue;
    for (int pp = 1; pp <= world / tp; ++pp) {
      if ((world / tp) % pp != 0) continue;
      const Layout candidate{world / (tp * pp), tp, pp, cfg.parallel.ep};
      try {
        ParallelConfig parallel = cfg.parallel;
        parallel.dp = candidate.dp;
        parallel.tp = tp;
        parallel.pp = pp;
        Topology::resolve(parallel, cfg.model, world);
        accumulation_steps(cfg, candidate.dp);
      } catch (const InputError&) {
        continue;
      }
      layouts.push_back(candidate);
    }
  }
  return layouts;
}

std::vector<Plan> search_layouts(const Config& cfg, const Cluster& cluster, int world) {
  std::vector<Plan> plans;
  for (const Layout& layout : valid_layouts(cfg, world)) {
    Config c = cfg;
    c.parallel.dp = layout.dp;
    c.parallel.tp = layout.tp;
    c.parallel.pp = layout.pp;
    plans.push_back(make_plan(c, world, cluster, RankCoverage::ends));
  }
  std::stable_sort(plans.begin(), plans.end(),
                   [](const Plan& a, const Plan& b) { return a.step.total_s() < b.step.total_s(); });
  return plans;
}

}  // namespace meshtrain
