// The sgemm rate this machine reaches through meshtrain's GEMM dispatch: the roofline that the
// training benchmark is compared with. Prints one JSON line, with the BLAS that ran: library,
// kernel set (OpenBLAS's core: OPENBLAS_CORETYPE or its own choice) and threads.
//
// usage: bench_sgemm [--model-shapes N C V | --llama-shapes N C V QKV H] [--seconds S]
// With --model-shapes it times the GEMMs of one GPT-2 block at N rows (B·T) and C channels plus the
// output head over V (the products that dominate a training step, forward and backward); with
// --llama-shapes those of one llama block (q|k|v QKV = (heads + 2·kv_heads)·head_size wide, o_proj,
// gate|up 2H wide, down_proj from H) and its lm_head; else a square 2048 product.
#include "kernels/blas_info.hpp"
#include "kernels/gemm.hpp"

#include <Kokkos_Core.hpp>
#include <fmt/format.h>

#include <chrono>
#include <cstdlib>
#include <string>
#include <vector>

namespace {

using namespace meshtrain;

struct Product {
  Trans ta, tb;
  GemmShape s;
};

// The forward and backward products of one block's linear layers, given as (in, out) channels,
// and of the head, in the trainer's layouts.
std::vector<Product> model_products(int N, int C, int V, const std::vector<std::pair<int, int>>& layers) {
  std::vector<Product> p;
  for (auto [ic, oc] : layers) {
    p.push_back({Trans::no, Trans::no, {N, oc, ic}});   // forward
    p.push_back({Trans::no, Trans::yes, {N, ic, oc}});  // dinp
    p.push_back({Trans::yes, Trans::no, {ic, oc, N}});  // dweight
  }
  p.push_back({Trans::no, Trans::yes, {N, V, C}});
  p.push_back({Trans::no, Trans::no, {N, C, V}});
  p.push_back({Trans::yes, Trans::no, {V, C, N}});
  return p;
}

double run(const std::vector<Product>& products, double seconds) {
  std::size_t most = 0;
  for (const auto& p : products) {
    most = std::max({most, std::size_t(p.s.m) * p.s.k, std::size_t(p.s.k) * p.s.n, std::size_t(p.s.m) * p.s.n});
  }
  Buffer<float> a("a", most), b("b", most), c("c", most);
  Kokkos::deep_copy(a, 0.5f);
  Kokkos::deep_copy(b, 0.25f);
  ExecSpace space;
  double flops = 0;
  const auto start = std::chrono::steady_clock::now();
  double elapsed = 0;
  int rounds = 0;
  while (elapsed < seconds || rounds < 2) {
    for (const auto& p : products) {
      const int lda = p.ta == Trans::no ? p.s.k : p.s.m;
      const int ldb = p.tb == Trans::no ? p.s.n : p.s.k;
      gemm<float>(space, p.ta, p.tb, p.s, 1.0f, a.data(), lda, b.data(), ldb, 0.0f, c.data(), p.s.n);
      flops += 2.0 * p.s.m * p.s.n * p.s.k;
    }
    space.fence();
    ++rounds;
    elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  }
  return flops / elapsed;
}

}  // namespace

int main(int argc, char** argv) {
  Kokkos::ScopeGuard kokkos(argc, argv);
  double seconds = 3.0;
  std::vector<Product> products = {{Trans::no, Trans::no, {2048, 2048, 2048}}};
  std::string what = "square 2048";
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--seconds" && i + 1 < argc) {
      seconds = std::atof(argv[++i]);
    } else if (arg == "--model-shapes" && i + 3 < argc) {
      const int N = std::atoi(argv[i + 1]), C = std::atoi(argv[i + 2]), V = std::atoi(argv[i + 3]);
      // c_attn, attn.c_proj, c_fc and mlp.c_proj.
      products = model_products(N, C, V, {{C, 3 * C}, {C, C}, {C, 4 * C}, {4 * C, C}});
      what = fmt::format("GPT-2 block and head GEMMs, N={} C={} V={}", N, C, V);
      i += 3;
    } else if (arg == "--llama-shapes" && i + 5 < argc) {
      const int N = std::atoi(argv[i + 1]), C = std::atoi(argv[i + 2]), V = std::atoi(argv[i + 3]);
      const int QKV = std::atoi(argv[i + 4]), H = std::atoi(argv[i + 5]);
      // q|k|v, o_proj (from the query heads' C channels), gate|up and down_proj.
      products = model_products(N, C, V, {{C, QKV}, {C, C}, {C, 2 * H}, {H, C}});
      what = fmt::format("llama block and head GEMMs, N={} C={} V={} QKV={} H={}", N, C, V, QKV, H);
      i += 5;
    } else {
      fmt::print(stderr, "usage: bench_sgemm [--model-shapes N C V | --llama-shapes N C V QKV H] [--seconds S]\n");
      return 2;
    }
  }
  const double rate = run(products, seconds);
  const BlasInfo blas = blas_info();
  fmt::print(
      "{{\"sgemm_flops_per_s\": {:.6g}, \"shapes\": \"{}\", \"blas\": \"{}\", \"blas_kernels\": \"{}\", "
      "\"blas_threads\": {}}}\n",
      rate, what, blas.library, blas.core, blas.threads);
  return 0;
}
