// The tensor-core attention backward (kernels/flash_attention_mma.hpp): three raw CUDA kernels, the
// algorithm and tile order of kernels/flash_attention_mma_plan.hpp, tensor-core products through wmma
// (16×16×16, 16-bit operands, fp32 accumulators).
//
// Shared memory of a block (head size HS, Real 16-bit):
//   row tiles [64][HS + 8] of Real: Q and dO, K and V. The 8 elements of padding make a row 16·odd bytes
//     long, so the eight 16-byte rows a tensor-core load reads at once start in eight distinct bank groups
//     (unpadded, HS = 64 or 128 would put all eight in the same banks: an 8-way conflict).
//   score tiles [64][68] of float: S, then dP (fp32 products of the tensor cores, read elementwise).
//   probability tiles [64][72] of Real: P and dS rounded, the operands of the second products.
//   lse, D and the document start of the query tile's rows.
// dK/dV at HS = 128 take 121 KiB, dQ 112 KiB: above the 48 KiB a block gets by default, so each kernel
// asks for it once (cudaFuncAttributeMaxDynamicSharedMemorySize); a device that cannot give it (before
// sm_80) makes attention_backward return false and the Kokkos kernel run.
//
// Registers: each warp keeps its share of the block's sums as accumulator fragments (dQ: 16 rows × HS; dK
// and dV: 16 rows × HS/2 each), indexed by constants in unrolled loops so they stay in registers (ptxas -v
// shows no local memory; figures in share/docs/design.md, Attention).
#include "kernels/flash_attention_mma.hpp"

#include "kernels/flash_attention_mma_plan.hpp"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <mma.h>

#include <cmath>
#include <cstdio>
#include <stdexcept>
#include <string>
#include <type_traits>

namespace meshtrain::flash_mma {
namespace {

using namespace nvcuda;

// The CUDA type of each storage type: the same bits (half_types.hpp).
template <class Real>
struct CudaType;
template <>
struct CudaType<bf16> {
  using type = __nv_bfloat16;
};
template <>
struct CudaType<fp16> {
  using type = __half;
};

constexpr int kRowPad = 8;                    // 16-bit elements after each row tile row
constexpr int kScoreStride = kTile + 4;       // floats of a score row: 272 bytes, 16·17
constexpr int kProbStride = kTile + kRowPad;  // Reals of a probability row: 144 bytes, 16·9
template <int HS>
constexpr int kRowStride = HS + kRowPad;  // 16-bit elements of a row tile's row: 16·odd bytes

// A block's shared memory, carved in this order: the row tiles Q, dO, K, V; the score tiles S and dP; the
// probability tiles P (dK/dV only) and dS; lse, D and the document start of each query row. Every piece
// is a multiple of 32 bytes, and so is every square a tensor-core load or store starts at (wmma wants
// 256-bit aligned addresses).
template <class S, int HS, bool WithP>
struct SharedTiles {
  static constexpr int kRowTile = kTile * kRowStride<HS>;
  static_assert(kRowTile * 2 % 32 == 0 && kTile * kScoreStride * 4 % 32 == 0 && kTile * kProbStride * 2 % 32 == 0);
  static constexpr int kBytes =
      4 * kRowTile * 2 + 2 * kTile * kScoreStride * 4 + (WithP ? 2 : 1) * kTile * kProbStride * 2 + 3 * kTile * 4;

  S *Q, *dO, *K, *V;
  float *scores, *dP;
  S *P, *dS;  // P: nullptr in the dQ kernel
  float *L, *Dr;
  int* start;

