// The BLAS advice against hand-written cases: which OpenBLAS kernel sets count as generic, and
// which OPENBLAS_CORETYPE fits a CPU; the lines the trainer prints.
#include "kernels/blas_info.hpp"

#include <gtest/gtest.h>

namespace meshtrain {
namespace test_blas_info {

constexpr CpuVectors avx512_intel{true, true, false}, avx512_amd{true, true, true};
constexpr CpuVectors avx2_intel{true, false, false}, avx2_amd{true, false, true}, sse_only{false, false, false};

TEST(BlasInfo, GenericKernelSetsOnWideCpusGetAFix) {
  EXPECT_EQ(openblas_core_fix("Prescott", avx512_intel), "SkylakeX");
  EXPECT_EQ(openblas_core_fix("Prescott", avx512_amd), "SkylakeX");
  EXPECT_EQ(openblas_core_fix("prescott", avx512_intel), "SkylakeX");  // OpenBLAS takes names in any case
  EXPECT_EQ(openblas_core_fix("Core2", avx2_intel), "Haswell");
  EXPECT_EQ(openblas_core_fix("Nehalem", avx2_intel), "Haswell");
  EXPECT_EQ(openblas_core_fix("Sandybridge", avx2_intel), "Haswell");  // AVX without FMA or AVX2
  EXPECT_EQ(openblas_core_fix("Barcelona", avx2_amd), "Zen");
  EXPECT_EQ(openblas_core_fix("Piledriver", avx2_amd), "Zen");
}

TEST(BlasInfo, FittingOrUnknownKernelSetsAndNarrowCpusGetNone) {
  for (const char* core : {"Haswell", "Zen", "SkylakeX", "Cooperlake", "SapphireRapids", "SomethingNewer", ""}) {
    EXPECT_EQ(openblas_core_fix(core, avx512_intel), "") << core;
    EXPECT_EQ(openblas_core_fix(core, avx2_amd), "") << core;
  }
  EXPECT_EQ(openblas_core_fix("Prescott", sse_only), "");       // nothing better runs there
  EXPECT_EQ(openblas_core_fix("Prescott2", avx512_intel), "");  // names match whole
}

TEST(BlasInfo, LinesNameLibraryKernelsThreadsAndTheFix) {
  BlasInfo openblas{"OpenBLAS 0.3.21", "Prescott", 2, "OpenBLAS 0.3.21 DYNAMIC_ARCH Prescott"};
  EXPECT_EQ(blas_line(openblas), "BLAS: OpenBLAS 0.3.21, kernels Prescott, 2 threads");
  EXPECT_EQ(blas_line(BlasInfo{"cuBLAS 13.0.0", "", 0, ""}), "BLAS: cuBLAS 13.0.0");
  EXPECT_EQ(blas_line(BlasInfo{"OpenBLAS 0.3.21", "Zen", 1, ""}), "BLAS: OpenBLAS 0.3.21, kernels Zen, 1 thread");
  const std::string warning = blas_warning(openblas, avx512_intel);
  EXPECT_NE(warning.find("Prescott kernels"), std::string::npos) << warning;
  EXPECT_NE(warning.find("AVX-512"), std::string::npos) << warning;
  EXPECT_NE(warning.find("HINT: export OPENBLAS_CORETYPE=SkylakeX"), std::string::npos) << warning;
  EXPECT_NE(blas_warning(openblas, avx2_amd).find("HINT: export OPENBLAS_CORETYPE=Zen"), std::string::npos);
  EXPECT_EQ(blas_warning(BlasInfo{"OpenBLAS 0.3.21", "SkylakeX", 2, ""}, avx512_intel), "");
  EXPECT_EQ(blas_warning(BlasInfo{"cuBLAS 13.0.0", "", 0, ""}, avx512_intel), "");
}

}  // namespace test_blas_info
}  // namespace meshtrain
