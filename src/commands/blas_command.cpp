// meshtrain blas [--openblas-coretype]: which BLAS this build calls and whether its kernels suit
// this CPU. Runs without MPI and Kokkos (main.cpp), so that a launcher's task can ask it before
// its rank starts (slurm/train.sbatch).
#include "commands/commands.hpp"

#include "core/command_line.hpp"
#include "kernels/blas_info.hpp"

#include <boost/program_options.hpp>
#include <fmt/format.h>

#include <cstdlib>

namespace po = boost::program_options;

namespace meshtrain {

int blas_command(const Args& args) {
  bool coretype_only = false;
  po::options_description options("meshtrain blas: the BLAS of this build, and the OPENBLAS_CORETYPE this CPU needs");
  options.add_options()("openblas-coretype", po::bool_switch(&coretype_only),
                        "print only the OPENBLAS_CORETYPE to set on this CPU, or nothing when OpenBLAS's own choice "
                        "is right (the scripts' one test)");
  constexpr const char* usage = "meshtrain blas [--openblas-coretype]";
  if (print_help_if_asked(args, options, usage)) return 0;
  parse_options(args, options, usage);

  const BlasInfo info = blas_info();
  const CpuVectors cpu = host_cpu_vectors();
  const std::string fix = openblas_core_fix(info.core, cpu);
  if (coretype_only) {
    if (!fix.empty()) fmt::print("{}\n", fix);
    return 0;
  }
  fmt::print("{}\n", blas_line(info));
  if (!info.config.empty()) fmt::print("build: {}\n", info.config);
  fmt::print("CPU: AVX2+FMA {}, AVX-512 {}{}\n", cpu.avx2_fma ? "yes" : "no", cpu.avx512 ? "yes" : "no",
             cpu.amd ? " (AMD)" : "");
  const char* set = std::getenv("OPENBLAS_CORETYPE");
  fmt::print("OPENBLAS_CORETYPE: {}\n", set != nullptr ? fmt::format("{} (from the environment)", set) : "unset");
  const std::string warning = blas_warning(info, cpu);
  fmt::print("{}\n", warning.empty() ? std::string("the BLAS kernels suit this CPU") : warning);
  return 0;
}

}  // namespace meshtrain
