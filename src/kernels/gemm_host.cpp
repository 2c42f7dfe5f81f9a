// Host GEMM dispatch through CBLAS (row-major); 16-bit products through sgemm on a float workspace.
#include "kernels/gemm.hpp"

#include <cblas.h>

#include <algorithm>
#include <memory>
#include <mutex>
#include <type_traits>

namespace meshtrain {
namespace {

CBLAS_TRANSPOSE cblas_trans(Trans t) { return t == Trans::yes ? CblasTrans : CblasNoTrans; }

template <class Real>
void cblas_gemm(Trans trans_a, Trans trans_b, GemmShape s, Real alpha, const Real* a, int lda, const Real* b, int ldb,
                Real beta, Real* c, int ldc) {
  if constexpr (std::is_same_v<Real, float>) {
    cblas_sgemm(CblasRowMajor, cblas_trans(trans_a), cblas_trans(trans_b), s.m, s.n, s.k, alpha, a, lda, b, ldb, beta,
                c, ldc);
  } else {
    cblas_dgemm(CblasRowMajor, cblas_trans(trans_a), cblas_trans(trans_b), s.m, s.n, s.k, alpha, a, lda, b, ldb, beta,
                c, ldc);
  }
}

// ---- 16-bit products --------------------------------------------------------------------------

// Floats of op(A) and C rows converted at a time: 16 MiB, but at least 64 rows (sgemm's efficiency
// falls on thinner panels). GPT-2 small's logits (k 768, n 50304) go 82 rows at a time.
constexpr std::size_t kPanelFloats = std::size_t(1) << 22;
constexpr std::size_t kMinPanelRows = 64;

struct Panels {
  std::size_t rows;    // rows of C per panel
  std::size_t floats;  // workspace: op(B) (k·n), then a panel of op(A) (rows·k) and of C (rows·n)
};

Panels panels_for(GemmShape s) {
  if (s.m <= 0 || s.n <= 0) return {0, 0};
  const std::size_t m = s.m, n = s.n, k = std::max(s.k, 0);
  const std::size_t rows = std::min(m, std::max(kPanelFloats / (k + n), kMinPanelRows));
  return {rows, k * n + rows * (k + n)};
}

// The one float workspace, grow-only. Products hold the lock for their whole run.
struct Workspace {
  std::mutex mutex;
  std::unique_ptr<float[]> data;
  std::size_t floats = 0;

