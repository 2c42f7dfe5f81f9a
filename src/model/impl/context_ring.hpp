// Context parallelism's attention (issue 43, part 2): kernels/ring_attention.hpp's block kernels driven
// around the cp group. Each rank holds its two load-balanced chunks of every sequence (ContextChunks) and
// the q, k and v of those rows; the K/V blocks travel the ring rank → rank + 1, so that at step s a rank
// holds the block of rank − s.
//   forward:  cp steps, each folding the block held into the running output, while the block moves on
//             (non-blocking send and receive posted before the kernel, waited after it).
//   backward: the K/V blocks go round again; beside each travels its dk, dv partial sum: a rank adds its
//             queries' share and passes it on, and after cp steps (one more hop) every block's sum is
//             back at its owner, added in ring order from the owner on — the same order on every run.
// Messages: forward cp − 1 K/V blocks a rank sends; backward cp − 1 K/V blocks and cp dK/dV partial sums
// (in accum_t). One group of one rank sends nothing.
#pragma once

#include "core/exec.hpp"
#include "core/model_sizes.hpp"
#include "kernels/ring_attention.hpp"
#include "model/impl/carver.hpp"
#include "parallel/comm.hpp"

#include <fmt/format.h>

#include <cstddef>
#include <stdexcept>

namespace meshtrain {

// B sequences of T positions (the whole sequence), NH query and KVH kv heads of hs channels.
struct ContextRingShape {
  int B, T, NH, KVH, hs;
};

template <class Real>
class ContextRing {
 public:
  using A = accum_t<Real>;
  using Shape = ContextRingShape;

  // What the ring works in, carved from the stage's scratch (model/impl/carver.hpp: counted as the rest
  // of its activations are): the K/V block held and the one arriving, their dk, dv partial sums, the running
  // output (forward), the running dq and D_i = do_i·o_i (backward). The running output and dq share their
  // elements: each lives within one call, and a forward and a backward never overlap.
  struct Buffers {
    Vec<Real> kv[2];
    Vec<A> dkv[2];
    Vec<A> running, dq, d;
  };
  // The buffers of `shape` over `ranks` ranks; std::invalid_argument where 2·ranks does not divide T.
  static Buffers carve(carving::Carver<Real>& c, const Shape& shape, int ranks) {
    if (!context_chunks_divide(shape.T, ranks)) {
      throw std::invalid_argument(fmt::format(
          "context parallelism splits each sequence of {} positions into 2 × {} chunks: they must divide evenly",
          shape.T, ranks));
    }
    const std::size_t rows = std::size_t(shape.B) * std::size_t(shape.T / ranks);
    const std::size_t q = rows * std::size_t(shape.NH * shape.hs), kv = rows * std::size_t(2 * shape.KVH * shape.hs);
    Buffers b;
    for (Vec<Real>& block : b.kv) block = c.take(kv);
    for (Vec<A>& sum : b.dkv) sum = c.template take_as<A>(kv);
    b.running = c.template take_as<A>(q);
    b.dq = b.running;
    b.d = c.template take_as<A>(rows * std::size_t(shape.NH));
    return b;
  }

  // cp: the context-parallel group (null: one rank); `buffers` carved for its size.
  ContextRing(const ExecSpace& space, Comm* cp, Shape shape, const Buffers& buffers)
      : space_(space), cp_(cp), shape_(shape), ranks_(cp ? cp->size() : 1), rank_(cp ? cp->rank() : 0), b_(buffers) {
    if (!context_chunks_divide(shape.T, ranks_) ||
        b_.d.extent(0) != std::size_t(shape.B) * std::size_t(shape.T / ranks_) * std::size_t(shape.NH)) {
      throw std::invalid_argument(
          fmt::format("a context ring over {} ranks given buffers carved for another shape", ranks_));
    }
  }

  int local_rows() const { return shape_.T / ranks_; }
  ContextChunks chunks_of(int rank) const { return ContextChunks::of_rank(rank, ranks_, shape_.T); }

