// Expert-parallel model states under mpiexec (1, 2, 4 and 8 ranks; share/docs/design.md, Model
// states). The world is one data-parallel group of dp ranks, split as Megatron places expert
// parallelism: ep neighbouring dp ranks form an expert-parallel group (ep rank = dp rank mod ep),
// the ranks with the same ep rank an expert-data-parallel group (edp rank = dp rank / ep), which
// holds the same experts. For ep = 1, 2, 4 (dividing the world and E = 4) and ZeRO 0–3, against
// closed forms worked out here:
//   - the bytes by category, planned and allocated, and the moments Σ unit / group by hand;
//   - the gradient reduction: rank d's gradients are (d + 1)·v, so a dense element sums to
//     v·Σ_d (d + 1) and an expert's to v·Σ (d + 1) over the dp ranks with that expert's ep rank;
//   - the gradient norm over the world: every element of the whole model counted once;
//   - each block whole when it computes (at ZeRO 3 an MoE block's two units, its own and its
//     experts', gathered over their two groups), against the same weights initialised whole.
#include "model/init.hpp"
#include "parallel/comm.hpp"
#include "state/optimizer_state.hpp"
#include "state/state_memory.hpp"
#include "state/working_copy.hpp"

#include "common/small_moe.hpp"

#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <functional>
#include <memory>
#include <vector>

namespace meshtrain {
namespace {

// The world as one dp group, and its ep and edp groups in Megatron's placement.
struct ExpertGroups {
  int ep;
  std::unique_ptr<Comm> dp, ep_group, edp;

