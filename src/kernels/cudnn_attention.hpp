// cuDNN's fused scaled-dot-product attention behind meshtrain's fused causal attention, for CUDA builds
// configured with MESHTRAIN_ENABLE_CUDNN (the compile definition MESHTRAIN_HAVE_CUDNN_ATTENTION says so).
//
// Sizes and layouts are kernels/flash_attention.hpp's: B batch, T time, NH query heads, KVH kv heads (query
// head h reads kv head h/(NH/KVH)), hs head size.
//   qkv  [B,T,(NH+2KVH)·hs]: q | k | v column groups; query head h at column h·hs, kv head k's k at
//        NH·hs + k·hs, its v at (NH+KVH)·hs + k·hs.
//   out  [B,T,NH·hs], lse [B,NH,T] float: the natural-log log-sum-exp of each row's scaled causal scores,
//        scale 1/sqrt(hs) (cuDNN's softmax "Stats").
//   dqkv written (=) in qkv's layout: dQ, dK, dV, each kv head's gradient summed over its query heads.
// cuDNN reads Q, K, V as [B,H,T,hs] tensors whose strides point into qkv (no copies) and writes O, dQ, dK,
// dV the same way, so the two paths are interchangeable call by call. Only the numbers differ: cuDNN's
// kernels add in their own order (and, in the default backward, accumulate dQ with atomics).
//
// Kept free of Kokkos and of cuDNN's headers, like kernels/cublas_gemm.hpp, so that it compiles wherever
// the CUDA toolkit and cuDNN are installed, GPU or not: the dispatch hands it the execution space's stream
// (Kokkos::Cuda::cuda_stream()) and the Views' data pointers, which must be 16-byte aligned (View
// allocations are; with hs a multiple of 8 so is every head's column).
#pragma once

#include "core/half_types.hpp"
#include "kernels/attention_shape.hpp"

namespace meshtrain::cudnn {

using meshtrain::AttentionShape;

// The storage types cuDNN's fused attention takes: it is 16-bit only (fp32 and fp64 stay on the Kokkos
// kernel).
template <class Real>
inline constexpr bool attention_type_v = is_low_precision_v<Real>;

// Whether cuDNN takes a call of this shape with `docs` documents per sequence (AttentionSegments::docs):
// B, T ≥ 1; KVH divides NH; hs a multiple of 8 up to 128 (what every GPU from sm_80 on runs forward and
// backward; Hopper would take 256, kept on the Kokkos kernel for one rule everywhere); docs = 0.
//
// Documents are not taken: cuDNN expresses them only as a ragged ("THD") batch of B·docs entries, with an
// int32 length per entry (padding mask) and element offsets into Q, K, V, O and the stats (ragged
// offsets). Those tensors would have to be made on the device from AttentionSegments' offsets, which this
// host-compiled library cannot (no kernels; a copy to the host would synchronise every call), and the
// stats would then be stored per token, not as lse's [B,NH,T]. The Kokkos kernel keeps them.
bool attention_shape_supported(AttentionShape shape, int docs);

template <class Real>
bool attention_supported(AttentionShape shape, int docs) {
  return attention_type_v<Real> && attention_shape_supported(shape, docs);
}

// Whether the backward asks cuDNN for its deterministic algorithm (process-wide; off by default). On
// Hopper the frontend then builds the variant that keeps dP in the workspace (2·B·NH·T² bytes, T rounded
// up to 64, by the frontend's own sizing; not measured here), the quadratic memory fused attention is
// there to avoid; the default backward adds dQ with atomics, so it is not bitwise reproducible from run
// to run. The Kokkos kernel is deterministic either way.
void set_deterministic(bool on);

// The forward: out and lse from qkv, on `stream` (a cudaStream_t; nullptr is the default stream). Real is
// bf16 or fp16 and the shape one attention_supported accepts. The graph of each shape, type and device is
// built on its first call and kept; the cuDNN handle is made once per device; the workspace cuDNN asks for
// is a grow-only device block per stream (cudaMallocAsync on that stream, the old one freed with
// cudaFreeAsync), so no call synchronises after the first of each shape. False, with nothing enqueued,
// where cuDNN cannot build the graph of this shape, type and device (its engines lack one: the first such
// call of the process warns on stderr, naming it and cuDNN's reason): the caller runs the Kokkos kernel.
// Other failures (no GPU, an execution that fails) throw std::runtime_error naming the call, the shape,
// cuDNN's or CUDA's message and a HINT.
template <class Real>
bool attention_forward(void* stream, Real* out, float* lse, const Real* qkv, AttentionShape shape);

// The backward: dqkv (=) from dout, qkv, and the forward's out and lse, as above.
template <class Real>
bool attention_backward(void* stream, Real* dqkv, const Real* dout, const Real* qkv, const Real* out, const float* lse,
                        AttentionShape shape);

}  // namespace meshtrain::cudnn
