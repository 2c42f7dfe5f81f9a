// LoRA's frozen base (share/docs/usage.md, LoRA): the model's own tensors in the compute precision only
// — no gradients, no master copy, no moments — loaded once from checkpoint.init_weights. Held as the
// ZeRO stage holds compute weights (state/zero_stage.hpp): whole for this rank's tensor-parallel piece
// and pipeline stage at stages 0–2, and at stage 3 as this rank's slices with the blocks gathered on
// demand (state/block_gatherer.hpp) beside the adapters' own gathers. It is the ParameterStore the model
// computes with: the trainable tensors (the adapters, layout()) are the working copy's, the frozen ones
// this store's.
#pragma once

#include "core/memory_ledger.hpp"
#include "model/parameter_store.hpp"
#include "state/block_gatherer.hpp"
#include "state/frozen_source.hpp"
#include "state/zero_stage.hpp"

#include <functional>

namespace meshtrain {

template <class Real>
class FrozenBase final : public ParameterStore<Real> {
 public:
  // `base`: the model's layout for this rank, padded as the adapters' (ZeRO's units); `adapters`: where
  // the trainable tensors live; `groups` the shard groups' communicators and `places` this rank's place in
  // them (the adapters' optimizer's).
  FrozenBase(const ExecSpace& space, const ParameterLayout& base, ParameterStore<Real>& adapters, ZeroStage stage,
             const UnitComms& groups, const UnitGroups& places)
      : space_(space),
        stage_(stage),
        groups_(stage.shards() ? groups : UnitComms{}),
        map_(base, stage.shard_groups(places)),
        replicas_(stage.replica_groups(places)),
        adapters_(adapters),
        weights_("meshtrain::lora::frozen_base", map_, stage.compute_weights()),
        gatherer_(space, weights_, groups_) {}

  const ParameterLayout& layout() const override { return adapters_.layout(); }
  Real* weight(const TensorInfo& t) override { return adapters_.weight(t); }
  Real* grad(const TensorInfo& t) override { return adapters_.grad(t); }
  void need_block(int block) override {
    adapters_.need_block(block);
    gatherer_.need(block);
  }
  const ParameterLayout* frozen_layout() const override { return &map_.layout(); }
  Real* frozen_weight(const TensorInfo& t) override { return weights_.at(t); }

  // The base's weights: `read` loads a checkpoint's /model tensors of frozen_layout() into the source it
  // is given (state/frozen_source.hpp), tensor by tensor into Real — the whole tensors, or at ZeRO-3 this
  // rank's slices, whose units the model reads whole are then gathered (blocks on demand).
  void load(const std::function<void(StateSource&)>& read) {
    gatherer_.invalidate();
    FrozenWeightsSource<Real> source(space_, weights_.where(), replicas_);
    read(source);
    if (weights_.held() != Held::working_and_shard) return;
    for (std::size_t u = 0; u < map_.units(); ++u) {
      if (!map_.is_block(u)) weights_.gather(u, groups_.of(map_.unit(u)));
    }
    host_fence(space_, "frozen weights: gathered");
  }

  // The frozen weights count as the model's weights.
  MemoryBytes memory() const { return MemoryBytes::of(MemoryCategory::weights, weights_.bytes()); }

 private:
  ExecSpace space_;
  ZeroStage stage_;
  UnitComms groups_;
  ShardMap map_;
  UnitGroups replicas_;
  ParameterStore<Real>& adapters_;
  PlacedState<Real> weights_;
  BlockGatherer<Real> gatherer_;
};

}  // namespace meshtrain