  __device__ explicit SharedTiles(unsigned char* base) {
    Q = reinterpret_cast<S*>(base);
    dO = Q + kRowTile;
    K = dO + kRowTile;
    V = K + kRowTile;
    scores = reinterpret_cast<float*>(V + kRowTile);
    dP = scores + kTile * kScoreStride;
    P = WithP ? reinterpret_cast<S*>(dP + kTile * kScoreStride) : nullptr;
    dS = reinterpret_cast<S*>(dP + kTile * kScoreStride) + (WithP ? kTile * kProbStride : 0);
    L = reinterpret_cast<float*>(dS + kTile * kProbStride);
    Dr = L + kTile;
    start = reinterpret_cast<int*>(Dr + kTile);
  }
};

// The dK/dV kernel's tiles (with P) and the dQ kernel's.
template <class Real, int HS>
using KeyTiles = SharedTiles<typename CudaType<Real>::type, HS, true>;
template <class Real, int HS>
using QueryTiles = SharedTiles<typename CudaType<Real>::type, HS, false>;

template <class Real>
struct Args {
  Real* dqkv;
  const Real* dout;
  const Real* qkv;
  const Real* out;
  const float* lse;
  float* D;
  int B, T, NH, KVH;
  detail::DocumentBounds docs;
  float scale;
  __device__ long row() const { return long(NH + 2 * KVH) * hs; }
  int hs;
};

template <class S>
using FragA = wmma::fragment<wmma::matrix_a, kFragment, kFragment, kFragment, S, wmma::row_major>;
template <class S>
using FragAT = wmma::fragment<wmma::matrix_a, kFragment, kFragment, kFragment, S, wmma::col_major>;
template <class S>
using FragB = wmma::fragment<wmma::matrix_b, kFragment, kFragment, kFragment, S, wmma::row_major>;
template <class S>
using FragBT = wmma::fragment<wmma::matrix_b, kFragment, kFragment, kFragment, S, wmma::col_major>;
using Accumulator = wmma::fragment<wmma::accumulator, kFragment, kFragment, kFragment, float>;

// Rows [first, first + 64) of a [T][stride] matrix, columns [0, HS) from `src` (the head's first column),
// into a row tile; rows at or past T are zeros, so their scores are finite and masked.
template <int HS, class S, class Real>
__device__ __forceinline__ void load_rows(S* tile, const Real* src, long stride, int first, int T) {
  constexpr int chunks = HS / 8;  // 16-byte pieces of a row
  for (int n = threadIdx.x; n < kTile * chunks; n += blockDim.x) {
    const int r = n / chunks, c = n % chunks;
    uint4 v = make_uint4(0, 0, 0, 0);
    if (first + r < T) v = *reinterpret_cast<const uint4*>(src + (first + r) * stride + c * 8);
    *reinterpret_cast<uint4*>(tile + r * kRowStride<HS> + c * 8) = v;
  }
}

// The 16×16 squares (row_block, n), n in [n0, n0 + N), of left·rightᵀ ([64][64], float) from two row
// tiles: S = Q·Kᵀ, dP = dO·Vᵀ.
template <int HS, int N, class S>
__device__ __forceinline__ void warp_products_t(float* out, const S* left, const S* right, int row_block, int n0) {
#pragma unroll
  for (int n = n0; n < n0 + N; ++n) {
    Accumulator acc;
    wmma::fill_fragment(acc, 0.0f);
#pragma unroll
    for (int k = 0; k < HS / kFragment; ++k) {
      FragA<S> a;
      FragBT<S> b;
      wmma::load_matrix_sync(a, left + kFragment * row_block * kRowStride<HS> + kFragment * k, kRowStride<HS>);
      wmma::load_matrix_sync(b, right + kFragment * n * kRowStride<HS> + kFragment * k, kRowStride<HS>);
      wmma::mma_sync(acc, a, b, acc);
    }
    wmma::store_matrix_sync(out + kFragment * row_block * kScoreStride + kFragment * n, acc, kScoreStride,
                            wmma::mem_row_major);
  }
}

// acc[n] += (rows 16·row_block.. of A)·(right's columns c0 + 16n..), n < N, k over the tile's 64 rows in
// order. Transposed: A = probᵀ (a kv-row warp reads a column strip of P or dS); else A = prob's rows.
template <int HS, int N, bool Transposed, class S>
__device__ __forceinline__ void warp_accumulate(Accumulator (&acc)[N], const S* prob, const S* right, int row_block,
                                                int c0) {
#pragma unroll
  for (int k = 0; k < kTile / kFragment; ++k) {
    using A = std::conditional_t<Transposed, FragAT<S>, FragA<S>>;
    A a;
    if constexpr (Transposed) {
      wmma::load_matrix_sync(a, prob + kFragment * k * kProbStride + kFragment * row_block, kProbStride);
    } else {
      wmma::load_matrix_sync(a, prob + kFragment * row_block * kProbStride + kFragment * k, kProbStride);
    }
#pragma unroll
    for (int n = 0; n < N; ++n) {
      FragB<S> b;
      wmma::load_matrix_sync(b, right + kFragment * k * kRowStride<HS> + c0 + kFragment * n, kRowStride<HS>);
      wmma::mma_sync(acc[n], a, b, acc[n]);
    }
  }
}

// P (where wanted) and dS of query rows [r0, r0 + rows) of the tile pair (i0, j0), rounded to Real; thread
// `thread` of `threads` takes every threads-th score.
template <class Real, class S>
__device__ __forceinline__ void score_gradients(S* P, S* dS, const float* scores, const float* dP, const float* L,
                                                const float* Dr, const int* start, int i0, int j0, int T, float scale,
                                                int r0, int rows, int thread, int threads) {
  for (int e = thread; e < rows * kTile; e += threads) {
    const int r = r0 + e / kTile, c = e % kTile;
    const ScoreGradient g = score_gradient(scores[r * kScoreStride + c], dP[r * kScoreStride + c], L[r], Dr[r], scale,
                                           visible(i0 + r, j0 + c, start[r], T));
    if (P != nullptr) reinterpret_cast<unsigned short*>(P)[r * kProbStride + c] = Real(g.p).bits;
    reinterpret_cast<unsigned short*>(dS)[r * kProbStride + c] = Real(g.ds).bits;
  }
}

// The query tile's lse, D and document starts (rows past T: 0, and masked).
template <class Real>
__device__ __forceinline__ void load_row_values(float* L, float* Dr, int* start, const Args<Real>& a, int b, int h,
                                                int i0) {
  for (int r = threadIdx.x; r < kTile; r += blockDim.x) {
    const int i = i0 + r;
    const long at = (long(b) * a.NH + h) * a.T + i;
    L[r] = i < a.T ? a.lse[at] : 0.0f;
    Dr[r] = i < a.T ? a.D[at] : 0.0f;
    start[r] = i < a.T ? a.docs.start(b, i) : i;
  }
}

// Writes a warp's accumulators (its 16 rows of the tile at `first`, 16·N columns) times `factor` to dst
// ([T][stride] from the warp's first column), through a 16×16 float staging square of its own.
template <int N, class Real>
__device__ __forceinline__ void warp_write(Accumulator (&acc)[N], float* stage, Real* dst, long stride, int first,
                                           int T, float factor, int lane) {
#pragma unroll
  for (int n = 0; n < N; ++n) {
    wmma::store_matrix_sync(stage, acc[n], kScoreStride, wmma::mem_row_major);
    __syncwarp();
    for (int e = lane; e < kFragment * kFragment; e += 32) {
      const int r = e / kFragment, c = e % kFragment;
      if (first + r < T) dst[(first + r) * stride + kFragment * n + c] = Real(factor * stage[r * kScoreStride + c]);
    }
    __syncwarp();
  }
}

// D_i = do_i·o_i, [B][NH][T], a thread per row, d in order.
template <class Real>
__global__ void __launch_bounds__(256) backward_d(Args<Real> a) {
  const long n = long(blockIdx.x) * blockDim.x + threadIdx.x;
  if (n >= long(a.B) * a.NH * a.T) return;
  const long t = n % a.T, h = (n / a.T) % a.NH, b = n / (long(a.T) * a.NH);
  const long at = (b * a.T + t) * long(a.NH) * a.hs + h * a.hs;
  float sum = 0.0f;
  for (int d = 0; d < a.hs; ++d) sum += float(a.dout[at + d]) * float(a.out[at + d]);
  a.D[n] = sum;
}

template <class Real, int HS>
__global__ void __launch_bounds__(kKeyThreads, 1) backward_dkdv(Args<Real> a) {
  extern __shared__ __align__(128) unsigned char shared[];
  const KeyTiles<Real, HS> t(shared);
  const auto [Q, dO, K, V, scores, dP, P, dS, L, Dr, start] = t;

  const int tiles = tile_count(a.T);
  const int kt = blockIdx.x % tiles, kv = (blockIdx.x / tiles) % a.KVH, b = blockIdx.x / (tiles * a.KVH);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  // The warp's 16 kv rows and half of the columns; for S and dP, its 16 query rows and half of the kv columns.
  constexpr int N = HS / kFragment / kKeyColumnHalves;
  const int row_block = warp % kRowBlocks, half = warp / kRowBlocks;
  const int g = a.NH / a.KVH, j0 = kt * kTile;
  const long row = a.row(), q_cols = long(a.NH) * HS, seq = long(b) * a.T;
  const long k_col = long(a.NH + kv) * HS, v_col = long(a.NH + a.KVH + kv) * HS;

  load_rows<HS>(K, a.qkv + seq * row + k_col, row, j0, a.T);
  load_rows<HS>(V, a.qkv + seq * row + v_col, row, j0, a.T);
  Accumulator dK[N], dV[N];
#pragma unroll
  for (int n = 0; n < N; ++n) {
    wmma::fill_fragment(dK[n], 0.0f);
    wmma::fill_fragment(dV[n], 0.0f);
  }
  const int last = last_query_tile(a.docs, b, kt);
  for (int jh = 0; jh < g; ++jh) {
    const int h = kv * g + jh;
    for (int qt = kt; qt <= last; ++qt) {
      const int i0 = qt * kTile;
      __syncthreads();  // the previous tile's products are done with Q, dO, P and dS
      load_rows<HS>(Q, a.qkv + seq * row + long(h) * HS, row, i0, a.T);
      load_rows<HS>(dO, a.dout + seq * q_cols + long(h) * HS, q_cols, i0, a.T);
      load_row_values(L, Dr, start, a, b, h, i0);
      __syncthreads();
      constexpr int n_scores = kTile / kFragment / kKeyColumnHalves;
      warp_products_t<HS, n_scores>(scores, Q, K, row_block, half * n_scores);
      warp_products_t<HS, n_scores>(dP, dO, V, row_block, half * n_scores);
      __syncthreads();  // a row's scores come from two warps
      score_gradients<Real>(P, dS, scores, dP, L, Dr, start, i0, j0, a.T, a.scale, 0, kTile, threadIdx.x, kKeyThreads);
      __syncthreads();  // a kv-row warp reads every query row of P and dS
      warp_accumulate<HS, N, true>(dV, P, dO, row_block, half * N * kFragment);
      warp_accumulate<HS, N, true>(dK, dS, Q, row_block, half * N * kFragment);
    }
  }
  __syncthreads();
  float* const stage = scores + kFragment * row_block * kScoreStride + kFragment * half;
  const int first = j0 + kFragment * row_block;
  const long c0 = long(half) * N * kFragment;
  warp_write<N>(dK, stage, a.dqkv + seq * row + k_col + c0, row, first, a.T, a.scale, lane);
  warp_write<N>(dV, stage, a.dqkv + seq * row + v_col + c0, row, first, a.T, 1.0f, lane);
}

template <class Real, int HS>
__global__ void __launch_bounds__(kQueryThreads) backward_dq(Args<Real> a) {
  using S = typename CudaType<Real>::type;
  extern __shared__ __align__(128) unsigned char shared[];
  const QueryTiles<Real, HS> t(shared);
  const auto [Q, dO, K, V, scores, dP, unused_P, dS, L, Dr, start] = t;

  const int tiles = tile_count(a.T);
  const int qt = blockIdx.x % tiles, h = (blockIdx.x / tiles) % a.NH, b = blockIdx.x / (tiles * a.NH);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int kv = h / (a.NH / a.KVH), i0 = qt * kTile;
  const long row = a.row(), q_cols = long(a.NH) * HS, seq = long(b) * a.T;
  const long k_col = long(a.NH + kv) * HS, v_col = long(a.NH + a.KVH + kv) * HS;

  load_rows<HS>(Q, a.qkv + seq * row + long(h) * HS, row, i0, a.T);
  load_rows<HS>(dO, a.dout + seq * q_cols + long(h) * HS, q_cols, i0, a.T);
  load_row_values(L, Dr, start, a, b, h, i0);
  constexpr int N = HS / kFragment;
  Accumulator dQ[N];
#pragma unroll
  for (int n = 0; n < N; ++n) wmma::fill_fragment(dQ[n], 0.0f);
  for (int kt = first_kv_tile(a.docs, b, qt); kt <= qt; ++kt) {
    const int j0 = kt * kTile;
    __syncthreads();  // the row loads, or the previous tile's products, are done
    load_rows<HS>(K, a.qkv + seq * row + k_col, row, j0, a.T);
    load_rows<HS>(V, a.qkv + seq * row + v_col, row, j0, a.T);
    __syncthreads();
    // Every product of this kv tile reads the warp's own query rows only: the warp needs no block barrier.
    warp_products_t<HS, kTile / kFragment>(scores, Q, K, warp, 0);
    warp_products_t<HS, kTile / kFragment>(dP, dO, V, warp, 0);
    __syncwarp();
    score_gradients<Real, S>(nullptr, dS, scores, dP, L, Dr, start, i0, j0, a.T, a.scale, kFragment * warp, kFragment,
                             lane, 32);
    __syncwarp();
    warp_accumulate<HS, N, false>(dQ, dS, K, warp, 0);
  }
  __syncwarp();
  warp_write<N>(dQ, scores + kFragment * warp * kScoreStride, a.dqkv + seq * row + long(h) * HS, row,
                i0 + kFragment * warp, a.T, a.scale, lane);
}

void check_launch(const char* kernel) {
  const cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) {
    throw std::runtime_error(
        std::string("flash_mma::attention_backward: launching ") + kernel + ": " + cudaGetErrorString(e) +
        "\nHINT: train.deterministic = false runs cuDNN's backward instead, where the build has it");
  }
}

// Whether each kernel of this type and head size may take its shared memory (asked once per process).
template <class Real, int HS>
bool shared_memory_granted() {
  static const bool granted = [] {
    const bool ok = cudaFuncSetAttribute(backward_dkdv<Real, HS>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         KeyTiles<Real, HS>::kBytes) == cudaSuccess &&
                    cudaFuncSetAttribute(backward_dq<Real, HS>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         QueryTiles<Real, HS>::kBytes) == cudaSuccess;
    if (!ok) {
      std::fprintf(stderr,
                   "meshtrain: warning: this device cannot give the tensor-core attention backward %d bytes of "
                   "shared memory per block (head size %d; %s): the Kokkos kernel runs it\n",
                   KeyTiles<Real, HS>::kBytes, HS, cudaGetErrorString(cudaGetLastError()));
    }
    return ok;
  }();
  return granted;
}

template <class Real, int HS>
bool launch(cudaStream_t stream, const Args<Real>& a) {
  if (!shared_memory_granted<Real, HS>()) return false;
  const long rows = long(a.B) * a.NH * a.T;
  const int tiles = tile_count(a.T);
  backward_d<Real><<<unsigned((rows + 255) / 256), 256, 0, stream>>>(a);
  check_launch("backward_d");
  backward_dkdv<Real, HS><<<unsigned(a.B * a.KVH * tiles), kKeyThreads, KeyTiles<Real, HS>::kBytes, stream>>>(a);
  check_launch("backward_dkdv");
  backward_dq<Real, HS><<<unsigned(a.B * a.NH * tiles), kQueryThreads, QueryTiles<Real, HS>::kBytes, stream>>>(a);
  check_launch("backward_dq");
  return true;
}

}  // namespace

