// Causal attention on this machine: the fused Kokkos kernel (kernels/flash_attention.hpp) and its
// BLAS-tiled host variant (kernels/flash_attention_host.hpp) against the materialised path
// (kernels/attention.hpp, GEMMs through the BLAS), forward and backward, hs 64, in float and bf16.
// Prints a table of the best wall times and the speed-ups (materialised / fused, forward + backward).
//
// usage: bench_attention [--shape B NH T]... [--precision fp32|bf16]... [--repeats N]
// Without --shape: B 1 and 4, NH 4 and 12 at T 256 and 1024, B 1 at T 2048 and 4096.
#include "kernels/attention.hpp"
#include "kernels/blas_info.hpp"
#include "kernels/flash_attention.hpp"
#include "kernels/flash_attention_host.hpp"
#include "kernels/gemm.hpp"

#include "best_time.hpp"

#include <Kokkos_Core.hpp>
#include <fmt/format.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

namespace {

using namespace meshtrain;

constexpr int kHeadSize = 64;
// The BLAS-tiled variant runs on host builds only (device builds print n/a for it).
constexpr bool kHostBuild = Kokkos::SpaceAccessibility<HostSpace, MemSpace>::accessible;

struct Shape {
  int B, NH, T;
};

struct Times {
  double forward = 0, backward = 0;
  double total() const { return forward + backward; }
};

template <class Real>
Buffer<Real> filled_buffer(const char* label, std::size_t n, double amplitude) {
  Buffer<Real> buf(std::string(label), n);
  auto mirror = Kokkos::create_mirror_view(buf);
  std::uint64_t x = 88172645463325252ull;
  for (std::size_t i = 0; i < n; ++i) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    mirror(i) = Real(amplitude * (double(x >> 11) * 0x1.0p-53 * 2 - 1));
  }
  Kokkos::deep_copy(buf, mirror);
  return buf;
}

template <class Real>
Vec<Real> vec_of(const Buffer<Real>& b) {
  return Vec<Real>(b.data(), b.extent(0));
}
template <class Real>
CVec<Real> cvec_of(const Buffer<Real>& b) {
  return CVec<Real>(b.data(), b.extent(0));
}

struct Measured {
  Times kernel, host, materialized;
};

template <class Real>
Measured measure(const Shape& s, int repeats) {
  using A = accum_t<Real>;
  ExecSpace space;
  const int NH = s.NH, hs = kHeadSize;
  const std::size_t rows = std::size_t(s.B) * s.T;
  const auto qkv = filled_buffer<Real>("qkv", rows * 3 * NH * hs, 1.0);
  const auto dout = filled_buffer<Real>("dout", rows * NH * hs, 1.0);
  Buffer<Real> out("out", rows * NH * hs), dqkv("dqkv", rows * 3 * NH * hs);
  const int warmups = s.T <= 1024 ? 1 : 0;
  // The best wall time of `repeats` runs of run(), fenced.
  auto timed = [&](auto&& run) {
    return bench::best_of(
               repeats,
               [&] {
                 run();
                 space.fence();
               },
               warmups)
        .wall;
  };
  Measured m;
  {
    Buffer<A> lse("lse", std::size_t(s.B) * NH * s.T);
    Buffer<A> work("work", flash_attention_backward_workspace(s.B, s.T, NH));
    Buffer<A> host_work("host_work", kHostBuild ? flash_attention_host_workspace<Real>(s.T, hs) : 0);
    const CVec<A> lse_in(lse.data(), lse.extent(0));
    m.kernel.forward = timed(
        [&] { flash_attention_forward<Real>(space, vec_of(out), vec_of(lse), cvec_of(qkv), s.B, s.T, NH, NH, hs); });
    m.kernel.backward = timed([&] {
      flash_attention_backward<Real>(space, vec_of(dqkv), cvec_of(dout), cvec_of(qkv), cvec_of(out), lse_in, s.B, s.T,
                                     NH, NH, hs, {}, vec_of(work));
    });
    if constexpr (kHostBuild) {
      m.host.forward = timed([&] {
        flash_attention_host_forward<Real>(space, vec_of(out), vec_of(lse), cvec_of(qkv), s.B, s.T, NH, NH, hs, {},
                                           vec_of(host_work));
      });
      m.host.backward = timed([&] {
        flash_attention_host_backward<Real>(space, vec_of(dqkv), cvec_of(dout), cvec_of(qkv), cvec_of(out), lse_in, s.B,
                                            s.T, NH, NH, hs, {}, vec_of(host_work));
      });
    }
  }
  {
    const std::size_t tt = std::size_t(s.B) * NH * s.T * s.T;
    Buffer<Real> att("att", tt), datt("datt", tt);
    m.materialized.forward =
        timed([&] { attention_forward<Real>(space, vec_of(out), vec_of(att), cvec_of(qkv), s.B, s.T, NH, NH, hs); });
    m.materialized.backward = timed([&] {
      attention_backward<Real>(space, vec_of(dqkv), vec_of(datt), cvec_of(dout), cvec_of(qkv), cvec_of(att), s.B, s.T,
                               NH, NH, hs);
    });
  }
  return m;
}

}  // namespace

