// The CUDA build's BLAS: cuBLAS, by the version of the library loaded (no GPU needed to ask).
#include "kernels/blas_info.hpp"

#include <cublas_v2.h>
#include <fmt/format.h>

namespace meshtrain {

BlasInfo blas_info() {
  int major = 0, minor = 0, patch = 0;
  cublasGetProperty(MAJOR_VERSION, &major);
  cublasGetProperty(MINOR_VERSION, &minor);
  cublasGetProperty(PATCH_LEVEL, &patch);
  BlasInfo info;
  info.library = fmt::format("cuBLAS {}.{}.{}", major, minor, patch);
  return info;
}

}  // namespace meshtrain
