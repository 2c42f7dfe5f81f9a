// model.attention = fused against materialized on the same model, weights and batches: losses, stage
// outputs, input gradients and every parameter gradient agree to rounding (float: normwise 1e-6;
// double: 1e-12), for both families, grouped-query and multi-query, odd head sizes, T past one tile
// of query rows (the host kernel's 64) and not a multiple of it, and pipeline stages with several
// micro-batches in flight. The two paths share nothing but the projections around them: the
// materialized one multiplies out P = softmax(QKᵀ) as T×T GEMMs, the fused one works in tiles with
// an online softmax and recomputes P in backward from one log-sum-exp per row.
#include "recompute_harness.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

namespace meshtrain::test {
namespace test_attention_kinds {

// ||a − b|| / ||b||, with the sizes checked.
template <class Real>
double normwise_difference(const std::vector<Real>& a, const std::vector<Real>& b) {
  EXPECT_EQ(a.size(), b.size());
  double diff = 0, norm = 0;
  for (std::size_t i = 0; i < a.size() && i < b.size(); ++i) {
    diff += (double(a[i]) - double(b[i])) * (double(a[i]) - double(b[i]));
    norm += double(b[i]) * double(b[i]);
  }
  return std::sqrt(diff) / std::max(std::sqrt(norm), 1e-300);
}

template <class Real>
void expect_near_each(const std::vector<std::vector<Real>>& a, const std::vector<std::vector<Real>>& b, double tol,
                      const std::string& what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  for (std::size_t k = 0; k < a.size(); ++k) EXPECT_LE(normwise_difference(a[k], b[k]), tol) << what << " " << k;
}

struct Case {
  ModelConfig model;
  int batch;
  StagePlace place;
  int slots;
};

// L H C V T. gpt2: head sizes 9 and 5; llama: 4 query heads on 2 kv heads, and 1 (multi-query).
const Case cases[] = {
    {{2, 2, 18, 13, 67}, 2, {0, 1}, 2},                         // the whole model, T 67: two query blocks
    {{3, 3, 15, 11, 130}, 1, {1, 2}, 2},                        // last stage, T 130: three
    {test::llama_of({2, 4, 24, 11, 67}, 2, 20), 2, {0, 1}, 2},  // grouped-query
    {test::llama_of({3, 2, 12, 7, 70}, 1, 12), 1, {0, 2}, 3},   // multi-query, first stage
};

template <class Real>
void fused_matches_materialized(double tol) {
  for (const Case& c : cases) {
    ModelConfig m = c.model;
    SCOPED_TRACE(std::string(name_of(m.arch)) + " T " + std::to_string(m.seq_len) + " stage " +
                 std::to_string(c.place.stage));
    m.attention = AttentionKernel::materialized;
    const Observed<Real> want = run_pipeline_like<Real>(m, c.batch, c.place, c.slots, Recompute::none);
    m.attention = AttentionKernel::fused;
    const Observed<Real> got = run_pipeline_like<Real>(m, c.batch, c.place, c.slots, Recompute::none);
    EXPECT_LE(normwise_difference(got.losses, want.losses), tol) << "losses";
    expect_near_each(got.outputs, want.outputs, tol, "stage output");
    expect_near_each(got.input_grads, want.input_grads, tol, "input gradient");
    EXPECT_LE(normwise_difference(got.grads, want.grads), tol) << "parameter gradients";
    // The fused path keeps no T×T probabilities: less memory for these T, and not by chance.
    EXPECT_LT(got.sizes.total(), want.sizes.total());
  }
}

TEST(AttentionKinds, FusedMatchesMaterializedInFloat) { fused_matches_materialized<float>(1e-6); }
TEST(AttentionKinds, FusedMatchesMaterializedInDouble) { fused_matches_materialized<double>(1e-12); }

// Under fused attention selective recomputation has nothing to drop: the same memory and the same
// bits as none (the stage skips recompute_attention).
TEST(AttentionKinds, SelectiveIsNoneUnderFused) {
  ModelConfig m = test::llama_of({2, 4, 24, 11, 67}, 2, 20);
  m.attention = AttentionKernel::fused;
  const Observed<float> none = run_pipeline_like<float>(m, 2, {0, 1}, 2, Recompute::none);
  const Observed<float> selective = run_pipeline_like<float>(m, 2, {0, 1}, 2, Recompute::selective);
  EXPECT_EQ(selective.sizes.kept, none.sizes.kept);
  EXPECT_EQ(selective.sizes.scratch, none.sizes.scratch);
  expect_identical(none.losses, selective.losses, "losses");
  expect_identical(none.grads, selective.grads, "gradients");
}

}  // namespace test_attention_kinds
}  // namespace meshtrain::test
