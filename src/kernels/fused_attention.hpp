// Fused causal attention as the model calls it (model.attention = fused): one entry point per
// direction, the kernel chosen by where the views live.
//   host memory (Serial, OpenMP builds): kernels/flash_attention_host.hpp, the tiles as BLAS GEMMs
//     (1.5-1.7x the materialised path at T >= 1024 on 2 cores, where the Kokkos kernel's scalar tile
//     loops ran at 0.17-0.25x of it: share/docs/design.md, Attention);
//   device memory (CUDA builds): kernels/flash_attention.hpp's Kokkos kernel, one launch forward and
//     three backward; where the build has cuDNN (MESHTRAIN_ENABLE_CUDNN), the bf16 and fp16 forwards
//     it takes (head sizes a multiple of 8 up to 128, no documents) run on cuDNN instead, on the space's
//     stream (a call whose graph cuDNN cannot build, a shape or GPU its engines lack, runs on the Kokkos
//     kernel, with one warning per process). The 16-bit backward runs on the tensor-core kernel
//     (kernels/flash_attention_mma.hpp: deterministic, head sizes 32, 64, 96, 128, with documents) unless
//     train.deterministic = false (kernels/fused_attention_backward_choice.hpp) hands it to cuDNN: cuDNN's
//     adds dQ with atomics, so two runs would differ in the last bits and a resumed run would no longer
//     equal the straight one, and its deterministic variant keeps O(T²) in its workspace. Other types and
//     shapes stay on the Kokkos kernel. Both forwards leave the same lse (the
//     natural-log log-sum-exp of each row's scaled scores), which either backward reads.
// Both keep the output and one accum_t log-sum-exp per row; nothing of size T×T exists outside a tile,
// so the memory a block keeps is linear in T. Layouts, segments and equations: kernels/flash_attention.hpp.
#pragma once

#include "core/exec.hpp"
#include "kernels/flash_attention.hpp"
#include "kernels/flash_attention_host.hpp"
#include "kernels/fused_attention_backward_choice.hpp"
#if defined(MESHTRAIN_HAVE_CUDNN_ATTENTION) && defined(KOKKOS_ENABLE_CUDA)
#include "kernels/cudnn_attention.hpp"
#define MESHTRAIN_FUSED_ATTENTION_CUDNN 1
#endif
#ifdef KOKKOS_ENABLE_CUDA
#include "kernels/flash_attention_mma.hpp"
#endif

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <type_traits>

