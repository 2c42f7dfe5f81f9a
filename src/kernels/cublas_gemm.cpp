// Row-major GEMMs through column-major cuBLAS.
//
// cuBLAS is column-major: a row-major M×N matrix is its column-major N×M transpose. So row-major
// C = op(A)·op(B) is computed as column-major Cᵀ = op(B)ᵀ·op(A)ᵀ, i.e. cuBLAS is called with the
// operands swapped, m and n swapped, and the same leading dimensions. bf16 and fp16 go through the
// Ex entry points: 16-bit A, B and C, float alpha and beta, float accumulation.
#include "kernels/cublas_gemm.hpp"

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <stdexcept>
#include <type_traits>
#include <unordered_map>
#include <utility>
#include <vector>

namespace meshtrain::cublas {
namespace {

void check(cublasStatus_t status, const char* call, const char* file, int line) {
  if (status == CUBLAS_STATUS_SUCCESS) return;
  throw std::runtime_error(
      fmt::format("{}:{}: {} failed: {} ({})\nHINT: CUBLAS_STATUS_NOT_INITIALIZED means no usable GPU or driver "
                  "(check nvidia-smi and CUDA_VISIBLE_DEVICES); ALLOC_FAILED means the GPU is out of memory",
                  file, line, call, cublasGetStatusName(status), cublasGetStatusString(status)));
}
#define MESHTRAIN_CUBLAS_CHECK(call) check((call), #call, __FILE__, __LINE__)

void check(cudaError_t status, const char* call, const char* file, int line) {
  if (status == cudaSuccess) return;
  throw std::runtime_error(
      fmt::format("{}:{}: {} failed: {} ({})\nHINT: cudaErrorNoDevice or InsufficientDriver "
                  "means no usable GPU or driver (check nvidia-smi and CUDA_VISIBLE_DEVICES); "
                  "MemoryAllocation means the GPU is out of memory",
                  file, line, call, cudaGetErrorName(status), cudaGetErrorString(status)));
}
#define MESHTRAIN_CUDA_CHECK(call) check((call), #call, __FILE__, __LINE__)

cublasOperation_t op(Trans t) { return t == Trans::yes ? CUBLAS_OP_T : CUBLAS_OP_N; }

std::atomic<bool> tf32_enabled{false};

// CUBLAS_DEFAULT_MATH keeps fp32 products exact; without the DISALLOW flag cuBLAS may add split-K
// partial sums of bf16/fp16 products in 16 bits, where the dispatch promises float accumulation.
cublasMath_t math_mode() {
  const int base = tf32_enabled.load(std::memory_order_relaxed) ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH;
  return static_cast<cublasMath_t>(base | CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION);
}

// One handle per host thread, bound to the stream of each call. cuBLAS handles are costly to
// create and not thread-safe to share; a thread-local cache is the usual answer.
cublasHandle_t handle_for(void* stream) {
  struct Owner {
    cublasHandle_t handle = nullptr;
    ~Owner() {
      if (handle != nullptr) cublasDestroy(handle);
    }
  };
  thread_local Owner owner;
  if (owner.handle == nullptr) MESHTRAIN_CUBLAS_CHECK(cublasCreate(&owner.handle));
  MESHTRAIN_CUBLAS_CHECK(cublasSetStream(owner.handle, static_cast<cudaStream_t>(stream)));
  MESHTRAIN_CUBLAS_CHECK(cublasSetMathMode(owner.handle, math_mode()));
  return owner.handle;
}

// Copies `pointers` into device memory on `stream` and returns the device copy, for the pointer
// arrays of grouped products. One block per host thread and stream, reused by every call after:
// the copy is queued behind the products already on the stream that read the block. A block too
// small is freed and reallocated (at least twice as large) in stream order, cudaFreeAsync and
// cudaMallocAsync, so no call waits for the GPU. cudaMemcpyAsync has read the pageable host array
// by the time it returns.
const void* const* staged_pointers(void* stream, const std::vector<const void*>& pointers) {
  struct Block {
    void* data = nullptr;
    std::size_t count = 0;
  };
  struct Blocks {
    std::unordered_map<void*, Block> by_stream;
    ~Blocks() {
      for (auto& entry : by_stream) cudaFree(entry.second.data);
    }
  };
  thread_local Blocks blocks;
  const auto s = static_cast<cudaStream_t>(stream);
  Block& block = blocks.by_stream[stream];
  if (pointers.size() > block.count) {
    const std::size_t count = std::max({pointers.size(), 2 * block.count, std::size_t(64)});
    void* old = std::exchange(block.data, nullptr);
    block.count = 0;
    if (old != nullptr) MESHTRAIN_CUDA_CHECK(cudaFreeAsync(old, s));
    MESHTRAIN_CUDA_CHECK(cudaMallocAsync(&block.data, count * sizeof(void*), s));
    block.count = count;
  }
  MESHTRAIN_CUDA_CHECK(
      cudaMemcpyAsync(block.data, pointers.data(), pointers.size() * sizeof(void*), cudaMemcpyHostToDevice, s));
  return static_cast<const void* const*>(block.data);
}

}  // namespace

void set_tf32(bool on) { tf32_enabled.store(on, std::memory_order_relaxed); }

// The cuBLAS type of a storage type that goes through the Ex entry points (float in grouped products).
template <class Real>
constexpr cudaDataType_t data_type() {
  static_assert(is_low_precision_v<Real> || std::is_same_v<Real, float>);
  if constexpr (std::is_same_v<Real, float>) return CUDA_R_32F;
  return std::is_same_v<Real, bf16> ? CUDA_R_16BF : CUDA_R_16F;
}

template <class Real>
void gemm(void* stream, Trans trans_a, Trans trans_b, GemmShape s, accum_t<Real> alpha, const Real* a, int lda,
          const Real* b, int ldb, accum_t<Real> beta, Real* c, int ldc) {
  cublasHandle_t h = handle_for(stream);
  if constexpr (std::is_same_v<Real, float>) {
    MESHTRAIN_CUBLAS_CHECK(
        cublasSgemm(h, op(trans_b), op(trans_a), s.n, s.m, s.k, &alpha, b, ldb, a, lda, &beta, c, ldc));
  } else if constexpr (std::is_same_v<Real, double>) {
    MESHTRAIN_CUBLAS_CHECK(
        cublasDgemm(h, op(trans_b), op(trans_a), s.n, s.m, s.k, &alpha, b, ldb, a, lda, &beta, c, ldc));
  } else {
    const cudaDataType_t t = data_type<Real>();
    MESHTRAIN_CUBLAS_CHECK(cublasGemmEx(h, op(trans_b), op(trans_a), s.n, s.m, s.k, &alpha, b, t, ldb, a, t, lda, &beta,
                                        c, t, ldc, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  }
}

template <class Real>
void gemm_strided_batched(void* stream, Trans trans_a, Trans trans_b, GemmShape s, accum_t<Real> alpha, const Real* a,
                          int lda, long stride_a, const Real* b, int ldb, long stride_b, accum_t<Real> beta, Real* c,
                          int ldc, long stride_c, int batch) {
  cublasHandle_t h = handle_for(stream);
  if constexpr (std::is_same_v<Real, float>) {
    MESHTRAIN_CUBLAS_CHECK(cublasSgemmStridedBatched(h, op(trans_b), op(trans_a), s.n, s.m, s.k, &alpha, b, ldb,
                                                     stride_b, a, lda, stride_a, &beta, c, ldc, stride_c, batch));
  } else if constexpr (std::is_same_v<Real, double>) {
    MESHTRAIN_CUBLAS_CHECK(cublasDgemmStridedBatched(h, op(trans_b), op(trans_a), s.n, s.m, s.k, &alpha, b, ldb,
                                                     stride_b, a, lda, stride_a, &beta, c, ldc, stride_c, batch));
  } else {
    const cudaDataType_t t = data_type<Real>();
    MESHTRAIN_CUBLAS_CHECK(cublasGemmStridedBatchedEx(h, op(trans_b), op(trans_a), s.n, s.m, s.k, &alpha, b, t, ldb,
                                                      stride_b, a, t, lda, stride_a, &beta, c, t, ldc, stride_c, batch,
                                                      CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  }
}

// Problems of one shape and one set of row strides (a two-level strided batch) go as a single
// group, which cuBLAS runs as one batched product; otherwise each problem is its own group of one.
// The per-group arrays stay on the host, only the pointer arrays go to the device: [B_0 … B_{n−1} |
// A_0 … | C_0 …] in one staged block, the operands swapped for column-major as in gemm.
template <class Real>
void gemm_grouped(void* stream, Trans trans_a, Trans trans_b, std::span<const GemmProblem<Real>> problems,
                  accum_t<Real> alpha, accum_t<Real> beta) {
  const int count = static_cast<int>(problems.size());
  if (count == 0) return;
  const GemmProblem<Real>& first_problem = problems[0];
  const bool one_shape = std::all_of(problems.begin(), problems.end(), [&](const GemmProblem<Real>& p) {
    return p.shape.m == first_problem.shape.m && p.shape.n == first_problem.shape.n &&
           p.shape.k == first_problem.shape.k && p.lda == first_problem.lda && p.ldb == first_problem.ldb &&
           p.ldc == first_problem.ldc;
  });
  const int groups = one_shape ? 1 : count;
  cublasHandle_t h = handle_for(stream);
  const std::vector<cublasOperation_t> op_first(groups, op(trans_b)), op_second(groups, op(trans_a));
  const std::vector<accum_t<Real>> alphas(groups, alpha), betas(groups, beta);
  const std::vector<int> group_size(groups, one_shape ? count : 1);
  std::vector<int> m(groups), n(groups), k(groups), ld_first(groups), ld_second(groups), ldc(groups);
  for (int i = 0; i < groups; ++i) {
    const GemmProblem<Real>& p = problems[i];
    m[i] = p.shape.n;
    n[i] = p.shape.m;
    k[i] = p.shape.k;
    ld_first[i] = p.ldb;
    ld_second[i] = p.lda;
    ldc[i] = p.ldc;
  }
  std::vector<const void*> pointers(3 * std::size_t(count));
  for (int i = 0; i < count; ++i) {
    pointers[i] = problems[i].b;
    pointers[count + i] = problems[i].a;
    pointers[2 * count + i] = problems[i].c;
  }
  const void* const* device = staged_pointers(stream, pointers);
  const void* const* first = device;
  const void* const* second = device + count;
  void* const* out = const_cast<void* const*>(device + 2 * count);
  if constexpr (std::is_same_v<Real, double>) {
    MESHTRAIN_CUBLAS_CHECK(cublasDgemmGroupedBatched(
        h, op_first.data(), op_second.data(), m.data(), n.data(), k.data(), alphas.data(),
        reinterpret_cast<const double* const*>(first), ld_first.data(), reinterpret_cast<const double* const*>(second),
        ld_second.data(), betas.data(), reinterpret_cast<double* const*>(out), ldc.data(), groups, group_size.data()));
  } else {
    const cudaDataType_t t = data_type<Real>();
    MESHTRAIN_CUBLAS_CHECK(cublasGemmGroupedBatchedEx(
        h, op_first.data(), op_second.data(), m.data(), n.data(), k.data(), alphas.data(), first, t, ld_first.data(),
        second, t, ld_second.data(), betas.data(), out, t, ldc.data(), groups, group_size.data(), CUBLAS_COMPUTE_32F));
  }
}

#define MESHTRAIN_INSTANTIATE_CUBLAS(Real)                                                                        \
  template void gemm<Real>(void*, Trans, Trans, GemmShape, accum_t<Real>, const Real*, int, const Real*, int,     \
                           accum_t<Real>, Real*, int);                                                            \
  template void gemm_strided_batched<Real>(void*, Trans, Trans, GemmShape, accum_t<Real>, const Real*, int, long, \
                                           const Real*, int, long, accum_t<Real>, Real*, int, long, int);         \
  template void gemm_grouped<Real>(void*, Trans, Trans, std::span<const GemmProblem<Real>>, accum_t<Real>,        \
                                   accum_t<Real>);

MESHTRAIN_INSTANTIATE_CUBLAS(float)
MESHTRAIN_INSTANTIATE_CUBLAS(double)
MESHTRAIN_INSTANTIATE_CUBLAS(bf16)
MESHTRAIN_INSTANTIATE_CUBLAS(fp16)
#undef MESHTRAIN_INSTANTIATE_CUBLAS

}  // namespace meshtrain::cublas
