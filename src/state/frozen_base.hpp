// LoRA's frozen base (share/docs/usage.md, LoRA): the model's own tensors in the compute precision only
// — no gradients, no master copy, no moments — held whole for this rank's tensor-parallel piece and
// pipeline stage at every ZeRO stage, loaded once from checkpoint.init_weights. It is the
// ParameterStore the model computes with: the trainable tensors (the adapters, layout()) are the
// working copy's, the frozen ones this store's own.
#pragma once

#include "core/memory_ledger.hpp"
#include "model/parameter_store.hpp"
#include "state/frozen_source.hpp"

#include <functional>

namespace meshtrain {

template <class Real>
class FrozenBase final : public ParameterStore<Real> {
 public:
  // `base`: the model's layout for this rank (no padding); `adapters`: where the trainable tensors live.
  FrozenBase(const ExecSpace& space, ParameterLayout base, ParameterStore<Real>& adapters)
      : space_(space),
        base_(std::move(base)),
        adapters_(adapters),
        weights_("meshtrain::lora::frozen_base", base_.total()) {}

  const ParameterLayout& layout() const override { return adapters_.layout(); }
  Real* weight(const TensorInfo& t) override { return adapters_.weight(t); }
  Real* grad(const TensorInfo& t) override { return adapters_.grad(t); }
  void need_block(int block) override { adapters_.need_block(block); }
  const ParameterLayout* frozen_layout() const override { return &base_; }
  Real* frozen_weight(const TensorInfo& t) override { return weights_.data() + t.offset; }

  // The base's weights: `read` loads a checkpoint's /model tensors of frozen_layout() into the source it
  // is given (state/frozen_source.hpp), tensor by tensor into Real; `replicas` hold the same copy.
  void load(const std::function<void(StateSource&)>& read, const UnitGroups& replicas) {
    FrozenWeightsSource<Real> source(space_, base_, weights_.data(), replicas);
    read(source);
  }

  // The frozen weights count as the model's weights.
  MemoryBytes memory() const {
    MemoryBytes m;
    m[MemoryCategory::weights] = std::int64_t(weights_.extent(0) * sizeof(Real));
    return m;
  }

 private:
  ExecSpace space_;
  ParameterLayout base_;
  ParameterStore<Real>& adapters_;
  Buffer<Real> weights_;
};

}  // namespace meshtrain
