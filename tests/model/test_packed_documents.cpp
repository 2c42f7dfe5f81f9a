// Packed sequences (LanguageModel::set_documents): a micro-batch whose sequences each hold several
// documents, with targets that carry no loss (kNoLossTarget), gives — in double — the loss sum and
// every parameter gradient that running each document alone from position 0 gives. The
// documents alone share nothing with the packed run but the weights: attention confined to each
// document and positions restarting (gpt2's table, llama's rotary) are what make them equal. Both
// families, grouped-query attention, full recomputation; without the documents the same check fails.
#include "recompute_harness.hpp"

#include "kernels/cross_entropy.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

namespace meshtrain::test {
namespace test_packed_documents {

constexpr int B = 2, T = 16;
// Sequence 0: documents [0, 5), [5, 11), [11, 16); sequence 1: [0, 7), [7, 16) and an empty third.
const std::vector<int> offsets = {0, 5, 11, 16, 0, 7, 16, 16};
constexpr int docs = 3;

struct Batch {
  std::vector<int> inputs, targets;
};

Batch packed_batch(int vocab) {
  std::mt19937_64 rng(27);
  std::uniform_int_distribution<int> token(0, vocab - 1);
  Batch b{std::vector<int>(B * T), std::vector<int>(B * T)};
  for (int n = 0; n < B * T; ++n) {
    b.inputs[n] = token(rng);
    // About a third of the targets carry no loss (prompts, padding).
    b.targets[n] = n % 3 == 1 ? kNoLossTarget : token(rng);
  }
  return b;
}

Buffer<int> upload(const std::vector<int>& v) {
  Buffer<int> d("values", v.size());
  Kokkos::deep_copy(d, Kokkos::View<const int*, Kokkos::HostSpace>(v.data(), v.size()));
  return d;
}

struct Result {
  double loss_sum = 0;
  std::vector<double> grads;
};

// The packed micro-batch through a model of batch B, with its documents or (with_documents false)
// without them.
Result run_packed(const ModelConfig& m, Recompute recompute, bool with_documents) {
  ExecSpace space;
  const auto model = make_language_model<double>(space, m, B, nullptr, {}, 1, recompute);
  fill_weights(*model);
  model->zero_grads();
  const Batch b = packed_batch(m.vocab);
  const Buffer<int> inputs = upload(b.inputs), targets = upload(b.targets), segments = upload(offsets);
  if (with_documents) model->set_documents(0, {CVec<int>(segments.data(), segments.extent(0)), docs});
  const LossSum sum(LossTerm::token_sum);
  sum.clear(space);
  model->stage_forward(0, CVec<int>(inputs.data(), B * T));
  model->stage_loss(0, CVec<int>(targets.data(), B * T), 1.0, sum);
  model->stage_backward(0, CVec<int>(inputs.data(), B * T));
  space.fence();
  Result r;
  r.loss_sum = sum.read(space);
  r.grads = to_host(CVec<double>(model->grads()));
  return r;
}

// Each document alone: its tokens at positions 0 … L − 1 of a sequence of batch 1, the rest of the
// sequence other tokens whose targets carry no loss (causal attention keeps them out of the
// document's rows); losses and gradients summed over the documents.
Result run_alone(const ModelConfig& m) {
  ExecSpace space;
  const auto model = make_language_model<double>(space, m, 1);
  fill_weights(*model);
  model->zero_grads();
  const Batch b = packed_batch(m.vocab);
  const LossSum sum(LossTerm::token_sum);
  sum.clear(space);
  for (int s = 0; s < B; ++s) {
    for (int d = 0; d < docs; ++d) {
      const int start = offsets[s * (docs + 1) + d], end = offsets[s * (docs + 1) + d + 1];
      if (end == start) continue;
      std::vector<int> in(T, 1), tg(T, kNoLossTarget);
      for (int t = start; t < end; ++t) {
        in[t - start] = b.inputs[s * T + t];
        tg[t - start] = b.targets[s * T + t];
      }
      const Buffer<int> inputs = upload(in), targets = upload(tg);
      model->stage_forward(0, CVec<int>(inputs.data(), T));
      model->stage_loss(0, CVec<int>(targets.data(), T), 1.0, sum);
      model->stage_backward(0, CVec<int>(inputs.data(), T));
      space.fence();
    }
  }
  Result r;
  r.loss_sum = sum.read(space);
  r.grads = to_host(CVec<double>(model->grads()));
  return r;
}

double normwise(const std::vector<double>& a, const std::vector<double>& b) {
  EXPECT_EQ(a.size(), b.size());
  double diff = 0, norm = 0;
  for (std::size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
    diff += (a[i] - b[i]) * (a[i] - b[i]);
    norm += b[i] * b[i];
  }
  return std::sqrt(diff) / std::max(std::sqrt(norm), 1e-300);
}

struct Case {
  std::string name;
  ModelConfig model;
  Recompute recompute;
};

// L H C V T: gpt2 (its position table), a GQA llama (rotary), and llama under full recomputation.
std::vector<Case> cases() {
  return {
      {"gpt2", ModelConfig{2, 2, 12, 23, T}, Recompute::none},
      {"llama GQA", llama_of(ModelConfig{2, 4, 16, 23, T}, 2, 20), Recompute::none},
      {"gpt2 full recomputation", ModelConfig{2, 2, 12, 23, T}, Recompute::full},
      {"llama full recomputation", llama_of(ModelConfig{2, 4, 16, 23, T}, 2, 20), Recompute::full},
  };
}

TEST(PackedDocuments, EqualEachDocumentRunAlone) {
  for (const Case& c : cases()) {
    SCOPED_TRACE(c.name);
    const Result want = run_alone(c.model);
    const Result got = run_packed(c.model, c.recompute, true);
    EXPECT_NEAR(got.loss_sum, want.loss_sum, 1e-12 * std::abs(want.loss_sum));
    EXPECT_LE(normwise(got.grads, want.grads), 1e-12);
  }
}

// The check above can fail: without its documents the packed micro-batch is one causal sequence, whose
// later documents see the earlier ones and (gpt2, llama) read positions past their own starts.
TEST(PackedDocuments, WithoutDocumentsTheyDiffer) {
  for (const Case& c : cases()) {
    SCOPED_TRACE(c.name);
    const Result want = run_alone(c.model);
    const Result got = run_packed(c.model, c.recompute, false);
    EXPECT_GT(std::abs(got.loss_sum - want.loss_sum), 1e-6 * std::abs(want.loss_sum));
    EXPECT_GT(normwise(got.grads, want.grads), 1e-6);
  }
}

TEST(PackedDocuments, MaterializedAttentionRefusesThem) {
  ModelConfig m{2, 2, 12, 23, T};
  m.attention = AttentionKernel::materialized;
  ExecSpace space;
  const auto model = make_language_model<double>(space, m, B);
  const Buffer<int> segments = upload(offsets);
  EXPECT_THROW(model->set_documents(0, {CVec<int>(segments.data(), segments.extent(0)), docs}), std::invalid_argument);
  EXPECT_NO_THROW(model->set_documents(0, {}));
}

}  // namespace test_packed_documents
}  // namespace meshtrain::test