  // out [B, Tl, NH·hs] and lse [B, NH, Tl] of this rank's queries (qkv [B, Tl, (NH + 2KVH)·hs]) over every
  // rank's keys; `documents` are the whole sequences'.
  void forward(Vec<Real> out, Vec<A> lse, CVec<Real> qkv, const AttentionSegments& documents) {
    const Shape& s = shape_;
    ring_attention_pack<Real>(space_, b_.kv[0], qkv, s.B, local_rows(), s.NH, s.KVH, s.hs);
    ring_attention_begin<A>(space_, b_.running, lse);
    int held = 0;
    for (int step = 0; step < ranks_; ++step) {
      Request sent, received;
      if (step + 1 < ranks_) pass_on(b_.kv[held], b_.kv[1 - held], kv_tag, sent, received);
      ring_attention_forward_block<Real>(space_, b_.running, lse, qkv, chunks_of(rank_), CVec<Real>(b_.kv[held]),
                                         chunks_of(holder(step)), s.B, s.T, s.NH, s.KVH, s.hs, documents);
      received.wait();
      sent.wait();
      held = 1 - held;
    }
    ring_attention_end<Real>(space_, out, CVec<A>(b_.running));
  }

  // dqkv [B, Tl, (NH + 2KVH)·hs] from dout and the forward's qkv, out and lse.
  void backward(Vec<Real> dqkv, CVec<Real> dout, CVec<Real> qkv, CVec<Real> out, CVec<A> lse,
                const AttentionSegments& documents) {
    const Shape& s = shape_;
    ring_attention_pack<Real>(space_, b_.kv[0], qkv, s.B, local_rows(), s.NH, s.KVH, s.hs);
    ring_attention_backward_begin<Real>(space_, b_.d, b_.dq, b_.dkv[0], dout, out, s.B, local_rows(), s.NH, s.hs);
    int held = 0;
    for (int step = 0; step < ranks_; ++step) {
      Request sent, received;
      if (step + 1 < ranks_) pass_on(b_.kv[held], b_.kv[1 - held], kv_tag, sent, received);
      ring_attention_backward_block<Real>(space_, b_.dq, b_.dkv[held], qkv, chunks_of(rank_), CVec<Real>(b_.kv[held]),
                                          chunks_of(holder(step)), dout, lse, CVec<A>(b_.d), s.B, s.T, s.NH, s.KVH,
                                          s.hs, documents);
      // The partial sum moves on with its block; the last hop brings this rank's own block's sum home.
      if (ranks_ > 1) {
        Request sum_sent, sum_received;
        pass_on(b_.dkv[held], b_.dkv[1 - held], dkv_tag, sum_sent, sum_received);
        sum_received.wait();
        sum_sent.wait();
      }
      received.wait();
      sent.wait();
      held = 1 - held;
    }
    // The last hop left this rank's own block's sum where `held` points after the flip; one rank kept it.
    const Vec<A>& own = ranks_ > 1 ? b_.dkv[held] : b_.dkv[0];
    ring_attention_backward_end<Real>(space_, dqkv, CVec<A>(b_.dq), CVec<A>(own), s.B, local_rows(), s.NH, s.KVH, s.hs);
  }

 private:
  static constexpr int kv_tag = 0, dkv_tag = 1;

  // The rank whose block this rank holds at `step`.
  int holder(int step) const { return (rank_ - step + ranks_) % ranks_; }

  // Sends `from` to the next rank and receives the previous rank's into `into`, both left in flight.
  template <class T>
  void pass_on(const Vec<T>& from, const Vec<T>& into, int tag, Request& sent, Request& received) {
    const int next = (rank_ + 1) % ranks_, previous = (rank_ - 1 + ranks_) % ranks_;
    received = cp_->irecv(into.data(), into.extent(0), previous, tag);
    sent = cp_->isend(from.data(), from.extent(0), next, tag);
  }

  ExecSpace space_;
  Comm* cp_;
  Shape shape_;
  int ranks_, rank_;
  Buffers b_;
};

}  // namespace meshtrain
