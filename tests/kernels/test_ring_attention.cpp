// Ring attention (kernels/ring_attention.hpp) against the fused kernel on the whole sequence
// (kernels/fused_attention.hpp): cp ranks simulated in one process, each holding its two load-balanced
// chunks, folding every rank's K/V block in ring order (its own first) forward, and backward adding dq
// over the blocks and each block's dk, dv over the ranks it visits, back at its owner. The outputs, the
// log-sum-exps and every column of dqkv must equal the whole sequence's rows (1e-12 in double, 1e-6 in
// float, bf16 to its rounding), multi-head and grouped-query, with packed documents that cross the chunks, at chunk
// sizes that are no multiple of either fused kernel's tile, and cp 1 (one rank, both chunks), 2 and 4.
#include "kernels/fused_attention.hpp"
#include "kernels/ring_attention.hpp"

#include "kernel_test_utils.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

namespace meshtrain::test {
namespace {

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
Host local_rows(const Host& whole, int B, int T, int cols, const ContextChunks& chunks) {
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
Host local_lse(const Host& whole, int B, int NH, int T, const ContextChunks& chunks) {
  const int Tl = chunks.local_rows();
  Host out(std::size_t(B) * NH * Tl);
  for (int bh = 0; bh < B * NH; ++bh) {
    for (int r = 0; r < Tl; ++r) out[std::size_t(bh) * Tl + r] = whole[std::size_t(bh) * T + chunks.position(r)];
  }
  return out;
}

// |actual − expected| ≤ tolerance · (1 + |expected|), the worst element reported.
void expect_close(const Host& expected, const Host& actual, double tolerance, const std::string& what) {
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

template <class Real>
void expect_ring_equals_whole(const Case& c, double tolerance) {
  using A = accum_t<Real>;
  SCOPED_TRACE(c.name());
  ExecSpace space;
  const int B = c.B, T = c.T(), NH = c.NH, KVH = c.KVH, hs = c.hs, W = c.width();
  const Host qkv = random_vector(std::size_t(B) * T * W, 11, -2.0, 2.0);
  const Host dout = random_vector(std::size_t(B) * T * NH * hs, 12);
  Buffer<int> offsets("meshtrain::test::offsets", c.offsets.size());
  {
    auto mirror = Kokkos::create_mirror_view(offsets);
    for (std::size_t i = 0; i < c.offsets.size(); ++i) mirror(i) = c.offsets[i];
    Kokkos::deep_copy(offsets, mirror);
  }
  const AttentionSegments segments{CVec<int>(offsets.data(), offsets.extent(0)), c.docs};

  // The whole sequence through the fused kernel.
  const Buffer<Real> whole_qkv = to_device<Real>(qkv), whole_dout = to_device<Real>(dout);
  Buffer<Real> whole_out("out", std::size_t(B) * T * NH * hs), whole_dqkv("dqkv", qkv.size());
  Buffer<A> whole_lse("lse", std::size_t(B) * NH * T);
  Buffer<A> workspace("workspace", fused_attention_workspace<Real>(B, T, NH, hs));
  fused_attention_forward<Real>(space, vec(whole_out), vec(whole_lse), cvec(whole_qkv), B, T, NH, KVH, hs, segments,
                                vec(workspace));
  fused_attention_backward<Real>(space, vec(whole_dqkv), cvec(whole_dout), cvec(whole_qkv), cvec(whole_out),
                                 cvec(whole_lse), B, T, NH, KVH, hs, segments, vec(workspace));
  const Host out = to_host(whole_out), lse = to_host(whole_lse), dqkv = to_host(whole_dqkv);

  // Each rank's rows, its K/V block, its forward around the ring.
  const int Tl = 2 * c.rows;
  std::vector<ContextChunks> chunks;
  std::vector<Buffer<Real>> local_qkv, local_dout, blocks, local_out;
  std::vector<Buffer<A>> lses;
  for (int r = 0; r < c.cp; ++r) {
    chunks.push_back(ContextChunks::of_rank(r, c.cp, T));
    local_qkv.push_back(to_device<Real>(local_rows(qkv, B, T, W, chunks[r])));
    local_dout.push_back(to_device<Real>(local_rows(dout, B, T, NH * hs, chunks[r])));
    blocks.emplace_back("kv", std::size_t(B) * Tl * 2 * KVH * hs);
    ring_attention_pack<Real>(space, vec(blocks[r]), cvec(local_qkv[r]), B, Tl, NH, KVH, hs);
  }
  for (int r = 0; r < c.cp; ++r) {
    Buffer<A> running("running", std::size_t(B) * Tl * NH * hs);
    lses.emplace_back("lse", std::size_t(B) * NH * Tl);
    ring_attention_begin<A>(space, vec(running), vec(lses[r]));
    for (int step = 0; step < c.cp; ++step) {
      const int from = (r - step + c.cp) % c.cp;
      ring_attention_forward_block<Real>(space, vec(running), vec(lses[r]), cvec(local_qkv[r]), chunks[r],
                                         cvec(blocks[from]), chunks[from], B, T, NH, KVH, hs, segments);
    }
    local_out.emplace_back("out", std::size_t(B) * Tl * NH * hs);
    ring_attention_end<Real>(space, vec(local_out[r]), cvec(running));
    expect_close(local_rows(out, B, T, NH * hs, chunks[r]), to_host(local_out[r]), tolerance,
                 "rank " + std::to_string(r) + " out");
    expect_close(local_lse(lse, B, NH, T, chunks[r]), to_host(lses[r]), tolerance,
                 "rank " + std::to_string(r) + " lse");
  }

  // Backward: each block's dk, dv gathered from every rank it visits, in ring order, back at its owner.
  std::vector<Buffer<A>> dq, dkv, d;
  for (int r = 0; r < c.cp; ++r) {
    dq.emplace_back("dq", std::size_t(B) * Tl * NH * hs);
    dkv.emplace_back("dkv", std::size_t(B) * Tl * 2 * KVH * hs);
    d.emplace_back("d", std::size_t(B) * NH * Tl);
    // NaN first: begin must clear what the blocks add into.
    Kokkos::deep_copy(dq[r], std::numeric_limits<A>::quiet_NaN());
    Kokkos::deep_copy(dkv[r], std::numeric_limits<A>::quiet_NaN());
    ring_attention_backward_begin<Real>(space, vec(d[r]), vec(dq[r]), vec(dkv[r]), cvec(local_dout[r]),
                                        cvec(local_out[r]), B, Tl, NH, hs);
  }
  for (int step = 0; step < c.cp; ++step) {
    for (int r = 0; r < c.cp; ++r) {
      const int from = (r - step + c.cp) % c.cp;
      ring_attention_backward_block<Real>(space, vec(dq[r]), vec(dkv[from]), cvec(local_qkv[r]), chunks[r],
                                          cvec(blocks[from]), chunks[from], cvec(local_dout[r]), cvec(lses[r]),
                                          cvec(d[r]), B, T, NH, KVH, hs, segments);
    }
  }
  for (int r = 0; r < c.cp; ++r) {
    Buffer<Real> local_dqkv("dqkv", std::size_t(B) * Tl * W);
    ring_attention_backward_end<Real>(space, vec(local_dqkv), cvec(dq[r]), cvec(dkv[r]), B, Tl, NH, KVH, hs);
    expect_close(local_rows(dqkv, B, T, W, chunks[r]), to_host(local_dqkv), tolerance,
                 "rank " + std::to_string(r) + " dqkv");
  }
}

// Documents of two sequences whose boundaries fall inside chunks, on them, and at the ends; one sequence
// with an empty document.
std::vector<int> documents_of(int T) { return {0, 5, T / 2 - 1, T / 2 + 3, T, 0, T / 4, T / 4, T - 1, T}; }

const Case cases[] = {
    {1, 37, 2, 4, 2, 8, {}, 0},                 // one rank: both chunks, no document
    {2, 35, 2, 4, 2, 8, {}, 0},                 // 140 positions: past the host tile of 64 rows
    {2, 35, 2, 4, 4, 6, documents_of(140), 4},  // multi-head, documents across the chunks
    {4, 9, 2, 6, 2, 4, documents_of(72), 4},    // eight chunks of 9 rows, groups of 3 query heads
    {4, 5, 1, 2, 1, 16, {}, 0},                 // multi-query
};

TEST(RingAttention, DoubleEqualsTheWholeSequence) {
  for (const Case& c : cases) expect_ring_equals_whole<double>(c, 1e-12);
}

TEST(RingAttention, FloatEqualsTheWholeSequence) {
  for (const Case& c : cases) expect_ring_equals_whole<float>(c, 1e-6);
}

// 16-bit operands widened as the fused kernel widens them, each result rounded once: within one or two
// units of bf16's last place (2^-8 relative).
TEST(RingAttention, Bf16EqualsTheWholeSequence) {
  for (const Case& c : cases) expect_ring_equals_whole<bf16>(c, 1.6e-2);
}

TEST(RingAttention, ChunksOfARank) {
  // Rank i of cp holds chunks i and 2cp − 1 − i: every chunk once, and each rank one early and one late.
  const int cp = 4, T = 8 * 3;
  std::vector<int> seen(std::size_t(T), 0);
  for (int r = 0; r < cp; ++r) {
    const ContextChunks c = ContextChunks::of_rank(r, cp, T);
    EXPECT_EQ(c.first + c.second, 2 * cp - 1);
    for (int i = 0; i < c.local_rows(); ++i) ++seen[std::size_t(c.position(i))];
  }
  EXPECT_EQ(std::count(seen.begin(), seen.end(), 1), T);
}

}  // namespace
}  // namespace meshtrain::test