  explicit ExpertGroups(int ep_degree) : ep(ep_degree), dp(make_mpi_comm(MPI_COMM_WORLD)) {
    const int d = dp->rank();
    MPI_Comm ep_comm = MPI_COMM_NULL, edp_comm = MPI_COMM_NULL;
    MPI_Comm_split(MPI_COMM_WORLD, d / ep, d, &ep_comm);
    MPI_Comm_split(MPI_COMM_WORLD, d % ep, d, &edp_comm);
    ep_group = make_mpi_comm(ep_comm);  // the Comms keep their own duplicates
    edp = make_mpi_comm(edp_comm);
    MPI_Comm_free(&ep_comm);
    MPI_Comm_free(&edp_comm);
  }
  int ep_rank() const { return ep_group->rank(); }
  ParameterLayout layout(ZeroStage stage) const {
    return ParameterLayout(small_moe(4, 6), 1, 0, StagePlace{}, stage.shard_group_size(dp->size()), ep, ep_rank());
  }
};

std::vector<float> to_host(const float* data, std::size_t n) {
  std::vector<float> host(n);
  Kokkos::deep_copy(Kokkos::View<float*, HostSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>(host.data(), n),
                    CVec<float>(data, n));
  return host;
}
void from_host(float* data, const std::vector<float>& host) {
  Kokkos::deep_copy(
      Vec<float>(data, host.size()),
      Kokkos::View<const float*, HostSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>(host.data(), host.size()));
}

// The unreduced gradient of element g (global index) of tensor t, up to the rank's factor d + 1.
float v(const TensorInfo& t, std::int64_t g) { return float(g % 5 + 1 + (t.expert >= 0 ? t.expert : 0)); }

// Σ (d + 1) over the dp ranks that hold tensor t: all of them, or for an expert those of its ep rank.
double rank_sum(const TensorInfo& t, int dp, int ep, int experts) {
  double s = 0;
  for (int d = 0; d < dp; ++d) {
    if (t.expert < 0 || d % ep == t.expert / (experts / ep)) s += d + 1;
  }
  return s;
}

// Runs `body` for ep = 1, 2 and 4 where it divides the world, and ZeRO 0–3.
void for_each_case(const std::function<void(const ExpertGroups&, ZeroStage)>& body) {
  int world = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  for (int ep : {1, 2, 4}) {
    if (world % ep != 0) continue;
    const ExpertGroups g(ep);
    for (int zero = 0; zero <= 3; ++zero) {
      SCOPED_TRACE(testing::Message() << "ep " << ep << " zero " << zero);
      body(g, ZeroStage{zero});
    }
  }
}

constexpr std::size_t small_buckets = 4096;  // bytes: several buckets per run of units

TEST(ExpertStates, PlannedBytesAreAllocatedAndExpertUnitsShardOverEdp) {
  for_each_case([](const ExpertGroups& g, ZeroStage stage) {
    const int dp = g.dp->size();
    const ParameterLayout layout = g.layout(stage);
    const OptimizerState state(ExecSpace(), layout, stage, *g.dp, *g.edp, true, small_buckets);
    const MemoryBytes planned = planned_state_memory(layout, dp, stage, Precision::fp32);
    for (int c = 0; c < memory_categories; ++c) {
      EXPECT_EQ(state.memory().bytes[c], planned.bytes[c]) << category_name(MemoryCategory(c));
    }
    std::size_t moments = 0;  // elements of one moment: each unit's slice of its group
    for (const ShardUnit& u : layout.units()) {
      moments += stage.shards() ? u.size() / (u.experts ? dp / g.ep : dp) : u.size();
    }
    EXPECT_EQ(state.memory()[MemoryCategory::optimizer], std::int64_t(2 * sizeof(float) * moments));
  });
}

// Writes rank d's gradients (d + 1)·v unit by unit from the end, as backward does, and reduces.
void reduce_fake_gradients(OptimizerState& state, int dp_rank) {
  const ParameterLayout& layout = state.layout();
  const ShardMap& map = state.map();
  const float factor = float(dp_rank + 1);
  state.reduction().start_step();
  state.reduction().arm();
  for (std::size_t u = map.units(); u-- > 0;) {
    for (const TensorInfo& t : layout.tensors()) {
      if (layout.unit_at(t.offset) != u) continue;
      std::vector<float> g(t.numel, 0.0f);
      for (std::size_t i = 0; i < t.numel; ++i) g[i] = factor * v(t, t.global_index(i));
      from_host(state.grads().at(t), g);
    }
    state.reduction().ready_from(map.unit(u).begin);
  }
  state.reduction().finish(nullptr);
}

TEST(ExpertStates, ReductionSumsExpertGradientsOverEdpOnlyAndTheNormCountsEachOnce) {
  const ModelConfig model = small_moe(4, 6);
  const ParameterLayout whole(model);
  for_each_case([&](const ExpertGroups& g, ZeroStage stage) {
    const int dp = g.dp->size();
    const ParameterLayout layout = g.layout(stage);
    OptimizerState state(ExecSpace(), layout, stage, *g.dp, *g.edp, true, small_buckets);
    reduce_fake_gradients(state, g.dp->rank());
    for (const TensorInfo& t : layout.tensors()) {
      const io::ElementRange run = state.map().owned_run(t);
      const std::vector<float> got = to_host(state.grads().element(t, run.first), run.count);
      for (std::size_t j = 0; j < run.count; ++j) {
        const std::int64_t e = t.global_index(run.first + j);
        ASSERT_EQ(double(got[j]), v(t, e) * rank_sum(t, dp, g.ep, model.experts)) << t.name << " element " << e;
      }
    }
    double norm = state.grad_squared_norm([&](const TensorInfo& t) { return layout.holds_counted_copy(t); });
    MPI_Allreduce(MPI_IN_PLACE, &norm, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    double want = 0;
    for (const TensorInfo& t : whole.tensors()) {
      for (std::size_t i = 0; i < t.numel; ++i) {
        const double x = v(t, std::int64_t(i)) * rank_sum(t, dp, g.ep, model.experts);
        want += x * x;
      }
    }
    EXPECT_DOUBLE_EQ(norm, want);
  });
}

// Every stage holds a block's units whole when it computes: published whole (ZeRO 0–2, each unit
// gathered over its group from stage 1), or at ZeRO 3 gathered on demand, the block's own unit over
// dp and its experts' over edp, with the next block prefetched.
TEST(ExpertStates, EachBlockIsWholeWhenItComputes) {
  constexpr std::uint64_t seed = 17;
  for_each_case([&](const ExpertGroups& g, ZeroStage stage) {
    const ExecSpace space;
    const ParameterLayout layout = g.layout(stage);
    OptimizerState state(space, layout, stage, *g.dp, *g.edp, true, small_buckets);
    WorkingCopy<float> copy(space, state);
    state.initialize(seed);
    copy.publish();
    // The same rank's tensors initialised whole, without shards or gathers.
    const ParameterLayout whole(small_moe(4, 6), 1, 0, StagePlace{}, 1, g.ep, g.ep_rank());
    Buffer<float> reference("reference", whole.total());
    initialize_parameters(space, reference, whole, seed);
    const std::vector<float> want = to_host(reference.data(), whole.total());
    // Forward up, backward down: each block whole in its room when it is needed, prefetch or not.
    for (int block : {0, 1, 2, 2, 1, 0}) {
      copy.need_block(block);
      const std::vector<std::size_t>& units = state.map().block_units(block);
      EXPECT_EQ(units.size(), small_moe(4, 6).is_moe_block(block) ? 2u : 1u);
      for (const TensorInfo& t : layout.tensors()) {
        if (std::find(units.begin(), units.end(), layout.unit_at(t.offset)) == units.end()) continue;
        const std::vector<float> got = to_host(copy.weight(t), t.numel);
        const std::size_t at = whole.find(t.name).offset;
        EXPECT_EQ(got, std::vector<float>(want.begin() + long(at), want.begin() + long(at + t.numel)))
            << "block " << block << " " << t.name;
      }
    }
  });
}

}  // namespace
}  // namespace meshtrain
