// The two reduce-on-ready strategies.
#include "state/gradient_reduction.hpp"

#include "kernels/convert.hpp"

#include <algorithm>

namespace meshtrain {
namespace {

// The tied wte's gradient on this rank: its unit's owned slice (all of it at stage 0).
Vec<float> tied_wte(const PlacedState<float>& grads) {
  const ParameterLayout& layout = grads.map().layout();
  return grads.owned_view(layout.unit_at(layout.find("wte.weight").offset));
}

class BucketedAllReduce final : public GradientReduction {
 public:
  BucketedAllReduce(const ExecSpace& space, const PlacedState<float>& grads, Comm& replicas, std::size_t bucket_bytes)
      : space_(space), grads_(grads), replicas_(replicas) {
    for (const auto& [begin, end] : gradient_buckets(grads.accumulated().extent(0), bucket_bytes)) {
      buckets_.push_back({begin, end, Request(), false});
    }
  }

  void start_step() override { Kokkos::deep_copy(space_, grads_.accumulated(), 0.0f); }
  void arm() override { armed_ = true; }

  void ready_from(std::size_t offset) override {
    if (!armed_ || replicas_.size() == 1) return;
    for (auto& b : buckets_) {
      if (b.started) continue;
      if (b.begin < offset) break;  // buckets are ordered from the end: the rest are not ready either
      start(b);
    }
  }

  void finish(Comm* tied) override {
    // Pipeline runs never arm, so every bucket is still unreduced here: the tied stages add their
    // local wte gradients first and the replicas then reduce the sum with the rest.
    if (tied != nullptr) {
      const Vec<float> wte = tied_wte(grads_);
      space_.fence();
      tied->allreduce_sum(wte.data(), wte.extent(0));
    }
    armed_ = false;
    if (replicas_.size() == 1) return;
    for (auto& b : buckets_) {
      if (!b.started) start(b);
    }
    for (auto& b : buckets_) {
      b.request.wait();
      b.started = false;
    }
  }

  std::size_t buffer_bytes() const override { return 0; }  // in place

 private:
  struct Bucket {
    std::size_t begin, end;
    Request request;
    bool started = false;
  };
  void start(Bucket& b) {
    space_.fence();  // the gradients come from kernels; they must be complete before MPI reads them
    b.request = replicas_.iallreduce_sum(grads_.accumulated().data() + b.begin, b.end - b.begin);
    b.started = true;
  }

  ExecSpace space_;
  const PlacedState<float>& grads_;
  Comm& replicas_;
  std::vector<Bucket> buckets_;  // from the end of the buffer to its start
  bool armed_ = false;
};

class UnitReduceScatter final : public GradientReduction {
 public:
  UnitReduceScatter(const ExecSpace& space, const ZeroStage& stage, const PlacedState<float>& grads, Comm& group)
      : space_(space),
        every_pass_(stage.reduces_every_pass()),
        grads_(grads),
        group_(group),
        received_("meshtrain::zero::reduce_buffer", reduction_buffer_elements(grads.map(), stage)) {
    next_unit_ = grads.map().units();
  }

  void start_step() override {
    Kokkos::deep_copy(space_, grads_.accumulated(), 0.0f);
    pending_ = true;
    next_unit_ = grads_.map().units();
  }
  void arm() override { armed_ = true; }

  void ready_from(std::size_t offset) override {
    if (!every_pass_ && !armed_) return;
    const ShardMap& map = grads_.map();
    while (next_unit_ > 0 && map.unit(next_unit_ - 1).begin >= offset) start(--next_unit_);
    if (next_unit_ > 0) return;
    // The pass is complete: its last unit lands before the next pass accumulates into it again.
    complete();
    next_unit_ = map.units();
    if (!every_pass_) pending_ = false;
  }

  void finish(Comm* tied) override {
    armed_ = false;
    if (!every_pass_ && pending_) {
      while (next_unit_ > 0) start(--next_unit_);
      next_unit_ = grads_.map().units();
    }
    complete();
    pending_ = false;
    space_.fence();
    // The first and the last stage shard the wte unit alike, so the two add slice by slice.
    if (tied != nullptr) {
      const Vec<float> wte = tied_wte(grads_);
      tied->allreduce_sum(wte.data(), wte.extent(0));
    }
  }

  std::size_t buffer_bytes() const override { return received_.extent(0) * sizeof(float); }

 private:
  // Starts unit u's reduce-scatter, which runs while backward computes the next unit. The one
  // before it completes first: its receive buffer is reused, and under stages 2–3 the unit after
  // next accumulates into the working room that one's reduce-scatter reads.
  void start(std::size_t u) {
    complete();
    space_.fence();  // the gradients come from kernels; they must be complete before MPI reads them
    in_flight_ = group_.ireduce_scatter_sum(grads_.unit_at(u), received_.data(), grads_.map().shard(u));
    unit_in_flight_ = u;
  }

  void complete() {
    if (!in_flight_.pending()) return;
    in_flight_.wait();
    const std::size_t u = unit_in_flight_, n = grads_.map().shard(u);
    const Vec<float> owned = grads_.owned_view(u);
    const CVec<float> reduced(received_.data(), n);
    if (every_pass_) {
      // Sharded gradients accumulate over micro-batches; the unit's working gradients start again at 0.
      accumulate_into<float, float>(space_, owned, reduced, 1.0f, long(n));
      Kokkos::deep_copy(space_, grads_.unit_view(u), 0.0f);
    } else {
      Kokkos::deep_copy(space_, owned, reduced);
    }
  }

  ExecSpace space_;
  bool every_pass_;
  const PlacedState<float>& grads_;
  Comm& group_;
  Buffer<float> received_;
  Request in_flight_;  // the reduce-scatter of unit_in_flight_, if pending
  std::size_t unit_in_flight_ = 0;
  std::size_t next_unit_;  // units [next_unit_, end) are reduced in this pass
  bool armed_ = false;
  bool pending_ = false;  // stage 1: this step's gradients are not reduced yet
};

}  // namespace

std::unique_ptr<GradientReduction> make_gradient_reduction(const ExecSpace& space, const ZeroStage& stage,
                                                           const PlacedState<float>& grads, Comm& dp, Comm* shard_group,
                                                           std::size_t bucket_bytes) {
  if (!stage.shards()) return std::make_unique<BucketedAllReduce>(space, grads, dp, bucket_bytes);
  return std::make_unique<UnitReduceScatter>(space, stage, grads, *shard_group);
}

std::vector<std::pair<std::size_t, std::size_t>> gradient_buckets(std::size_t elements, std::size_t bucket_bytes) {
  const std::size_t per_bucket = std::max<std::size_t>(1, bucket_bytes / sizeof(float));
  std::vector<std::pair<std::size_t, std::size_t>> buckets;
  for (std::size_t end = elements; end > 0;) {
    const std::size_t begin = end > per_bucket ? end - per_bucket : 0;
    buckets.emplace_back(begin, end);
    end = begin;
  }
  return buckets;
}

std::size_t reduction_buffer_elements(const ShardMap& map, const ZeroStage& stage) {
  return stage.shards() ? map.largest_shard() : 0;
}

}  // namespace meshtrain
