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
#include "kernels/ring_attention.hpp"
#include "parallel/comm.hpp"

#include <fmt/format.h>

#include <cstddef>
#include <stdexcept>

namespace meshtrain {

template <class Real>
class ContextRing {
 public:
  using A = accum_t<Real>;
  // B sequences of T positions (the whole sequence), NH query and KVH kv heads of hs channels.
  struct Shape {
    int B, T, NH, KVH, hs;
  };

  // cp: the context-parallel group (null: one rank). All buffers are allocated here.
  ContextRing(const ExecSpace& space, Comm* cp, Shape shape)
      : space_(space), cp_(cp), shape_(shape), ranks_(cp ? cp->size() : 1), rank_(cp ? cp->rank() : 0) {
    if (shape.T % (2 * ranks_) != 0) {
      throw std::invalid_argument(fmt::format(
          "context parallelism splits each sequence of {} positions into 2 × {} chunks: they must divide evenly",
          shape.T, ranks_));
    }
    const std::size_t rows = std::size_t(shape.B) * std::size_t(local_rows());
    const std::size_t q = rows * std::size_t(shape.NH * shape.hs), kv = rows * std::size_t(2 * shape.KVH * shape.hs);
    for (int i = 0; i < 2; ++i) {
      kv_[i] = Buffer<Real>("meshtrain::context_ring::kv", kv);
      dkv_[i] = Buffer<A>("meshtrain::context_ring::dkv", kv);
    }
    running_ = Buffer<A>("meshtrain::context_ring::out", q);
    dq_ = Buffer<A>("meshtrain::context_ring::dq", q);
    d_ = Buffer<A>("meshtrain::context_ring::d", std::size_t(shape.B) * std::size_t(shape.NH * local_rows()));
  }

  int local_rows() const { return shape_.T / ranks_; }
  ContextChunks chunks_of(int rank) const { return ContextChunks::of_rank(rank, ranks_, shape_.T); }

  // out [B, Tl, NH·hs] and lse [B, NH, Tl] of this rank's queries (qkv [B, Tl, (NH + 2KVH)·hs]) over every
  // rank's keys; `documents` are the whole sequences'.
  void forward(Vec<Real> out, Vec<A> lse, CVec<Real> qkv, const AttentionSegments& documents) {
    const Shape& s = shape_;
    ring_attention_pack<Real>(space_, whole(kv_[0]), qkv, s.B, local_rows(), s.NH, s.KVH, s.hs);
    ring_attention_begin<A>(space_, whole(running_), lse);
    int held = 0;
    for (int step = 0; step < ranks_; ++step) {
      Request sent, received;
      if (step + 1 < ranks_) pass_on(kv_[held], kv_[1 - held], kv_tag, sent, received);
      ring_attention_forward_block<Real>(space_, whole(running_), lse, qkv, chunks_of(rank_), CVec<Real>(kv_[held]),
                                         chunks_of(holder(step)), s.B, s.T, s.NH, s.KVH, s.hs, documents);
      received.wait();
      sent.wait();
      held = 1 - held;
    }
    ring_attention_end<Real>(space_, out, CVec<A>(running_));
  }

  // dqkv [B, Tl, (NH + 2KVH)·hs] from dout and the forward's qkv, out and lse.
  void backward(Vec<Real> dqkv, CVec<Real> dout, CVec<Real> qkv, CVec<Real> out, CVec<A> lse,
                const AttentionSegments& documents) {
    const Shape& s = shape_;
    ring_attention_pack<Real>(space_, whole(kv_[0]), qkv, s.B, local_rows(), s.NH, s.KVH, s.hs);
    ring_attention_backward_begin<Real>(space_, whole(d_), whole(dq_), whole(dkv_[0]), dout, out, s.B, local_rows(),
                                        s.NH, s.hs);
    int held = 0;
    for (int step = 0; step < ranks_; ++step) {
      Request sent, received;
      if (step + 1 < ranks_) pass_on(kv_[held], kv_[1 - held], kv_tag, sent, received);
      ring_attention_backward_block<Real>(space_, whole(dq_), whole(dkv_[held]), qkv, chunks_of(rank_),
                                          CVec<Real>(kv_[held]), chunks_of(holder(step)), dout, lse, CVec<A>(d_), s.B,
                                          s.T, s.NH, s.KVH, s.hs, documents);
      // The partial sum moves on with its block; the last hop brings this rank's own block's sum home.
      if (ranks_ > 1) {
        Request sum_sent, sum_received;
        pass_on(dkv_[held], dkv_[1 - held], dkv_tag, sum_sent, sum_received);
        sum_received.wait();
        sum_sent.wait();
      }
      received.wait();
      sent.wait();
      held = 1 - held;
    }
    // The last hop left this rank's own block's sum where `held` points after the flip; one rank kept it.
    const Buffer<A>& own = ranks_ > 1 ? dkv_[held] : dkv_[0];
    ring_attention_backward_end<Real>(space_, dqkv, CVec<A>(dq_), CVec<A>(own), s.B, local_rows(), s.NH, s.KVH, s.hs);
  }

 private:
  static constexpr int kv_tag = 0, dkv_tag = 1;

  // All of a buffer, as the kernels take it.
  template <class T>
  static Vec<T> whole(const Buffer<T>& b) {
    return slice(b, 0, b.extent(0));
  }

  // The rank whose block this rank holds at `step`.
  int holder(int step) const { return (rank_ - step + ranks_) % ranks_; }

  // Sends `from` to the next rank and receives the previous rank's into `into`, both left in flight.
  template <class T>
  void pass_on(const Buffer<T>& from, const Buffer<T>& into, int tag, Request& sent, Request& received) {
    const int next = (rank_ + 1) % ranks_, previous = (rank_ - 1 + ranks_) % ranks_;
    received = cp_->irecv(into.data(), into.extent(0), previous, tag);
    sent = cp_->isend(from.data(), from.extent(0), next, tag);
  }

  ExecSpace space_;
  Comm* cp_;
  Shape shape_;
  int ranks_, rank_;
  Buffer<Real> kv_[2];  // the block held and the one arriving
  Buffer<A> dkv_[2];    // the held block's dk, dv partial sum and the one arriving
  Buffer<A> running_;   // the running output (forward)
  Buffer<A> dq_;        // the running dq (backward)
  Buffer<A> d_;         // D_i = do_i·o_i
};

}  // namespace meshtrain
