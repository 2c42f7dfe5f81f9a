// Which BLAS the GEMM dispatch calls, for the trainer's start-up lines and the benchmarks, and
// whether OpenBLAS runs kernels that leave this CPU's vector units idle.
//
// OpenBLAS built with DYNAMIC_ARCH (Debian's) picks its kernel set ("core") from the CPU when it is
// loaded; a CPU it does not recognise gets a generic set. OpenBLAS 0.3.21 runs Prescott's (SSE3)
// on a Xeon with AVX-512 of family 6 model 207: a 2048³ sgemm at 56 GFLOP/s instead of 250–290 with
// OPENBLAS_CORETYPE=SkylakeX (share/docs/benchmark.md). The variable is read at load time, so the
// fix has to come from the environment that starts the process.
#pragma once

#include <string>

namespace meshtrain {

struct BlasInfo {
  std::string library;  // "OpenBLAS 0.3.21", "cuBLAS 13.0.0", "a CBLAS (not OpenBLAS)"
  std::string core;     // OpenBLAS's kernel set: "Haswell", "SkylakeX", "Prescott"; empty for others
  int threads = 0;      // the host BLAS's threads; 0 where not known or not a host BLAS
  std::string config;   // the library's build description (openblas_get_config()), or empty
};

// The BLAS of this build, as the library reports itself (host builds: OpenBLAS or another CBLAS;
// CUDA builds: cuBLAS). kernels/blas_info_host.cpp, kernels/blas_info_device.cpp.
BlasInfo blas_info();

// "BLAS: OpenBLAS 0.3.21, kernels Cooperlake, 2 threads" or "BLAS: cuBLAS 13.0.0"
std::string blas_line(const BlasInfo& info);

// The vector extensions of the host CPU that OpenBLAS's kernel sets use.
struct CpuVectors {
  bool avx2_fma = false;  // AVX2 and FMA3: the Haswell and Zen kernel sets
  bool avx512 = false;    // AVX-512 F, CD, BW, DQ and VL: the SkylakeX set
  bool amd = false;       // AuthenticAMD (AVX2 without AVX-512: Zen)
};
CpuVectors host_cpu_vectors();

// The OPENBLAS_CORETYPE to set when `core` is one of OpenBLAS's kernel sets without AVX2 (Prescott,
// Core2, Nehalem, Sandybridge, the AMD sets before Zen, ...) on a CPU with AVX2 or AVX-512:
// SkylakeX with AVX-512, else Zen on AMD, Haswell on others. Empty when nothing is to be gained.
std::string openblas_core_fix(const std::string& core, const CpuVectors& cpu);

// The warning rank 0 prints when openblas_core_fix has a fix for this process, or "".
std::string blas_warning(const BlasInfo& info, const CpuVectors& cpu);

}  // namespace meshtrain
