// A rank's model states under ZeRO 0–3, run under mpiexec at 1, 2 and 4 ranks.
//
// For every layout of the world and every stage: the bytes the trainer's objects allocate equal,
// category by category, what the planner computes (plan/memory_plan.hpp); and each stage shrinks
// what it promises, against counts worked out here from the tensor shapes alone: the moments are
// Σ ⌈unit / dp⌉ per rank from stage 1, the gradients too (plus the working units: the non-block
// units and two blocks' rooms) from stage 2, the weights from stage 3.
#include "state/model_state.hpp"

#include "core/accumulation.hpp"
#include "parallel/comm.hpp"
#include "parallel/pipeline_schedule.hpp"
#include "parallel/topology.hpp"
#include "plan/memory_plan.hpp"
#include "train/batch_loader.hpp"
#include "train/pipeline_executor.hpp"
#include "train/training_groups.hpp"

#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <map>
#include <string>

namespace meshtrain {
namespace {

Config small_config(int zero) {
  Config cfg;
  cfg.model.layers = 4;
  cfg.model.heads = 4;
  cfg.model.d_model = 24;
  cfg.model.vocab = 53;
  cfg.model.seq_len = 8;
  cfg.train.micro_batch = 2;
  cfg.train.global_batch = 8;
  cfg.parallel.zero = zero;
  return cfg;
}

// Elements of each shard unit (wte, wpe, h.l, ln_f) of a rank's piece, unpadded, by tensor name.
std::map<std::string, std::size_t> unit_elements(const ParameterLayout& layout) {
  std::map<std::string, std::size_t> units;
  for (const TensorInfo& t : layout.tensors()) {
    const std::string& n = t.name;
    const std::string unit = n.rfind("h.", 0) == 0 ? n.substr(0, n.find('.', 2)) : n.substr(0, n.find('.'));
    units[unit] += t.numel;
  }
  return units;
}

// `working`: the non-block units whole, and room for two blocks (one when the stage has one), so
// that the next block is gathered while this one computes.
struct Expected {
  std::size_t shards = 0, non_block = 0, block = 0, blocks = 0;
  std::size_t working() const { return non_block + std::min<std::size_t>(blocks, 2) * block; }
};

Expected expected_counts(const ParameterLayout& layout, int dp) {
  Expected e;
  for (const auto& [name, n] : unit_elements(layout)) {
    const std::size_t padded = (n + dp - 1) / dp * dp;
    e.shards += padded / dp;
    if (name.rfind("h.", 0) == 0) {
      e.block = std::max(e.block, padded);
      ++e.blocks;
    } else {
      e.non_block += padded;
    }
  }
  return e;
}

TEST(ModelState, AllocatesWhatThePlannerPlansAndShrinksByStage) {
  int world = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  ExecSpace space;
  for (int tp = 1; tp <= world; tp *= 2) {
    for (int pp = 1; tp * pp <= world; pp *= 2) {
      const Layout grid{world / (tp * pp), tp, pp};
      const Topology topology(MPI_COMM_WORLD, grid);
      // CMake runs this test with MESHTRAIN_POINTER_AUDIT=1: the groups refuse host buffers, as the trainer's do.
      const auto dp_comm = audit_if_requested(make_mpi_comm(topology.dp_comm()), "dp");
      const auto tp_comm = audit_if_requested(make_mpi_comm(topology.tp_comm()), "tp");
      const GridPosition pos = topology.position();
      const StagePlace place{pos.pp_rank, pp};
      std::map<int, MemoryBytes> by_stage;
      for (int zero = 0; zero <= 3; ++zero) {
        SCOPED_TRACE(testing::Message() << "dp " << grid.dp << " tp " << tp << " pp " << pp << " zero " << zero);
        const Config cfg = small_config(zero);
        const int accum = accumulation_steps(cfg, grid.dp);
        // The stage's schedule sizes its activation slots (no loader: nothing runs here).
        const PipelineParts slots{pp > 1 ? pipeline_schedule(PipelineSchedule::one_f_one_b, pp, pos.pp_rank, accum)
                                         : std::vector<Action>()};
        ModelState state(space, cfg, StateGroups{tp_comm.get(), dp_comm.get(), nullptr, MPI_COMM_WORLD}, place, slots);
        const MemoryBytes actual =
            state.memory() + MemoryBytes::of(MemoryCategory::workspace, BatchLoader::bytes_for(2, cfg.model.seq_len));
        const MemoryBytes planned = planned_rank_memory(cfg, grid, pos);
        for (int c = 0; c < memory_categories; ++c) {
          EXPECT_EQ(actual.bytes[c], planned.bytes[c]) << category_name(MemoryCategory(c));
        }
        by_stage[zero] = actual;
        // Recomputation changes the activations only, and the planner follows.
        for (const char* mode : {"selective", "full"}) {
          Config recomputing = cfg;
          recomputing.train.recompute = parse_name<Recompute>(mode);
          ModelState other(space, recomputing, StateGroups{tp_comm.get(), dp_comm.get(), nullptr, MPI_COMM_WORLD},
                           place, slots);
          const MemoryBytes a = other.memory(), p = planned_rank_memory(recomputing, grid, pos);
          EXPECT_EQ(a[MemoryCategory::activations], p[MemoryCategory::activations]) << mode;
          // A stage of one block keeps one set either way; with more, sharing saves (but under fused
          // attention, the default, selective has no probabilities to share: the same memory as none).
          const bool saves =
              recomputing.train.recompute == Recompute::full || cfg.model.attention != AttentionKernel::fused;
          if (state.layout().stage_layers() > 1 && saves) {
            EXPECT_LT(a[MemoryCategory::activations], actual[MemoryCategory::activations]) << mode;
          } else {
            EXPECT_LE(a[MemoryCategory::activations], actual[MemoryCategory::activations]) << mode;
          }
          EXPECT_EQ(a[MemoryCategory::optimizer], actual[MemoryCategory::optimizer]) << mode;
        }
        // ZB-H1 keeps p micro-batches' activations on every stage and holds up to stage + 1 deferred backwards'
        // output gradients (under full recomputation also the products' inputs and the norms' statistics, the
        // latter of accum_t): planned as allocated, more than 1F1B's.
        if (pp > 1) {
          for (const auto& [precision, recompute] : {std::pair{"fp32", "none"}, std::pair{"bf16", "none"},
                                                     std::pair{"fp32", "full"}, std::pair{"bf16", "full"}}) {
            Config zero_bubble = cfg;
            zero_bubble.parallel.schedule = PipelineSchedule::zero_bubble_h1;
            zero_bubble.train.precision = parse_name<Precision>(precision);
            zero_bubble.train.recompute = parse_name<Recompute>(recompute);
            const PipelineParts lists{pipeline_schedule(zero_bubble.parallel.schedule, pp, pos.pp_rank, accum)};
            ModelState other(space, zero_bubble, StateGroups{tp_comm.get(), dp_comm.get(), nullptr, MPI_COMM_WORLD},
                             place, lists);
            const MemoryBytes a = other.memory(), p = planned_rank_memory(zero_bubble, grid, pos);
            EXPECT_EQ(a[MemoryCategory::activations], p[MemoryCategory::activations])
                << "zb-h1 " << precision << " recompute " << recompute;
            if (std::string(precision) == "fp32" && std::string(recompute) == "none") {
              EXPECT_GT(a[MemoryCategory::activations], actual[MemoryCategory::activations]) << "zb-h1";
            }
          }
        }
        // The vocabulary padded for the GEMMs (53 to 128 × tp rows, train.vocab_multiple): larger
        // weights, logits and 16-bit GEMM workspace, planned as allocated.
        for (const char* precision : {"fp32", "bf16"}) {
          Config padded = cfg;
          padded.model.vocab_multiple = 128;
          padded.train.precision = parse_name<Precision>(precision);
          ModelState other(space, padded, StateGroups{tp_comm.get(), dp_comm.get(), nullptr, MPI_COMM_WORLD}, place,
                           slots);
          const MemoryBytes a =
              other.memory() + MemoryBytes::of(MemoryCategory::workspace, BatchLoader::bytes_for(2, cfg.model.seq_len));
          const MemoryBytes p = planned_rank_memory(padded, grid, pos);
          for (int c = 0; c < memory_categories; ++c) {
            EXPECT_EQ(a.bytes[c], p.bytes[c]) << "padded " << precision << " " << category_name(MemoryCategory(c));
          }
          EXPECT_EQ(other.layout().padded_vocab(), 128 * tp);
          if (place.last() && std::string(precision) == "fp32") {
            EXPECT_GT(a[MemoryCategory::activations], actual[MemoryCategory::activations]);  // the logits
          }
        }
        // 16-bit runs: planned = allocated; the fp32 master is whole at stage 0 and the owned slices
        // from stage 1 on; the model's 16-bit weights are whole below stage 3 (half the bytes of an
        // fp32 run's) and a shard plus the working units at stage 3.
        for (const char* precision : {"bf16", "fp16"}) {
          Config low = cfg;
          low.train.precision = parse_name<Precision>(precision);
          ModelState other(space, low, StateGroups{tp_comm.get(), dp_comm.get(), nullptr, MPI_COMM_WORLD}, place,
                           slots);
          const MemoryBytes a = other.memory(), p = planned_rank_memory(low, grid, pos);
          for (int c = 0; c < memory_categories; ++c) {
            if (MemoryCategory(c) == MemoryCategory::workspace) continue;  // the planner adds the token buffers
            EXPECT_EQ(a.bytes[c], p.bytes[c]) << precision << " " << category_name(MemoryCategory(c));
          }
          const Expected e = expected_counts(other.layout(), grid.dp);
          const std::int64_t whole = std::int64_t(other.layout().total());
          EXPECT_EQ(a[MemoryCategory::master], 4 * (zero == 0 ? whole : std::int64_t(e.shards))) << precision;
          EXPECT_EQ(a[MemoryCategory::weights], 2 * (zero < 3 ? whole : std::int64_t(e.shards + e.working())))
              << precision;
          EXPECT_EQ(a[MemoryCategory::optimizer], actual[MemoryCategory::optimizer]) << precision;
        }
      }
      const ParameterLayout piece(small_config(0).model, tp, pos.tp_rank, place);
      const Expected e = expected_counts(piece, grid.dp);
      const auto f = std::int64_t(sizeof(float));
      const auto whole = std::int64_t(piece.total());
      EXPECT_EQ(by_stage[0][MemoryCategory::optimizer], 2 * f * whole);
      for (int zero = 1; zero <= 3; ++zero) {
        SCOPED_TRACE(testing::Message() << "zero " << zero);
        const MemoryBytes& m = by_stage[zero];
        EXPECT_EQ(m[MemoryCategory::optimizer], 2 * f * std::int64_t(e.shards));
        // Whole (padded) buffers below the stage that shards them; shard + working units from it.
        const std::int64_t padded_whole = f * std::int64_t(e.shards) * grid.dp;
        const std::int64_t sharded = f * std::int64_t(e.shards + e.working());
        EXPECT_EQ(m[MemoryCategory::grads], zero >= 2 ? sharded : padded_whole);
        EXPECT_EQ(m[MemoryCategory::weights], zero >= 3 ? sharded : padded_whole);
        EXPECT_EQ(m[MemoryCategory::activations], by_stage[0][MemoryCategory::activations]);
      }
      if (grid.dp == 4) {
        // Four ways: a quarter of stage 0's optimizer bytes, up to the padding of each unit.
        const double ratio =
            double(by_stage[1][MemoryCategory::optimizer]) / double(by_stage[0][MemoryCategory::optimizer]);
        EXPECT_NEAR(ratio, 0.25, 0.002);
      }
    }
  }
}

// Context parallelism: the state's dp group spans dp × cp ranks (ZeRO shards over the replicas) and each rank
// keeps the activations of its seq_len / cp positions, the ring's buffers among them; the planner counts both
// as the state allocates them. At 2 ranks cp 2; at 4, dp 2 × cp 2.
TEST(ModelState, AllocatesWhatThePlannerPlansUnderContextParallelism) {
  int world = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  if (world < 2) GTEST_SKIP() << "context parallelism needs 2 or more ranks";
  ExecSpace space;
  Layout grid{world / 2, 1, 1};
  grid.cp = 2;
  const Topology topology(MPI_COMM_WORLD, grid);
  const auto replicas = audit_if_requested(make_mpi_comm(topology.dp_cp_comm()), "dp");
  const auto cp = audit_if_requested(make_mpi_comm(topology.cp_comm()), "cp");
  const GridPosition pos = topology.position();
  for (int zero = 0; zero <= 3; ++zero) {
    SCOPED_TRACE(testing::Message() << "dp " << grid.dp << " cp 2 zero " << zero);
    Config cfg = small_config(zero);
    cfg.parallel.cp = cfg.model.context_parallel = 2;
    ModelState state(space, cfg,
                     StateGroups{nullptr, replicas.get(), nullptr, MPI_COMM_WORLD, nullptr, nullptr, cp.get()},
                     StagePlace{}, PipelineParts{});
    const MemoryBytes actual =
        state.memory() + MemoryBytes::of(MemoryCategory::workspace, BatchLoader::bytes_for(2, cfg.model.seq_len));
    const MemoryBytes planned = planned_rank_memory(cfg, grid, pos);
    for (int c = 0; c < memory_categories; ++c) {
      EXPECT_EQ(actual.bytes[c], planned.bytes[c]) << category_name(MemoryCategory(c));
    }
    // Sharded over all the replicas: a shard is ⌈unit / (dp · cp)⌉ of each unit.
    const Expected e = expected_counts(state.layout(), grid.replicas());
    if (zero > 0) {
      EXPECT_EQ(actual[MemoryCategory::optimizer], 2 * std::int64_t(sizeof(float)) * std::int64_t(e.shards));
    }
  }
}

}  // namespace
}  // namespace meshtrain
