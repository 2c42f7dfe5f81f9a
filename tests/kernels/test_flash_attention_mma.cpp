// The tensor-core attention backward (kernels/flash_attention_mma.cpp). On every build: its tile walk
// covers every score a query sees, from both sides; its algorithm, run by the host emulation
// (flash_attention_mma_emulation.hpp) in bf16 and fp16, against the materialised path in double (and, with
// documents, the flash kernel in double, which its own tests tie to each document alone). On CUDA builds
// with a GPU: the kernel against the emulation, and bitwise the same from run to run.
#include "kernels/attention.hpp"
#include "kernels/flash_attention.hpp"
#include "kernels/flash_attention_mma.hpp"

#include "flash_attention_mma_emulation.hpp"
#include "kernel_test_utils.hpp"
#include "low_precision_utils.hpp"

#include <iostream>
#include <set>
#include <utility>

namespace meshtrain::test {
namespace {

struct Case {
  int B, T, NH, KVH, hs;
  std::vector<int> offsets;  // B·(docs+1), or none
  int docs = 0;
  int row() const { return (NH + 2 * KVH) * hs; }
  std::size_t qkv_size() const { return std::size_t(B) * T * row(); }
  std::size_t out_size() const { return std::size_t(B) * T * NH * hs; }
  std::string name() const {
    return "B " + std::to_string(B) + " T " + std::to_string(T) + " NH " + std::to_string(NH) + " KVH " +
           std::to_string(KVH) + " hs " + std::to_string(hs) + " documents " + std::to_string(docs);
  }
};

// Every head size the kernel is built for; T within one tile, of several with a short last one, of whole
// tiles; GQA and multi-query; documents of one token, boundaries inside a tile and on one (64, 128).
const std::vector<Case> kCases = {
    {2, 130, 4, 2, 64, {}, 0},
    {1, 128, 2, 1, 128, {}, 0},
    {2, 37, 3, 3, 32, {}, 0},
    {1, 150, 4, 1, 96, {0, 1, 64, 100, 128, 150}, 5},
    {2, 200, 2, 2, 32, {0, 70, 71, 200, 0, 200, 200, 200}, 3},
};

// out and lse of the double flash forward.
std::pair<Host, Host> forward_in_double(const Case& c, const Host& qkv) {
  const auto seg = to_device(c.offsets);
  auto out = to_device<double>(nan_filled(c.out_size()));
  auto lse = to_device<double>(nan_filled(std::size_t(c.B) * c.NH * c.T));
  flash_attention_forward<double>(ExecSpace{}, vec(out), vec(lse), cvec(to_device<double>(qkv)), c.B, c.T, c.NH, c.KVH,
                                  c.hs, AttentionSegments{cvec(seg), c.docs});
  return {to_host(out), to_host(lse)};
}

// The gradient in double: the materialised path without documents, the flash kernel with them.
Host reference_dqkv(const Case& c, const Host& qkv, const Host& dout, const Host& out, const Host& lse) {
  ExecSpace space;
  auto dqkv = to_device<double>(nan_filled(c.qkv_size()));
  const auto d_qkv = to_device<double>(qkv), d_dout = to_device<double>(dout);
  if (c.docs == 0) {
    const std::size_t tt = std::size_t(c.B) * c.NH * c.T * c.T;
    auto o = to_device<double>(nan_filled(c.out_size())), att = to_device<double>(nan_filled(tt));
    auto datt = to_device<double>(nan_filled(tt));
    attention_forward<double>(space, vec(o), vec(att), cvec(d_qkv), c.B, c.T, c.NH, c.KVH, c.hs);
    attention_backward<double>(space, vec(dqkv), vec(datt), cvec(d_dout), cvec(d_qkv), cvec(att), c.B, c.T, c.NH, c.KVH,
                               c.hs);
  } else {
    const auto seg = to_device(c.offsets);
    auto work = to_device<double>(nan_filled(flash_attention_backward_workspace(c.B, c.T, c.NH)));
    flash_attention_backward<double>(space, vec(dqkv), cvec(d_dout), cvec(d_qkv), cvec(to_device<double>(out)),
                                     cvec(to_device<double>(lse)), c.B, c.T, c.NH, c.KVH, c.hs,
                                     AttentionSegments{cvec(seg), c.docs}, vec(work));
  }
  return to_host(dqkv);
}

double normwise_error(const Host& got, const Host& want) {
  double worst = 0, scale = 0;
  for (std::size_t i = 0; i < want.size(); ++i) {
    worst = std::max(worst, std::fabs(got[i] - want[i]));
    scale = std::max(scale, std::fabs(want[i]));
  }
  return worst / scale;
}

TEST(FlashAttentionMma, TileWalksVisitEveryTilePairWithAVisibleScore) {
  for (const Case& c : kCases) {
    SCOPED_TRACE(c.name());
    const detail::DocumentBounds docs{c.offsets.empty() ? nullptr : c.offsets.data(), c.docs, c.T};
    const int tiles = flash_mma::tile_count(c.T);
    for (int b = 0; b < c.B; ++b) {
      std::set<std::pair<int, int>> by_query, by_key, needed;  // (qt, kt)
      for (int qt = 0; qt < tiles; ++qt)
        for (int kt = flash_mma::first_kv_tile(docs, b, qt); kt <= qt; ++kt) by_query.insert({qt, kt});
      for (int kt = 0; kt < tiles; ++kt)
        for (int qt = kt; qt <= flash_mma::last_query_tile(docs, b, kt); ++qt) by_key.insert({qt, kt});
      for (int i = 0; i < c.T; ++i)
        for (int j = 0; j < c.T; ++j)
          if (flash_mma::visible(i, j, docs.start(b, i), c.T)) needed.insert({i / 64, j / 64});
      for (const auto& pair : needed) {
        EXPECT_TRUE(by_query.count(pair)) << "dQ misses tiles " << pair.first << ", " << pair.second;
        EXPECT_TRUE(by_key.count(pair)) << "dK/dV miss tiles " << pair.first << ", " << pair.second;
      }
      for (const auto& [qt, kt] : by_key) EXPECT_LT(qt, tiles);
    }
  }
}

// A case's 16-bit inputs and what a 16-bit forward hands the backward: out rounded to H, lse to float.
struct Inputs {
  Host qkv, dout, out, lse;
};
template <class H>
Inputs inputs_for(const Case& c, std::uint64_t seed) {
  Inputs in{rounded<H>(random_vector(c.qkv_size(), seed, -2.0, 2.0)),
            rounded<H>(random_vector(c.out_size(), seed + 1)),
            {},
            {}};
  const auto [out, lse] = forward_in_double(c, in.qkv);
  in.out = rounded<H>(out);
  in.lse = rounded<float>(lse);
  return in;
}

template <class H>
Host emulated(const Case& c, const Inputs& in) {
  return emulate_mma_backward<H>({c.B, c.T, c.NH, c.KVH, c.hs, in.qkv, in.dout, in.out, in.lse, c.offsets, c.docs});
}

// H's unit roundoff: 2^-8 for bf16, 2^-11 for fp16.
template <class H>
double unit_roundoff() {
  return std::is_same_v<H, bf16> ? std::ldexp(1.0, -8) : std::ldexp(1.0, -11);
}

template <class H>
class FlashAttentionMmaPrecision : public ::testing::Test {};
using Halves = ::testing::Types<bf16, fp16>;
TYPED_TEST_SUITE(FlashAttentionMmaPrecision, Halves);

// The emulation's gradient against the one in double on the same 16-bit inputs (the forward's out rounded
// to H, lse to float, as a 16-bit run hands them over), beside the Kokkos kernel's (which keeps P in
// float). Rounding dqkv alone costs about u/2 normwise, P and dS a little more: held to 2u, where a wrong
// mask, tile or scale is off by order 1 (a mask one key short, or a tile walk one tile short, fails it).
TYPED_TEST(FlashAttentionMmaPrecision, EmulationEqualsTheGradientInDouble) {
  using H = TypeParam;
  const double u = unit_roundoff<H>();
  for (const Case& c : kCases) {
    SCOPED_TRACE(c.name());
    const Inputs in = inputs_for<H>(c, 7 + c.T);
    const Host want = reference_dqkv(c, in.qkv, in.dout, in.out, in.lse);
    const Host got = emulated<H>(c, in);

    const auto seg = to_device(c.offsets);
    auto kokkos = to_device<H>(nan_filled(c.qkv_size()));
    auto work = to_device<float>(nan_filled(flash_attention_backward_workspace(c.B, c.T, c.NH)));
    flash_attention_backward<H>(ExecSpace{}, vec(kokkos), cvec(to_device<H>(in.dout)), cvec(to_device<H>(in.qkv)),
                                cvec(to_device<H>(in.out)), cvec(to_device<float>(in.lse)), c.B, c.T, c.NH, c.KVH, c.hs,
                                AttentionSegments{cvec(seg), c.docs}, vec(work));
    const double error = normwise_error(got, want), kokkos_error = normwise_error(to_host(kokkos), want);
    std::cout << c.name() << ": normwise error / u: tensor-core order " << error / u << ", Kokkos kernel "
              << kokkos_error / u << "\n";
    EXPECT_LT(error, 2 * u);
  }
}

#ifdef KOKKOS_ENABLE_CUDA
// The kernel on the device against its emulation: the same roundings at the same points, the tensor
// cores' own order of terms inside each product, so within 2u normwise; and a second run bitwise the first.
TYPED_TEST(FlashAttentionMmaPrecision, KernelEqualsItsEmulationAndItself) {
  using H = TypeParam;
  const double u = unit_roundoff<H>();
  for (const Case& c : kCases) {
    SCOPED_TRACE(c.name());
    const Inputs in = inputs_for<H>(c, 17 + c.T);
    const Host want = emulated<H>(c, in);
    const auto seg = to_device(c.offsets);
    const auto d_qkv = to_device<H>(in.qkv), d_dout = to_device<H>(in.dout), d_out = to_device<H>(in.out);
    const auto d_lse = to_device<float>(in.lse);
    auto work = to_device<float>(nan_filled(std::size_t(c.B) * c.NH * c.T));
    Host runs[2];
    for (Host& run : runs) {
      auto dqkv = to_device<H>(nan_filled(c.qkv_size()));
      ASSERT_TRUE(flash_mma::attention_backward<H>(ExecSpace{}.cuda_stream(), dqkv.data(), d_dout.data(), d_qkv.data(),
                                                   d_out.data(), d_lse.data(), {c.B, c.T, c.NH, c.KVH, c.hs},
                                                   c.docs ? seg.data() : nullptr, c.docs, work.data()));
      run = to_host(dqkv);
    }
    EXPECT_LT(normwise_error(runs[0], want), 2 * u);
    EXPECT_EQ(runs[0], runs[1]);
  }
}
#endif

}  // namespace
}  // namespace meshtrain::test
