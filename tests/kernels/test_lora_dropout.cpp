// lora.dropout's mask (kernels/lora_dropout.hpp) against a naive host re-implementation of its documented
// keying (Random123's Philox4x32-10 called here, not through the kernel's header): the values of
// drop(x) and of the gradient through it; the dropped fraction within binomial bounds; the same mask for the
// same key and another for another seed, step, block, module or sample; a micro-batch's rows and a rank's
// columns drawn as the whole batch draws them (the layouts' independence); a routed expert's rows drawn by
// their assignment (token, expert) wherever they stand, their ids made from the routing; and a digest of
// every result, bitwise the same whatever the team size and the thread count (MESHTRAIN_LORA_DROPOUT_DIGEST).
#include "kernels/lora_dropout.hpp"

#include "kernel_test_utils.hpp"

#include <Random123/philox.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>

namespace meshtrain::test {
namespace {

constexpr int T = 16, B = 4, N = B * T, IN = 96;

// usage.md's definition, written out: key = Philox under the seed of (step low, step high, block,
// module | "LK" << 16), its words 0 (low) and 1 (high); counter = (column, token low, token high, tag), the
// tag "LD" for a micro-batch's rows and "LE" | expert << 16 for a routed expert's; dropped when the draw's
// word 0 < round(p · 2^32).
bool naive_keeps(double p, std::uint64_t seed, std::int64_t step, int block, int module, std::uint64_t token,
                 std::uint64_t column, std::uint32_t tag = 0x4C44u) {
  r123::Philox4x32 philox;
  const r123::Philox4x32::ctr_type kc = {{std::uint32_t(step), std::uint32_t(std::uint64_t(step) >> 32),
                                          std::uint32_t(block), std::uint32_t(module) | (0x4C4Bu << 16)}};
  const r123::Philox4x32::key_type seed_key = {{std::uint32_t(seed), std::uint32_t(seed >> 32)}};
  const auto kw = philox(kc, seed_key);
  const std::uint64_t key = (std::uint64_t(kw[1]) << 32) | kw[0];
  const r123::Philox4x32::ctr_type c = {{std::uint32_t(column), std::uint32_t(token), std::uint32_t(token >> 32), tag}};
  const r123::Philox4x32::key_type k = {{std::uint32_t(key), std::uint32_t(key >> 32)}};
  return double(philox(c, k)[0]) >= std::round(p * 4294967296.0);
}

struct Draw {
  double p = 0.1;
  std::uint64_t seed = 1337;
  std::int64_t step = 3;
  std::uint64_t first_sample = 8;
  int block = 1, module = 2;
  LoraDropoutMask mask(std::uint64_t first_column = 0) const {
    return lora_dropout_mask(p, seed, step, first_sample, T, block, module, first_column);
  }
};

template <class Real>
std::vector<Real> dropped(const Draw& d, const Host& x, int rows, int in, int ldx, std::uint64_t first_column = 0) {
  const Buffer<Real> xd = to_device<Real>(x), out("out", std::size_t(rows) * in);
  lora_dropout_forward<Real>(ExecSpace(), vec(out), xd.data(), ldx, d.mask(first_column), rows, in);
  return raw(out);
}

// Which elements of an (N, IN) block of ones are kept.
std::vector<bool> kept(const Draw& d) {
  const std::vector<double> out = dropped<double>(d, filled(std::size_t(N) * IN, 1.0), N, IN, IN);
  std::vector<bool> k(out.size());
  for (std::size_t i = 0; i < out.size(); ++i) k[i] = out[i] != 0;
  return k;
}

std::size_t differing(const std::vector<bool>& a, const std::vector<bool>& b) {
  std::size_t n = 0;
  for (std::size_t i = 0; i < a.size(); ++i) n += a[i] != b[i] ? 1 : 0;
  return n;
}

TEST(LoraDropout, ForwardMatchesNaiveDraw) {
  const Draw d;
  const int ldx = IN + 5;  // a column range of a wider buffer
  const Host x = random_vector(std::size_t(N) * ldx, 7);
  const std::vector<double> got = dropped<double>(d, x, N, IN, ldx);
  std::size_t dropped_count = 0;
  for (int n = 0; n < N; ++n) {
    for (int c = 0; c < IN; ++c) {
      const bool keep =
          naive_keeps(d.p, d.seed, d.step, d.block, d.module, d.first_sample * T + std::uint64_t(n), std::uint64_t(c));
      const double want = keep ? x[std::size_t(n) * ldx + c] / (1 - d.p) : 0.0;
      ASSERT_NEAR(got[std::size_t(n) * IN + c], want, 1e-15) << n << "," << c;
      dropped_count += keep ? 0 : 1;
    }
  }
  EXPECT_GT(dropped_count, 0u);
}

TEST(LoraDropout, BackwardAddsMaskedGradient) {
  const Draw d;
  const int lddx = IN + 3;
  const Host g = random_vector(std::size_t(N) * IN, 11), dx0 = random_vector(std::size_t(N) * lddx, 12);
  const Buffer<double> gd = to_device<double>(g), dx = to_device<double>(dx0);
  lora_dropout_backward<double>(ExecSpace(), dx.data(), lddx, cvec(gd), d.mask(), N, IN);
  const Host got = to_host(dx);
  for (int n = 0; n < N; ++n) {
    for (int c = 0; c < lddx; ++c) {
      const std::size_t i = std::size_t(n) * lddx + c;
      const bool keep = c < IN && naive_keeps(d.p, d.seed, d.step, d.block, d.module,
                                              d.first_sample * T + std::uint64_t(n), std::uint64_t(c));
      const double want = dx0[i] + (keep ? g[std::size_t(n) * IN + c] / (1 - d.p) : 0.0);
      ASSERT_NEAR(got[i], want, 1e-15) << n << "," << c;
    }
  }
}

// The dropped count of n = N·IN elements against Binomial(n, p): within 5 standard deviations.
TEST(LoraDropout, RateWithinBinomialBounds) {
  for (double p : {0.05, 0.1, 0.5, 0.9}) {
    Draw d;
    d.p = p;
    const std::vector<bool> k = kept(d);
    const double n = double(k.size()), dropped_count = n - double(std::count(k.begin(), k.end(), true));
    EXPECT_NEAR(dropped_count, n * p, 5 * std::sqrt(n * p * (1 - p))) << "p = " << p;
  }
}

// Another key draws an independent mask: two masks differ in about 2p(1 − p) of their elements.
TEST(LoraDropout, SameKeySameMaskOtherKeyOther) {
  const Draw d;
  const std::vector<bool> base = kept(d);
  EXPECT_EQ(differing(base, kept(d)), 0u);
  const double n = double(base.size()), q = 2 * d.p * (1 - d.p), bound = 5 * std::sqrt(n * q * (1 - q));
  for (const auto& [what, change] :
       std::vector<std::pair<std::string, void (*)(Draw&)>>{{"seed", [](Draw& o) { o.seed += 1; }},
                                                            {"step", [](Draw& o) { o.step += 1; }},
                                                            {"block", [](Draw& o) { o.block += 1; }},
                                                            {"module", [](Draw& o) { o.module += 1; }},
                                                            {"micro-batch", [](Draw& o) { o.first_sample += B; }}}) {
    Draw other = d;
    change(other);
    EXPECT_NEAR(double(differing(base, kept(other))), n * q, bound) << "another " << what;
  }
}

// Two micro-batches of B/2 samples draw the rows of one of B; two tensor-parallel ranks' column halves
// (first_column their offset) the columns of the whole input.
TEST(LoraDropout, IndependentOfLayout) {
  const Draw whole;
  const Host x = random_vector(std::size_t(N) * IN, 5);
  const std::vector<float> all = dropped<float>(whole, x, N, IN, IN);
  const std::size_t half_rows = std::size_t(N / 2) * IN;
  for (int micro = 0; micro < 2; ++micro) {
    Draw part = whole;
    part.first_sample = whole.first_sample + std::uint64_t(micro) * (B / 2);
    const Host xs(x.begin() + std::ptrdiff_t(micro * half_rows), x.begin() + std::ptrdiff_t((micro + 1) * half_rows));
    const std::vector<float> got = dropped<float>(part, xs, N / 2, IN, IN);
    EXPECT_TRUE(bitwise_equal(got, std::vector<float>(all.begin() + std::ptrdiff_t(micro * half_rows),
                                                      all.begin() + std::ptrdiff_t((micro + 1) * half_rows))))
        << "micro-batch " << micro;
  }
  for (int rank = 0; rank < 2; ++rank) {
    const int cols = IN / 2;
    // This rank's columns, as a row-parallel module's input holds them: x + rank·cols, row stride IN.
    const Buffer<float> xd = to_device<float>(x), out("out", std::size_t(N) * cols);
    lora_dropout_forward<float>(ExecSpace(), vec(out), xd.data() + rank * cols, IN,
                                whole.mask(std::uint64_t(rank) * cols), N, cols);
    const std::vector<float> got = raw(out);
    for (int n = 0; n < N; ++n) {
      for (int c = 0; c < cols; ++c) {
        ASSERT_EQ(got[std::size_t(n) * cols + c], all[std::size_t(n) * IN + rank * cols + c]) << rank;
      }
    }
  }
}

// Under context parallelism a rank holds two chunks of every sequence: its rows' bits are the whole
// micro-batch's rows at their global positions (cp 2 and 4 over T = 16).
TEST(LoraDropout, IndependentOfContextParallelism) {
  const Draw whole;
  const Host x = random_vector(std::size_t(N) * IN, 9);
  const std::vector<double> all = dropped<double>(whole, x, N, IN, IN);
  for (int cp : {2, 4}) {
    for (int rank = 0; rank < cp; ++rank) {
      const ContextChunks chunks = ContextChunks::of_rank(rank, cp, T);
      const int Tl = chunks.local_rows();
      Host xs, want;
      for (int b = 0; b < B; ++b) {
        for (int r = 0; r < Tl; ++r) {
          const auto row = std::ptrdiff_t((std::size_t(b) * T + std::size_t(chunks.position(r))) * IN);
          xs.insert(xs.end(), x.begin() + row, x.begin() + row + IN);
          want.insert(want.end(), all.begin() + row, all.begin() + row + IN);
        }
      }
      const Buffer<double> xd = to_device<double>(xs), out("out", xs.size());
      const LoraDropoutMask mask = lora_dropout_mask(whole.p, whole.seed, whole.step, whole.first_sample, T,
                                                     whole.block, whole.module, 0, chunks);
      lora_dropout_forward<double>(ExecSpace(), vec(out), xd.data(), IN, mask, B * Tl, IN);
      EXPECT_TRUE(bitwise_equal(raw(out), std::vector<double>(want.begin(), want.end())))
          << "cp " << cp << " rank " << rank;
    }
  }
}

// R rows of a routed expert's input, each an assignment (global token, global expert): drop(x) and the
// gradient through it against the naive draw; a row's mask follows it to any place (the exchange's order),
// and one token's rows for two experts draw two masks.
constexpr int R = 40;
std::vector<std::int64_t> assignment_ids() {
  std::vector<std::int64_t> ids(2 * R);
  for (int i = 0; i < R; ++i) {
    ids[2 * std::size_t(i)] = std::int64_t((std::uint64_t(1) << 33) + std::uint64_t(i / 2));  // two rows per token
    ids[2 * std::size_t(i) + 1] = 3 + 5 * (i % 2) + 60 * (i % 3);                             // experts up to 128
  }
  return ids;
}
Buffer<std::int64_t> ids_on_device(const std::vector<std::int64_t>& host) {
  Buffer<std::int64_t> ids("ids", host.size());
  auto mirror = Kokkos::create_mirror_view(ids);
  for (std::size_t i = 0; i < host.size(); ++i) mirror(i) = host[i];
  Kokkos::deep_copy(ids, mirror);
  return ids;
}
std::vector<double> assignments_dropped(const Draw& d, const std::vector<std::int64_t>& ids, const Host& x,
                                        std::uint64_t first_column = 0) {
  const Buffer<std::int64_t> idd = ids_on_device(ids);
  const Buffer<double> xd = to_device<double>(x), out("out", std::size_t(R) * IN);
  lora_dropout_forward<double>(ExecSpace(), vec(out), xd.data(), IN,
                               AssignmentRows{d.mask(first_column), CVec<std::int64_t>(idd.data(), idd.extent(0))}, R,
                               IN, "test");
  return raw(out);
}

TEST(LoraDropout, AssignmentRowsMatchNaiveDraw) {
  const Draw d;
  const std::vector<std::int64_t> ids = assignment_ids();
  const Host x = random_vector(std::size_t(R) * IN, 21);
  const std::uint64_t first_column = 7;  // a row-parallel rank's columns
  const std::vector<double> got = assignments_dropped(d, ids, x, first_column);
  const Host g = random_vector(std::size_t(R) * IN, 22), dx0 = random_vector(std::size_t(R) * IN, 23);
  const Buffer<double> gd = to_device<double>(g), dx = to_device<double>(dx0);
  const Buffer<std::int64_t> idd = ids_on_device(ids);
  lora_dropout_backward<double>(ExecSpace(), dx.data(), IN, cvec(gd),
                                AssignmentRows{d.mask(first_column), CVec<std::int64_t>(idd.data(), idd.extent(0))}, R,
                                IN, "test");
  const Host dx_got = to_host(dx);
  std::size_t dropped_count = 0;
  for (int n = 0; n < R; ++n) {
    const std::uint64_t token = std::uint64_t(ids[2 * std::size_t(n)]),
                        expert = std::uint64_t(ids[2 * std::size_t(n) + 1]);
    for (int c = 0; c < IN; ++c) {
      const std::size_t i = std::size_t(n) * IN + c;
      const bool keep = naive_keeps(d.p, d.seed, d.step, d.block, d.module, token, first_column + std::uint64_t(c),
                                    0x4C45u | std::uint32_t(expert << 16));
      ASSERT_NEAR(got[i], keep ? x[i] / (1 - d.p) : 0.0, 1e-15) << n << "," << c;
      ASSERT_NEAR(dx_got[i], dx0[i] + (keep ? g[i] / (1 - d.p) : 0.0), 1e-15) << n << "," << c;
      dropped_count += keep ? 0 : 1;
    }
  }
  EXPECT_NEAR(double(dropped_count), R * IN * d.p, 5 * std::sqrt(R * IN * d.p * (1 - d.p)));
}

TEST(LoraDropout, AssignmentRowsKeepTheirMaskAnywhere) {
  const Draw d;
  const std::vector<std::int64_t> ids = assignment_ids();
  const Host ones = filled(std::size_t(R) * IN, 1.0);
  const std::vector<double> base = assignments_dropped(d, ids, ones);
  // The rows reversed, as another rank's exchange might order them: each row's mask moves with it.
  std::vector<std::int64_t> reversed(ids.size());
  for (int n = 0; n < R; ++n) {
    reversed[2 * std::size_t(n)] = ids[2 * std::size_t(R - 1 - n)];
    reversed[2 * std::size_t(n) + 1] = ids[2 * std::size_t(R - 1 - n) + 1];
  }
  const std::vector<double> moved = assignments_dropped(d, reversed, ones);
  for (int n = 0; n < R; ++n) {
    for (int c = 0; c < IN; ++c) {
      ASSERT_EQ(moved[std::size_t(n) * IN + c], base[std::size_t(R - 1 - n) * IN + c]) << n << "," << c;
    }
  }
  // Rows 0 and 1 are one token's, for experts 3 and 68: about 2p(1 − p) of their columns differ.
  std::size_t differ = 0;
  for (int c = 0; c < IN; ++c) differ += base[std::size_t(c)] != base[std::size_t(IN + c)] ? 1 : 0;
  EXPECT_GT(differ, 0u);
}

// The ids from a routing of N tokens, k = 2: token n's choice j at row slot(n, j) (−1: dropped); the
// micro-batch starts at sample 12 of sequences of 8 (token 96). Under context parallelism (rank 1 of 2: chunks
// 1 and 2 of 2 positions) local row n is position 2, 3, 4, 5 of its sequence, and row 4 the next sequence's 2.
TEST(LoraDropout, AssignmentIdsFromRouting) {
  constexpr int tokens = 5, k = 2;
  const std::vector<std::int32_t> slot = {4, 0, -1, 6, 1, 7, 2, -1, 3, 5};
  const std::vector<std::int32_t> expert = {2, 0, 1, 3, 0, 3, 1, 2, 1, 2};
  const Buffer<std::int32_t> sd = to_device(slot), ed = to_device(expert);
  const Buffer<std::int64_t> ids("ids", 2 * 8);
  const auto ids_of = [&](const ContextChunks& chunks) {
    const LoraDropoutMask mask = lora_dropout_mask(0.25, 7, 3, 12, 8, 0, 0, 0, chunks);
    lora_assignment_ids(ExecSpace(), Vec<std::int64_t>(ids.data(), ids.extent(0)), CVec<int>(sd.data(), sd.extent(0)),
                        CVec<int>(ed.data(), ed.extent(0)), mask, tokens, k);
    return raw(ids);
  };
  const std::vector<std::int64_t> want = {96 + 0, 0, 96 + 2, 0, 96 + 3, 1, 96 + 4, 1,
                                          96 + 0, 2, 96 + 4, 2, 96 + 1, 3, 96 + 2, 3};
  EXPECT_EQ(ids_of({}), want);
  // Token n → 96 + {2, 3, 4, 5, 10}[n].
  const std::vector<std::int64_t> want_cp = {96 + 2, 0, 96 + 4,  0, 96 + 5, 1, 96 + 10, 1,
                                             96 + 2, 2, 96 + 10, 2, 96 + 3, 3, 96 + 4,  3};
  EXPECT_EQ(ids_of(ContextChunks::of_rank(1, 2, 8)), want_cp);
}

// FNV-1a over the bytes of drop(x) and the gradient through it in float, bf16 and double.
TEST(LoraDropout, Digest) {
  const char* path = std::getenv("MESHTRAIN_LORA_DROPOUT_DIGEST");
  if (path == nullptr) GTEST_SKIP() << "MESHTRAIN_LORA_DROPOUT_DIGEST is not set";
  std::uint64_t h = 1469598103934665603ull;
  auto add = [&](const auto& values) {
    const auto* bytes = reinterpret_cast<const unsigned char*>(values.data());
    for (std::size_t i = 0; i < values.size() * sizeof(values[0]); ++i) h = (h ^ bytes[i]) * 1099511628211ull;
  };
  const Draw d;
  const Host x = random_vector(std::size_t(N) * IN, 9);
  auto both = [&](auto zero) {
    using Real = decltype(zero);
    add(dropped<Real>(d, x, N, IN, IN));
    const Buffer<Real> g = to_device<Real>(x), dx = to_device<Real>(random_vector(std::size_t(N) * IN, 10));
    lora_dropout_backward<Real>(ExecSpace(), dx.data(), IN, cvec(g), d.mask(), N, IN);
    add(raw(dx));
    // A routed expert's rows, forward and backward.
    const Buffer<std::int64_t> ids = ids_on_device(assignment_ids());
    const AssignmentRows rows{d.mask(), CVec<std::int64_t>(ids.data(), ids.extent(0))};
    const Buffer<Real> xr = to_device<Real>(x), out("out", std::size_t(R) * IN);
    lora_dropout_forward<Real>(ExecSpace(), vec(out), xr.data(), IN, rows, R, IN, "test");
    add(raw(out));
    lora_dropout_backward<Real>(ExecSpace(), dx.data(), IN, cvec(g), rows, R, IN, "test");
    add(raw(dx));
  };
  both(float(0));
  both(bf16(0));
  both(double(0));
  std::ofstream(path) << std::hex << h << '\n';
  std::printf("lora dropout digest %016llx\n", static_cast<unsigned long long>(h));
}

}  // namespace
}  // namespace meshtrain::test