int main(int argc, char** argv) {
  meshtrain::initialize_kokkos();
  {
    std::vector<Shape> shapes;
    std::vector<std::string> precisions;
    int repeats = 3;
    for (int i = 1; i < argc; ++i) {
      const std::string a = argv[i];
      if (a == "--shape" && i + 3 < argc) {
        shapes.push_back({std::atoi(argv[i + 1]), std::atoi(argv[i + 2]), std::atoi(argv[i + 3])});
        i += 3;
      } else if (a == "--precision" && i + 1 < argc) {
        precisions.push_back(argv[++i]);
      } else if (a == "--repeats" && i + 1 < argc) {
        repeats = std::atoi(argv[++i]);
      } else {
        fmt::print(stderr, "usage: bench_attention [--shape B NH T]... [--precision fp32|bf16]... [--repeats N]\n");
        return 2;
      }
    }
    if (shapes.empty()) {
      for (int T : {256, 1024})
        for (int B : {1, 4})
          for (int NH : {4, 12}) shapes.push_back({B, NH, T});
      for (int T : {2048, 4096})
        for (int NH : {4, 12}) shapes.push_back({1, NH, T});
    }
    if (precisions.empty()) precisions = {"fp32", "bf16"};
    fmt::print("{}, Kokkos {} with concurrency {}, hs {}\n", blas_line(blas_info()), ExecSpace::name(),
               ExecSpace().concurrency(), kHeadSize);
    fmt::print(
        "| precision | B | NH | T | materialised fwd / bwd ms | kernel fwd / bwd ms | host BLAS fwd / bwd ms | "
        "kernel speed-up | host BLAS speed-up |\n");
    fmt::print("|---|---|---|---|---|---|---|---|---|\n");
    for (const std::string& p : precisions) {
      for (const Shape& s : shapes) {
        const int r = s.T <= 1024 ? repeats : 1;
        const Measured m = p == "bf16" ? measure<bf16>(s, r) : measure<float>(s, r);
        const std::string host = kHostBuild
                                     ? fmt::format("{:.1f} / {:.1f}", 1e3 * m.host.forward, 1e3 * m.host.backward)
                                     : std::string("n/a");
        const std::string host_ratio =
            kHostBuild ? fmt::format("{:.2f}×", m.materialized.total() / m.host.total()) : std::string("n/a");
        fmt::print("| {} | {} | {} | {} | {:.1f} / {:.1f} | {:.1f} / {:.1f} | {} | {:.2f}× | {} |\n", p, s.B, s.NH, s.T,
                   1e3 * m.materialized.forward, 1e3 * m.materialized.backward, 1e3 * m.kernel.forward,
                   1e3 * m.kernel.backward, host, m.materialized.total() / m.kernel.total(), host_ratio);
        std::fflush(stdout);
      }
    }
    release_gemm_workspace();  // a Kokkos allocation: before finalize
  }
  Kokkos::finalize();
}
