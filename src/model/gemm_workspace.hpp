// The float workspace that the host's 16-bit GEMMs (kernels/gemm.hpp) need for one model rank, so
// that the trainer can reserve it before the first step and count it as memory category `workspace`:
//   reserve_gemm_workspace(model_gemm_workspace_bytes<bf16>(model, micro_batch, tp));
// 0 for float and double, and on CUDA builds.
#pragma once

#include "core/model_sizes.hpp"
#include "kernels/gemm.hpp"
#include "model/parameters.hpp"

#include <algorithm>
#include <cstddef>
#include <iterator>
#include <vector>

namespace meshtrain {

// The largest workspace over every product Gpt2<Real>(model, batch, tp) runs: exact for a model on
// one stage, an upper bound for a pipeline stage (the output head's products are counted whether
// or not the stage holds the head). tests/model/test_gpt2_low_precision.cpp holds it to what a
// forward and backward really allocate.
template <class Real>
std::size_t gpt2_gemm_workspace_bytes(const ModelConfig& m, int batch, int tp = 1) {
  const int N = batch * m.seq_len, T = m.seq_len, C = m.d_model, Cl = C / tp, hs = C / m.heads;
  const int Vl = int(padded_vocab(m, tp).value() / tp);  // this rank's (padded) vocabulary rows
  const GemmShape products[] = {
      {N, Vl, C},     {N, C, Vl},     {Vl, C, N},      // tied output head: logits, dlnf, dwte
      {N, 3 * Cl, C}, {N, C, 3 * Cl}, {C, 3 * Cl, N},  // c_attn: forward, input and weight gradients
      {N, C, Cl},     {N, Cl, C},     {Cl, C, N},      // attn c_proj
      {N, 4 * Cl, C}, {N, C, 4 * Cl}, {C, 4 * Cl, N},  // c_fc
      {N, C, 4 * Cl}, {N, 4 * Cl, C}, {4 * Cl, C, N},  // mlp c_proj
      {T, T, hs},     {T, hs, T},                      // attention, per sequence and head
  };
  std::size_t bytes = 0;
  for (const GemmShape& s : products) bytes = std::max(bytes, gemm_workspace_bytes_for<Real>(s));
  return bytes;
}

// The three products each of a SwiGLU of `hidden` columns over `rows` rows runs, forward and
// backward (gate|up, then down), in the order: forward, input gradient, weight gradient.
inline void add_swiglu_products(std::vector<GemmShape>& products, int rows, int C, int hidden) {
  const GemmShape swiglu[] = {
      {rows, 2 * hidden, C}, {rows, C, 2 * hidden}, {2 * hidden, C, rows},  // gate|up
      {rows, C, hidden},     {rows, hidden, C},     {C, hidden, rows},      // down
  };
  products.insert(products.end(), std::begin(swiglu), std::end(swiglu));
}

// The same for a llama rank: every product of model/llama_forward.cpp, llama_backward.cpp and
// llama_moe.cpp. The dense SwiGLU's only when some block is dense; an MoE block's shared experts
// over every row, and its routed experts' grouped products (each group's own shape,
// kernels/gemm.hpp) over at most min(N, capacity) rows: a group is one expert's rows from one
// sender, and a token goes to an expert at most once. The router's product runs in fp32 without
// the workspace (kernels/router_linear.hpp). Dropless, the experts' rows are an upper bound.
template <class Real>
std::size_t llama_gemm_workspace_bytes(const ModelConfig& m, int batch, int tp = 1) {
  const int N = batch * m.seq_len, T = m.seq_len, C = m.d_model, hs = m.head_size();
  const int Vl = int(padded_vocab(m, tp).value() / tp);
  const int Q = m.heads / tp * hs, QKV = (m.heads + 2 * m.kv_head_count()) / tp * hs;
  std::vector<GemmShape> products = {
      {N, Vl, C},  {N, C, Vl},  {Vl, C, N},   // lm_head: logits, dnorm, dlm_head
      {N, QKV, C}, {N, C, QKV}, {QKV, C, N},  // q|k|v: forward, input and weight gradients
      {N, C, Q},   {N, Q, C},   {C, Q, N},    // o_proj
      {T, T, hs},  {T, hs, T},                // attention, per sequence and head
  };
  if (m.moe_blocks() < m.layers) add_swiglu_products(products, N, C, m.mlp_hidden() / tp);
  if (m.experts > 0) {
    if (m.shared_experts > 0) add_swiglu_products(products, N, C, m.shared_hidden() / tp);
    const int capacity = m.expert_capacity(N);
    add_swiglu_products(products, capacity > 0 ? std::min(N, capacity) : N, C, m.expert_hidden_size() / tp);
  }
  std::size_t bytes = 0;
  for (const GemmShape& s : products) bytes = std::max(bytes, gemm_workspace_bytes_for<Real>(s));
  return bytes;
}

// The workspace of the family model.arch names.
template <class Real>
std::size_t model_gemm_workspace_bytes(const ModelConfig& m, int batch, int tp = 1) {
  return m.arch == Arch::llama ? llama_gemm_workspace_bytes<Real>(m, batch, tp)
                               : gpt2_gemm_workspace_bytes<Real>(m, batch, tp);
}

}  // namespace meshtrain
