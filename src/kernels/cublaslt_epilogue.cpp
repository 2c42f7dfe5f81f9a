// Row-major products with cuBLASLt epilogues, through column-major cuBLASLt as in cublas_gemm.cpp:
// row-major C = op(A)·op(B) is column-major Cᵀ = op(B)ᵀ·op(A)ᵀ, so cuBLASLt's A is our B and its
// B our A, its m our n. A row-major column j is then a column-major row: the bias vector and the
// bias gradient (cuBLASLt: one element per row of D) are per row-major column, as GemmEpilogue
// says, and the column sums of our B are cuBLASLt's BGRADA (the reduction of its A over k).
#include "kernels/cublaslt_epilogue.hpp"

#include "kernels/cublas_support.hpp"

#include <cublasLt.h>

#include <array>
#include <cstdint>
#include <cstdio>
#include <map>
#include <mutex>
#include <set>
#include <type_traits>

namespace meshtrain::cublas {
namespace {

using detail::data_type;
using detail::op;

// What cuBLASLt may use as workspace: 32 MiB, the size NVIDIA recommends for Hopper.
constexpr std::size_t kWorkspaceBytes = std::size_t(32) << 20;

cublasLtHandle_t lt_handle() {
  struct Owner {
    cublasLtHandle_t handle = nullptr;
    ~Owner() {
      if (handle != nullptr) cublasLtDestroy(handle);
    }
  };
  thread_local Owner owner;
  if (owner.handle == nullptr) MESHTRAIN_CUBLAS_CHECK(cublasLtCreate(&owner.handle));
  return owner.handle;
}

cublasLtEpilogue_t lt_epilogue(GemmEpilogue e) {
  switch (e) {
    case GemmEpilogue::bias: return CUBLASLT_EPILOGUE_BIAS;
    case GemmEpilogue::gelu_aux_bias: return CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
    case GemmEpilogue::dgelu_bgrad: return CUBLASLT_EPILOGUE_DGELU_BGRAD;
    case GemmEpilogue::bgrad_b: return CUBLASLT_EPILOGUE_BGRADA;
  }
  return CUBLASLT_EPILOGUE_DEFAULT;
}

const char* name(GemmEpilogue e) {
  switch (e) {
    case GemmEpilogue::bias: return "BIAS";
    case GemmEpilogue::gelu_aux_bias: return "GELU_AUX_BIAS";
    case GemmEpilogue::dgelu_bgrad: return "DGELU_BGRAD";
    case GemmEpilogue::bgrad_b: return "BGRADA";
  }
  return "?";
}

// RAII for the descriptors of one call.
struct MatmulDesc {
  cublasLtMatmulDesc_t desc = nullptr;
  MatmulDesc(cublasComputeType_t compute) {
    MESHTRAIN_CUBLAS_CHECK(cublasLtMatmulDescCreate(&desc, compute, CUDA_R_32F));
  }
  ~MatmulDesc() { cublasLtMatmulDescDestroy(desc); }
  template <class T>
  void set(cublasLtMatmulDescAttributes_t attribute, const T& value) {
    MESHTRAIN_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, attribute, &value, sizeof(value)));
  }
};

struct Layout {
  cublasLtMatrixLayout_t layout = nullptr;
  Layout(cudaDataType_t type, std::uint64_t rows, std::uint64_t cols, std::int64_t ld) {
    MESHTRAIN_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&layout, type, rows, cols, ld));
  }
  ~Layout() { cublasLtMatrixLayoutDestroy(layout); }
};

struct Preference {
  cublasLtMatmulPreference_t pref = nullptr;
  Preference() {
    MESHTRAIN_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
    const std::uint64_t bytes = kWorkspaceBytes;
    MESHTRAIN_CUBLAS_CHECK(
        cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &bytes, sizeof(bytes)));
    // Split-K partial sums in the compute type (float) only, never in a 16-bit output type: the
    // products accumulate in float as kernels/gemm.hpp promises.
    const std::uint32_t schemes = CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE;
    MESHTRAIN_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK,
                                                                &schemes, sizeof(schemes)));
  }
  ~Preference() { cublasLtMatmulPreferenceDestroy(pref); }
};

// The 16-byte alignment class of a pointer: cuBLASLt picks algorithms by the operands' alignment.
int alignment(const void* p) {
  const auto address = reinterpret_cast<std::uintptr_t>(p);
  return address % 16 == 0 ? 16 : address % 8 == 0 ? 8 : address % 4 == 0 ? 4 : 2;
}

// The heuristic's choice for one kind of call, asked once per thread: GetHeuristic costs tens of
// microseconds, as much as a small product.
using AlgoKey = std::array<std::int64_t, 16>;
struct Choice {
  bool found = false;
  cublasLtMatmulAlgo_t algo{};
};

// Prints the first refusal of each epilogue and type once per process.
void report_refusal(GemmEpilogue e, cudaDataType_t type, GemmShape s) {
  static std::mutex mutex;
  static std::set<std::pair<int, int>> reported;
  const std::lock_guard<std::mutex> lock(mutex);
  if (!reported.insert({int(e), int(type)}).second) return;
  std::fprintf(stderr,
               "meshtrain: cuBLASLt has no algorithm for the %s epilogue of a %d x %d x %d product (CUDA type %d); "
               "such products run unfused, with their kernels\n",
               name(e), s.m, s.n, s.k, int(type));
}

}  // namespace

