// Context parallelism (ModelConfig::context_parallel; issue 43, part 2) against the whole sequence on one
// rank, the world the context-parallel group (run with 2 and 4 ranks): gpt2's whole model and its first,
// middle and last pipeline stages, llama's (grouped-query) whole model and last stage, several micro-batches
// in flight, no recomputation and full, with packed documents that cross the chunks' boundaries, in double
// and float. Each rank holds its two chunks of every sequence (ContextChunks) and attends around the ring
// (model/impl/context_ring.hpp), so its stage outputs and input gradients must be the whole run's rows at its
// positions, its losses (means over its rows) sum over the group to cp times the whole run's, and its
// parameter gradients sum over the group to the whole run's, all to rounding. Its activations: what the
// stage carved equals the planner's count for the same configuration, and its blocks keep fewer elements.
// Mixtures of experts (dropless, with shared experts, every block or every other): the routers' load-balancing
// and z losses and their routed and kept counts, summed over the group, are the whole run's — each rank
// routes its own rows and the losses take the micro-batch's counts, summed over the group.
#include "recompute_harness.hpp"

#include "parallel/comm.hpp"

#include <gtest/gtest.h>
#include <mpi.h>

#include <cmath>
#include <iterator>
#include <memory>
#include <string>

namespace meshtrain {
namespace test_context_parallel {

using Case = test::StageCase;

// m with 5 routed experts of width 12 of which each token takes 2, in every `every`-th block, with `shared`
// shared experts; load-balancing and z-loss weights large enough to move the gradients.
ModelConfig moe_of(ModelConfig m, int every, int shared) {
  m.experts = 5;
  m.experts_per_token = 2;
  m.expert_hidden = 12;
  m.moe_every = every;
  m.shared_experts = shared;
  m.aux_loss_coef = 0.5;
  m.z_loss_coef = 0.1;
  return m;
}

// L H C V T: T = 16 splits into 2·cp chunks for cp 2 and 4.
const Case cases[] = {
    {{2, 4, 16, 13, 16}, 2, {0, 1}, 2},  // the whole model
    {{4, 4, 16, 13, 16}, 2, {0, 3}, 2},  // first stage
    {{4, 4, 16, 13, 16}, 1, {1, 3}, 3},  // middle stage
    {{4, 4, 16, 13, 16}, 2, {2, 3}, 2},  // last stage
    // llama: 8 query heads over 4 kv heads (C 32, head size 4), SwiGLU width 24
    {test::llama_of({2, 8, 32, 13, 16}, 4, 24), 2, {0, 1}, 2},
    {test::llama_of({4, 8, 32, 13, 16}, 2, 24), 2, {2, 3}, 2},
    {moe_of(test::llama_of({2, 8, 32, 13, 16}, 4, 24), 1, 0), 2, {0, 1}, 2},
    {moe_of(test::llama_of({3, 8, 32, 13, 16}, 8, 20), 2, 1), 2, {0, 1}, 1},
};

// Sequence b holds documents [0, 5 + 2b) and [5 + 2b, T): each crosses a chunk boundary at cp 2 and 4.
test::ContextSplit documents_of(int batch, int T) {
  test::ContextSplit split;
  split.docs = 2;
  for (int b = 0; b < batch; ++b) split.offsets.insert(split.offsets.end(), {0, 5 + 2 * b, T});
  return split;
}

// The sum over the group of each rank's values.
template <class Real>
std::vector<Real> summed(const std::vector<Real>& mine) {
  std::vector<double> sum(mine.begin(), mine.end());
  MPI_Allreduce(MPI_IN_PLACE, sum.data(), int(sum.size()), MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
  return std::vector<Real>(sum.begin(), sum.end());
}

template <class Real>
void expect_same_training(const Case& c, Recompute recompute, Comm& cp, bool with_documents, double tolerance) {
  SCOPED_TRACE("stage " + std::to_string(c.place.stage) + "/" + std::to_string(c.place.stages) + " cp " +
               std::to_string(cp.size()) + (recompute == Recompute::full ? " full" : "") +
               (with_documents ? " documents" : ""));
  test::ContextSplit split = with_documents ? documents_of(c.batch, c.model.seq_len) : test::ContextSplit{};
  const auto whole = test::run_pipeline_like<Real>(c.model, c.batch, c.place, c.slots, recompute, nullptr, split);
  ModelConfig context = c.model;
  context.context_parallel = cp.size();
  split.cp = &cp;
  const auto local = test::run_pipeline_like<Real>(context, c.batch, c.place, c.slots, recompute, nullptr, split);
  const ContextChunks chunks = split.chunks(c.model);
  const auto rows_of = [&](const std::vector<Real>& v) {
    return test::chunk_rows(v, c.batch, c.model.seq_len, std::size_t(c.model.d_model), chunks);
  };
  if (c.place.last()) {
    std::vector<Real> losses = summed(local.losses);
    for (Real& loss : losses) loss = Real(double(loss) / cp.size());
    test::expect_close_rows(whole.losses, losses, tolerance, "losses (the ranks' means, summed over the group, ÷ cp)");
  }
  for (std::size_t k = 0; k < whole.outputs.size(); ++k) {
    test::expect_close_rows(rows_of(whole.outputs[k]), local.outputs[k], tolerance,
                            "stage output " + std::to_string(k));
  }
  for (std::size_t k = 0; k < whole.input_grads.size(); ++k) {
    test::expect_close_rows(rows_of(whole.input_grads[k]), local.input_grads[k], tolerance,
                            "input gradient " + std::to_string(k));
  }
  test::expect_close_rows(whole.grads, summed(local.grads), tolerance, "gradients summed over the group");
  const ActivationSizes planned = activation_elements<Real>(context, c.batch, 1, c.place, c.slots, recompute);
  EXPECT_EQ(local.sizes.kept, planned.kept) << "the planner counts what the stage carves";
  EXPECT_EQ(local.sizes.scratch, planned.scratch);
  EXPECT_LT(local.sizes.kept, whole.sizes.kept) << "a rank keeps its positions' activations";
  const RouterStatistics& want = whole.router;
  if (want.empty()) return;
  ASSERT_EQ(local.router.blocks, want.blocks);
  for (const auto& [name, mine, theirs] : {std::tuple{"aux losses", &local.router.aux_loss, &want.aux_loss},
                                           std::tuple{"z losses", &local.router.z_loss, &want.z_loss},
                                           std::tuple{"routed counts", &local.router.routed, &want.routed},
                                           std::tuple{"kept counts", &local.router.kept, &want.kept}}) {
    test::expect_close_rows(*theirs, summed(*mine), tolerance, std::string(name) + ", summed over the group");
  }
}

TEST(ContextParallel, TrainsAsTheWholeSequence) {
  const std::unique_ptr<Comm> cp = make_mpi_comm(MPI_COMM_WORLD);
  ASSERT_GT(cp->size(), 1) << "run under mpiexec with 2 or 4 ranks";
  for (const Case& c : cases) {
    for (const Recompute recompute : {Recompute::none, Recompute::full}) {
      for (const bool with_documents : {false, true}) {
        expect_same_training<double>(c, recompute, *cp, with_documents, 1e-12);
        expect_same_training<float>(c, recompute, *cp, with_documents, 2e-5);
      }
    }
  }
}

TEST(ContextParallel, RefusesAGroupOtherThanTheModelSays) {
  const std::unique_ptr<Comm> cp = make_mpi_comm(MPI_COMM_WORLD);
  ModelConfig m = cases[0].model;
  m.context_parallel = cp->size() * 2;
  m.seq_len = 4 * m.context_parallel;
  EXPECT_THROW(
      make_language_model<float>(ExecSpace(), m, 1, nullptr, {}, 1, Recompute::none, nullptr, nullptr, cp.get()),
      std::logic_error);
}

}  // namespace test_context_parallel
}  // namespace meshtrain
