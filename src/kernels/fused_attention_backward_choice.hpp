// Which kernel runs fused attention's backward where there is a choice (train.deterministic): a
// process-wide setting, like the fp32 GEMM mode (kernels/gemm.hpp), that the model state sets from its
// configuration before the first step and kernels/fused_attention.hpp reads on every call.
#pragma once

namespace meshtrain {

enum class FusedAttentionBackward {
  deterministic,  // the Kokkos or BLAS-tiled kernel: sums in a fixed order, bitwise from run to run
  fastest,        // CUDA builds with cuDNN: cuDNN's backward (dQ added with atomics) for the calls it takes
};

void set_fused_attention_backward(FusedAttentionBackward choice);
FusedAttentionBackward fused_attention_backward_choice();

}  // namespace meshtrain
