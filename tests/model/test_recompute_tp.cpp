// Activation recomputation under tensor parallelism (the world is the group: run with 2 and 4
// ranks): selective and full give each rank bitwise the losses, stage outputs, input gradients and
// gradient shards of none, for the whole model and for first, middle and last pipeline stages with
// several micro-batches in flight, for both families (llama: grouped-query attention with one kv
// head per rank under tp 4, a SwiGLU width of 24 split by columns). Full recomputation re-runs the attention's sum over
// the group inside backward; a rank that skipped or added one would hang or differ here.
#include "recompute_harness.hpp"

#include "parallel/comm.hpp"

#include <gtest/gtest.h>
#include <mpi.h>

#include <memory>
#include <string>

namespace meshtrain {
namespace {

using Case = test::StageCase;

template <class Real>
void expect_modes_agree(const Case& c, Comm& tp) {
  SCOPED_TRACE("stage " + std::to_string(c.place.stage) + "/" + std::to_string(c.place.stages) + " slots " +
               std::to_string(c.slots) + " tp " + std::to_string(tp.size()));
  const auto none = test::run_pipeline_like<Real>(c.model, c.batch, c.place, c.slots, Recompute::none, &tp);
  for (Recompute mode : {Recompute::selective, Recompute::full}) {
    const auto other = test::run_pipeline_like<Real>(c.model, c.batch, c.place, c.slots, mode, &tp);
    test::expect_same_run(none, other, c.place, mode == Recompute::selective ? "selective" : "full");
    const ActivationSizes want = activation_elements<Real>(c.model, c.batch, tp.size(), c.place, c.slots, mode);
    EXPECT_EQ(other.sizes.kept, want.kept);
    EXPECT_EQ(other.sizes.scratch, want.scratch);
  }
}

const Case cases[] = {
    // heads divisible by 4
    {{3, 4, 16, 13, 5}, 2, {0, 1}, 2},  // the whole model; vocabulary 13 padded over the ranks
    {{4, 4, 16, 13, 6}, 2, {0, 3}, 2},  // first stage
    {{4, 4, 16, 13, 6}, 1, {1, 3}, 3},  // middle stage
    {{4, 4, 16, 13, 6}, 2, {2, 3}, 2},  // last stage
};

// 8 query heads over 4 kv heads (C 32, head size 4), SwiGLU width 24, vocabulary 13.
ModelConfig llama(int layers) {
  ModelConfig m{layers, 8, 32, 13, 5};
  m.arch = Arch::llama;
  m.kv_heads = 4;
  m.ffn_hidden = 24;
  return m;
}

const Case llama_cases[] = {
    {llama(1), 1, {0, 1}, 2},  // the whole model
    {llama(3), 1, {1, 3}, 2},  // a middle stage: input gradients and stage outputs
};

TEST(RecomputeTensorParallel, LlamaIdenticalToNone) {
  const std::unique_ptr<Comm> tp = make_mpi_comm(MPI_COMM_WORLD);
  ASSERT_GT(tp->size(), 1) << "run under mpiexec with 2 or 4 ranks";
  for (const Case& c : llama_cases) expect_modes_agree<float>(c, *tp);
}

TEST(RecomputeTensorParallel, IdenticalToNone) {
  const std::unique_ptr<Comm> tp = make_mpi_comm(MPI_COMM_WORLD);
  ASSERT_GT(tp->size(), 1) << "run under mpiexec with 2 or 4 ranks";
  for (const Case& c : cases) {
    expect_modes_agree<float>(c, *tp);
    expect_modes_agree<double>(c, *tp);
  }
}

}  // namespace
}  // namespace meshtrain
