// Weight gradients run later than their backward: zero-bubble pipeline schedules (parallel/pipeline_schedule.hpp,
// backward_input and backward_weight) split a micro-batch's backward into its input gradient, sent upstream at once,
// and its weight gradients, run in an idle slot later. While a slot's backward runs deferred, every weight gradient
// the listings hand to add() is queued instead of run, with copies (hold) of the views it reads that the backward's
// scratch overwrites before then; the backward's progress reports are queued with them. replay() then runs the
// queue in the order a whole backward would have run it, reporting each unit as its gradients become final (ZeRO
// 2/3 reduce-scatter it then). Without a deferred slot add() runs the work at once: a whole backward. Internal to
// model/.
#pragma once

#include "core/exec.hpp"

#include <fmt/format.h>

#include <cstddef>
#include <functional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace meshtrain {

// What one deferred backward holds: output gradients and products' inputs (values, of the model's type), and the
// norms' row statistics (of accum_t).
struct HeldElements {
  std::size_t values = 0;
  std::size_t statistics = 0;
  HeldElements& operator+=(const HeldElements& o) {
    values += o.values;
    statistics += o.statistics;
    return *this;
  }
  bool operator==(const HeldElements&) const = default;
};

template <class Real>
class DeferredWeightGradients {
 public:
  using Work = std::function<void()>;
  using ReadyFrom = std::function<void(std::size_t offset)>;

  using Accum = accum_t<Real>;

  DeferredWeightGradients() = default;
  // `arenas` micro-batches may wait at once, each holding `each` (what one backward holds, exactly).
  // `volatile_memory`: the rank's scratch, whose views hold() copies (others live until the slot is freed);
  // `discarded`: where gradients nobody reads go (LoRA's frozen base), which a deferred backward skips.
  DeferredWeightGradients(const std::string& family, int arenas, HeldElements each, int slots,
                          std::vector<CVec<Real>> volatile_memory, std::vector<CVec<Real>> discarded)
      : family_(family),
        each_(each),
        values_(fmt::format("meshtrain::{}::held_gradients", family), std::size_t(arenas) * each.values),
        statistics_(fmt::format("meshtrain::{}::held_statistics", family), std::size_t(arenas) * each.statistics),
        volatile_(std::move(volatile_memory)),
        discarded_(std::move(discarded)),
        queues_(std::size_t(slots)),
        arena_of_(std::size_t(slots), -1) {
    for (int k = arenas - 1; k >= 0; --k) free_.push_back(k);
  }

  // In elements of Real (a statistic of 16-bit models takes two).
  std::size_t allocated_elements() const {
    return values_.extent(0) + statistics_.extent(0) * sizeof(Accum) / sizeof(Real);
  }
  bool deferring() const { return current_ >= 0; }

  // The coming backward of `slot` defers its weight gradients, into a free arena.
  void begin(int slot) {
    if (deferring() || arena_of_.at(std::size_t(slot)) >= 0 || free_.empty()) {
      throw std::logic_error(fmt::format("{}: no arena to defer slot {}'s weight gradients into", family_, slot));
    }
    current_ = slot;
    arena_of_[std::size_t(slot)] = free_.back();
    free_.pop_back();
    used_ = {};
  }
  // Its backward is done: it held exactly what activation_elements() counted.
  void end() {
    if (!(used_ == each_)) {
      throw std::logic_error(
          fmt::format("{}: a deferred backward held {} values and {} statistics, its arena has {} and {}", family_,
                      used_.values, used_.statistics, each_.values, each_.statistics));
    }
    current_ = -1;
  }

