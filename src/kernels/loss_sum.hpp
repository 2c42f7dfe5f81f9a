// The step's loss, summed in device memory: each micro-batch adds its term where the kernels
// computed it, with no read to the host; the training step sums it over the pipeline and
// data-parallel groups in place (a device backend's Comm takes device memory only) and reads it
// once per step. The term (share/docs/usage.md, Packing and the fine-tuning loss): the micro-batch's
// mean cross-entropy on plain token data, where every target carries loss; its sum on fine-tuning
// data, where the step divides by the loss-carrying targets of the whole global batch instead.
//
// Bitwise the host sum it replaced: a micro-batch's mean is its row losses' double total (sum_reduce's
// fixed order), rounded to accum_t<Real>, divided by the row count in accum_t<Real>, widened to
// double and added to the running double sum, micro-batch after micro-batch.
#pragma once

#include "core/exec.hpp"
#include "kernels/cross_entropy.hpp"

namespace meshtrain {

enum class LossTerm {
  micro_batch_mean,  // Σ of the rows' losses ÷ the rows
  token_sum,         // Σ of the rows' losses (rows without loss add 0)
};

class LossSum {
 public:
  explicit LossSum(LossTerm term = LossTerm::micro_batch_mean)
      : sum_("meshtrain::loss::sum"), total_("meshtrain::loss::micro_batch_total"), term_(term) {}

  LossTerm term() const { return term_; }

  // sum ← 0, enqueued on `space`.
  void clear(const ExecSpace& space) const {
    const Kokkos::View<double, MemSpace> sum = sum_;
    Kokkos::parallel_for(
        "meshtrain::loss::clear", Kokkos::RangePolicy<ExecSpace>(space, 0, 1), KOKKOS_LAMBDA(int) { sum() = 0; });
  }

  // sum += the term of losses[0, n) (their mean, or their double total), enqueued on `space` (two
  // launches, no fence).
  template <class Real>
  void add_micro_batch(const ExecSpace& space, CVec<Real> losses, int n) const {
    using Accum = accum_t<Real>;
    sum_reduce_into(space, total_, losses, n);
    const Kokkos::View<double, MemSpace> sum = sum_, total = total_;
    const bool mean = term_ == LossTerm::micro_batch_mean;
    Kokkos::parallel_for(
        "meshtrain::loss::add_micro_batch", Kokkos::RangePolicy<ExecSpace>(space, 0, 1),
        KOKKOS_LAMBDA(int) { sum() += mean ? double(static_cast<Accum>(total()) / static_cast<Accum>(n)) : total(); });
  }

  // The sum in device memory, for a group's in-place all-reduce (which orders itself after the
  // kernels that wrote it, parallel/comm.hpp), and for a read beside other values (ModelState::read_step_sums).
  double* data() const { return sum_.data(); }
  Kokkos::View<const double, MemSpace> on_device() const { return sum_; }

  // The sum on the host: waits for `space` (validation's read; a training step reads it with the
  // gradient norm, ModelState::read_step_sums).
  double read(const ExecSpace& space) const {
    double value = 0;
    Kokkos::deep_copy(space, Kokkos::View<double, HostSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>(&value), sum_);
    host_fence(space, "validation: the loss read");
    return value;
  }

 private:
  Kokkos::View<double, MemSpace> sum_;
  Kokkos::View<double, MemSpace> total_;  // the last micro-batch's Σ of row losses, before its mean
  LossTerm term_;
};

}  // namespace meshtrain
