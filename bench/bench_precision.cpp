// The cost of the 16-bit path on this machine: one Gpt2 forward + backward in fp32, bf16 and fp16 on
// the same shape, timed after a warm-up. Prints one JSON line per precision and the ratio to fp32.
// On the host the 16-bit GEMMs convert to float around sgemm (kernels/gemm.hpp), so this measures
// that overhead, not a speed-up; on a GPU cuBLAS runs them on tensor cores.
//
// Each figure is the best of R steps, in wall time and in this process's CPU time (user + system,
// all threads): on a machine shared with other jobs the CPU time is the steadier of the two.
//
// usage: bench_precision [--shape L H C V T B] [--repeats R]
#include "best_time.hpp"
#include "kernels/blas_info.hpp"
#include "model/families/gpt2.hpp"
#include "model/gemm_workspace.hpp"

#include <Kokkos_Core.hpp>
#include <fmt/format.h>

#include <cstdlib>
#include <random>
#include <string>

namespace {

using namespace meshtrain;

using bench::Timing;

template <class Real>
Timing seconds_per_step(const ModelConfig& m, int B, int repeats) {
  ExecSpace space;
  Gpt2<Real> model(space, m, B);
  reserve_gemm_workspace(family_gemm_workspace_bytes<Real, Gpt2Family>(m, B));
  const int N = B * m.seq_len;
  std::mt19937_64 rng(1);
  std::normal_distribution<double> normal(0.0, 0.02);
  auto w = Kokkos::create_mirror_view(model.weights());
  for (std::size_t i = 0; i < w.extent(0); ++i) w(i) = Real(normal(rng));
  Kokkos::deep_copy(model.weights(), w);
  Buffer<int> tokens("tokens", N);
  auto t = Kokkos::create_mirror_view(tokens);
  for (int i = 0; i < N; ++i) t(i) = int(rng() % m.vocab);
  Kokkos::deep_copy(tokens, t);
  const CVec<int> in(tokens.data(), N);
  using Accum = typename Gpt2<Real>::Accum;
  const LossSum loss;  // as the training step: the loss stays on the device
  return bench::best_of(
      repeats,
      [&] {
        model.zero_grads();
        loss.clear(space);
        model.forward(in, in, Accum(1.0 / N), loss);
        model.backward(in);
        space.fence();
      },
      1);
}

}  // namespace

int main(int argc, char** argv) {
  meshtrain::initialize_kokkos();
  {
    ModelConfig m{4, 4, 256, 256, 128};
    int B = 4, repeats = 5;
    for (int i = 1; i < argc; ++i) {
      const std::string a = argv[i];
      if (a == "--shape" && i + 6 < argc) {
        m = {std::atoi(argv[i + 1]), std::atoi(argv[i + 2]), std::atoi(argv[i + 3]), std::atoi(argv[i + 4]),
             std::atoi(argv[i + 5])};
        B = std::atoi(argv[i + 6]);
        i += 6;
      } else if (a == "--repeats" && i + 1 < argc) {
        repeats = std::atoi(argv[++i]);
      }
    }
    const Timing fp32 = seconds_per_step<float>(m, B, repeats);
    const Timing bf = seconds_per_step<bf16>(m, B, repeats);
    const Timing hf = seconds_per_step<fp16>(m, B, repeats);
    const std::string shape = fmt::format("\"L\": {}, \"H\": {}, \"C\": {}, \"V\": {}, \"T\": {}, \"B\": {}", m.layers,
                                          m.heads, m.d_model, m.vocab, m.seq_len, B);
    for (const auto& [name, t] : {std::pair{"fp32", fp32}, std::pair{"bf16", bf}, std::pair{"fp16", hf}}) {
      fmt::print(
          "{{\"precision\": \"{}\", {}, \"step_ms\": {:.2f}, \"step_cpu_ms\": {:.2f}, \"cpu_vs_fp32\": {:.2f}}}\n",
          name, shape, 1e3 * t.wall, 1e3 * t.cpu, t.cpu / fp32.cpu);
    }
    const BlasInfo blas = blas_info();
    fmt::print("{{\"gemm_workspace_bytes\": {}, \"blas\": \"{}\", \"blas_kernels\": \"{}\", \"blas_threads\": {}}}\n",
               gemm_workspace_bytes(), blas.library, blas.core, blas.threads);
    release_gemm_workspace();
  }
  Kokkos::finalize();
}
