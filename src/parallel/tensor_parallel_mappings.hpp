// The tensor-parallel group's collectives, named by the region they enter or leave (as Megatron-LM
// names them), each a forward/backward pair: a layer calls forward(x) where its region starts or
// ends in the forward pass and backward(dx) at the mirror place of the backward pass, and the two
// are transposes of one another (tests/parallel/test_tp_mappings.cpp checks ⟨f(x), y⟩ = ⟨x, fᵀ(y)⟩).
// CopyToRegion (forward identity, backward all-reduce sum) and ReduceFromRegion (the reverse) are
// each a RegionMapping<forward step, backward step>, so the pair is the type.
//
// Which layer uses which: share/docs/design.md, Tensor parallel. The vocabulary-parallel
// cross-entropy's reductions, which have no backward, are VocabParallelStatistics below.
//
// Buffers are spans of the memory the group's backend serves (device memory under NCCL); every
// mapping works in place, so none allocates or copies. Element types: float, double, bf16, fp16 (the
// vocabulary statistics: float, double).
//
// Host code (no Kokkos here): each collective is ordered after the kernels that wrote its buffer by the
// group's Comm (parallel/comm.hpp). Without a group, or with a group of one rank, every mapping is the
// identity and does not communicate.
#pragma once

#include "parallel/comm.hpp"

#include <cstddef>
#include <span>
#include <utility>

namespace meshtrain {

// What a mapping does to a buffer in one direction (RegionMapping below): nothing, or sum it over
// the group.
enum class RegionStep { identity, sum };
// What a sequence-parallel mapping (SequenceMapping below) does between a rank's block of the token rows
// (the shard) and all of them (the whole): gather the shards into the whole, or sum the wholes and keep
// the shard.
enum class SequenceStep { gather, scatter };

// What the mappings share: the group (whose Comm orders each collective after the kernels that wrote
// its buffer, parallel/comm.hpp).
class TensorParallelGroup {
 public:
  TensorParallelGroup() = default;  // no group: every mapping is the identity
  explicit TensorParallelGroup(Comm* group);

  bool active() const { return group_ != nullptr; }
  int size() const { return group_ ? group_->size() : 1; }
  int rank() const { return group_ ? group_->rank() : 0; }

  // x ← Σ over the group, in place (16-bit types summed as parallel/comm.hpp says).
  template <class T>
  void sum(std::span<T> x) const;
  // x ← max over the group, in place.
  template <class T>
  void max(std::span<T> x) const;
  // `step` on x, in place: x.
  template <class T>
  std::span<T> apply(RegionStep step, std::span<T> x) const;
  // whole [size · shard.size()] ← every rank's shard, in rank order (sequence parallelism's row blocks).
  template <class T>
  void all_gather(std::span<const T> shard, std::span<T> whole) const;
  // shard ← block `rank` of Σ over the group of whole [size · shard.size()].
  template <class T>
  void reduce_scatter(std::span<const T> whole, std::span<T> shard) const;
  // `step` from in to out: all_gather (in the shard, out the whole) or reduce_scatter (the reverse).
  template <class T>
  void apply(SequenceStep step, std::span<const T> in, std::span<T> out) const;

 private:
  Comm* group_ = nullptr;  // null for no group or a group of one rank
};

// A mapping: one collective (or none) for each direction, `Forward` where a layer's region starts
// or ends in the forward pass and `Backward` at the mirror place of the backward pass.
template <RegionStep Forward, RegionStep Backward>
class RegionMapping {
 public:
  explicit RegionMapping(TensorParallelGroup group) : group_(std::move(group)) {}
  template <class T>
  std::span<T> forward(std::span<T> x) const {
    return group_.apply(Forward, x);
  }
  template <class T>
  std::span<T> backward(std::span<T> dx) const {
    return group_.apply(Backward, dx);
  }

 private:
  TensorParallelGroup group_;
};

// Enters a region whose layer is split over the group (a column-parallel product's input): every
// rank computes with the same replicated x, so the gradient of x is the sum of the ranks'.
using CopyToRegion = RegionMapping<RegionStep::identity, RegionStep::sum>;
// Leaves a region whose ranks each hold a partial sum (a row-parallel product's output, the
// vocabulary-parallel embedding): the output is the sum, and its gradient reaches every part as is.
using ReduceFromRegion = RegionMapping<RegionStep::sum, RegionStep::identity>;

// Sequence parallelism (parallel.sequence_parallel; Megatron-LM's): outside the regions above each rank
// holds only its block of the token rows — block r of the N rows, N / size of them — so the norms, the
// residual adds and their activations are split over the group. Where such a region's copy-to would
// hand out the replicated rows, the rows are gathered; where its reduce-from would sum partial rows, the
// sum is scattered: the same bytes as the all-reduce they replace (a ring all-reduce is a reduce-scatter
// and an all-gather), the activations between the regions ÷ size. Each is a forward/backward pair of
// two buffers, the shard (N / size rows) and the whole (N rows); without a group the two are one buffer
// and nothing happens.
//
// A mapping between the two: `Forward` takes (shard or whole) to the other in the forward pass,
// `Backward` the gradient back at the mirror place of the backward pass.
template <SequenceStep Forward, SequenceStep Backward>
class SequenceMapping {
 public:
  explicit SequenceMapping(TensorParallelGroup group) : group_(std::move(group)) {}
  template <class T>
  void forward(std::span<const T> in, std::span<T> out) const {
    group_.apply(Forward, in, out);
  }
  template <class T>
  void backward(std::span<const T> din, std::span<T> dout) const {
    group_.apply(Backward, din, dout);
  }

 private:
  TensorParallelGroup group_;
};

// Enters a region from the row shards: forward gathers the rows every rank then computes with (shard →
// whole); backward sums the ranks' gradients of the whole and keeps this rank's block (whole → shard).
using GatherToRegion = SequenceMapping<SequenceStep::gather, SequenceStep::scatter>;
// Leaves a region whose ranks each hold partial sums of every row: forward keeps this rank's block of the
// sum (whole → shard); backward gathers the blocks' gradients, which reach every partial as they are.
using ScatterFromRegion = SequenceMapping<SequenceStep::scatter, SequenceStep::gather>;

// The vocabulary-parallel cross-entropy's reductions over the vocabulary shards of each row: the
// row maxima (for a stable softmax) and the partial sums (Σ exp, the target's logit). Forward only:
// each rank forms its shard's gradient, softmax − one-hot, from these reduced statistics, so
// nothing travels back.
class VocabParallelStatistics {
 public:
  explicit VocabParallelStatistics(TensorParallelGroup group) : group_(std::move(group)) {}
  template <class T>
  void max_over_vocabulary(std::span<T> row_max) const {
    group_.max(row_max);
  }
  template <class T>
  void sum_over_vocabulary(std::span<T> partials) const {
    group_.sum(partials);
  }

 private:
  TensorParallelGroup group_;
};

}  // namespace meshtrain
