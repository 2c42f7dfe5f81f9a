// The ring driven over a real context-parallel group (model/impl/context_ring.hpp; the world is the group:
// run with 1, 2 and 4 ranks): each rank's output, log-sum-exp and dq|dk|dv rows equal the fused kernel's
// on the whole sequence (ring_attention_cases.hpp: documents across the chunks, GQA, chunk rows no multiple
// of the tiles; 1e-12 in double, 2e-6 in float: at 4 ranks the chunks of 35 rows make sequences of 280
// positions, whose dk sums differ from the fused kernel's by up to 1.1e-6), its K/V blocks and dK/dV partial sums sent
// and received non-blocking around the ring; a second backward gives the same bits (the partial sums add in ring
// order).
#include "model/impl/context_ring.hpp"

#include "parallel/comm.hpp"
#include "ring_attention_cases.hpp"

#include <mpi.h>

#include <memory>

namespace meshtrain::test {
namespace {

// A ring over `cp` for `shape`, its buffers carved from `storage` as a stage carves them from its scratch.
template <class Real>
ContextRing<Real> ring_over(Comm& cp, const typename ContextRing<Real>::Shape& shape, Buffer<Real>& storage) {
  using Buffers = typename ContextRing<Real>::Buffers;
  const Buffers buffers = carving::allocate_and_carve<Real, Buffers>(
      storage, "meshtrain::test::context_ring",
      [&](carving::Carver<Real>& c) { return ContextRing<Real>::carve(c, shape, cp.size()); });
  return ContextRing<Real>(ExecSpace(), &cp, shape, buffers);
}

template <class Real>
void expect_ring_equals_whole(const Case& c, Comm& cp, double tolerance) {
  using A = accum_t<Real>;
  // The cases' cp is the kernels' simulation; here the group decides it, at the cases' chunk sizes.
  Case here = c;
  here.cp = cp.size();
  if (here.docs > 0) here.offsets = documents_of(here.T());
  SCOPED_TRACE(here.name());
  ExecSpace space;
  const int B = here.B, T = here.T(), NH = here.NH, KVH = here.KVH, hs = here.hs, W = here.width();
  const WholeSequence<Real> whole(space, here);
  Buffer<Real> storage;
  ContextRing<Real> ring = ring_over<Real>(cp, {B, T, NH, KVH, hs}, storage);
  const ContextChunks mine = ring.chunks_of(cp.rank());
  const int Tl = ring.local_rows();
  const Buffer<Real> qkv = to_device<Real>(local_rows(whole.qkv, B, T, W, mine));
  const Buffer<Real> dout = to_device<Real>(local_rows(whole.dout, B, T, NH * hs, mine));
  Buffer<Real> out("out", std::size_t(B) * Tl * NH * hs), dqkv("dqkv", std::size_t(B) * Tl * W);
  Buffer<A> lse("lse", std::size_t(B) * NH * Tl);
  ring.forward(vec(out), vec(lse), cvec(qkv), whole.segments);
  expect_rows_close(to_host(out), local_rows(whole.out, B, T, NH * hs, mine), tolerance, "out");
  expect_rows_close(to_host(lse), local_lse(whole.lse, B, NH, T, mine), tolerance, "lse");
  ring.backward(vec(dqkv), cvec(dout), cvec(qkv), cvec(out), cvec(lse), whole.segments);
  const std::vector<Real> first = raw(dqkv);
  expect_rows_close(to_host(dqkv), local_rows(whole.dqkv, B, T, W, mine), tolerance, "dqkv");
  ring.backward(vec(dqkv), cvec(dout), cvec(qkv), cvec(out), cvec(lse), whole.segments);
  EXPECT_TRUE(first == raw(dqkv)) << "a second backward differs";
}

TEST(ContextRing, EqualsTheWholeSequence) {
  const std::unique_ptr<Comm> cp = make_mpi_comm(MPI_COMM_WORLD);
  for (const Case& c : ring_cases) {
    expect_ring_equals_whole<double>(c, *cp, 1e-12);
    expect_ring_equals_whole<float>(c, *cp, 2e-6);
  }
}

TEST(ContextRing, RefusesSequencesThatDoNotSplit) {
  const std::unique_ptr<Comm> cp = make_mpi_comm(MPI_COMM_WORLD);
  const int T = 2 * cp->size() + 1;  // one position too many for 2·cp chunks
  Buffer<float> storage;
  EXPECT_THROW(ring_over<float>(*cp, {1, T, 2, 1, 4}, storage), std::invalid_argument);
}

}  // namespace
}  // namespace meshtrain::test
