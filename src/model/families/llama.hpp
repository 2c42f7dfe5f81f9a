// The LLaMA family (share/docs/usage.md, Model families) for model/decoder_stage.hpp:
//   token embedding (no position table), L blocks of
//     x += o_proj(attention(rope(q), rope(k), v)),  q|k|v = qkv_proj(rmsnorm(x))
//     x += down_proj(silu(gate) · up),              gate|up = gate_up_proj(rmsnorm(x))
//   a final RMSNorm and the output head lm_head, a matrix of its own or (model.tie_embeddings) the token
//   embedding; no biases but q's, k's and v's under model.qkv_bias (Qwen2).
// Attention is grouped-query: KV key/value heads, each shared by NH/KV query heads. Tensor
// parallelism as Megatron's: q, k, v, gate and up column-parallel (q, k, v by heads), o and down
// row-parallel, embed_tokens and lm_head vocabulary-parallel. A block may route experts instead of
// its dense MLP (MoE, llama_moe.cpp). Weights are in torch Linear layout [out, in]; q, k, v (and
// gate, up) of a block are consecutive in the flat buffer, so each trio (pair) is one GEMM. Its
// listings: llama_forward.cpp, llama_backward.cpp, llama_moe.cpp.
//
// Size letters: B micro-batch, T context, C channels, NH query heads, KV kv heads, hs head size,
// H SwiGLU hidden size, V vocab, N = B·T; a trailing l is this rank's share (NHl = NH/tp, …).
#pragma once

#include "core/model_sizes.hpp"
#include "kernels/grouped_linear.hpp"
#include "kernels/moe_router.hpp"
#include "kernels/rotary.hpp"
#include "model/decoder_stage.hpp"
#include "model/impl/expert_exchange.hpp"

#include <algorithm>
#include <vector>

namespace meshtrain {

// An MoE block's routing on the host: counts as MoeActivations::counts holds them, and the row
// group of each expert (the grouped products' argument).
struct HostRouting {
  std::vector<int> counts;  // routed (E) | row offsets (E+1)
  ExchangePlan exchange;    // where the rows go and the received rows' groups
  int rows() const { return counts.back(); }
  const int* offsets() const { return counts.data() + (counts.size() - 1) / 2; }
};

// What an MoE block keeps of its routing and its experts' products for backward.
template <class Real>
struct MoeActivations {
  Vec<accum_t<Real>> probs;  // (N, E) router probabilities
  Vec<accum_t<Real>> lse;    // (N)    log Σ exp of the router logits
  Vec<accum_t<Real>> gate;   // (N, k) gate weights
  Vec<int> expert;           // (N, k) chosen experts
  Vec<int> slot;             // (N, k) row of each assignment in the expert-ordered buffers, −1 dropped
  Vec<int> row_token;        // (R)    token of each row
  Vec<int> counts;           // (2E+1) routed (E) | row offsets (E+1): one copy to the host
  Vec<int> batch_routed;     // (E)    context parallelism: the micro-batch's routed, summed over the cp group
  Vec<Real> xs;              // (R, C)      the normed tokens in expert order
  Vec<Real> received;        // (Rr, C)     the rows this rank's experts compute (xs itself at ep 1)
  Vec<Real> gate_up;         // (Rr, 2Hel)  each received row's expert gate | up
  Vec<Real> act;             // (Rr, Hel)   silu(gate) · up
  Vec<Real> ys;              // (R, C)      each row's expert output (this tp rank's partial sum)
  // lora.dropout on the routed experts only (kernels/lora_dropout.hpp): each row's (global token, expert),
  // and the received rows' (routed_ids itself at ep 1).
  Vec<std::int64_t> routed_ids;    // (R, 2)
  Vec<std::int64_t> received_ids;  // (Rr, 2)
};

struct LlamaFamily {
  static constexpr Arch arch = Arch::llama;
  // Its LoRA modules' places in lora_block_modules (model/lora_adapters.hpp): an MoE block's gate, up and down
  // are its shared experts', and its router follows.
  enum LoraModuleIndex { lora_q, lora_k, lora_v, lora_o, lora_gate, lora_up, lora_down, lora_router };
  static constexpr const char* name = "llama";
  static constexpr bool norm_keeps_mean = false;  // RMSNorm

