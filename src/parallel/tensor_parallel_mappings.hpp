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
// Host code (no Kokkos here): before a collective reads a buffer the kernels that wrote it must be
// done, so each mapping calls `fence` first. Without a group, or with a group of one rank, every
// mapping is the identity and neither fences nor communicates.
#pragma once

#include "parallel/comm.hpp"

#include <cstddef>
#include <span>
#include <utility>

namespace meshtrain {

// What a mapping does to a buffer in one direction (RegionMapping below): nothing, or sum it over
// the group.
enum class RegionStep { identity, sum };

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
