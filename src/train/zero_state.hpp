// ZeRO (arXiv 1910.02054): the model states of one model replica's rank sharded over its
// data-parallel group, stage by stage.
//
// The shard map is the layout's units (model/parameters.hpp: wte, wpe, each block, ln_f), each
// padded to a multiple of dp; rank r of the group owns slice [begin + r·s, begin + (r+1)·s) of every
// unit, s = unit size / dp, and its shards of all units lie end to end in its shard buffers.
//
//   stage 1  AdamW moments of the owned slices only. Gradients accumulate in a whole flat buffer; the
//            step's last backward pass reduce-scatters each unit as soon as backward has finished it
//            (or all at the end under pipeline schedules); each rank updates its slices of the whole
//            weight buffer and the units are all-gathered back in place.
//   stage 2  + gradients sharded: every backward pass reduce-scatters each finished unit into the
//            gradient shard (accumulating over micro-batches) and zeroes the unit's working
//            gradients. Blocks share one working gradient buffer, so a rank holds the gradient shard,
//            the non-block units (wte, wpe, ln_f, whose gradients arrive at both ends of backward)
//            and one block's worth.
//   stage 3  + weights sharded: a block's weights are all-gathered into one working buffer just before
//            its forward and again before its backward, and overwritten by the next block's; the
//            non-block units are gathered once per step after the update.
//
// Every stage computes what stage 0 computes: the same sums (in another order), the same AdamW.
//
// Under bf16/fp16 the model computes on a 16-bit copy (train/low_precision_copy.hpp) and this
// object is the fp32 optimizer side only (`master_only`): the owned slices of the fp32 master
// weights, the fp32 gradients and the moments; the copy gathers its own 16-bit weights.
#pragma once

#include "core/config.hpp"
#include "model/parameter_store.hpp"
#include "optim/adamw.hpp"
#include "parallel/comm.hpp"
#include "train/memory_ledger.hpp"
#include "train/shard_map.hpp"
#include "train/state_source.hpp"

#include <cstddef>
#include <functional>
#include <memory>
#include <vector>

namespace meshtrain {

// Elements of every buffer a ZeroState allocates (also what the planner counts).
struct ZeroSizes {
  std::size_t weights = 0;       // whole flat buffer (stages 1–2); shard + non-block units + one block (stage 3);
                                 // the shard only (master_only)
  std::size_t grads = 0;         // whole flat buffer (stage 1); shard + non-block units + one block (stages 2–3)
  std::size_t moments = 0;       // each of exp_avg and exp_avg_sq: the shard
  std::size_t reduce_buffer = 0;  // receive buffer of one unit's reduce-scatter
  std::size_t staging = 0;       // checkpoint staging in host memory: one tensor (device builds only)
  MemoryBytes bytes() const;
};

ZeroSizes zero_sizes(const ParameterLayout& padded, int dp, int stage, bool master_only = false);

class ZeroState final : public ParameterStore<float> {
 public:
  // `layout` must be padded for dp (unit_align = dp). `stage` 1, 2 or 3.
  ZeroState(const ExecSpace& space, const ParameterLayout& layout, int stage, Comm& dp, bool master_only = false);
  ~ZeroState() override;

  // ParameterStore: where the model computes.
  const ParameterLayout& layout() const override { return layout_; }
  float* weight(const TensorInfo& t) override;
  float* grad(const TensorInfo& t) override;
  void need_block(int block) override;

  int stage() const { return stage_; }
  const ShardMap& map() const { return map_; }
  MemoryBytes memory() const;
  // The owned slice of unit u's fp32 (master) weights.
  Vec<float> weight_shard_view(std::size_t u) const { return Vec<float>(weight_shard(u), map_.shard(u)); }

  // Fresh weights (each rank draws its own slices, then gathers).
  void initialize(std::uint64_t seed);
  // After loading the owned slices (from a checkpoint), make every working copy agree with them.
  void gather_weights();

  // One step's gradients: zero_grads() first; arm() before the step's last backward pass (stage 1
  // reduces during it; stages 2–3 reduce during every pass); backward calls ready_from(offset);
  // finish() reduces whatever is left. Afterwards the owned slices hold the mean gradient.
  void zero_grads();
  void arm() { armed_ = true; }
  void ready_from(std::size_t offset);
  void finish();

  // The owned gradient slice of unit u (the tied wte is summed between pipeline stages here).
  Vec<float> grad_shard(std::size_t u) const;
  // Σ g² over the owned slices of the tensors `counted` admits (the caller sums over the world).
  double grad_squared_norm(const std::function<bool(const TensorInfo&)>& counted) const;
  // AdamW on the owned slices (`update_for(t)` gives tensor t's step, weight decay included), then the
  // updated weights are gathered wherever the model reads them.
  void update(const std::function<AdamWStep(const TensorInfo&)>& update_for);

  // Checkpoint sources of the weights and the two moments: each rank saves its owned slices.
  StateSource& weights_source() { return *sources_[0]; }
  StateSource& exp_avg_source() { return *sources_[1]; }
  StateSource& exp_avg_sq_source() { return *sources_[2]; }

 private:
  class ShardSource;
  std::size_t shard_size(std::size_t u) const { return map_.shard(u); }
  std::size_t owned_begin(std::size_t u) const { return map_.owned_begin(u); }
  bool sharded_weights() const { return stage_ == 3 || master_only_; }
  float* unit_weights(std::size_t u) const;  // where the model reads unit u
  float* unit_grads(std::size_t u) const;    // where backward accumulates unit u
  float* weight_shard(std::size_t u) const;  // the owned slice of unit u's weights
  float* grad_shard_data(std::size_t u) const;
  void reduce_unit(std::size_t u);
  void gather_unit(std::size_t u, float* into);

  ExecSpace space_;
  ParameterLayout layout_;
  ShardMap map_;
  int stage_;
  bool master_only_;
  Comm& dp_;
  Buffer<float> weights_, grads_;    // whole (stages 1–2 / stage 1) or resident non-block units + one block
  Buffer<float> weight_shard_;       // stage 3, master_only
  Buffer<float> grad_shard_;         // stages 2–3
  Buffer<float> exp_avg_, exp_avg_sq_;
  Buffer<float> reduce_buffer_;
  Kokkos::View<float*, HostSpace> host_staging_;  // checkpoint tensors, where device memory is not host memory
  int gathered_block_ = -1;  // stage 3: the block whose weights the working block buffer holds
  std::size_t next_unit_;    // units [next_unit_, end) are reduced in this pass
  bool armed_ = false;
  bool pending_ = false;  // stage 1: this step's gradients are not reduced yet
  std::vector<std::unique_ptr<StateSource>> sources_;  // ShardSources: weights, exp_avg, exp_avg_sq
};

}  // namespace meshtrain
