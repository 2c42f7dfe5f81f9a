// LoRA's adapter gradients under lora.dropout against central finite differences of the loss, in double, on
// a llama whose every linear layer and output head are adapted: the mask is fixed by the micro-batch's draw
// (LanguageModel::set_micro_batch_draw), so the loss is a smooth function of the adapters. The first block's
// gradients reach it through the second block's adapters, so dx through the mask is checked too. Beside it:
// the mask acts (the loss moves), evaluation (no draw) is the model without dropout, and full recomputation
// draws backward's mask as forward drew it (the same gradients, bitwise). The same on a mixture of experts,
// whose routed experts' rows draw their mask by their assignment (token, expert).
#include "model/language_model.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <random>

namespace meshtrain {
namespace test_lora_gradients {

constexpr int kBatch = 2;

ModelConfig lora_llama(double dropout) {
  ModelConfig m;
  m.layers = 2;
  m.heads = 4;
  m.d_model = 16;
  m.vocab = 29;
  m.seq_len = 6;
  m.arch = Arch::llama;
  m.kv_heads = 2;
  m.ffn_hidden = 20;
  m.lora.rank = 2;
  m.lora.alpha = 4;
  m.lora.dropout = dropout;
  m.lora.targets = "q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj,lm_head";
  return m;
}

// A mixture of experts of three blocks: blocks 0 and 2 route 4 experts (top 2) beside a shared expert, block 1
// is dense; every linear layer of each is adapted, the routers (`gate`) and the output head too.
ModelConfig lora_moe(double dropout = 0.0) {
  ModelConfig m = lora_llama(dropout);
  m.layers = 3;
  m.experts = 4;
  m.experts_per_token = 2;
  m.moe_every = 2;
  m.shared_experts = 1;
  m.expert_hidden = 8;
  m.aux_loss_coef = 0;  // forward returns the cross-entropy: the auxiliary losses' gradients would be beside it
  m.z_loss_coef = 0;
  m.lora.targets = "q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj,gate,lm_head";
  return m;
}

const MicroBatchDraw kDraw{1337, 4, 6};

// A model with random base weights (norm weights near one) and random adapters (B nonzero, so that every
// adapter has a gradient), the same for every model of the same shape.
std::unique_ptr<LanguageModel<double>> build(const ModelConfig& m, Recompute recompute = Recompute::none) {
  ExecSpace space;
  auto model = make_language_model<double>(space, m, kBatch, nullptr, {}, 1, recompute);
  std::mt19937_64 rng(11);
  std::normal_distribution<double> normal(0.0, 1.0);
  auto w = Kokkos::create_mirror_view(model->weights());
  for (const TensorInfo& t : model->layout().tensors()) {
    const double base = t.init == InitKind::ones ? 1.0 : 0.0;
    for (std::size_t i = 0; i < t.numel; ++i) w(t.offset + i) = base + (t.shape.size() >= 2 ? 0.3 : 0.1) * normal(rng);
  }
  Kokkos::deep_copy(model->weights(), w);
  auto a = Kokkos::create_mirror_view(model->adapter_weights());
  for (std::size_t i = 0; i < a.extent(0); ++i) a(i) = 0.3 * normal(rng);
  Kokkos::deep_copy(model->adapter_weights(), a);
  return model;
}

struct Tokens {
  Buffer<int> inputs{"inputs", kBatch * 6}, targets{"targets", kBatch * 6};
  Tokens() {
    std::mt19937_64 rng(5);
    std::uniform_int_distribution<int> token(0, 28);
    auto hi = Kokkos::create_mirror_view(inputs), ht = Kokkos::create_mirror_view(targets);
    for (std::size_t i = 0; i < hi.extent(0); ++i) {
      hi(i) = token(rng);
      ht(i) = token(rng);
    }
    Kokkos::deep_copy(inputs, hi);
    Kokkos::deep_copy(targets, ht);
  }
  CVec<int> in() const { return CVec<int>(inputs.data(), inputs.extent(0)); }
  CVec<int> tg() const { return CVec<int>(targets.data(), targets.extent(0)); }
};

std::vector<double> adapter_grads(LanguageModel<double>& model, const Tokens& tokens) {
  const int N = kBatch * 6;
  model.zero_grads();
  model.forward(tokens.in(), tokens.tg(), 1.0 / N);
  model.backward(tokens.in());
  auto g = Kokkos::create_mirror_view(model.adapter_grads());
  Kokkos::deep_copy(g, model.adapter_grads());
  return std::vector<double>(g.data(), g.data() + g.extent(0));
}

// Central differences of the loss at 4 random elements of every adapter tensor; returns how many were checked.
int check_finite_differences(LanguageModel<double>* model, const Tokens& tokens) {
  const std::vector<double> grads = adapter_grads(*model, tokens);

  auto w = Kokkos::create_mirror_view(model->adapter_weights());
  Kokkos::deep_copy(w, model->adapter_weights());
  auto loss_at = [&](std::size_t index, double value) {
    w(index) = value;
    Kokkos::deep_copy(model->adapter_weights(), w);
    return model->forward(tokens.in(), tokens.tg(), 0.0);
  };
  const double h = 1e-5;
  std::mt19937_64 rng(3);
  std::uniform_int_distribution<std::size_t> pick;
  int checked = 0;
  for (const TensorInfo& t : model->adapter_layout()->tensors()) {
    for (int s = 0; s < 4; ++s) {
      const std::size_t i = t.offset + pick(rng) % t.numel;
      const double original = w(i);
      const double numeric = (loss_at(i, original + h) - loss_at(i, original - h)) / (2 * h);
      w(i) = original;
      EXPECT_NEAR(grads[i], numeric, 1e-7 + 1e-5 * std::fabs(numeric)) << t.name << "[" << i - t.offset << "]";
      ++checked;
    }
  }
  return checked;
}

// Full recomputation draws backward's mask as forward drew it: the gradients of the kept activations, bitwise.
void expect_recomputation_draws_forwards_mask(const ModelConfig& m) {
  const Tokens tokens;
  auto kept = build(m);
  auto recomputed = build(m, Recompute::full);
  kept->set_micro_batch_draw(0, kDraw);
  recomputed->set_micro_batch_draw(0, kDraw);
  EXPECT_EQ(adapter_grads(*kept, tokens), adapter_grads(*recomputed, tokens));
}

TEST(LoraDropoutGradients, MatchFiniteDifferences) {
  auto model = build(lora_llama(0.3));
  model->set_micro_batch_draw(0, kDraw);
  // (blocks × modules + the head) × (A, B) × samples
  EXPECT_EQ(check_finite_differences(model.get(), Tokens()), (2 * 7 + 1) * 2 * 4);
}

// The MoE blocks' adapters: the router's (its logits in fp32 beside the frozen router's), the shared expert's,
// and each routed expert's over the rows it was sent (grouped products); the dense block's between them.
TEST(LoraMoeGradients, MatchFiniteDifferences) {
  auto model = build(lora_moe());
  // (2 MoE blocks × (4 attention + 3 shared + router + 4 experts × 3) + the dense block's 7 + the head) × 2 × 4
  EXPECT_EQ(check_finite_differences(model.get(), Tokens()), (2 * (4 + 3 + 1 + 4 * 3) + 7 + 1) * 2 * 4);
}

TEST(LoraMoeGradients, RecomputationIsBitwise) {
  const Tokens tokens;
  auto kept = build(lora_moe());
  auto recomputed = build(lora_moe(), Recompute::full);
  EXPECT_EQ(adapter_grads(*kept, tokens), adapter_grads(*recomputed, tokens));
}

TEST(LoraMoeDropoutGradients, MatchFiniteDifferences) {
  auto model = build(lora_moe(0.3));
  model->set_micro_batch_draw(0, kDraw);
  EXPECT_EQ(check_finite_differences(model.get(), Tokens()), (2 * (4 + 3 + 1 + 4 * 3) + 7 + 1) * 2 * 4);
}

TEST(LoraMoeDropoutGradients, RecomputationDrawsForwardsMask) {
  expect_recomputation_draws_forwards_mask(lora_moe(0.3));
}

// Only the routed experts adapted (every block routes, no shared expert): their inputs' mask alone moves the
// loss, keyed by the draw.
TEST(LoraMoeDropoutGradients, ExpertsMaskActsInTrainingOnly) {
  const Tokens tokens;
  ModelConfig m = lora_moe(0.3);
  m.moe_every = 1;
  m.shared_experts = 0;
  m.lora.targets = "up_proj";
  auto model = build(m);
  const double eval = model->forward(tokens.in(), tokens.tg(), 0.0);
  model->set_micro_batch_draw(0, kDraw);
  const double trained = model->forward(tokens.in(), tokens.tg(), 0.0);
  EXPECT_GT(std::fabs(trained - eval), 1e-6);
  EXPECT_EQ(trained, model->forward(tokens.in(), tokens.tg(), 0.0));
  MicroBatchDraw next = kDraw;
  next.first_sample += 1;  // the same rows as other tokens of the step: another mask
  model->set_micro_batch_draw(0, next);
  EXPECT_GT(std::fabs(model->forward(tokens.in(), tokens.tg(), 0.0) - trained), 1e-6);
  model->set_micro_batch_draw(0, std::nullopt);
  EXPECT_EQ(model->forward(tokens.in(), tokens.tg(), 0.0), eval);
}

TEST(LoraDropoutGradients, MaskActsInTrainingOnly) {
  const Tokens tokens;
  auto model = build(lora_llama(0.3));
  auto plain = build(lora_llama(0.0));
  const double eval = model->forward(tokens.in(), tokens.tg(), 0.0);  // no draw set: evaluation
  EXPECT_EQ(eval, plain->forward(tokens.in(), tokens.tg(), 0.0));
  plain->set_micro_batch_draw(0, kDraw);  // a draw without dropout changes nothing
  EXPECT_EQ(eval, plain->forward(tokens.in(), tokens.tg(), 0.0));
  model->set_micro_batch_draw(0, kDraw);
  const double trained = model->forward(tokens.in(), tokens.tg(), 0.0);
  EXPECT_GT(std::fabs(trained - eval), 1e-6);
  EXPECT_EQ(trained, model->forward(tokens.in(), tokens.tg(), 0.0));  // the same draw, the same mask
  MicroBatchDraw next = kDraw;
  next.step += 1;
  model->set_micro_batch_draw(0, next);
  EXPECT_GT(std::fabs(model->forward(tokens.in(), tokens.tg(), 0.0) - trained), 1e-6);
  model->set_micro_batch_draw(0, std::nullopt);
  EXPECT_EQ(model->forward(tokens.in(), tokens.tg(), 0.0), eval);
}

TEST(LoraDropoutGradients, RecomputationDrawsForwardsMask) {
  expect_recomputation_draws_forwards_mask(lora_llama(0.3));
}

}  // namespace test_lora_gradients
}  // namespace meshtrain
