// The planner's assembly: layouts searched against a brute-force enumeration, memory per rank as
// the sum of its parts, and the fit against devices and nodes.
#include "common/small_moe.hpp"
#include "core/errors.hpp"
#include "parallel/pipeline_schedule.hpp"
#include "parallel/traffic_json.hpp"
#include "plan/memory_plan.hpp"
#include "plan/plan_report.hpp"
#include "plan/planner.hpp"
#include "plan/runtime_overhead.hpp"
#include "plan/traffic.hpp"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <set>
#include <tuple>

namespace meshtrain {
namespace test_planner {

Config config_of(int layers, int heads, int micro, int global) {
  Config cfg;
  cfg.model = {layers, heads, 48, 256, 32};
  cfg.train.micro_batch = micro;
  cfg.train.global_batch = global;
  return cfg;
}

Cluster gpu_cluster(double memory_bytes) {
  Cluster c = cluster_preset("h100-sxm-8");
  c.ranks_per_node = 4;
  c.device_memory_bytes = memory_bytes;
  return c;
}

// Every (dp, tp, pp) with dp·tp·pp = world, tp dividing heads, pp at most layers, and
// global_batch a multiple of micro_batch·dp: by brute force over all triples.
// (dp, cp, tp, pp): cp splits the 32 positions into 2·cp chunks.
std::set<std::tuple<int, int, int, int>> brute_force(int world, int layers, int heads, int micro, int global) {
  std::set<std::tuple<int, int, int, int>> out;
  for (int dp = 1; dp <= world; ++dp)
    for (int cp = 1; cp <= world; ++cp)
      for (int tp = 1; tp <= world; ++tp)
        for (int pp = 1; pp <= world; ++pp)
          if (dp * cp * tp * pp == world && heads % tp == 0 && pp <= layers && global % (micro * dp) == 0 &&
              32 % (2 * cp) == 0)
            out.insert({dp, cp, tp, pp});
  return out;
}

TEST(Search, EnumeratesExactlyTheValidLayouts) {
  for (auto [world, layers, heads, micro, global] :
       {std::tuple{1, 2, 2, 1, 1}, std::tuple{8, 4, 4, 1, 8}, std::tuple{12, 6, 6, 2, 24}, std::tuple{16, 3, 8, 1, 4},
        std::tuple{24, 12, 12, 1, 48}, std::tuple{7, 7, 1, 1, 7}, std::tuple{6, 2, 3, 4, 4}}) {
    const Config cfg = config_of(layers, heads, micro, global);
    std::set<std::tuple<int, int, int, int>> found;
    for (const Layout& l : valid_layouts(cfg, world)) found.insert({l.dp, l.cp, l.tp, l.pp});
    EXPECT_EQ(found, brute_force(world, layers, heads, micro, global)) << "world " << world;
    const std::vector<Plan> plans = search_layouts(cfg, gpu_cluster(1e12), world);
    // Each with tp > 1 a second time under sequence parallelism, where tp divides a rank's micro-batch rows; each
    // with pp > 1 under 1F1B (the config's) and ZB-H1.
    std::size_t expected = 0;
    for (const auto& [dp, cp, tp, pp] : found) {
      expected += std::size_t(tp > 1 && micro * cfg.model.seq_len / cp % tp == 0 ? 2 : 1) * (pp > 1 ? 2 : 1);
    }
    EXPECT_EQ(plans.size(), expected);
    for (const Plan& p : plans) {
      if (p.layout.pp == 1) {
        EXPECT_EQ(p.cfg.parallel.schedule, PipelineSchedule::one_f_one_b);
      }
    }
    EXPECT_TRUE(std::is_sorted(plans.begin(), plans.end(),
                               [](const Plan& a, const Plan& b) { return a.step.total_s() < b.step.total_s(); }));
    for (const Plan& p : plans) {  // the search's shortcut over middle dp ranks changes no figure
      const Plan full = make_plan(p.cfg, world, p.cluster, RankCoverage::every);
      EXPECT_EQ(p.needed_bytes, full.needed_bytes);
      EXPECT_EQ(p.limiting_rank, full.limiting_rank);
    }
  }
}

TEST(Plan, RejectsLayoutsTheTrainerRejects) {
  Config cfg = config_of(4, 4, 2, 8);
  cfg.parallel.tp = 3;
  EXPECT_THROW(make_plan(cfg, 6, gpu_cluster(1e12)), InputError);  // tp does not divide heads
  cfg.parallel.tp = 1;
  cfg.parallel.dp = 3;
  EXPECT_THROW(make_plan(cfg, 3, gpu_cluster(1e12)), InputError);  // 8 sequences over micro 2 × dp 3
}

TEST(Plan, HostMemoryIsCategoriesPlusRuntimePlusData) {
  Config cfg = config_of(4, 4, 2, 8);
  cfg.parallel.tp = 2;
  cfg.parallel.pp = 2;
  Cluster c = cluster_preset("local");
  c.ranks_per_node = 0;
  const Plan plan = make_plan(cfg, 8, c);  // dp 2
  ASSERT_EQ(plan.ranks.size(), 8u);
  std::int64_t node = 0;
  for (const RankPlan& r : plan.ranks) {
    EXPECT_EQ(r.position.tp_rank, r.rank % 2);
    const MemoryBytes expected = planned_rank_memory(cfg, plan.layout, r.position);
    EXPECT_EQ(r.memory.bytes, expected.bytes);
    // dp 2 at stage 0: MPI's all-reduce scratch, one bucket at most the rank's gradients.
    EXPECT_EQ(r.runtime_bytes, runtime_overhead_bytes(8, 8) +
                                   std::min<std::int64_t>(std::int64_t(25) << 20, expected[MemoryCategory::grads]));
    EXPECT_EQ(r.peak_rss, expected.total() + r.runtime_bytes + r.data_bytes);
    node += r.peak_rss;
  }
  EXPECT_EQ(plan.needed_bytes, node);
  EXPECT_EQ(plan.fits, node <= plan.capacity_bytes);
}

TEST(Plan, GpuFitIsPerDeviceAndNamesTheLargestRank) {
  Config cfg = config_of(4, 4, 2, 8);
  cfg.parallel.pp = 2;
  const Plan roomy = make_plan(cfg, 2, gpu_cluster(1e12));
  EXPECT_TRUE(roomy.fits);
  std::int64_t largest = 0;
  int largest_rank = 0;
  for (const RankPlan& r : roomy.ranks) {
    EXPECT_EQ(r.device_bytes, r.memory.total() + std::int64_t(roomy.cluster.device_reserve_bytes));
    if (r.device_bytes > largest) largest = r.device_bytes, largest_rank = r.rank;
  }
  EXPECT_EQ(roomy.needed_bytes, largest);
  EXPECT_EQ(roomy.limiting_rank, largest_rank);
  const Plan tight = make_plan(cfg, 2, gpu_cluster(double(largest - 1)));
  EXPECT_FALSE(tight.fits);
}

// make_plan computes a rank's figures once per (stage, tp rank, ep rank, node size) — and dp rank
// under background saves — and plan_json its traffic once per (stage, tp rank, ep rank): every rank
// of layouts with tp, pp, ep, ZeRO and async saves gets what its own computation gives.
TEST(Plan, EveryRanksFiguresAndTrafficAreItsOwn) {
  Config moe;
  moe.model = small_moe(4, 8);
  moe.train.micro_batch = 1;
  moe.train.global_batch = 8;
  struct Case {
    Config cfg;
    int world, tp, pp, zero;
    bool async;
  };
  std::vector<Case> cases = {{config_of(4, 4, 1, 8), 16, 2, 2, 1, false}, {config_of(4, 4, 1, 8), 8, 1, 2, 3, true}};
  moe.parallel.ep = 2;
  cases.push_back({moe, 8, 1, 2, 2, true});
  cases.push_back({moe, 8, 2, 1, 0, false});
  for (Case& c : cases) {
    c.cfg.parallel.tp = c.tp;
    c.cfg.parallel.pp = c.pp;
    c.cfg.parallel.zero = c.zero;
    c.cfg.checkpoint.async = c.async;
    const Plan plan = make_plan(c.cfg, c.world, gpu_cluster(1e12), RankCoverage::every);
    const nlohmann::json json = plan_json(plan);
    ASSERT_EQ(plan.ranks.size(), std::size_t(c.world));
    for (const RankPlan& r : plan.ranks) {
      SCOPED_TRACE(testing::Message() << "world " << c.world << " tp " << c.tp << " pp " << c.pp << " rank " << r.rank);
      const GridPosition at = Topology::position(plan.layout, r.rank);
      EXPECT_EQ(r.position.dp_rank, at.dp_rank);
      EXPECT_EQ(r.memory.bytes, planned_rank_memory(c.cfg, plan.layout, at).bytes);
      EXPECT_EQ(json["per_rank"][std::size_t(r.rank)]["traffic"],
                traffic_json(predicted_traffic(c.cfg, plan.layout, at)));
    }
    std::int64_t counted = 0;
    for (const RankKind& k : plan.kinds) counted += k.count;
    EXPECT_EQ(counted, c.world);
  }
}

// predicted_traffic extrapolates past affine_micros micro-batches: every count of every rank equals
// the enumeration's, for pipelines of one to four stages under both schedules, ZeRO 0–3, full
// recomputation, tensor and expert parallelism, bf16. And the planned activation slots equal the
// schedule's own peak without building it.
TEST(Plan, TrafficExtrapolatedOverMicroBatchesIsTheEnumerations) {
  Config moe;
  moe.model = small_moe(4, 8);
  moe.parallel.ep = 2;
  for (const auto& [base, tp, pp, world] :
       {std::tuple{config_of(4, 4, 1, 1), 1, 1, 1}, std::tuple{config_of(4, 4, 1, 1), 2, 2, 4},
        std::tuple{config_of(4, 4, 1, 1), 1, 4, 4}, std::tuple{config_of(3, 4, 1, 1), 1, 3, 6},
        std::tuple{moe, 1, 1, 2}, std::tuple{moe, 2, 3, 12}}) {
    for (int zero : {0, 1, 2, 3}) {
      for (PipelineSchedule schedule : {PipelineSchedule::gpipe, PipelineSchedule::one_f_one_b}) {
        Config cfg = base;
        cfg.train.micro_batch = 1;
        cfg.parallel.tp = tp;
        cfg.parallel.pp = pp;
        cfg.parallel.zero = zero;
        cfg.parallel.schedule = schedule;
        cfg.train.recompute = zero % 2 == 1 ? Recompute::full : Recompute::none;
        cfg.train.precision = zero == 2 ? Precision::bf16 : Precision::fp32;
        const Layout grid = Topology::resolve(cfg.parallel, cfg.model, world);
        for (int micros = affine_micros(grid); micros <= affine_micros(grid) + 6; ++micros) {
          cfg.train.global_batch = micros * grid.dp;
          for (int r = 0; r < world; ++r) {
            SCOPED_TRACE(testing::Message() << "tp " << tp << " pp " << pp << " zero " << zero << " schedule "
                                            << name_of(schedule) << " micros " << micros << " rank " << r);
            const GridPosition at = Topology::position(grid, r);
            EXPECT_EQ(traffic_json(predicted_traffic(cfg, grid, at)),
                      traffic_json(enumerated_traffic(cfg, grid, at, micros)));
          }
        }
      }
    }
  }
  for (PipelineSchedule schedule : {PipelineSchedule::gpipe, PipelineSchedule::one_f_one_b}) {
    for (int stages = 1; stages <= 5; ++stages) {
      for (int stage = 0; stage < stages; ++stage) {
        for (int micros = 1; micros <= 12; ++micros) {
          EXPECT_EQ(live_activations(schedule, stages, stage, micros),
                    peak_live_activations(pipeline_schedule(schedule, stages, stage, micros)));
        }
      }
    }
  }
}

TEST(Cluster, PresetsAndPlacement) {
  for (const auto& name : cluster_preset_names()) EXPECT_EQ(cluster_preset(name).preset, name);
  EXPECT_THROW(cluster_preset("tpu"), InputError);
  const Cluster h100 = cluster_preset("h100-sxm-8");
  EXPECT_EQ(h100.peak_flops(Precision::bf16), 989e12);
  EXPECT_EQ(h100.peak_flops(Precision::fp32), 67e12);
  EXPECT_EQ(h100.ranks_on_node(0, 12), 8);
  EXPECT_EQ(h100.ranks_on_node(9, 12), 4);
  EXPECT_EQ(h100.node_of(15), 1);
}

}  // namespace test_planner
}  // namespace meshtrain