namespace meshtrain {

// Whether Vec<Real> lives where host loops may read it (the BLAS-tiled kernel).
template <class Real>
inline constexpr bool fused_attention_on_host =
    Kokkos::SpaceAccessibility<HostSpace, typename Vec<Real>::memory_space>::accessible;

// Whether cuDNN runs a call of this type, shape, segments and operands (never on host builds). cuDNN's
// plans take 16-byte aligned tensors; the model carves its activations from one buffer, aligned for
// their element type only, so a view that starts elsewhere goes to the Kokkos kernel.
template <class Real>
bool fused_attention_on_cudnn([[maybe_unused]] int B, [[maybe_unused]] int T, [[maybe_unused]] int NH,
                              [[maybe_unused]] int KVH, [[maybe_unused]] int hs,
                              [[maybe_unused]] const AttentionSegments& segments,
                              [[maybe_unused]] std::initializer_list<const void*> operands) {
#ifdef MESHTRAIN_FUSED_ATTENTION_CUDNN
  if constexpr (!fused_attention_on_host<Real>) {
    for (const void* p : operands) {
      if (reinterpret_cast<std::uintptr_t>(p) % 16 != 0) return false;
    }
    return cudnn::attention_supported<Real>(cudnn::AttentionShape{B, T, NH, KVH, hs}, segments.docs);
  }
#endif
  return false;
}

// Elements of accum_t<Real> the workspace of either direction needs (a block's scratch, shared by all
// blocks: nothing in it outlives a call).
template <class Real>
constexpr std::size_t fused_attention_workspace(int B, int T, int NH, int hs) {
  if constexpr (fused_attention_on_host<Real>) {
    return flash_attention_host_workspace<Real>(T, hs);
  } else {
    return flash_attention_backward_workspace(B, T, NH);
  }
}

// out [B*T*NH*hs] and lse [B*NH*T] are written; qkv is [B*T*(NH+2KVH)*hs].
template <class Real>
void fused_attention_forward(const ExecSpace& space, Vec<Real> out, Vec<accum_t<Real>> lse,
                             CVec<std::type_identity_t<Real>> qkv, int B, int T, int NH, int KVH, int hs,
                             const AttentionSegments& segments, Vec<accum_t<Real>> workspace) {
  if constexpr (fused_attention_on_host<Real>) {
    flash_attention_host_forward(space, out, lse, qkv, B, T, NH, KVH, hs, segments, workspace);
  } else {
#ifdef MESHTRAIN_FUSED_ATTENTION_CUDNN
    if constexpr (cudnn::attention_type_v<Real>) {
      // False where cuDNN cannot build this shape's graph: the Kokkos kernel below then (one warning per run).
      if (fused_attention_on_cudnn<Real>(B, T, NH, KVH, hs, segments, {out.data(), lse.data(), qkv.data()}) &&
          cudnn::attention_forward<Real>(space.cuda_stream(), out.data(), lse.data(), qkv.data(),
                                         cudnn::AttentionShape{B, T, NH, KVH, hs})) {
        return;
      }
    }
#endif
    flash_attention_forward(space, out, lse, qkv, B, T, NH, KVH, hs, segments);
  }
}

// dqkv [B*T*(NH+2KVH)*hs] is written (=), every column; out and lse are the forward's.
template <class Real>
void fused_attention_backward(const ExecSpace& space, Vec<Real> dqkv, CVec<std::type_identity_t<Real>> dout,
                              CVec<std::type_identity_t<Real>> qkv, CVec<std::type_identity_t<Real>> out,
                              CVec<accum_t<Real>> lse, int B, int T, int NH, int KVH, int hs,
                              const AttentionSegments& segments, Vec<accum_t<Real>> workspace) {
  if constexpr (fused_attention_on_host<Real>) {
    flash_attention_host_backward(space, dqkv, dout, qkv, out, lse, B, T, NH, KVH, hs, segments, workspace);
  } else {
#ifdef MESHTRAIN_FUSED_ATTENTION_CUDNN
    if constexpr (cudnn::attention_type_v<Real>) {
      if (fused_attention_backward_choice() == FusedAttentionBackward::fastest &&
          fused_attention_on_cudnn<Real>(B, T, NH, KVH, hs, segments,
                                         {dqkv.data(), dout.data(), qkv.data(), out.data(), lse.data()}) &&
          cudnn::attention_backward<Real>(space.cuda_stream(), dqkv.data(), dout.data(), qkv.data(), out.data(),
                                          lse.data(), cudnn::AttentionShape{B, T, NH, KVH, hs})) {
        return;
      }
    }
#endif
#ifdef KOKKOS_ENABLE_CUDA
    if constexpr (is_low_precision_v<Real>) {
      // A call it does not take (sizes the Kokkos kernel's checks name, a head size it is not built for), or
      // false where the device cannot give the kernels their shared memory: the Kokkos kernel then.
      if (flash_mma::backward_supported<Real>({B, T, NH, KVH, hs}, {dout.data(), qkv.data()}) && segments.docs >= 0 &&
          segments.offsets.extent(0) >= attention_segments_size(B, segments.docs) &&
          workspace.extent(0) >= flash_attention_backward_workspace(B, T, NH) &&
          flash_mma::attention_backward<Real>(space.cuda_stream(), dqkv.data(), dout.data(), qkv.data(), out.data(),
                                              lse.data(), {B, T, NH, KVH, hs}, segments.offsets.data(), segments.docs,
                                              workspace.data())) {
        return;
      }
    }
#endif
    flash_attention_backward(space, dqkv, dout, qkv, out, lse, B, T, NH, KVH, hs, segments, workspace);
  }
}

}  // namespace meshtrain