  // This rank's sizes: B, T, C whole; heads, SwiGLU columns and vocabulary rows its share. The MoE
  // sizes (share/docs/usage.md, Mixture of experts) are 0 without experts.
  struct Dims {
    std::size_t B, T, C, N, NHl, KVl, hs, Hl, Vl;
    int layers;       // blocks of this pipeline stage
    int first_layer;  // global index of the stage's block 0
    int moe_every;
    std::size_t E, k;  // routed experts, experts per token
    std::size_t Hel;   // one expert's SwiGLU columns on this rank
    std::size_t Hsl;   // the shared experts' SwiGLU columns on this rank (0: none)
    std::size_t R;  // rows of the expert-ordered token buffers: N·k, or fewer under a capacity (E · capacity padded)
    int capacity;   // assignments an expert keeps of a micro-batch (0: all)
    // model.pad_to_capacity: expert e's rows are [e · capacity, (e+1) · capacity), its kept ones first, the
    // rest padding (row_token −1, zero rows): every size is known before the routing (static_routing()).
    bool padded;
    std::size_t ep;  // expert-parallel ranks the experts are spread over
    std::size_t El;  // experts this rank holds (E / ep)
    // Rows an ep rank's experts may receive: R without expert parallelism; else each of the ep
    // senders' rows for El experts at most (all N·k of them when nothing is dropped).
    std::size_t Rr;
    bool fused_attention;  // model.attention = fused: blocks keep lse, not att
    bool ring_attention;   // context parallelism: attention runs around the ring, not the fused kernel's workspace
    std::size_t cp;        // context-parallel ranks: a micro-batch's N · cp tokens, which the router losses average
    bool qkv_bias;         // model.qkv_bias: q|k|v's product adds a bias
    bool expert_dropout;   // lora.dropout on the routed experts' adapters (core/lora_targets.hpp)
    // Rows of the residual stream and the norms on this rank: N, or N / tp under sequence parallelism
    // (ModelConfig::sequence_parallel: this rank's block of them, between the tensor-parallel regions).
    std::size_t Nl;
    std::size_t q_cols() const { return NHl * hs; }
    std::size_t qkv_cols() const { return (NHl + 2 * KVl) * hs; }
    bool sequence_parallel() const { return Nl != N; }
    bool moe(int l) const { return E > 0 && (first_layer + l) % moe_every == 0; }
    // The dense SwiGLU's columns of block l: its MLP's, or an MoE block's shared experts'.
    std::size_t dense_cols(int l) const { return moe(l) ? Hsl : Hl; }
    std::size_t widest_dense_cols() const {
      std::size_t widest = 0;
      for (int l = 0; l < layers; ++l) widest = std::max(widest, dense_cols(l));
      return widest;
    }
    bool any_moe() const {
      for (int l = 0; l < layers; ++l) {
        if (moe(l)) return true;
      }
      return false;
    }
  };

  // One block's weights (or gradients): qkv spans q_proj, k_proj and v_proj, gate_up gate_proj and
  // up_proj (an MoE block: its shared experts', empty without them).
  template <class Real>
  struct BlockWeights {
    Vec<Real> attn_norm;  // (C)
    Vec<Real> qkv;        // ((NHl+2KVl)·hs, C)
    Vec<Real> qkv_bias;   // ((NHl+2KVl)·hs)  model.qkv_bias only
    Vec<Real> o;          // (C, NHl·hs)
    Vec<Real> mlp_norm;   // (C)
    Vec<Real> gate_up;    // (2Hl, C)
    Vec<Real> down;       // (C, Hl)
    Vec<Real> router;     // (E, C)  MoE blocks only
    Vec<Real> experts;    // E × [gate (Hel, C) | up (Hel, C) | down (C, Hel)], expert after expert
  };
  template <class Real>
  struct Weights {
    Vec<Real> embed;      // embed_tokens (Vl, C)
    Vec<Real> positions;  // none (rotary positions)
    std::vector<BlockWeights<Real>> blocks;
    Vec<Real> norm;    // (C)
    Vec<Real> output;  // lm_head (Vl, C); embed itself under model.tie_embeddings
  };

