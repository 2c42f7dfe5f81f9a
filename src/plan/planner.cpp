// Assembles plans: memory per rank, fit against the devices or nodes, step time; and the search.
#include "plan/planner.hpp"

#include "core/accumulation.hpp"
#include "core/config_checks.hpp"
#include "core/errors.hpp"
#include "core/model_sizes.hpp"
#include "model/parameters.hpp"
#include "plan/lora_plan.hpp"
#include "plan/memory_plan.hpp"
#include "plan/runtime_overhead.hpp"

#include <algorithm>
#include <array>
#include <map>
#include <tuple>

namespace meshtrain {
namespace {

// A rank's memory, runtime and data, and what they need of its device or node.
RankPlan rank_figures(const Config& cfg, const Layout& grid, const Cluster& cluster, int rank, const GridPosition& at,
                      std::int64_t data) {
  RankPlan rp;
  rp.rank = rank;
  rp.position = at;
  rp.memory = planned_rank_memory(cfg, grid, at);
  // The reduced gradients are fp32 whatever the precision (the 16-bit copy's move into fp32 first).
  const std::int64_t fp32_grads =
      cfg.train.precision == Precision::fp32 ? rp.memory[MemoryCategory::grads] : rp.memory[MemoryCategory::master];
  const int world = grid.world();
  rp.runtime_bytes = runtime_overhead_bytes(cluster.ranks_on_node(rank, world), world) +
                     collective_scratch_bytes(grid.replicas(), cfg.parallel.zero, cfg.parallel.bucket_mb, fp32_grads);
  rp.data_bytes = data;
  if (cluster.host_only) {
    rp.peak_rss = rp.memory.total() + rp.runtime_bytes + rp.data_bytes;
    rp.device_bytes = rp.peak_rss;
  } else {
    rp.peak_rss = rp.runtime_bytes + rp.data_bytes;
    rp.device_bytes = rp.memory.total() + std::int64_t(cluster.device_reserve_bytes);
  }
  return rp;
}

// What plan_table tells kinds of ranks apart by: the position and every figure.
using KindKey = std::tuple<int, int, std::array<std::int64_t, memory_categories>, std::int64_t, std::int64_t,
                           std::int64_t, std::int64_t>;
KindKey kind_key(const RankPlan& r) {
  return {r.position.pp_rank, r.position.tp_rank, r.memory.bytes, r.runtime_bytes,
          r.data_bytes,       r.peak_rss,         r.device_bytes};
}

// The ranks of a plan, visited once in rank order: their kinds, the largest figures and the fit.
class RankPass {
 public:
  RankPass(Plan& plan, std::int64_t data) : plan_(plan), data_(data) {}

  // The kind of ranks with these figures (its index), made with `rank` as its first when new.
  std::size_t kind_of(int rank, const RankPlan& figures) {
    auto [it, fresh] = kind_index_.try_emplace(kind_key(figures), plan_.kinds.size());
    if (fresh) {
      plan_.kinds.push_back({figures, {}, 0});
      plan_.kinds.back().figures.rank = rank;
    }
    return it->second;
  }
  // Rank `rank` of kind `k` (kind_of's), whose figures these are.
  void add(int rank, std::size_t k, const RankPlan& figures) {
    RankKind& kind = plan_.kinds[k];
    if (kind.first_ranks.size() < 4) kind.first_ranks.push_back(rank);
    ++kind.count;
    plan_.max_peak_rss = std::max(plan_.max_peak_rss, figures.peak_rss);
    plan_.max_device_bytes = std::max(plan_.max_device_bytes, figures.device_bytes);
    const Cluster& c = plan_.cluster;
    if (!c.host_only) {
      if (figures.device_bytes > plan_.needed_bytes) {
        plan_.needed_bytes = figures.device_bytes;
        plan_.limiting_rank = rank;
      }
      return;
    }
    // The node's ranks together (nodes are blocks of consecutive ranks); its token pages are the
    // page cache's, held once per node.
    if (c.node_of(rank) != node_) {
      close_node();
      node_ = c.node_of(rank);
      node_first_rank_ = rank;
      node_bytes_ = data_;
    }
    node_bytes_ += figures.device_bytes - figures.data_bytes;
  }

  void finish() {
    close_node();
    std::sort(plan_.kinds.begin(), plan_.kinds.end(),
              [](const RankKind& a, const RankKind& b) { return kind_key(a.figures) < kind_key(b.figures); });
  }

 private:
  void close_node() {
    if (node_ >= 0 && node_bytes_ > plan_.needed_bytes) {
      plan_.needed_bytes = node_bytes_;
      plan_.limiting_rank = node_first_rank_;
    }
  }

