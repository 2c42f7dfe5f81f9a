// Ring attention (kernels/ring_attention.hpp) against the fused kernel on the whole sequence
// (kernels/fused_attention.hpp): cp ranks simulated in one process, each holding its two load-balanced
// chunks, folding every rank's K/V block in ring order (its own first) forward, and backward adding dq
// over the blocks and each block's dk, dv over the ranks it visits, back at its owner. The outputs, the
// log-sum-exps and every column of dqkv must equal the whole sequence's rows (1e-12 in double, 1e-6 in
// float, bf16 to its rounding), multi-head and grouped-query, with packed documents that cross the chunks,
// at chunk sizes that are no multiple of either fused kernel's tile, and cp 1 (one rank, both chunks), 2
// and 4 (ring_attention_cases.hpp).
#include "ring_attention_cases.hpp"

#include <limits>

namespace meshtrain::test {
namespace {

template <class Real>
void expect_ring_equals_whole(const Case& c, double tolerance) {
  using A = accum_t<Real>;
  SCOPED_TRACE(c.name());
  ExecSpace space;
  const int B = c.B, T = c.T(), NH = c.NH, KVH = c.KVH, hs = c.hs, W = c.width();
  const WholeSequence<Real> whole(space, c);
  const AttentionSegments& segments = whole.segments;

  // Each rank's rows, its K/V block, its forward around the ring.
  const int Tl = 2 * c.rows;
  std::vector<ContextChunks> chunks;
  std::vector<Buffer<Real>> local_qkv, local_dout, blocks, local_out;
  std::vector<Buffer<A>> lses;
  for (int r = 0; r < c.cp; ++r) {
    chunks.push_back(ContextChunks::of_rank(r, c.cp, T));
    local_qkv.push_back(to_device<Real>(local_rows(whole.qkv, B, T, W, chunks[r])));
    local_dout.push_back(to_device<Real>(local_rows(whole.dout, B, T, NH * hs, chunks[r])));
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
    expect_rows_close(to_host(local_out[r]), local_rows(whole.out, B, T, NH * hs, chunks[r]), tolerance,
                      "rank " + std::to_string(r) + " out");
    expect_rows_close(to_host(lses[r]), local_lse(whole.lse, B, NH, T, chunks[r]), tolerance,
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
    expect_rows_close(to_host(local_dqkv), local_rows(whole.dqkv, B, T, W, chunks[r]), tolerance,
                      "rank " + std::to_string(r) + " dqkv");
  }
}

TEST(RingAttention, DoubleEqualsTheWholeSequence) {
  for (const Case& c : ring_cases) expect_ring_equals_whole<double>(c, 1e-12);
}

TEST(RingAttention, FloatEqualsTheWholeSequence) {
  for (const Case& c : ring_cases) expect_ring_equals_whole<float>(c, 1e-6);
}

// 16-bit operands widened as the fused kernel widens them, each result rounded once: within one or two
// units of bf16's last place (2^-8 relative).
TEST(RingAttention, Bf16EqualsTheWholeSequence) {
  for (const Case& c : ring_cases) expect_ring_equals_whole<bf16>(c, 1.6e-2);
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
