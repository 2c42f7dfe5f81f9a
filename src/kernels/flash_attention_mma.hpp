// The deterministic attention backward on tensor cores, for CUDA builds (MESHTRAIN_ENABLE_CUDA): the
// default backward of 16-bit runs (train.deterministic = true), where the Kokkos kernel
// (kernels/flash_attention.hpp) is plain fp32 FMAs. The algorithm and its tile order:
// kernels/flash_attention_mma_plan.hpp; the host emulation the CPU tests check against the materialised
// path: tests/kernels/flash_attention_mma_emulation.hpp.
//
// A launch of three kernels (D, dK/dV, dQ) on `stream`, each a raw CUDA kernel with its block size (dQ 128
// threads, dK/dV 256) and shared memory (Q, K, V, dO tiles of 64 rows, padded so that the tensor cores'
// 16-byte row loads fall in distinct banks; the score tiles) fixed at compile time per head size. Sums in a
// fixed order, no atomics: bitwise the same from run to run.
//
// Kokkos-free, like kernels/cudnn_attention.hpp: the dispatch (kernels/fused_attention.hpp) hands it the
// space's stream and the Views' data pointers.
#pragma once

#include "core/half_types.hpp"
#include "kernels/attention_shape.hpp"

#include <cstdint>
#include <initializer_list>

namespace meshtrain::flash_mma {

// The head sizes the kernel is built for (a template argument, so that its accumulators are registers):
// those of GPT-2 (64), LLaMA (128) and the smaller models in between. Others run on the Kokkos kernel.
constexpr bool head_size_supported(int hs) { return hs == 32 || hs == 64 || hs == 96 || hs == 128; }

// Whether the tensor-core backward takes a call: Real bf16 or fp16, a head size it is built for
// (above), KVH dividing NH, and the operands it loads 16 bytes at a time (qkv and dout) 16-byte aligned
// (the model's activations are carved from one buffer aligned for their element type only, so a view may
// start elsewhere, and then the Kokkos kernel runs).
template <class Real>
bool backward_supported(AttentionShape shape, std::initializer_list<const void*> operands) {
  if constexpr (!is_low_precision_v<Real>) {
    return false;
  } else {
    for (const void* p : operands) {
      if (reinterpret_cast<std::uintptr_t>(p) % 16 != 0) return false;
    }
    return shape.B > 0 && shape.T > 0 && shape.KVH > 0 && shape.NH % shape.KVH == 0 && head_size_supported(shape.hs);
  }
}

// dqkv (=, every column) from dout, qkv and the forward's out and lse, in the layouts of
// kernels/flash_attention.hpp; offsets and docs as AttentionSegments holds them (device memory; docs 0 and
// no offsets: plain causal); D holds B·NH·T floats of workspace. Returns false, with nothing enqueued, where
// the device cannot give a block the shared memory the kernels need (the first such call warns once); throws
// std::runtime_error naming the kernel and CUDA's message where a launch fails.
template <class Real>
bool attention_backward(void* stream, Real* dqkv, const Real* dout, const Real* qkv, const Real* out, const float* lse,
                        AttentionShape shape, const int* offsets, int docs, float* D);

}  // namespace meshtrain::flash_mma
