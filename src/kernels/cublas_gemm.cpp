// Row-major GEMMs through column-major cuBLAS.
//
// cuBLAS is column-major: a row-major M×N matrix is its column-major N×M transpose. So row-major
// C = op(A)·op(B) is computed as column-major Cᵀ = op(B)ᵀ·op(A)ᵀ, i.e. cuBLAS is called with the
// operands swapped, m and n swapped, and the same leading dimensions. bf16 and fp16 go through the
// Ex entry points: 16-bit A, B and C, float alpha and beta, float accumulation.
#include "kernels/cublas_gemm.hpp"

#include "kernels/cublas_support.hpp"

#include <algorithm>
#include <type_traits>
#include <vector>

namespace meshtrain::cublas {
namespace {

using detail::data_type;
using detail::handle_for;
using detail::op;

// Copies `pointers` into device memory on `stream` and returns the device copy, for the pointer
// arrays of grouped products: the thread's block for this stream (detail::stream_block), so the
// copy is queued behind the products already on the stream that read it. cudaMemcpyAsync has read
// the pageable host array by the time it returns.
const void* const* staged_pointers(void* stream, const std::vector<const void*>& pointers) {
  const std::size_t bytes = pointers.size() * sizeof(void*);
  void* block = detail::stream_block(stream, detail::Block::pointer_arrays, bytes);
  MESHTRAIN_CUDA_CHECK(
      cudaMemcpyAsync(block, pointers.data(), bytes, cudaMemcpyHostToDevice, static_cast<cudaStream_t>(stream)));
  return static_cast<const void* const*>(block);
}

}  // namespace

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
