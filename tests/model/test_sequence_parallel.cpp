// Sequence parallelism (ModelConfig::sequence_parallel; issue 43, part 1) against plain tensor
// parallelism, the world the tensor-parallel group (run with 2 and 4 ranks): gpt2's whole model and its
// first, middle and last pipeline stages, llama's (grouped-query; dense, and MoE blocks with a shared
// expert beside dense ones, dropless and under a capacity), several micro-batches in flight, no
// recomputation and full, in double and float. The two runs compute the same model with the same weights and inputs;
// sequence parallelism keeps each rank's block of the residual rows and sums the norms' weight gradients over the
// group, so the losses, each rank's block of the stage outputs and input gradients, and every gradient
// must agree to rounding. Its activations: what the stage carved equals the planner's count for the
// same configuration, and the blocks keep fewer elements than without.
#include "recompute_harness.hpp"

#include "parallel/comm.hpp"

#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <iterator>
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

// 8 query heads over 4 kv heads (C 32, head size 4), SwiGLU width 24, vocabulary 13, T 4.
ModelConfig llama(int layers) { return test::llama_of({layers, 8, 32, 13, 4}, 4, 24); }

// Blocks 0 and 2 route 4 experts (2 a token, width 8) beside a shared one; block 1 is dense. The
// router sees every row of the micro-batch, gathered, as without sequence parallelism.
ModelConfig mixture(int layers, double capacity_factor) {
  ModelConfig m = llama(layers);
  m.experts = 4;
  m.experts_per_token = 2;
  m.moe_every = 2;
  m.shared_experts = 1;
  m.expert_hidden = 8;
  m.capacity_factor = capacity_factor;
  return m;
}

const Case llama_cases[] = {
    {llama(1), 2, {0, 1}, 2},         // the whole model
    {llama(5), 1, {1, 3}, 3},         // a middle stage: input gradients and stage outputs
    {llama(5), 2, {2, 3}, 2},         // the last stage: the final norm's gradient over the group
    {mixture(3, 0), 2, {0, 1}, 2},    // MoE, dropless
    {mixture(3, 1.0), 2, {0, 1}, 2},  // MoE under a capacity: some assignments dropped
};

template <class Real>
void expect_same_training(const Case& c, Recompute recompute, Comm& tp, double tolerance) {
  const std::string name = "stage " + std::to_string(c.place.stage) + "/" + std::to_string(c.place.stages) + " tp " +
                           std::to_string(tp.size()) + (recompute == Recompute::full ? " full" : "");
  SCOPED_TRACE(name);
  ModelConfig sequence = c.model;
  sequence.sequence_parallel = true;
  const auto plain = test::run_pipeline_like<Real>(c.model, c.batch, c.place, c.slots, recompute, &tp);
  const auto split = test::run_pipeline_like<Real>(sequence, c.batch, c.place, c.slots, recompute, &tp);
  if (c.place.last()) test::expect_close_rows(plain.losses, split.losses, tolerance, "losses");
  const std::size_t rows = std::size_t(c.batch) * c.model.seq_len * c.model.d_model / std::size_t(tp.size());
  for (std::size_t k = 0; k < plain.outputs.size(); ++k) {
    ASSERT_EQ(split.outputs[k].size(), rows) << "a stage output holds this rank's block of rows";
    test::expect_close_rows(test::rows_held(plain.outputs[k], rows, &tp), split.outputs[k], tolerance,
                            "stage output " + std::to_string(k));
  }
  for (std::size_t k = 0; k < plain.input_grads.size(); ++k) {
    test::expect_close_rows(test::rows_held(plain.input_grads[k], rows, &tp), split.input_grads[k], tolerance,
                            "input gradient " + std::to_string(k));
  }
  test::expect_close_rows(plain.grads, split.grads, tolerance, "gradients");
  const ActivationSizes planned = activation_elements<Real>(sequence, c.batch, tp.size(), c.place, c.slots, recompute);
  EXPECT_EQ(split.sizes.kept, planned.kept) << "the planner counts what the stage carves";
  EXPECT_EQ(split.sizes.scratch, planned.scratch);
  EXPECT_LT(split.sizes.kept, plain.sizes.kept) << "the residual rows and norm statistics are split";
}

void expect_cases_train_alike(const Case* first, const Case* last) {
  const std::unique_ptr<Comm> tp = make_mpi_comm(MPI_COMM_WORLD);
  ASSERT_GT(tp->size(), 1) << "run under mpiexec with 2 or 4 ranks";
  for (const Case* c = first; c != last; ++c) {
    for (const Recompute recompute : {Recompute::none, Recompute::full}) {
      expect_same_training<double>(*c, recompute, *tp, 1e-12);
      expect_same_training<float>(*c, recompute, *tp, 2e-5);
    }
  }
}

TEST(SequenceParallel, Gpt2TrainsAsTensorParallel) { expect_cases_train_alike(std::begin(cases), std::end(cases)); }

TEST(SequenceParallel, LlamaTrainsAsTensorParallel) {
  expect_cases_train_alike(std::begin(llama_cases), std::end(llama_cases));
}

}  // namespace
}  // namespace meshtrain