  // `view` as the queued work may read it later: itself, unless it lies in the volatile memory, then its
  // copy in the slot's arena: of values, or of row statistics.
  CVec<Real> hold(const ExecSpace& space, CVec<Real> view) {
    return held(space, view, values_, each_.values, used_.values);
  }
  CVec<Accum> hold_statistics(const ExecSpace& space, CVec<Accum> view) {
    return held(space, view, statistics_, each_.statistics, used_.statistics);
  }
  // A view the queued work writes (a sum over tp): always a copy, while deferring.
  Vec<Real> hold_copy(const ExecSpace& space, CVec<Real> view) {
    if (!deferring()) throw std::logic_error(family_ + ": hold_copy outside a deferred backward");
    return copy_into(space, view, values_, each_.values, used_.values);
  }
  // Columns [0, cols) of `rows` rows at row stride ld from `data`: as they are, or copied (then at stride cols).
  struct Columns {
    const Real* data;
    int ld;
  };
  Columns hold_columns(const ExecSpace& space, const Real* data, int ld, int rows, int cols) {
    if (!deferring() || !in_volatile(data)) return {data, ld};
    const Vec<Real> copy = take(values_, each_.values, used_.values, std::size_t(rows) * std::size_t(cols));
    Kokkos::parallel_for(
        "meshtrain::deferred_weights::hold_columns", Kokkos::RangePolicy<ExecSpace>(space, 0, long(rows) * cols),
        KOKKOS_LAMBDA(long i) { copy(i) = data[(i / cols) * ld + i % cols]; });
    return {copy.data(), cols};
  }
  // Whether a gradient written to `grad` is kept: not empty, and (while deferring) not discarded.
  bool trains(Vec<Real> grad) const {
    if (grad.data() == nullptr) return false;
    if (!deferring()) return true;
    for (const CVec<Real>& d : discarded_) {
      if (grad.data() >= d.data() && grad.data() < d.data() + d.extent(0)) return false;
    }
    return true;
  }

  // Runs `work` now, or queues it for replay() while deferring.
  void add(Work work) {
    if (!deferring()) return work();
    queues_[std::size_t(current_)].push_back({std::move(work), kNoReport});
  }
  // Backward's progress report (LanguageModel::ReadyFrom): now, or in its place in the queue.
  void report(std::size_t offset, const ReadyFrom& ready_from) {
    if (!deferring()) {
      if (ready_from) ready_from(offset);
      return;
    }
    queues_[std::size_t(current_)].push_back({Work(), offset});
  }
  // Runs slot's queued weight gradients, reporting to `ready_from`, and frees its arena.
  void replay(int slot, const ReadyFrom& ready_from) {
    std::vector<Entry>& queue = queues_.at(std::size_t(slot));
    if (deferring() || arena_of_[std::size_t(slot)] < 0) {
      throw std::logic_error(fmt::format("{}: slot {} has no deferred weight gradients to run", family_, slot));
    }
    for (const Entry& e : queue) {
      if (e.report != kNoReport) {
        if (ready_from) ready_from(e.report);
      } else {
        e.work();
      }
    }
    queue.clear();
    free_.push_back(arena_of_[std::size_t(slot)]);
    arena_of_[std::size_t(slot)] = -1;
  }

 private:
  bool in_volatile(const void* data) const {
    const auto* at = static_cast<const char*>(data);
    for (const CVec<Real>& v : volatile_) {
      const auto* begin = reinterpret_cast<const char*>(v.data());
      if (at >= begin && at < begin + v.extent(0) * sizeof(Real)) return true;
    }
    return false;
  }
  template <class T>
  Vec<T> take(const Buffer<T>& arena, std::size_t each, std::size_t& used, std::size_t n) {
    if (used + n > each) {
      throw std::logic_error(fmt::format("{}: a deferred backward holds more than its arena's {}", family_, each));
    }
    const Vec<T> copy(arena.data() + std::size_t(arena_of_[std::size_t(current_)]) * each + used, n);
    used += n;
    return copy;
  }
  template <class T>
  Vec<T> copy_into(const ExecSpace& space, CVec<T> view, const Buffer<T>& arena, std::size_t each, std::size_t& used) {
    const Vec<T> copy = take(arena, each, used, view.extent(0));
    Kokkos::deep_copy(space, copy, view);
    return copy;
  }
  template <class T>
  CVec<T> held(const ExecSpace& space, CVec<T> view, const Buffer<T>& arena, std::size_t each, std::size_t& used) {
    if (!deferring() || !in_volatile(view.data())) return view;
    return copy_into(space, view, arena, each, used);
  }

  static constexpr std::size_t kNoReport = ~std::size_t(0);
  struct Entry {
    Work work;
    std::size_t report;  // kNoReport: run work
  };

  std::string family_;
  HeldElements each_;
  Buffer<Real> values_;
  Buffer<Accum> statistics_;
  std::vector<CVec<Real>> volatile_, discarded_;
  std::vector<std::vector<Entry>> queues_;
  std::vector<int> arena_of_;  // by slot: its arena while its weight gradients wait, else -1
  std::vector<int> free_;
  int current_ = -1;  // the slot whose backward runs deferred
  HeldElements used_;
};

}  // namespace meshtrain
