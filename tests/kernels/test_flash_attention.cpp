// The fused causal attention (kernels/flash_attention.hpp) against the materialised path
// (kernels/attention.hpp) in double, multi-head and grouped-query, at sizes that are no multiple of the
// tile; float against double; bf16 and fp16 against float on the same inputs; document masks against
// each document run alone through the materialised path; its launches; and a digest of every result
// for the ctest runs under other team sizes and thread counts to compare bitwise
// (tests/kernels/CMakeLists.txt: flash_attention_digest_*).
#include "kernels/attention.hpp"
#include "kernels/flash_attention.hpp"
#include "kernels/flash_attention_host.hpp"

#include "common/kokkos_counters.hpp"
#include "kernel_test_utils.hpp"
#include "low_precision_utils.hpp"

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>

namespace meshtrain::test {
namespace {

struct Shape {
  int B, T, NH, KVH, hs;
  int row() const { return (NH + 2 * KVH) * hs; }
  std::size_t qkv_size() const { return std::size_t(B) * T * row(); }
  std::size_t out_size() const { return std::size_t(B) * T * NH * hs; }
  std::size_t lse_size() const { return std::size_t(B) * NH * T; }
  std::string name() const {
    return "B " + std::to_string(B) + " T " + std::to_string(T) + " NH " + std::to_string(NH) + " KVH " +
           std::to_string(KVH) + " hs " + std::to_string(hs);
  }
};

// Document offsets as AttentionSegments takes them: B·(docs+1), or none.
struct Documents {
  std::vector<int> offsets;
  int docs = 0;
};

struct Result {
  Host out, lse, dqkv;
};

// The device buffers of one flash run, kept for the bitwise digest.
template <class Real>
struct FlashBuffers {
  Buffer<Real> out, dqkv;
  Buffer<accum_t<Real>> lse;
};

Buffer<int> segment_buffer(const Documents& docs) {
  Buffer<int> buf("meshtrain::test::segments", docs.offsets.size());
  auto mirror = Kokkos::create_mirror_view(buf);
  for (std::size_t i = 0; i < docs.offsets.size(); ++i) mirror(i) = docs.offsets[i];
  Kokkos::deep_copy(buf, mirror);
  return buf;
}

// Which implementation runs: the Kokkos kernel, or the host's BLAS-tiled one (kernels/flash_attention_host.hpp,
// host builds only: elsewhere its tests skip).
enum class Variant { kernel, host_blas };
constexpr bool kHostBuild = Kokkos::SpaceAccessibility<HostSpace, MemSpace>::accessible;

template <class Real>
Buffer<Real> flash_forward_buffers(const Shape& s, const Buffer<Real>& qkv, const Documents& docs,
                                   Buffer<accum_t<Real>>& lse, Variant variant = Variant::kernel) {
  ExecSpace space;
  const auto seg = segment_buffer(docs);
  auto out = to_device<Real>(nan_filled(s.out_size()));
  lse = to_device<accum_t<Real>>(nan_filled(s.lse_size()));
  const AttentionSegments segments{cvec(seg), docs.docs};
  if constexpr (kHostBuild) {
    if (variant == Variant::host_blas) {
      auto work = to_device<accum_t<Real>>(nan_filled(flash_attention_host_workspace<Real>(s.T, s.hs)));
      flash_attention_host_forward<Real>(space, vec(out), vec(lse), cvec(qkv), s.B, s.T, s.NH, s.KVH, s.hs, segments,
                                         vec(work));
      return out;
    }
  }
  flash_attention_forward<Real>(space, vec(out), vec(lse), cvec(qkv), s.B, s.T, s.NH, s.KVH, s.hs, segments);
  return out;
}

template <class Real>
Buffer<Real> flash_backward_buffers(const Shape& s, const Buffer<Real>& qkv, const Buffer<Real>& dout,
                                    const Buffer<Real>& out, const Buffer<accum_t<Real>>& lse, const Documents& docs,
                                    Variant variant = Variant::kernel) {
  ExecSpace space;
  const auto seg = segment_buffer(docs);
  auto dqkv = to_device<Real>(nan_filled(s.qkv_size()));
  const AttentionSegments segments{cvec(seg), docs.docs};
  if constexpr (kHostBuild) {
    if (variant == Variant::host_blas) {
      auto work = to_device<accum_t<Real>>(nan_filled(flash_attention_host_workspace<Real>(s.T, s.hs)));
      flash_attention_host_backward<Real>(space, vec(dqkv), cvec(dout), cvec(qkv), cvec(out), cvec(lse), s.B, s.T, s.NH,
                                          s.KVH, s.hs, segments, vec(work));
      return dqkv;
    }
  }
  auto work = to_device<accum_t<Real>>(nan_filled(flash_attention_backward_workspace(s.B, s.T, s.NH)));
  flash_attention_backward<Real>(space, vec(dqkv), cvec(dout), cvec(qkv), cvec(out), cvec(lse), s.B, s.T, s.NH, s.KVH,
                                 s.hs, segments, vec(work));
  return dqkv;
}

template <class Real>
FlashBuffers<Real> run_flash_buffers(const Shape& s, const Host& qkv, const Host& dout, const Documents& docs,
                                     Variant variant = Variant::kernel) {
  const auto d_qkv = to_device<Real>(qkv), d_dout = to_device<Real>(dout);
  FlashBuffers<Real> r;
  r.out = flash_forward_buffers<Real>(s, d_qkv, docs, r.lse, variant);
  r.dqkv = flash_backward_buffers<Real>(s, d_qkv, d_dout, r.out, r.lse, docs, variant);
  return r;
}

template <class Real>
Result run_flash(const Shape& s, const Host& qkv, const Host& dout, const Documents& docs = {},
                 Variant variant = Variant::kernel) {
  const auto r = run_flash_buffers<Real>(s, qkv, dout, docs, variant);
  return {to_host(r.out), to_host(r.lse), to_host(r.dqkv)};
}

// Today's path: out and dqkv (its lse is not kept).
template <class Real>
Result run_materialized(const Shape& s, const Host& qkv, const Host& dout) {
  ExecSpace space;
  const std::size_t tt = std::size_t(s.B) * s.NH * s.T * s.T;
  auto d_qkv = to_device<Real>(qkv), d_dout = to_device<Real>(dout);
  auto out = to_device<Real>(nan_filled(s.out_size())), att = to_device<Real>(nan_filled(tt));
  auto dqkv = to_device<Real>(nan_filled(s.qkv_size())), datt = to_device<Real>(nan_filled(tt));
  attention_forward<Real>(space, vec(out), vec(att), cvec(d_qkv), s.B, s.T, s.NH, s.KVH, s.hs);
  attention_backward<Real>(space, vec(dqkv), vec(datt), cvec(d_dout), cvec(d_qkv), cvec(att), s.B, s.T, s.NH, s.KVH,
                           s.hs);
  return {to_host(out), {}, to_host(dqkv)};
}

// The first position of t's document in sequence b.
int document_start(const Documents& docs, int b, int t) {
  int start = 0;
  for (int d = 0; d < docs.docs; ++d) {
    const int o = docs.offsets[std::size_t(b) * (docs.docs + 1) + d];
    if (o <= t) start = o;
  }
  return start;
}

// lse_i = log Σ_j exp(scale q_i·k_j) over the keys row i sees, in long double on the host.
Host reference_lse(const Shape& s, const Host& qkv, const Documents& docs) {
  Host lse(s.lse_size());
  const int g = s.NH / s.KVH;
  const long double scale = 1.0L / std::sqrt(static_cast<long double>(s.hs));
  for (int b = 0; b < s.B; ++b)
    for (int h = 0; h < s.NH; ++h)
      for (int i = 0; i < s.T; ++i) {
        std::vector<long double> scores;
        long double top = -1e300L;
        for (int j = document_start(docs, b, i); j <= i; ++j) {
          long double dot = 0;
          for (int d = 0; d < s.hs; ++d)
            dot += static_cast<long double>(qkv[(std::size_t(b) * s.T + i) * s.row() + h * s.hs + d]) *
                   qkv[(std::size_t(b) * s.T + j) * s.row() + s.NH * s.hs + (h / g) * s.hs + d];
          scores.push_back(scale * dot);
          top = std::max(top, scores.back());
        }
        long double sum = 0;
        for (long double x : scores) sum += std::exp(x - top);
        lse[(std::size_t(b) * s.NH + h) * s.T + i] = static_cast<double>(top + std::log(sum));
      }
  return lse;
}

// Multi-head, grouped-query (KVH 1, 2) and multi-query; T of one row, of less than a tile, and of several
// tiles with a short last one; head sizes from 3 to 64 (tiles of 8 to 32 rows in double).
const std::vector<Shape> kShapes = {
    {1, 1, 2, 2, 3}, {2, 7, 4, 1, 5}, {1, 65, 4, 2, 24}, {2, 130, 3, 3, 64}, {2, 130, 4, 2, 5}, {1, 70, 6, 3, 64},
};

Host attention_inputs(const Shape& s, std::uint64_t seed) { return random_vector(s.qkv_size(), seed, -2.0, 2.0); }

TEST(FlashAttention, TilesAreWhatTheScratchHolds) {
  EXPECT_EQ(flash_attention_forward_tile<float>(64), 16);
  EXPECT_EQ(flash_attention_backward_tile<float>(64), 16);
  EXPECT_EQ(flash_attention_backward_tile<double>(64), 8);
  EXPECT_EQ(flash_attention_backward_tile<double>(5), 32);
  for (int hs : {3, 64, 128, 256}) {
    const int forward = flash_attention_forward_tile<float>(hs), backward = flash_attention_backward_tile<float>(hs);
    EXPECT_LE(detail::flash_forward_elements(forward, hs) * sizeof(float) + forward * sizeof(int), kFlashScratchBudget);
    EXPECT_LE(detail::flash_backward_elements(backward, hs) * sizeof(float) + backward * sizeof(int),
              kFlashScratchBudget);
  }
}

TEST(FlashAttention, EqualsTheMaterialisedPathInDouble) {
  for (const Shape& s : kShapes) {
    SCOPED_TRACE(s.name());
    const Host qkv = attention_inputs(s, 11 + s.T), dout = random_vector(s.out_size(), 12 + s.T);
    const Result flash = run_flash<double>(s, qkv, dout);
    const Result want = run_materialized<double>(s, qkv, dout);
    expect_close(flash.out, want.out, 1e-12, "out");
    expect_close(flash.lse, reference_lse(s, qkv, {}), 1e-12, "lse");
    expect_close(flash.dqkv, want.dqkv, 1e-12, "dqkv");
  }
}

// Float against double on inputs float holds exactly, beside today's float path on the same inputs: sums
// of up to T products of hs terms, in a different order from the GEMMs'; held to 1e-5 of the largest
// magnitude (~170 float ulps of it); the printed errors show both paths under 1e-6.
TEST(FlashAttention, FloatWithinRoundingOfDouble) {
  for (const Shape& s : kShapes) {
    SCOPED_TRACE(s.name());
    const Host qkv = rounded<float>(attention_inputs(s, 21 + s.T));
    const Host dout = rounded<float>(random_vector(s.out_size(), 22 + s.T));
    const Result want = run_flash<double>(s, qkv, dout);
    const Result flash = run_flash<float>(s, qkv, dout);
    const Result today = run_materialized<float>(s, qkv, dout);
    for (const auto& [name, got, ref, old] : {std::tuple{"out", &flash.out, &want.out, &today.out},
                                              std::tuple{"dqkv", &flash.dqkv, &want.dqkv, &today.dqkv}}) {
      expect_close_normwise(*got, *ref, 1e-5, name);
      double worst = 0, worst_old = 0, scale = 0;
      for (std::size_t i = 0; i < ref->size(); ++i) {
        worst = std::max(worst, std::fabs((*got)[i] - (*ref)[i]));
        worst_old = std::max(worst_old, std::fabs((*old)[i] - (*ref)[i]));
        scale = std::max(scale, std::fabs((*ref)[i]));
      }
      std::cout << s.name() << " " << name << ": normwise error flash " << worst / scale << ", materialised "
                << worst_old / scale << "\n";
    }
    expect_close_normwise(flash.lse, want.lse, 1e-5, "lse");
  }
}

// A 16-bit kernel widens its inputs and computes exactly as the float kernel does (the same float
// operations in the same order), then rounds out and dqkv once: on the same inputs its results are the
// float kernel's rounded, within one 16-bit ulp (low_precision_utils.hpp), and lse (float in both) equal
// to float accuracy. The float backward is handed the 16-bit out, as the 16-bit backward reads it.
template <class H>
class FlashAttentionLowPrecision : public ::testing::Test {};
using Halves = ::testing::Types<bf16, fp16>;
TYPED_TEST_SUITE(FlashAttentionLowPrecision, Halves);

TYPED_TEST(FlashAttentionLowPrecision, TheFloatKernelRoundedOnce) {
  using H = TypeParam;
  const Documents docs{{0, 5, 40, 70, 0, 70, 70, 70}, 3};
  for (const Shape& s : {Shape{2, 70, 4, 2, 64}, Shape{2, 70, 3, 3, 24}}) {
    SCOPED_TRACE(s.name());
    const Host qkv = rounded<H>(attention_inputs(s, 31)), dout = rounded<H>(random_vector(s.out_size(), 32));
    const auto qkv_f = to_device<float>(qkv), dout_f = to_device<float>(dout);
    const auto qkv_h = to_device<H>(qkv), dout_h = to_device<H>(dout);
    Buffer<float> lse_f, lse_h;
    const Buffer<float> out_f = flash_forward_buffers<float>(s, qkv_f, docs, lse_f);
    const Buffer<H> out_h = flash_forward_buffers<H>(s, qkv_h, docs, lse_h);
    expect_within_ulps<H>(to_host(out_h), to_host(out_f), kOneUlp, "out");
    expect_close(to_host(lse_h), to_host(lse_f), 1e-6, "lse");
    const Buffer<float> out_hf = to_device<float>(to_host(out_h));
    const Host dqkv_f = to_host(flash_backward_buffers<float>(s, qkv_f, dout_f, out_hf, lse_h, docs));
    const Host dqkv_h = to_host(flash_backward_buffers<H>(s, qkv_h, dout_h, out_h, lse_h, docs));
    expect_within_ulps<H>(dqkv_h, dqkv_f, kOneUlp, "dqkv");
  }
}

// Every document of every sequence alone through the materialised path (B = 1, T = its length), its rows
// put back where they were: what the document mask must give, values and gradients. Documents of one
// token, boundaries inside a tile and on one, sequences of different document counts (empty ones pad).
TEST(FlashAttention, DocumentMasksEqualEachDocumentAlone) {
  const std::vector<std::pair<Shape, Documents>> cases = {
      {{2, 70, 4, 2, 5}, {{0, 1, 17, 70, 70, 0, 32, 33, 64, 70}, 4}},
      {{1, 130, 4, 1, 24}, {{0, 48, 49, 50, 129, 130}, 5}},
      {{3, 9, 2, 2, 3}, {{0, 9, 9, 0, 1, 9, 0, 4, 9}, 2}},
  };
  for (const auto& [s, docs] : cases) {
    SCOPED_TRACE(s.name());
    const Host qkv = attention_inputs(s, 41 + s.T), dout = random_vector(s.out_size(), 42 + s.T);
    const Result flash = run_flash<double>(s, qkv, dout, docs);
    Host out(s.out_size()), dqkv(s.qkv_size());
    int documents = 0;
    for (int b = 0; b < s.B; ++b)
      for (int d = 0; d < docs.docs; ++d) {
        const int t0 = docs.offsets[std::size_t(b) * (docs.docs + 1) + d];
        const int t1 = docs.offsets[std::size_t(b) * (docs.docs + 1) + d + 1];
        if (t1 == t0) continue;
        ++documents;
        const Shape one{1, t1 - t0, s.NH, s.KVH, s.hs};
        const std::size_t first = std::size_t(b) * s.T + t0;
        const Host doc_qkv(qkv.begin() + first * s.row(), qkv.begin() + (first + one.T) * s.row());
        const Host doc_dout(dout.begin() + first * s.NH * s.hs, dout.begin() + (first + one.T) * s.NH * s.hs);
        const Result alone = run_materialized<double>(one, doc_qkv, doc_dout);
        std::copy(alone.out.begin(), alone.out.end(), out.begin() + first * s.NH * s.hs);
        std::copy(alone.dqkv.begin(), alone.dqkv.end(), dqkv.begin() + first * s.row());
      }
    EXPECT_GT(documents, s.B);
    expect_close(flash.out, out, 1e-12, "out");
    expect_close(flash.lse, reference_lse(s, qkv, docs), 1e-12, "lse");
    expect_close(flash.dqkv, dqkv, 1e-12, "dqkv");
  }
}

// One document per sequence, spelled out, is plain causal attention: the same bits.
TEST(FlashAttention, OneDocumentIsPlainCausal) {
  const Shape s{2, 65, 4, 2, 24};
  const Host qkv = attention_inputs(s, 51), dout = random_vector(s.out_size(), 52);
  const Result plain = run_flash<double>(s, qkv, dout);
  const Result one = run_flash<double>(s, qkv, dout, {{0, 65, 0, 65}, 1});
  EXPECT_EQ(plain.out, one.out);
  EXPECT_EQ(plain.lse, one.lse);
  EXPECT_EQ(plain.dqkv, one.dqkv);
}

TEST(FlashAttention, RejectsWhatItCannotRun) {
  const Shape s{1, 8, 4, 3, 4};
  const Host qkv = random_vector(std::size_t(8) * 40, 1), dout = random_vector(std::size_t(8) * 16, 2);
  EXPECT_THROW(run_flash<float>(s, qkv, dout), std::invalid_argument);  // 3 kv heads for 4 query heads
  const Shape ok{2, 8, 4, 2, 4};
  EXPECT_THROW(run_flash<float>(ok, attention_inputs(ok, 3), random_vector(ok.out_size(), 4), {{0, 8}, 1}),
               std::invalid_argument);  // offsets of one sequence for two
}

// Forward one launch, backward three (issue 25's budget: 2 and 3), nothing allocated: no T×T anywhere.
TEST(FlashAttention, LaunchesAndAllocations) {
  const Shape s{2, 70, 4, 2, 24};
  const Documents docs{{0, 30, 70, 0, 70, 70}, 2};
  const auto qkv = to_device<float>(attention_inputs(s, 61)), dout = to_device<float>(random_vector(s.out_size(), 62));
  auto out = to_device<float>(nan_filled(s.out_size())), lse = to_device<float>(nan_filled(s.lse_size()));
  auto dqkv = to_device<float>(nan_filled(s.qkv_size()));
  auto work = to_device<float>(nan_filled(flash_attention_backward_workspace(s.B, s.T, s.NH)));
  const auto seg = segment_buffer(docs);
  const AttentionSegments segments{cvec(seg), docs.docs};
  ExecSpace space;
  auto forward_call = [&] {
    flash_attention_forward<float>(space, vec(out), vec(lse), cvec(qkv), s.B, s.T, s.NH, s.KVH, s.hs, segments);
    space.fence();
  };
  auto backward_call = [&] {
    flash_attention_backward<float>(space, vec(dqkv), cvec(dout), cvec(qkv), cvec(out), cvec(lse), s.B, s.T, s.NH,
                                    s.KVH, s.hs, segments, vec(work));
    space.fence();
  };
  // Once uncounted: a backend may grow its team scratch pool on first use.
  forward_call();
  backward_call();
  const KokkosCounts forward = count_kokkos(forward_call);
  const KokkosCounts backward = count_kokkos(backward_call);
  EXPECT_EQ(forward.launches(), 1) << format_counts(forward);
  EXPECT_EQ(backward.launches(), 3) << format_counts(backward);
  EXPECT_EQ(forward.allocations + backward.allocations, 0);
  EXPECT_EQ(forward.reductions() + backward.reductions(), 0);
}

// The BLAS-tiled host variant: the kernel's results in double (so the materialised path's and each
// document's), with and without documents.
TEST(FlashAttentionHost, EqualsTheKernelInDouble) {
  if (!kHostBuild) GTEST_SKIP() << "a host build's variant";
  std::vector<std::pair<Shape, Documents>> cases;
  for (const Shape& s : kShapes) cases.push_back({s, {}});
  cases.push_back({{2, 70, 4, 2, 5}, {{0, 1, 17, 70, 70, 0, 32, 33, 64, 70}, 4}});
  cases.push_back({{1, 150, 4, 1, 24}, {{0, 48, 49, 50, 129, 150}, 5}});
  for (const auto& [s, docs] : cases) {
    SCOPED_TRACE(s.name() + " documents " + std::to_string(docs.docs));
    const Host qkv = attention_inputs(s, 81 + s.T), dout = random_vector(s.out_size(), 82 + s.T);
    const Result want = run_flash<double>(s, qkv, dout, docs);
    const Result host = run_flash<double>(s, qkv, dout, docs, Variant::host_blas);
    expect_close(host.out, want.out, 1e-12, "out");
    expect_close(host.lse, want.lse, 1e-12, "lse");
    expect_close(host.dqkv, want.dqkv, 1e-12, "dqkv");
  }
}

// T = 131072 (issue 25: long sequences), as 128 documents of 1024 positions so that it stays cheap: every
// position, offset and row index past 2^16 goes through the same arithmetic as a plain causal sequence
// of that length would. The first, a middle and the last document each equal that document alone (the
// kernel on T 1024), for the host variant here; the Kokkos kernel's loops index the same way and are
// checked on shorter sequences above (on the host its scalar tiles would take minutes at this length).
TEST(FlashAttentionHost, DocumentsOfALongSequenceEqualEachAlone) {
  if (!kHostBuild) GTEST_SKIP() << "a host build's variant";
  constexpr int T = 131072, length = 1024, docs = T / length;
  const Shape s{1, T, 2, 1, 4};
  Documents documents{std::vector<int>(docs + 1), docs};
  for (int d = 0; d <= docs; ++d) documents.offsets[std::size_t(d)] = d * length;
  const Host qkv = attention_inputs(s, 91), dout = random_vector(s.out_size(), 92);
  const Result all = run_flash<double>(s, qkv, dout, documents, Variant::host_blas);
  const Shape one{1, length, s.NH, s.KVH, s.hs};
  for (int d : {0, docs / 2 + 3, docs - 1}) {
    SCOPED_TRACE("document " + std::to_string(d));
    const std::size_t first = std::size_t(d) * length;
    const Host doc_qkv(qkv.begin() + first * s.row(), qkv.begin() + (first + length) * s.row());
    const Host doc_dout(dout.begin() + first * s.NH * s.hs, dout.begin() + (first + length) * s.NH * s.hs);
    const Result alone = run_flash<double>(one, doc_qkv, doc_dout);
    const Host out(all.out.begin() + first * s.NH * s.hs, all.out.begin() + (first + length) * s.NH * s.hs);
    const Host dqkv(all.dqkv.begin() + first * s.row(), all.dqkv.begin() + (first + length) * s.row());
    expect_close(out, alone.out, 1e-12, "out");
    expect_close(dqkv, alone.dqkv, 1e-12, "dqkv");
    for (int h = 0; h < s.NH; ++h) {  // lse [B, NH, T]: this document's rows of head h
      const Host lse(all.lse.begin() + std::size_t(h) * T + first,
                     all.lse.begin() + std::size_t(h) * T + first + length);
      const Host want(alone.lse.begin() + std::size_t(h) * length, alone.lse.begin() + std::size_t(h + 1) * length);
      expect_close(lse, want, 1e-12, "lse");
    }
  }
}

// As for the kernel: the 16-bit host variant is the float one rounded once.
TYPED_TEST(FlashAttentionLowPrecision, TheHostVariantIsItsFloatRoundedOnce) {
  using H = TypeParam;
  if (!kHostBuild) GTEST_SKIP() << "a host build's variant";
  const Documents docs{{0, 5, 100, 130, 0, 130, 130, 130}, 3};
  const Shape s{2, 130, 4, 2, 64};
  const Host qkv = rounded<H>(attention_inputs(s, 91)), dout = rounded<H>(random_vector(s.out_size(), 92));
  const auto qkv_f = to_device<float>(qkv), dout_f = to_device<float>(dout);
  const auto qkv_h = to_device<H>(qkv), dout_h = to_device<H>(dout);
  Buffer<float> lse_f, lse_h;
  const Buffer<float> out_f = flash_forward_buffers<float>(s, qkv_f, docs, lse_f, Variant::host_blas);
  const Buffer<H> out_h = flash_forward_buffers<H>(s, qkv_h, docs, lse_h, Variant::host_blas);
  expect_within_ulps<H>(to_host(out_h), to_host(out_f), kOneUlp, "out");
  expect_close(to_host(lse_h), to_host(lse_f), 1e-6, "lse");
  const Buffer<float> out_hf = to_device<float>(to_host(out_h));
  const Host dqkv_f = to_host(flash_backward_buffers<float>(s, qkv_f, dout_f, out_hf, lse_h, docs, Variant::host_blas));
  const Host dqkv_h = to_host(flash_backward_buffers<H>(s, qkv_h, dout_h, out_h, lse_h, docs, Variant::host_blas));
  expect_within_ulps<H>(dqkv_h, dqkv_f, kOneUlp, "dqkv");
}

// out, lse and dqkv of float, bf16 and double, GQA with documents, hashed: the ctest runs under teams of
// 1, 2 and 4 threads on 1 and 2 threads compare the digests byte for byte.
TEST(FlashAttention, Digest) {
  const char* path = std::getenv("MESHTRAIN_FLASH_DIGEST");
  if (path == nullptr) GTEST_SKIP() << "MESHTRAIN_FLASH_DIGEST is not set";
  std::uint64_t h = 1469598103934665603ull;
  auto add = [&](const auto& values) {
    const auto* bytes = reinterpret_cast<const unsigned char*>(values.data());
    for (std::size_t i = 0; i < values.size() * sizeof(values[0]); ++i) h = (h ^ bytes[i]) * 1099511628211ull;
  };
  auto run = [&]<class Real>(Real*) {
    for (const auto& [s, docs] : {std::pair{Shape{2, 130, 4, 2, 24}, Documents{{0, 3, 70, 130, 0, 130, 130, 130}, 3}},
                                  std::pair{Shape{1, 97, 4, 4, 64}, Documents{}}}) {
      const auto r = run_flash_buffers<Real>(s, attention_inputs(s, 71), random_vector(s.out_size(), 72), docs);
      add(raw(r.out));
      add(raw(r.lse));
      add(raw(r.dqkv));
    }
  };
  run(static_cast<float*>(nullptr));
  run(static_cast<bf16*>(nullptr));
  run(static_cast<double*>(nullptr));
  std::ofstream(path) << std::hex << h << '\n';
  std::printf("flash attention digest %016llx (team size asked %d)\n", static_cast<unsigned long long>(h),
              requested_team_size());
}

}  // namespace
}  // namespace meshtrain::test
