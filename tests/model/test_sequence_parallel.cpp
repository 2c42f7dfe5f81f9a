// Sequence parallelism (ModelConfig::sequence_parallel; issue 43, part 1) against plain tensor
// parallelism, the world the tensor-parallel group (run with 2 and 4 ranks): gpt2's whole model and its
// first, middle and last pipeline stages, several micro-batches in flight, no recomputation and full,
// in double and float. The two runs compute the same model with the same weights and inputs; sequence
// parallelism keeps each rank's block of the residual rows and sums the norms' weight gradients over the
// group, so the losses, each rank's block of the stage outputs and input gradients, and every gradient
// must agree to rounding. Its activations: what the stage carved equals the planner's count for the
// same configuration, and the blocks keep fewer elements than without.
#include "recompute_harness.hpp"

#include "parallel/comm.hpp"

#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>

namespace meshtrain {
namespace {

using Case = test::StageCase;

const Case cases[] = {
    // heads divisible by 4
    {{3, 4, 16, 13, 6}, 2, {0, 1}, 2},  // the whole model; vocabulary 13 padded over the ranks
    {{4, 4, 16, 13, 6}, 2, {0, 3}, 2},  // first stage
    {{4, 4, 16, 13, 6}, 2, {1, 3}, 3},  // middle stage
    {{4, 4, 16, 13, 6}, 2, {2, 3}, 2},  // last stage
};

// |actual − expected| ≤ tolerance · (1 + |expected|), element by element; the worst one reported.
template <class Real>
void expect_close(const std::vector<Real>& expected, const std::vector<Real>& actual, double tolerance,
                  const std::string& what) {
  ASSERT_EQ(expected.size(), actual.size()) << what;
  ASSERT_FALSE(expected.empty()) << what << ": nothing was compared";
  double worst = 0;
  std::size_t at = 0;
  for (std::size_t i = 0; i < expected.size(); ++i) {
    const double e = double(expected[i]), a = double(actual[i]);
    const double excess = std::abs(a - e) / (1 + std::abs(e));
    if (!(excess <= worst)) {  // NaN counts as the worst
      worst = std::isnan(excess) ? INFINITY : excess;
      at = i;
    }
  }
  EXPECT_LE(worst, tolerance) << what << "[" << at << "]: " << double(actual[at]) << " instead of "
                              << double(expected[at]);
}

template <class Real>
void expect_same_training(const Case& c, Recompute recompute, Comm& tp, double tolerance) {
  const std::string name = "stage " + std::to_string(c.place.stage) + "/" + std::to_string(c.place.stages) + " tp " +
                           std::to_string(tp.size()) + (recompute == Recompute::full ? " full" : "");
  SCOPED_TRACE(name);
  ModelConfig sequence = c.model;
  sequence.sequence_parallel = true;
  const auto plain = test::run_pipeline_like<Real>(c.model, c.batch, c.place, c.slots, recompute, &tp);
  const auto split = test::run_pipeline_like<Real>(sequence, c.batch, c.place, c.slots, recompute, &tp);
  if (c.place.last()) expect_close(plain.losses, split.losses, tolerance, "losses");
  const std::size_t rows = std::size_t(c.batch) * c.model.seq_len * c.model.d_model / std::size_t(tp.size());
  for (std::size_t k = 0; k < plain.outputs.size(); ++k) {
    ASSERT_EQ(split.outputs[k].size(), rows) << "a stage output holds this rank's block of rows";
    expect_close(test::rows_held(plain.outputs[k], rows, &tp), split.outputs[k], tolerance,
                 "stage output " + std::to_string(k));
  }
  for (std::size_t k = 0; k < plain.input_grads.size(); ++k) {
    expect_close(test::rows_held(plain.input_grads[k], rows, &tp), split.input_grads[k], tolerance,
                 "input gradient " + std::to_string(k));
  }
  expect_close(plain.grads, split.grads, tolerance, "gradients");
  const ActivationSizes planned = activation_elements<Real>(sequence, c.batch, tp.size(), c.place, c.slots, recompute);
  EXPECT_EQ(split.sizes.kept, planned.kept) << "the planner counts what the stage carves";
  EXPECT_EQ(split.sizes.scratch, planned.scratch);
  EXPECT_LT(split.sizes.kept, plain.sizes.kept) << "the residual rows and norm statistics are split";
}

TEST(SequenceParallel, Gpt2TrainsAsTensorParallel) {
  const std::unique_ptr<Comm> tp = make_mpi_comm(MPI_COMM_WORLD);
  ASSERT_GT(tp->size(), 1) << "run under mpiexec with 2 or 4 ranks";
  for (const Case& c : cases) {
    for (const Recompute recompute : {Recompute::none, Recompute::full}) {
      expect_same_training<double>(c, recompute, *tp, 1e-12);
      expect_same_training<float>(c, recompute, *tp, 2e-5);
    }
  }
}

}  // namespace
}  // namespace meshtrain
