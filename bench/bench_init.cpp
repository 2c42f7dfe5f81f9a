// How fast fresh initialisation fills a model here: the initialisation kernel over the whole
// layout against the host reference (initial_value, one element at a time, as start-up ran before
// the kernel) on a prefix of it. Prints one JSON line.
//
// Each figure is the best of R runs, in wall time and in this process's CPU time (user + system):
// on a machine shared with other jobs the CPU time is the steadier of the two. The weights are
// touched once before timing, so page faults are not counted.
//
// usage: bench_init [--shape L H C V T] [--repeats R] [--reference-elements N]
#include "best_time.hpp"
#include "model/init.hpp"

#include <Kokkos_Core.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <string>

int main(int argc, char** argv) {
  using namespace meshtrain;
  Kokkos::ScopeGuard kokkos(argc, argv);
  ModelConfig m{12, 12, 768, 50257, 1024};  // GPT-2 124M
  int repeats = 3;
  std::size_t reference_elements = std::size_t(1) << 22;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--shape" && i + 5 < argc) {
      m = ModelConfig{std::atoi(argv[i + 1]), std::atoi(argv[i + 2]), std::atoi(argv[i + 3]), std::atoi(argv[i + 4]),
                      std::atoi(argv[i + 5])};
      i += 5;
    } else if (arg == "--repeats" && i + 1 < argc) {
      repeats = std::max(1, std::atoi(argv[++i]));
    } else if (arg == "--reference-elements" && i + 1 < argc) {
      reference_elements = std::size_t(std::atoll(argv[++i]));
    } else {
      fmt::print(stderr, "usage: bench_init [--shape L H C V T] [--repeats R] [--reference-elements N]\n");
      return 2;
    }
  }
  const ParameterLayout layout(m);
  const std::size_t n = layout.total();
  ExecSpace space;
  Buffer<float> weights("meshtrain::bench::weights", n);
  const bench::Timing kernel =
      bench::best_of(repeats, [&] { initialize_parameters(space, slice(weights, 0, n), layout, 1337); });

  // The reference over the first elements of the layout (wte's).
  const TensorInfo& first = layout.tensors().front();
  const std::size_t sample = std::min(reference_elements, first.numel);
  auto host = Kokkos::create_mirror_view(weights);
  const bench::Timing reference = bench::best_of(repeats, [&] {
    for (std::size_t i = 0; i < sample; ++i) {
      const std::int64_t g = first.global_index(i);
      host(i) = g < 0 ? 0.0f : float(initial_value(1337, first, std::uint64_t(g), m.layers));
    }
  });

  const double kernel_rate = double(n) / kernel.cpu, reference_rate = double(sample) / reference.cpu;
  fmt::print(
      "{{\"parameters\": {}, \"execution_space\": \"{}\", \"kernel_s\": {:.4f}, \"kernel_cpu_s\": {:.4f}, "
      "\"kernel_ns_per_element\": {:.2f}, \"reference_ns_per_element\": {:.2f}, "
      "\"reference_s_for_all\": {:.3f}, \"speedup\": {:.2f}}}\n",
      n, ExecSpace::name(), kernel.wall, kernel.cpu, 1e9 / kernel_rate, 1e9 / reference_rate,
      double(n) / reference_rate, kernel_rate / reference_rate);
  return 0;
}
