// Shared by the ring attention tests (test_ring_attention: the kernels, cp ranks simulated in one process;
// test_context_ring: the ring driven over a real cp group): the cases, the whole sequence through the
// fused kernel as the reference, and a rank's rows of it.
#pragma once

#include "kernels/fused_attention.hpp"
#include "kernels/ring_attention.hpp"

#include "kernel_test_utils.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

namespace meshtrain::test {

struct Case {
  int cp, rows;  // ranks, rows of a chunk (T = 2·cp·rows)
  int B, NH, KVH, hs;
  std::vector<int> offsets;  // documents: B·(docs+1) offsets, or none
  int docs;
  int T() const { return 2 * cp * rows; }
  int width() const { return (NH + 2 * KVH) * hs; }
  std::string name() const {
    return "cp " + std::to_string(cp) + " chunk rows " + std::to_string(rows) + " NH " + std::to_string(NH) + " KVH " +
           std::to_string(KVH) + " docs " + std::to_string(docs);
  }
};

// Of a [B, T, cols] array, rank `chunks`' rows: [B, 2·rows, cols].
inline Host local_rows(const Host& whole, int B, int T, int cols, const ContextChunks& chunks) {
  const int Tl = chunks.local_rows();
  Host out(std::size_t(B) * Tl * cols);
  for (int b = 0; b < B; ++b) {
    for (int r = 0; r < Tl; ++r) {
      const auto from = whole.begin() + (long(b) * T + chunks.position(r)) * cols;
      std::copy(from, from + cols, out.begin() + (long(b) * Tl + r) * cols);
    }
  }
  return out;
}

// Of lse [B, NH, T], rank `chunks`' positions: [B, NH, 2·rows].
inline Host local_lse(const Host& whole, int B, int NH, int T, const ContextChunks& chunks) {
  const int Tl = chunks.local_rows();
  Host out(std::size_t(B) * NH * Tl);
  for (int bh = 0; bh < B * NH; ++bh) {
    for (int r = 0; r < Tl; ++r) out[std::size_t(bh) * Tl + r] = whole[std::size_t(bh) * T + chunks.position(r)];
  }
  return out;
}

// |actual − expected| ≤ tolerance · (1 + |expected|), the worst element reported: outputs of about unit size
// computed in two orders of summation differ by the unit's rounding, not by their own (kernel_test_utils'
// expect_close holds small elements to their own size).
inline void expect_rows_close(const Host& actual, const Host& expected, double tolerance, const std::string& what) {
  ASSERT_EQ(expected.size(), actual.size()) << what;
  double worst = 0;
  std::size_t at = 0;
  for (std::size_t i = 0; i < expected.size(); ++i) {
    const double excess = std::abs(actual[i] - expected[i]) / (1 + std::abs(expected[i]));
    if (!(excess <= worst)) {
      worst = std::isnan(excess) ? INFINITY : excess;
      at = i;
    }
  }
  EXPECT_LE(worst, tolerance) << what << "[" << at << "]: " << actual[at] << " instead of " << expected[at];
}

// The whole sequence's q|k|v and output gradient (the same draw on every rank), its documents, and the
// fused kernel's out, lse and dqkv of it: what every rank's rows must equal.
template <class Real>
struct WholeSequence {
  Host qkv, dout, out, lse, dqkv;
  Buffer<int> offsets;
  AttentionSegments segments;

  WholeSequence(const ExecSpace& space, const Case& c) {
    using A = accum_t<Real>;
    const int B = c.B, T = c.T(), NH = c.NH, KVH = c.KVH, hs = c.hs;
    qkv = random_vector(std::size_t(B) * T * c.width(), 11, -2.0, 2.0);
    dout = random_vector(std::size_t(B) * T * NH * hs, 12);
    offsets = to_device(c.offsets);
    segments = AttentionSegments{CVec<int>(offsets.data(), offsets.extent(0)), c.docs};
    const Buffer<Real> whole_qkv = to_device<Real>(qkv), whole_dout = to_device<Real>(dout);
    Buffer<Real> whole_out("out", std::size_t(B) * T * NH * hs), whole_dqkv("dqkv", qkv.size());
    Buffer<A> whole_lse("lse", std::size_t(B) * NH * T);
    Buffer<A> workspace("workspace", fused_attention_workspace<Real>(B, T, NH, hs));
    fused_attention_forward<Real>(space, vec(whole_out), vec(whole_lse), cvec(whole_qkv), B, T, NH, KVH, hs, segments,
                                  vec(workspace));
    fused_attention_backward<Real>(space, vec(whole_dqkv), cvec(whole_dout), cvec(whole_qkv), cvec(whole_out),
                                   cvec(whole_lse), B, T, NH, KVH, hs, segments, vec(workspace));
    out = to_host(whole_out);
    lse = to_host(whole_lse);
    dqkv = to_host(whole_dqkv);
  }
};

// Documents of two sequences whose boundaries fall inside chunks, on them, and at the ends; one sequence
// with an empty document.
inline std::vector<int> documents_of(int T) { return {0, 5, T / 2 - 1, T / 2 + 3, T, 0, T / 4, T / 4, T - 1, T}; }

inline const Case ring_cases[] = {
    {1, 37, 2, 4, 2, 8, {}, 0},                 // one rank: both chunks, no document
    {2, 35, 2, 4, 2, 8, {}, 0},                 // 140 positions: past the host tile of 64 rows
    {2, 35, 2, 4, 4, 6, documents_of(140), 4},  // multi-head, documents across the chunks
    {4, 9, 2, 6, 2, 4, documents_of(72), 4},    // eight chunks of 9 rows, groups of 3 query heads
    {4, 5, 1, 2, 1, 16, {}, 0},                 // multi-query
};

}  // namespace meshtrain::test
