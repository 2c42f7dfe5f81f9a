// What a ZeRO stage (arXiv 1910.02054) shards, said once: every buffer of the model states asks
// here where it is held, the planner included (share/docs/design.md, Model states).
//
//   stage 0  nothing: the data-parallel replicas hold everything whole and all-reduce gradients
//            (the degenerate shard: a shard group of one rank, which owns every unit whole).
//   stage 1  + AdamW moments (and the fp32 master of a 16-bit run) as the owned slices only.
//   stage 2  + gradients: each unit's working gradients are reduce-scattered into a gradient shard
//            in every backward pass; blocks take turns in working rooms.
//   stage 3  + weights: a shard, the non-block units resident, blocks gathered into working rooms
//            just before they compute.
#pragma once

#include "state/unit_groups.hpp"

namespace meshtrain {

// How one flat state is held on a rank (state/placed_state.hpp).
enum class Held {
  whole,              // every unit at its layout offset
  working_and_shard,  // the owned slices in a shard buffer; units whole only while they are needed
  working,            // units whole only while they are needed (16-bit gradients under stages 2–3)
  shard,              // the owned slices only (moments; a 16-bit run's fp32 master)
};

struct ZeroStage {
  int stage = 0;

  // Where the model reads the weights and accumulates the gradients in its own precision.
  Held compute_weights() const { return stage >= 3 ? Held::working_and_shard : Held::whole; }
  Held compute_grads() const { return stage >= 2 ? Held::working : Held::whole; }
  // The fp32 gradients the data-parallel reduction works on, with the reduced owned slices.
  Held fp32_grads() const { return stage >= 2 ? Held::working_and_shard : Held::whole; }
  // The fp32 master weights when they are not the compute weights (16-bit runs); the moments.
  static Held master_copy() { return Held::shard; }
  static Held moments() { return Held::shard; }

  // Stage 0 all-reduces over the replicas; ZeRO reduce-scatters over the shard group, in every
  // backward pass once gradients are working units (stages 2–3), else in the step's last pass.
  bool shards() const { return stage > 0; }
  bool reduces_every_pass() const { return stage >= 2; }
  // The data-parallel ranks that share one shard of the states (what the layout pads units for).
  int shard_group_size(int dp) const { return shards() ? dp : 1; }
  // Of each unit's data-parallel group (state/unit_groups.hpp: dp, or edp for expert units), the
  // group ZeRO shards the unit over, and the ranks that hold the same copy of it (its replicas).
  UnitGroups shard_groups(const UnitGroups& dp) const { return shards() ? dp : UnitGroups{}; }
  UnitGroups replica_groups(const UnitGroups& dp) const { return shards() ? UnitGroups{} : dp; }
};

}  // namespace meshtrain
