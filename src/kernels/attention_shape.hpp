// The sizes of one fused-attention call, as the kernels behind kernels/fused_attention.hpp take them
// (cuDNN's, kernels/cudnn_attention.hpp; the tensor-core backward, kernels/flash_attention_mma.hpp):
// B batch, T time, NH query heads, KVH kv heads, hs head size. Kokkos-free, like those two.
#pragma once

namespace meshtrain {

struct AttentionShape {
  int B = 0;
  int T = 0;
  int NH = 0;
  int KVH = 0;
  int hs = 0;
};

}  // namespace meshtrain
