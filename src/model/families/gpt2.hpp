// The GPT-2 family (share/docs/usage.md, Model families) for model/decoder_stage.hpp: token and
// learned position embedding (wte, wpe), L blocks of
//     x += c_proj(attention(q, k, v)),  q|k|v = c_attn(ln_1(x))
//     x += c_proj(gelu(c_fc(ln_2(x))))
// then ln_f and the output head tied to wte. Hugging Face's names and Conv1D shapes [in, out].
// Tensor parallelism (Megatron): c_attn and c_fc column-parallel (c_attn by heads), both c_proj
// row-parallel, wte vocabulary-parallel. LoRA (model/lora_adapters.hpp) adapts c_attn, both c_proj and
// c_fc. Its listings: gpt2_forward.cpp, gpt2_backward.cpp.
//
// Size letters: B micro-batch, T context, C channels, NH heads, V vocab, N = B·T; Cl = C/tp.
#pragma once

#include "model/decoder_stage.hpp"

#include <vector>

namespace meshtrain {

struct Gpt2Family {
  static constexpr Arch arch = Arch::gpt2;
  // Its LoRA modules' places in lora_modules (model/lora_adapters.hpp).
  enum LoraModuleIndex { lora_c_attn, lora_attn_proj, lora_c_fc, lora_mlp_proj };
  static constexpr const char* name = "gpt2";
  static constexpr bool norm_keeps_mean = true;  // LayerNorm

  // Sizes of this rank's activations: B, T, C whole; heads, MLP columns and vocabulary rows its share.
  struct Dims {
    std::size_t B, T, C, NH, N, Vl;  // NH: local heads; Vl: local (padded) vocabulary rows
    std::size_t tp;
    // Rows of the residual stream and the norms on this rank: N, or N / tp under sequence parallelism
    // (ModelConfig::sequence_parallel: this rank's block of them, between the tensor-parallel regions).
    std::size_t Nl;
    bool fused_attention;  // model.attention = fused: blocks keep lse, not att
    bool ring_attention;   // context parallelism: attention runs around the ring, not the fused kernel's workspace
    bool sequence_parallel() const { return Nl != N; }
    std::size_t Cl() const { return C / tp; }  // channels of the local heads
    std::size_t hs() const { return C / tp / NH; }
  };

  // One block's weights (or gradients).
  template <class Real>
  struct BlockWeights {
    Vec<Real> ln1_w;      // (C)
    Vec<Real> ln1_b;      // (C)
    Vec<Real> qkv_w;      // (C, 3Cl)  columns q|k|v, heads contiguous inside each
    Vec<Real> qkv_b;      // (3Cl)
    Vec<Real> attproj_w;  // (Cl, C)
    Vec<Real> attproj_b;  // (C)
    Vec<Real> ln2_w;      // (C)
    Vec<Real> ln2_b;      // (C)
    Vec<Real> fc_w;       // (C, 4Cl)
    Vec<Real> fc_b;       // (4Cl)
    Vec<Real> fcproj_w;   // (4Cl, C)
    Vec<Real> fcproj_b;   // (C)
  };
  template <class Real>
  struct Weights {
    Vec<Real> embed;      // wte (Vl, C)
    Vec<Real> positions;  // wpe (T, C)
    std::vector<BlockWeights<Real>> blocks;
    Vec<Real> lnf_w;   // (C)
    Vec<Real> lnf_b;   // (C)
    Vec<Real> output;  // wte again: the tied head
  };

  // Activations one block keeps for its backward pass. Under recomputation the fields a block does
  // not keep are views of the shared set (see Recompute).
  template <class Real>
  struct Block {
    Vec<Real> ln1;                // (N, C)   gathered under sequence parallelism
    Vec<accum_t<Real>> ln1_mean;  // (Nl)
    Vec<accum_t<Real>> ln1_rstd;  // (Nl)
    Vec<Real> qkv;                // (N, 3Cl)
    Vec<Real> atty;               // (N, Cl)  attention output before c_proj
    Vec<Real> att;                // (B, NH, T, T) softmax probabilities (materialized attention)
    Vec<accum_t<Real>> lse;       // (B, NH, T)    log-sum-exp of each score row (fused attention)
    Vec<Real> residual2;          // (Nl, C)  x + attn(ln_1(x))
    Vec<Real> ln2;                // (N, C)   gathered under sequence parallelism
    Vec<accum_t<Real>> ln2_mean;  // (Nl)
    Vec<accum_t<Real>> ln2_rstd;  // (Nl)
    Vec<Real> fch;                // (N, 4Cl) c_fc output
    Vec<Real> fch_gelu;           // (N, 4Cl)
    Vec<Real> residual3;          // (Nl, C)  block output
  };
  // Gradients of activations, reused by every block on the way back.
  template <class Real>
  struct Scratch {
    Vec<Real> dresidual;                     // (Nl, C) gradient flowing down the residual stream
    Vec<Real> dln;                           // (N, C)  also the gathered dresidual (sequence parallel)
    Vec<Real> datty;                         // (N, Cl)
    Vec<Real> dqkv;                          // (N, 3Cl)
    Vec<Real> datt;                          // (B, NH, T, T) materialized attention
    Vec<accum_t<Real>> attention_workspace;  // fused attention (kernels/fused_attention.hpp)
    Vec<Real> dfch;                          // (N, 4Cl)
    // The column sums' partials (bias, LayerNorm and position-embedding gradients;
    // kernels/column_sum.hpp) and the embedding gradient's token order (kernels/encoder.hpp).
    Vec<accum_t<Real>> column_partials;
    Vec<int> token_order;
  };
  template <class Real>
  using State = NoState;

  MESHTRAIN_DECODER_FAMILY(Gpt2Family);

  // Whether block l's module k carries an adapter: c_fc's and the MLP's c_proj's then run unfused from GELU,
  // LoRA's term joining GELU's input (forward) or its output's gradient (backward).
  template <class Real>
  static bool lora_adapts(const LoraParts<Real>& lora, int l, LoraModuleIndex k) {
    return lora.adapts(l, int(k));
  }
};

template <class Real>
using Gpt2 = DecoderStage<Real, Gpt2Family>;

MESHTRAIN_EXTERN_DECODER_STAGE(Gpt2Family);

}  // namespace meshtrain