  Plan& plan_;
  std::int64_t data_;
  std::map<KindKey, std::size_t> kind_index_;
  int node_ = -1, node_first_rank_ = 0;
  std::int64_t node_bytes_ = 0;
};

}  // namespace

Plan make_plan(const Config& cfg, int world, const Cluster& cluster, RankCoverage coverage) {
  Plan plan;
  plan.cfg = cfg;
  plan.cluster = cluster;
  plan.layout = Topology::resolve(cfg.parallel, cfg.model, world);
  const Layout& grid = plan.layout;
  plan.accum = accumulation_steps(cfg, grid.dp);

  const std::int64_t data = token_data_bytes(cfg.data.train);
  // A rank's figures follow from its pipeline stage, tp rank and ep rank (its layout), the ranks on
  // its node (the runtime) and, for background saves only, its dp rank (the snapshot of its ZeRO
  // share): computed once for each, every other rank of the same key takes them. Under
  // RankCoverage::ends the dp ranks between the first and the last take dp rank 1's snapshot.
  // With each its kind: looking a kind up by its figures is a comparison of every figure, once per key.
  std::map<std::tuple<int, int, int, int, int>, std::pair<RankPlan, std::size_t>> computed;
  RankPass pass(plan, data);
  if (coverage == RankCoverage::every) plan.ranks.reserve(std::size_t(world));
  for (int r = 0; r < world; ++r) {
    const GridPosition at = Topology::position(grid, r);
    int dp_key = -1;
    if (cfg.checkpoint.async) {
      const bool middle = at.dp_rank >= 1 && at.dp_rank <= grid.dp - 2;
      dp_key = coverage == RankCoverage::ends && middle ? 1 : at.dp_rank;
    }
    const auto key = std::tuple{at.pp_rank, at.tp_rank, at.ep_rank, dp_key, cluster.ranks_on_node(r, world)};
    auto it = computed.find(key);
    if (it == computed.end()) {
      RankPlan first = rank_figures(cfg, grid, cluster, r, at, data);
      const std::size_t kind = pass.kind_of(r, first);
      it = computed.emplace(key, std::pair{std::move(first), kind}).first;
    }
    RankPlan figures = it->second.first;
    figures.rank = r;
    figures.position = at;
    pass.add(r, it->second.second, figures);
    if (coverage == RankCoverage::every) plan.ranks.push_back(figures);
  }
  pass.finish();
  plan.capacity_bytes = std::int64_t(cluster.device_memory_bytes);
  plan.fits = plan.needed_bytes <= plan.capacity_bytes;

  plan.step = predict_step_time(cfg, grid, cluster);
  plan.tokens_per_step = double(cfg.train.global_batch) * cfg.model.seq_len;
  plan.tokens_per_s = plan.tokens_per_step / plan.step.total_s();
  plan.model_flops_per_s = plan.tokens_per_s * training_stage_flops(cfg.model, 0, 1).total;
  return plan;
}

Plan full_training_plan(const Plan& lora, RankCoverage coverage) {
  return make_plan(full_training(lora.cfg), lora.layout.world(), lora.cluster, coverage);
}

std::vector<Layout> valid_layouts(const Config& cfg, int world) {
  std::vector<Layout> layouts;
  for (const int tp : divisors_of(world)) {
    for (const int pp : divisors_of(world / tp)) {
      for (const int cp : divisors_of(world / (tp * pp))) {
        const Layout candidate{world / (tp * pp * cp), tp, pp, cfg.parallel.ep, cp};
        try {
          Config c = cfg;
          c.parallel.dp = candidate.dp;
          c.parallel.tp = tp;
          c.parallel.pp = pp;
          c.parallel.cp = cp;
          Topology::resolve(c.parallel, c.model, world);
          check_context_parallel(c);
          accumulation_steps(c, candidate.dp);
        } catch (const InputError&) {
          continue;
        }
        layouts.push_back(candidate);
      }
    }
  }
  return layouts;
}

namespace {

// The pipeline schedules a search tries for `c`'s layout: the configured one, and under a pipeline ZB-H1 as well
// where the model can split its backward (smaller bubble, more activations: the plan weighs both).
std::vector<PipelineSchedule> searched_schedules(const Config& c) {
  std::vector<PipelineSchedule> schedules{c.parallel.schedule};
  if (c.parallel.pp == 1 || c.parallel.schedule == PipelineSchedule::zero_bubble_h1) return schedules;
  Config zero_bubble = c;
  zero_bubble.parallel.schedule = PipelineSchedule::zero_bubble_h1;
  try {
    check_pipeline_schedule(zero_bubble);
  } catch (const InputError&) {
    return schedules;
  }
  schedules.push_back(PipelineSchedule::zero_bubble_h1);
  return schedules;
}

}  // namespace

std::vector<Plan> search_layouts(const Config& cfg, const Cluster& cluster, int world) {
  std::vector<Plan> plans;
  for (const Layout& layout : valid_layouts(cfg, world)) {
    Config c = cfg;
    c.parallel.dp = layout.dp;
    c.parallel.tp = layout.tp;
    c.parallel.pp = layout.pp;
    // The key and the model's setting it resolves into (core/config.cpp) together, as for sequence parallelism.
    c.parallel.cp = c.model.context_parallel = layout.cp;
    const std::int64_t rows = std::int64_t(cfg.train.micro_batch) * std::int64_t(local_positions(c.model));
    for (const PipelineSchedule schedule : searched_schedules(c)) {
      c.parallel.schedule = schedule;
      for (const bool sequence_parallel : {false, true}) {
        if (sequence_parallel && (layout.tp == 1 || rows % layout.tp != 0)) continue;
        // The key and the model's setting it resolves into (core/config.cpp) together.
        c.parallel.sequence_parallel = c.model.sequence_parallel = sequence_parallel;
        plans.push_back(make_plan(c, world, cluster, RankCoverage::ends));
      }
    }
  }
  std::stable_sort(plans.begin(), plans.end(),
                   [](const Plan& a, const Plan& b) { return a.step.total_s() < b.step.total_s(); });
  return plans;
}

}  // namespace meshtrain
