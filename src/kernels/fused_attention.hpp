// Fused causal attention as the model calls it (model.attention = fused): one entry point per
// direction, the kernel chosen by where the views live.
//   host memory (Serial, OpenMP builds): kernels/flash_attention_host.hpp, the tiles as BLAS GEMMs
//     (1.5-1.7x the materialised path at T >= 1024 on 2 cores, where the Kokkos kernel's scalar tile
//     loops ran at 0.17-0.25x of it: share/docs/design.md, Attention);
//   device memory (CUDA builds): kernels/flash_attention.hpp's Kokkos kernel, one launch forward and
//     three backward.
// Both keep the output and one accum_t log-sum-exp per row; nothing of size T×T exists outside a tile,
// so the memory a block keeps is linear in T. Layouts, segments and equations: kernels/flash_attention.hpp.
#pragma once

#include "core/exec.hpp"
#include "kernels/flash_attention.hpp"
#include "kernels/flash_attention_host.hpp"

#include <cstddef>
#include <type_traits>

namespace meshtrain {

// Whether Vec<Real> lives where host loops may read it (the BLAS-tiled kernel).
template <class Real>
inline constexpr bool fused_attention_on_host =
    Kokkos::SpaceAccessibility<HostSpace, typename Vec<Real>::memory_space>::accessible;

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
    flash_attention_backward(space, dqkv, dout, qkv, out, lse, B, T, NH, KVH, hs, segments, workspace);
  }
}

}  // namespace meshtrain
