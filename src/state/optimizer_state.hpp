// The fp32 side of a rank's model states, for any ZeRO stage (state/zero_stage.hpp): the master
// weights, the fp32 gradients with their data-parallel reduction, and AdamW's two moments, each a
// PlacedState over one shard map. Under fp32 the master weights are the weights the model computes
// on; under bf16/fp16 the model computes on a typed copy of them (state/working_copy.hpp).
//
// Everything is per owned run (state/shard_map.hpp): the update, the gradient norm and the
// checkpoint. The update and the norm each take all runs in one go (state/owned_chunks.hpp): one
// launch for AdamW, two and one read for the norm, whatever the number of tensors. At stage 0 the shard group is the
// rank alone and the run is the whole tensor. Each unit has its data-parallel group (state/unit_groups.hpp): the dense
// units the dp group, the routed experts' units the expert-data-parallel group (edp, the dp / ep ranks holding the same
// experts), which reduces and shards them, or at stage 0 holds their replicas.
#pragma once

#include "core/memory_ledger.hpp"
#include "optim/adamw.hpp"
#include "parallel/comm.hpp"
#include "state/gradient_reduction.hpp"
#include "state/owned_chunks.hpp"
#include "state/placed_state.hpp"
#include "state/state_source.hpp"

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <vector>

namespace meshtrain {

class OptimizerState {
 public:
  // `layout` padded for the shard groups (unit_align = dp under ZeRO); `dp` the data-parallel
  // group, `edp` the expert-data-parallel group (without expert parallelism: dp again).
  // `master_computes`: fp32 runs, where the model computes on the master weights themselves.
  OptimizerState(const ExecSpace& space, const ParameterLayout& layout, ZeroStage stage, Comm& dp, Comm& edp,
                 bool master_computes, std::size_t bucket_bytes);

  const ParameterLayout& layout() const { return map_.layout(); }
  const ShardMap& map() const { return map_; }
  ZeroStage stage() const { return stage_; }
  // The groups ZeRO shards over, or none at stage 0; unit u's.
  UnitComms shard_groups() const { return stage_.shards() ? data_parallel_ : UnitComms{}; }
  Comm* shard_group(std::size_t u) const { return shard_groups().of(map_.unit(u)); }
  // The ranks holding the same copy of each unit (stage 0: the data-parallel groups; ZeRO: none).
  const UnitGroups& replicas() const { return replicas_; }
  const PlacedState<float>& master() const { return master_; }
  const PlacedState<float>& grads() const { return grads_; }
  const PlacedState<float>& exp_avg() const { return exp_avg_; }
  const PlacedState<float>& exp_avg_sq() const { return exp_avg_sq_; }
  GradientReduction& reduction() { return *reduction_; }
  // Bytes by category; the master weights count as `weights` when the model computes on them.
  MemoryBytes memory() const;

  // Fresh master weights: every rank draws its owned slices (the caller publishes them).
  void initialize(std::uint64_t seed);
  // Σ g² over the owned runs of the tensors `counted` admits, on replica 0 of each unit's
  // replicas only (the caller sums over the world), in a fixed order (owned_squared_norm): left on
  // the device by the first (until the next call), read to the host (one copy) by the second. The
  // runs are listed again only when `counted` admits other tensors than at the last call.
  Kokkos::View<const double, MemSpace> grad_squared_norm_on_device(
      const std::function<bool(const TensorInfo&)>& counted) const;
  double grad_squared_norm(const std::function<bool(const TensorInfo&)>& counted) const;
  // AdamW on all owned runs in one launch, bitwise as run by run: `step.weight_decay` on the tensors
  // that decay (TensorInfo::decays), none on the others.
  void update(const AdamWStep& step);
  TrainingTensors checkpoint_tensors() { return {weights_source_, exp_avg_source_, exp_avg_sq_source_}; }

 private:
  ExecSpace space_;
  ZeroStage stage_;
  UnitComms data_parallel_;
  UnitGroups replicas_;
  ShardMap map_;
  PlacedState<float> master_, grads_, exp_avg_, exp_avg_sq_;
  std::unique_ptr<GradientReduction> reduction_;
  CheckpointStaging staging_;
  StateSlices weights_source_, exp_avg_source_, exp_avg_sq_source_;
  bool master_computes_;
  OwnedChunks update_chunks_;  // every tensor's owned run, marked where it decays
  // The norm's runs and which tensors they are; its partial sums and the sum.
  mutable OwnedChunks norm_chunks_;
  mutable std::optional<std::vector<bool>> norm_counts_;
  mutable Kokkos::View<double*, MemSpace> norm_partials_;
  Kokkos::View<double, MemSpace> norm_;
};

}  // namespace meshtrain