template <class Real>
bool attention_backward(void* stream, Real* dqkv, const Real* dout, const Real* qkv, const Real* out, const float* lse,
                        AttentionShape shape, const int* offsets, int docs, float* D) {
  const Args<Real> a{dqkv,
                     dout,
                     qkv,
                     out,
                     lse,
                     D,
                     shape.B,
                     shape.T,
                     shape.NH,
                     shape.KVH,
                     detail::DocumentBounds{offsets, docs, shape.T},
                     float(1.0 / std::sqrt(double(shape.hs))),
                     shape.hs};
  auto* s = static_cast<cudaStream_t>(stream);
  switch (shape.hs) {
    case 32: return launch<Real, 32>(s, a);
    case 64: return launch<Real, 64>(s, a);
    case 96: return launch<Real, 96>(s, a);
    case 128: return launch<Real, 128>(s, a);
    default:
      throw std::invalid_argument("flash_mma::attention_backward: head size " + std::to_string(shape.hs) +
                                  " (built for 32, 64, 96 and 128)");
  }
}

template bool attention_backward<bf16>(void*, bf16*, const bf16*, const bf16*, const bf16*, const float*,
                                       AttentionShape, const int*, int, float*);
template bool attention_backward<fp16>(void*, fp16*, const fp16*, const fp16*, const fp16*, const float*,
                                       AttentionShape, const int*, int, float*);

}  // namespace meshtrain::flash_mma
