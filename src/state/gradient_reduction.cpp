// The two reduce-on-ready strategies.
#include "state/gradient_reduction.hpp"

#include <algorithm>

namespace meshtrain {
namespace {

// The tied wte's gradient on this rank: its unit's owned slice (all of it at stage 0).
Vec<float> tied_wte(const PlacedState<float>& grads) {
  const ParameterLayout& layout = grads.map().layout();
  return grads.owned_view(layout.unit_at(layout.tied_table().offset));
}

// One kernel each, where a deep copy would count as one more (per step; per unit and pass): the
// gradients zeroed; owned += reduced and the unit (not holding owned) zeroed; owned = reduced.
void clear(const ExecSpace& space, Vec<float> grads) {
  Kokkos::parallel_for(
      "meshtrain::gradients::clear", Kokkos::RangePolicy<ExecSpace>(space, 0, grads.extent(0)),
      KOKKOS_LAMBDA(std::size_t i) { grads(i) = 0.0f; });
}
void add_and_clear(const ExecSpace& space, Vec<float> owned, CVec<float> reduced, Vec<float> unit) {
  const std::size_t n = owned.extent(0);
  Kokkos::parallel_for(
      "meshtrain::zero::add_and_clear", Kokkos::RangePolicy<ExecSpace>(space, 0, unit.extent(0)),
      KOKKOS_LAMBDA(std::size_t i) {
        if (i < n) owned(i) += reduced(i);
        unit(i) = 0.0f;
      });
}
void take(const ExecSpace& space, Vec<float> owned, CVec<float> reduced) {
  Kokkos::parallel_for(
      "meshtrain::zero::take", Kokkos::RangePolicy<ExecSpace>(space, 0, owned.extent(0)),
      KOKKOS_LAMBDA(std::size_t i) { owned(i) = reduced(i); });
}

class BucketedAllReduce final : public GradientReduction {
 public:
  BucketedAllReduce(const ExecSpace& space, const PlacedState<float>& grads, const UnitComms& replicas,
                    std::size_t bucket_bytes)
      : space_(space), grads_(grads) {
    const bool split = replicas.places().distinct();
    for (const GradientBucket& b : gradient_buckets(grads.map().layout(), split, bucket_bytes)) {
      Comm& group = b.experts ? *replicas.experts : *replicas.dense;
      // A group of one rank has nothing to sum.
      if (group.size() > 1) buckets_.push_back({b.begin, b.end, &group, Request(), false});
    }
  }

  void start_step() override { clear(space_, grads_.accumulated()); }
  void arm() override { armed_ = true; }

  void ready_from(std::size_t offset) override {
    if (!armed_) return;
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
      tied->allreduce_sum(wte.data(), wte.extent(0));
    }
    armed_ = false;
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
    Comm* replicas;
    Request request;
    bool started = false;
  };
  // The Comm orders the reduction after the backward kernels issued so far (parallel/comm.hpp).
  void start(Bucket& b) {
    b.request = b.replicas->iallreduce_sum(grads_.accumulated().data() + b.begin, b.end - b.begin);
    b.started = true;
  }

  ExecSpace space_;
  const PlacedState<float>& grads_;
  std::vector<Bucket> buckets_;  // from the end of the buffer to its start; those with replicas
  bool armed_ = false;
};

class UnitReduceScatter final : public GradientReduction {
 public:
  UnitReduceScatter(const ExecSpace& space, const ZeroStage& stage, const PlacedState<float>& grads,
                    const UnitComms& groups)
      : space_(space),
        every_pass_(stage.reduces_every_pass()),
        grads_(grads),
        groups_(groups),
        received_("meshtrain::zero::reduce_buffer", reduction_buffer_elements(grads.map(), stage)) {
    next_unit_ = grads.map().units();
  }

  void start_step() override {
    clear(space_, grads_.accumulated());
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
    Comm& group = *groups_.of(grads_.map().unit(u));
    in_flight_ = group.ireduce_scatter_sum(grads_.unit_at(u), received_.data(), grads_.map().shard(u));
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
      add_and_clear(space_, owned, reduced, grads_.unit_view(u));
    } else {
      take(space_, owned, reduced);
    }
  }

  ExecSpace space_;
  bool every_pass_;
  const PlacedState<float>& grads_;
  UnitComms groups_;
  Buffer<float> received_;
  Request in_flight_;  // the reduce-scatter of unit_in_flight_, if pending
  std::size_t unit_in_flight_ = 0;
  std::size_t next_unit_;  // units [next_unit_, end) are reduced in this pass
  bool armed_ = false;
  bool pending_ = false;  // stage 1: this step's gradients are not reduced yet
};

}  // namespace

std::unique_ptr<GradientReduction> make_gradient_reduction(const ExecSpace& space, const ZeroStage& stage,
                                                           const PlacedState<float>& grads, const UnitComms& groups,
                                                           std::size_t bucket_bytes) {
  if (!stage.shards()) return std::make_unique<BucketedAllReduce>(space, grads, groups, bucket_bytes);
  return std::make_unique<UnitReduceScatter>(space, stage, grads, groups);
}

std::vector<GradientBucket> gradient_buckets(const ParameterLayout& layout, bool split_experts,
                                             std::size_t bucket_bytes) {
  const std::size_t per_bucket = std::max<std::size_t>(1, bucket_bytes / sizeof(float));
  const std::vector<ShardUnit>& units = layout.units();
  std::vector<GradientBucket> buckets;
  // Each run [units[first].begin, units[last].end) of one kind, from the end of the layout.
  for (std::size_t last = units.size(); last > 0;) {
    const bool experts = split_experts && units[last - 1].experts;
    std::size_t first = last - 1;
    while (first > 0 && (!split_experts || units[first - 1].experts == experts)) --first;
    for (std::size_t end = units[last - 1].end; end > units[first].begin;) {
      const std::size_t begin = end - units[first].begin > per_bucket ? end - per_bucket : units[first].begin;
      buckets.push_back({begin, end, experts});
      end = begin;
    }
    last = first;
  }
  return buckets;
}

std::size_t reduction_buffer_elements(const ShardMap& map, const ZeroStage& stage) {
  return stage.shards() ? map.largest_shard() : 0;
}

}  // namespace meshtrain