  // Activations one block keeps for its backward pass (views of the shared set where
  // recomputation does not keep them).
  template <class Real>
  struct Block {
    Vec<Real> ln1;                // (N, C)       input_layernorm output (gathered under sequence parallelism)
    Vec<accum_t<Real>> ln1_rstd;  // (Nl)
    Vec<Real> qkv;                // (N, (NHl+2KVl)·hs)  q and k rotated
    Vec<Real> atty;               // (N, NHl·hs)  attention output before o_proj
    Vec<Real> att;                // (B, NHl, T, T) softmax probabilities (materialized attention)
    Vec<accum_t<Real>> lse;       // (B, NHl, T)    log-sum-exp of each score row (fused attention)
    Vec<Real> residual2;          // (Nl, C)      x + attn(...)
    Vec<Real> ln2;                // (N, C)       post_attention_layernorm output (gathered)
    Vec<accum_t<Real>> ln2_rstd;  // (Nl)
    Vec<Real> gate_up;            // (N, 2Hl)     gate | up (an MoE block: its shared experts')
    Vec<Real> swiglu;             // (N, Hl)      silu(gate) · up
    MoeActivations<Real> moe;     // an MoE block's routing and experts
    Vec<Real> residual3;          // (Nl, C)      block output
  };
  template <class Real>
  struct Scratch {
    Vec<Real> dresidual;                     // (Nl, C) gradient flowing down the residual stream
    Vec<Real> dln;                           // (N, C)  also a region's gathered output gradient
    Vec<Real> datty;                         // (N, NHl·hs)
    Vec<Real> dqkv;                          // (N, (NHl+2KVl)·hs)
    Vec<Real> datt;                          // (B, NHl, T, T) materialized attention
    Vec<accum_t<Real>> attention_workspace;  // fused attention (kernels/fused_attention.hpp)
    Vec<Real> dswiglu;                       // (N, Hl)
    Vec<Real> dgate_up;                      // (N, 2Hl)
    // The RMSNorm weight and qkv bias gradients' partial sums (kernels/column_sum.hpp) and the
    // embedding gradient's token order (kernels/encoder.hpp).
    Vec<accum_t<Real>> column_partials;
    Vec<int> token_order;
    // MoE blocks: router logits (forward) and their gradient (backward); the gate weights' gradient;
    // the experts' output rows' gradient, then their input rows'; the experts' hidden gradients.
    Vec<accum_t<Real>> router_logits;  // (N, E) in fp32 (kernels/router_linear.hpp)
    Vec<accum_t<Real>> dgate;          // (N, k)
    Vec<Real> drows;                   // (R, C)
    Vec<Real> dreceived;               // (Rr, C)  the experts' side of drows (drows itself at ep 1); forward's outputs
    Vec<Real> dexpert_act;             // (Rr, Hel)
    Vec<Real> dexpert_gate_up;         // (Rr, 2Hel)
    Vec<std::int64_t> expert_counts;   // (2E) ep > 1: the exchange's counts, kept | received (expert_exchange.hpp)
  };
  // The rotary table, and each slot's MoE blocks' routing as the host needs it ([slot][block],
  // read again by backward); it lists the MoE blocks in the router statistics.
  template <class Real>
  struct State {
    ExpertExchange exchange;
    RotaryTable<accum_t<Real>> rotary;
    std::vector<std::vector<HostRouting>> host_routing;
    State(const ParameterLayout& layout, const Dims& d, Comm* ep, int slots, RouterStatistics& statistics);
  };
  MESHTRAIN_DECODER_FAMILY(LlamaFamily);

  // The MLP of block l into proj (before the tensor-parallel reduction): dense, or routed experts
  // plus shared ones. An MoE block records its router's statistics only with `to_output`.
  template <class Real>
  static void mlp_forward(Parts<Real>& m, int slot, int l, const Block<Real>& s, Vec<Real> proj, bool to_output);
  template <class Real>
  static void moe_forward(Parts<Real>& m, int slot, int l, const Block<Real>& s, Vec<Real> proj, bool to_output);
  // dL/d(normed MLP input) into the scratch's dln from dL/d proj in `dproj` (every row; before the
  // tensor-parallel sum of the region's backward; the router's part, the same on every rank, after it,
  // into the sum `dln`: every row, or this rank's under sequence parallelism).
  template <class Real>
  static void mlp_backward(Parts<Real>& m, int slot, int l, CVec<Real> dproj);
  template <class Real>
  static void moe_backward(Parts<Real>& m, int slot, int l, CVec<Real> dproj);
  template <class Real>
  static void router_input_backward(Parts<Real>& m, int slot, int l, Vec<Real> dln);
  // Copies an MoE block's routed counts and row offsets (under ep, with the counts its experts receive,
  // exchanged on the device first) to the host, in one wait, and sets its experts' row groups.
  template <class Real>
  static void read_routing(Parts<Real>& m, int slot, int l);
  // Block l's index in the router statistics (its place in the router sums).
  template <class Real>
  static int router_block(const Parts<Real>& m, int l);
};

template <class Real>
using Llama = DecoderStage<Real, LlamaFamily>;

MESHTRAIN_EXTERN_DECODER_STAGE(LlamaFamily);

}  // namespace meshtrain