template <class Real>
bool gemm_epilogue(void* stream, Trans trans_a, Trans trans_b, GemmShape s, accum_t<Real> alpha, const Real* a, int lda,
                   const Real* b, int ldb, accum_t<Real> beta, Real* c, int ldc, GemmEpilogue epilogue,
                   const EpilogueOperands<Real>& x) {
  if constexpr (std::is_same_v<Real, double>) {
    return false;  // cuBLASLt's epilogues take 32- and 16-bit operands only
  } else {
    const cudaDataType_t t = data_type<Real>();
    const bool with_aux = epilogue == GemmEpilogue::gelu_aux_bias || epilogue == GemmEpilogue::dgelu_bgrad;
    const bool with_grad = epilogue == GemmEpilogue::dgelu_bgrad || epilogue == GemmEpilogue::bgrad_b;
    if (with_aux && (x.ld_aux % 8 != 0 || x.ld_aux < s.n)) {
      report_refusal(epilogue, t, s);
      return false;
    }
    const cublasComputeType_t compute =
        std::is_same_v<Real, float> && detail::tf32_enabled() ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
    MatmulDesc desc(compute);
    desc.set(CUBLASLT_MATMUL_DESC_TRANSA, op(trans_b));
    desc.set(CUBLASLT_MATMUL_DESC_TRANSB, op(trans_a));
    desc.set(CUBLASLT_MATMUL_DESC_EPILOGUE, lt_epilogue(epilogue));
    Real* grad_scratch = nullptr;
    if (with_grad) {
      grad_scratch = static_cast<Real*>(detail::stream_block(stream, detail::Block::bias_gradient, sizeof(Real) * s.n));
      void* out = grad_scratch;
      desc.set(CUBLASLT_MATMUL_DESC_BIAS_POINTER, out);
    } else {
      const void* in = x.bias;
      desc.set(CUBLASLT_MATMUL_DESC_BIAS_POINTER, in);
    }
    if (with_aux) {
      void* aux = x.aux;
      desc.set(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, aux);
      desc.set(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, std::int64_t{x.ld_aux});
    }
    // cuBLASLt's A is our B (stored k × n untransposed, n × k transposed), its B our A.
    const Layout first(t, trans_b == Trans::no ? s.n : s.k, trans_b == Trans::no ? s.k : s.n, ldb);
    const Layout second(t, trans_a == Trans::no ? s.k : s.m, trans_a == Trans::no ? s.m : s.k, lda);
    const Layout out(t, s.n, s.m, ldc);

    thread_local std::map<AlgoKey, Choice> choices;
    const AlgoKey key{
        int(epilogue), t,
        compute,       int(trans_a),
        int(trans_b),  s.m,
        s.n,           s.k,
        lda,           ldb,
        ldc,           x.ld_aux,
        alignment(a),  alignment(b),
        alignment(c),  alignment(with_aux ? x.aux : c) * 100 + alignment(with_grad ? grad_scratch : x.bias)};
    auto found = choices.find(key);
    if (found == choices.end()) {
      Preference pref;
      cublasLtMatmulHeuristicResult_t result{};
      int returned = 0;
      const cublasStatus_t status =
          cublasLtMatmulAlgoGetHeuristic(lt_handle(), desc.desc, first.layout, second.layout, out.layout, out.layout,
                                         pref.pref, 1, &result, &returned);
      Choice choice;
      choice.found = status == CUBLAS_STATUS_SUCCESS && returned > 0;
      if (choice.found) choice.algo = result.algo;
      found = choices.emplace(key, choice).first;
    }
    if (!found->second.found) {
      report_refusal(epilogue, t, s);
      return false;
    }
    void* workspace = detail::stream_block(stream, detail::Block::lt_workspace, kWorkspaceBytes);
    const auto cuda_stream = static_cast<cudaStream_t>(stream);
    MESHTRAIN_CUBLAS_CHECK(cublasLtMatmul(lt_handle(), desc.desc, &alpha, b, first.layout, a, second.layout, &beta, c,
                                          out.layout, c, out.layout, &found->second.algo, workspace, kWorkspaceBytes,
                                          cuda_stream));
    if (with_grad) {
      const float one = 1.0f;
      MESHTRAIN_CUBLAS_CHECK(cublasAxpyEx(detail::handle_for(stream), s.n, &one, CUDA_R_32F, grad_scratch, t, 1,
                                          x.bias_grad, t, 1, CUDA_R_32F));
    }
    return true;
  }
}

#define MESHTRAIN_INSTANTIATE_CUBLASLT(Real)                                                                           \
  template bool gemm_epilogue<Real>(void*, Trans, Trans, GemmShape, accum_t<Real>, const Real*, int, const Real*, int, \
                                    accum_t<Real>, Real*, int, GemmEpilogue, const EpilogueOperands<Real>&);
MESHTRAIN_INSTANTIATE_CUBLASLT(float)
MESHTRAIN_INSTANTIATE_CUBLASLT(double)
MESHTRAIN_INSTANTIATE_CUBLASLT(bf16)
MESHTRAIN_INSTANTIATE_CUBLASLT(fp16)
#undef MESHTRAIN_INSTANTIATE_CUBLASLT

}  // namespace meshtrain::cublas
