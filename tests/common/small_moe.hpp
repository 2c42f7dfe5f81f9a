// The small mixture-of-experts llama the expert-parallel tests share (share/docs/usage.md, Mixture
// of experts): 3 blocks, C 24, 6 query heads over 2 kv heads (head size 4), SwiGLU width 36,
// vocabulary 37, context 9; blocks 0 and 2 (moe_every 2) route to `experts` experts of width
// `width` and pass one shared expert of that width, block 1 is dense.
#pragma once

#include "core/config.hpp"

namespace meshtrain {

inline ModelConfig small_moe(int experts, int width) {
  ModelConfig m{3, 6, 24, 37, 9};
  m.arch = Arch::llama;
  m.kv_heads = 2;
  m.ffn_hidden = 36;
  m.experts = experts;
  m.moe_every = 2;
  m.shared_experts = 1;
  m.expert_hidden = width;
  return m;
}

}  // namespace meshtrain
