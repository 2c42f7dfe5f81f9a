// Naming the BLAS, and the advice on OpenBLAS's kernel set; the library queries are in
// blas_info_host.cpp (OpenBLAS, other CBLAS) and blas_info_device.cpp (cuBLAS).
#include "kernels/blas_info.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <string_view>

namespace meshtrain {
namespace {

// OpenBLAS 0.3.21's x86-64 kernel sets without AVX2, as openblas_get_corename() names them (and as
// OPENBLAS_CORETYPE takes them, in any case). Names not listed — the AVX2 and AVX-512 sets Haswell,
// Zen, SkylakeX, Cooperlake, SapphireRapids, and whatever later versions add — draw no warning.
constexpr std::array<std::string_view, 21> pre_avx2_cores = {
    "Prescott", "Katmai", "Coppermine",  "Northwood", "Banias",     "Athlon",       "Atom",
    "Core2",    "Penryn", "Dunnington",  "Nehalem",   "Opteron",    "Opteron_SSE3", "Barcelona",
    "Nano",     "Bobcat", "Sandybridge", "Bulldozer", "Piledriver", "Steamroller",  "Excavator"};

bool same_name(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return std::tolower(static_cast<unsigned char>(x)) == std::tolower(static_cast<unsigned char>(y));
         });
}

}  // namespace

std::string blas_line(const BlasInfo& info) {
  std::string line = "BLAS: " + info.library;
  if (!info.core.empty()) line += fmt::format(", kernels {}", info.core);
  if (info.threads > 0) line += fmt::format(", {} thread{}", info.threads, info.threads == 1 ? "" : "s");
  return line;
}

CpuVectors host_cpu_vectors() {
  CpuVectors cpu;
#if (defined(__x86_64__) || defined(__i386__)) && (defined(__GNUC__) || defined(__clang__))
  __builtin_cpu_init();
  cpu.avx2_fma = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  cpu.avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512cd") &&
               __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq") &&
               __builtin_cpu_supports("avx512vl");
  cpu.amd = __builtin_cpu_is("amd");
#endif
  return cpu;
}

std::string openblas_core_fix(const std::string& core, const CpuVectors& cpu) {
  const bool generic = std::any_of(pre_avx2_cores.begin(), pre_avx2_cores.end(),
                                   [&](std::string_view name) { return same_name(name, core); });
  if (!generic) return {};
  if (cpu.avx512) return "SkylakeX";
  if (cpu.avx2_fma) return cpu.amd ? "Zen" : "Haswell";
  return {};
}

std::string blas_warning(const BlasInfo& info, const CpuVectors& cpu) {
  const std::string fix = openblas_core_fix(info.core, cpu);
  if (fix.empty()) return {};
  // Measured with bench_sgemm (share/docs/benchmark.md).
  return fmt::format(
      "warning: OpenBLAS runs its {} kernels, which use no AVX2, on a CPU with {}: GEMMs run 3-5x slower than they "
      "can (a 2048^3 sgemm: 56 GFLOP/s with Prescott's kernels against 250-290 with SkylakeX's on a Xeon with "
      "AVX-512; 33 against 90-105 per core on an AMD EPYC).\nHINT: export OPENBLAS_CORETYPE={} before starting "
      "meshtrain (jobs/quickstart.sh and slurm/train.sbatch set it where it is unset; `meshtrain blas` says what "
      "this CPU needs)",
      info.core, cpu.avx512 ? "AVX-512" : "AVX2", fix);
}

}  // namespace meshtrain
