// The float workspace a 16-bit llama really grows on the host against what model/gemm_workspace.hpp
// reserves for it (the trainer reserves that figure before the first step and reports it as the
// memory category `workspace`, so a product that needs more would grow it unreported): one forward
// and backward of a dense llama and of MoE llamas whose largest product is a routed expert's or a
// shared expert's. The workspace is grow-only, so after the pass it holds exactly what the largest
// product needed. A model whose products all go by the GPU (CUDA builds) needs none.
#include "model/families/llama.hpp"
#include "model/gemm_workspace.hpp"
#include "model/init.hpp"
#include "model/language_model.hpp"

#include <gtest/gtest.h>

#include <random>

namespace meshtrain {
namespace test_llama_gemm_workspace {

// One forward and backward of `m` in bf16 from its initial weights on B = 2 sequences of random tokens.
void train_pass(const ModelConfig& m) {
  constexpr int B = 2;
  ExecSpace space;
  const auto model = make_language_model<bf16>(space, m, B);
  const ParameterLayout& layout = model->layout();
  auto w = Kokkos::create_mirror_view(model->weights());
  for (const TensorInfo& t : layout.tensors()) {
    for (std::size_t i = 0; i < t.numel; ++i) w(t.offset + i) = bf16(initial_value(7, t, i, m.layers));
  }
  Kokkos::deep_copy(model->weights(), w);
  const int N = B * m.seq_len;
  Buffer<int> tokens("tokens", N);
  auto host = Kokkos::create_mirror_view(tokens);
  std::mt19937 rng(3);
  for (int i = 0; i < N; ++i) host(i) = int(rng() % std::uint32_t(m.vocab));
  Kokkos::deep_copy(tokens, host);
  const CVec<int> in(tokens.data(), N);
  model->zero_grads();
  model->forward(in, in, 1.0f / float(N));
  model->backward(in);
  space.fence();
}

// C 32, 4 heads (2 kv), SwiGLU 24, L 2, V 61, T 16 (N = 32 tokens a pass); `experts` routed
// experts (top-2) of width `expert_hidden` in the blocks l with l mod `moe_every` = 0.
struct Shape {
  int experts = 0, expert_hidden = 0, shared_experts = 0, moe_every = 1;
  double capacity_factor = 0;
};

ModelConfig llama(const Shape& s) {
  ModelConfig m{2, 4, 32, 61, 16};
  m.arch = Arch::llama;
  m.kv_heads = 2;
  m.ffn_hidden = 24;
  m.experts = s.experts;
  m.expert_hidden = s.expert_hidden;
  m.shared_experts = s.shared_experts;
  m.moe_every = s.moe_every;
  m.capacity_factor = s.capacity_factor;
  return m;
}

void expect_reserved_is_used(const Shape& shape) {
  const ModelConfig m = llama(shape);
  release_gemm_workspace();
  train_pass(m);
  EXPECT_EQ(gemm_workspace_bytes(), (family_gemm_workspace_bytes<bf16, LlamaFamily>(m, 2)));
  release_gemm_workspace();
}

TEST(LlamaGemmWorkspace, DenseIsWhatItsProductsGrow) { expect_reserved_is_used({}); }

// Routed experts wider than the SwiGLU's 24, in every block (no dense product runs). Under a
// capacity, ⌈0.25 · 32 · 2 / 4⌉ = 4 of the 64 assignments an expert: every expert is full, its
// products 4 rows tall, and at width 400 the largest of the model (the bound of N rows would be
// twice the bytes). Dropless with k = E = 2, each expert takes every one of the N tokens.
TEST(LlamaGemmWorkspace, RoutedExpertsWiderThanTheDenseSwiGLU) {
  expect_reserved_is_used({.experts = 4, .expert_hidden = 400, .capacity_factor = 0.25});
  expect_reserved_is_used({.experts = 2, .expert_hidden = 56});
}

// Three shared experts of width 16: a dense SwiGLU of 48 over every token, in the MoE block 0 only.
TEST(LlamaGemmWorkspace, SharedExpertsWiderThanTheDenseSwiGLU) {
  expect_reserved_is_used({.experts = 4, .expert_hidden = 16, .shared_experts = 3, .moe_every = 2});
}

}  // namespace test_llama_gemm_workspace
}  // namespace meshtrain