  float* at_least(std::size_t n) {  // caller holds the lock
    if (n > floats) {
      data.reset();  // free the old block before allocating the larger one
      data = std::make_unique_for_overwrite<float[]>(n);
      floats = n;
    }
    return data.get();
  }
};

Workspace& workspace() {
  static Workspace w;
  return w;
}

// rows × cols of a row-major matrix with row stride ld, to/from a dense float block.
template <class Real>
void widen(const Real* src, long ld, std::size_t rows, std::size_t cols, float* dst) {
  for (std::size_t r = 0; r < rows; ++r) {
    const Real* s = src + r * ld;
    float* d = dst + r * cols;
    for (std::size_t j = 0; j < cols; ++j) d[j] = float(s[j]);
  }
}
template <class Real>
void narrow(const float* src, std::size_t rows, std::size_t cols, Real* dst, long ld) {
  for (std::size_t r = 0; r < rows; ++r) {
    const float* s = src + r * cols;
    Real* d = dst + r * ld;
    for (std::size_t j = 0; j < cols; ++j) d[j] = Real(s[j]);
  }
}

// One 16-bit product on the workspace `ws` (panels_for(s).floats floats): op(B) is converted once,
// then C is computed a panel of rows at a time, C_panel = alpha·op(A)_panel·op(B) + beta·C_panel in
// float, each element rounded to Real once.
template <class Real>
void gemm_low_precision(Trans ta, Trans tb, GemmShape s, float alpha, const Real* a, int lda, const Real* b, int ldb,
                        float beta, Real* c, int ldc, float* ws) {
  const Panels p = panels_for(s);
  if (p.rows == 0) return;
  const std::size_t m = s.m, n = s.n, k = std::max(s.k, 0);
  float* wb = ws;
  float* wa = wb + k * n;
  float* wc = wa + p.rows * k;
  // op(B) as stored: k × n, or n × k when transposed.
  if (tb == Trans::no) {
    widen(b, ldb, k, n, wb);
  } else {
    widen(b, ldb, n, k, wb);
  }
  const int ldwb = std::max<int>(1, tb == Trans::no ? s.n : s.k);
  for (std::size_t i0 = 0; i0 < m; i0 += p.rows) {
    const std::size_t rows = std::min(p.rows, m - i0);
    int ldwa;
    if (ta == Trans::no) {  // rows i0 … i0+rows−1 of A (m × k)
      widen(a + i0 * lda, lda, rows, k, wa);
      ldwa = std::max<int>(1, s.k);
    } else {  // A is stored k × m: its columns i0 … i0+rows−1
      widen(a + i0, lda, k, rows, wa);
      ldwa = int(rows);
    }
    if (beta != 0.0f) widen(c + i0 * ldc, ldc, rows, n, wc);
    cblas_sgemm(CblasRowMajor, cblas_trans(ta), cblas_trans(tb), int(rows), s.n, s.k, alpha, wa, ldwa, wb, ldwb, beta,
                wc, s.n);
    narrow(wc, rows, n, c + i0 * ldc, ldc);
  }
}

// Runs `count` products in order, problem(i) giving the i-th (a GemmProblem<Real>): every entry
// point of the dispatch comes here. 16-bit products hold the workspace, sized for the largest, for
// the whole run.
template <class Real, class Problem>
void gemm_in_order(const ExecSpace& space, Trans trans_a, Trans trans_b, int count, Problem problem,
                   accum_t<Real> alpha, accum_t<Real> beta) {
  space.fence();  // earlier kernels on this space must have produced the operands
  if constexpr (is_low_precision_v<Real>) {
    std::size_t floats = 0;
    for (int i = 0; i < count; ++i) floats = std::max(floats, panels_for(problem(i).shape).floats);
    Workspace& w = workspace();
    const std::lock_guard<std::mutex> lock(w.mutex);
    float* ws = w.at_least(floats);
    for (int i = 0; i < count; ++i) {
      const GemmProblem<Real> p = problem(i);
      gemm_low_precision(trans_a, trans_b, p.shape, alpha, p.a, p.lda, p.b, p.ldb, beta, p.c, p.ldc, ws);
    }
  } else {
    for (int i = 0; i < count; ++i) {
      const GemmProblem<Real> p = problem(i);
      cblas_gemm(trans_a, trans_b, p.shape, alpha, p.a, p.lda, p.b, p.ldb, beta, p.c, p.ldc);
    }
  }
}

}  // namespace

#if !defined(KOKKOS_ENABLE_CUDA)

template <class Real>
std::size_t gemm_workspace_bytes_for(GemmShape shape) {
  if constexpr (is_low_precision_v<Real>) {
    return panels_for(shape).floats * sizeof(float);
  } else {
    return 0;
  }
}

void set_fp32_gemm(Fp32Gemm) {}

void reserve_gemm_workspace(std::size_t bytes) {
  Workspace& w = workspace();
  const std::lock_guard<std::mutex> lock(w.mutex);
  w.at_least((bytes + sizeof(float) - 1) / sizeof(float));
}

std::size_t gemm_workspace_bytes() {
  Workspace& w = workspace();
  const std::lock_guard<std::mutex> lock(w.mutex);
  return w.floats * sizeof(float);
}

void release_gemm_workspace() {
  Workspace& w = workspace();
  const std::lock_guard<std::mutex> lock(w.mutex);
  w.data.reset();
  w.floats = 0;
}

template <class Real>
void gemm(const ExecSpace& space, Trans trans_a, Trans trans_b, GemmShape shape, accum_t<Real> alpha, const Real* a,
          int lda, const Real* b, int ldb, accum_t<Real> beta, Real* c, int ldc) {
  const GemmProblem<Real> problem{shape, a, lda, b, ldb, c, ldc};
  gemm_in_order<Real>(
      space, trans_a, trans_b, 1, [&](int) { return problem; }, alpha, beta);
}

template <class Real>
void gemm_strided_batched(const ExecSpace& space, Trans trans_a, Trans trans_b, GemmShape shape, accum_t<Real> alpha,
                          const Real* a, int lda, const Real* b, int ldb, accum_t<Real> beta, Real* c, int ldc,
                          const StridedBatch& batch) {
  const auto matrix = [&](int i) {
    const BatchStride at = batch.offsets(i);
    return GemmProblem<Real>{shape, a + at.a, lda, b + at.b, ldb, c + at.c, ldc};
  };
  gemm_in_order<Real>(space, trans_a, trans_b, batch.count(), matrix, alpha, beta);
}

template <class Real>
void gemm_grouped(const ExecSpace& space, Trans trans_a, Trans trans_b, std::span<const GemmProblem<Real>> problems,
                  accum_t<Real> alpha, accum_t<Real> beta) {
  gemm_in_order<Real>(
      space, trans_a, trans_b, static_cast<int>(problems.size()), [&](int i) { return problems[i]; }, alpha, beta);
}

// CBLAS has no epilogues: the callers run their kernels.
template <class Real>
bool gemm_fused(const ExecSpace&, Trans, Trans, GemmShape, accum_t<Real>, const Real*, int, const Real*, int,
                accum_t<Real>, Real*, int, GemmEpilogue, const EpilogueOperands<Real>&) {
  return false;
}

#include "kernels/gemm_instantiations.inc"

#endif

}  // namespace meshtrain
