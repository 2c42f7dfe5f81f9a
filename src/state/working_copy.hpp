// The weights and gradients the model computes with, in its precision Real, as the model's
// ParameterStore (model/parameter_store.hpp).
//
// fp32 (Real = float): the optimizer's own master weights and fp32 gradients, nothing copied.
// bf16/fp16: a typed copy, held as the ZeRO stage holds compute weights and gradients (whole, or
// a 16-bit shard with working units at stage 3, gathered per block in 16 bits). After each update
// every rank rounds its fp32 master slices into its 16-bit slices and the group gathers them:
// weights travel in 16 bits, the optimizer state never does. As backward finishes each tensor's
// 16-bit gradient, it is divided by the loss scale, added into the fp32 gradient (so micro-batches
// accumulate in fp32) and zeroed; only then does the reduction hear that the range is final, so
// the data-parallel sums are taken in fp32. Both hand-offs go in few launches: the gradients in one
// per range of newly final tensors that lie end to end (a whole pass of backward's report at stage 0
// without padding, else a unit), the rounding in one over every owned slice (state/owned_chunks.hpp).
#pragma once

#include "core/memory_ledger.hpp"
#include "kernels/convert.hpp"
#include "model/parameter_store.hpp"
#include "state/block_gatherer.hpp"
#include "state/optimizer_state.hpp"
#include "state/owned_chunks.hpp"

#include <optional>
#include <type_traits>
#include <vector>

namespace meshtrain {

template <class Real>
class WorkingCopy final : public ParameterStore<Real> {
 public:
  static constexpr bool typed_copy = !std::is_same_v<Real, float>;

  static MemoryBytes planned(const ShardMap& map, const ZeroStage& stage) {
    MemoryBytes m;
    if constexpr (typed_copy) {
      m[MemoryCategory::weights] = std::int64_t(PlacedState<Real>::bytes_for(map, stage.compute_weights()));
      m[MemoryCategory::grads] = std::int64_t(PlacedState<Real>::bytes_for(map, stage.compute_grads()));
    }
    return m;
  }

  WorkingCopy(const ExecSpace& space, OptimizerState& fp32)
      : space_(space),
        fp32_(fp32),
        weights_(own_or_master(fp32)),
        grads_(own_or_fp32_grads(fp32)),
        gatherer_(space, *weights_, fp32.shard_groups()),
        owned_slices_("meshtrain::low_precision::owned", fp32.map(),
                      typed_copy ? owned_slices(fp32.map()) : std::vector<OwnedRun>{}) {
    next_ = tensors().size();
  }

  // ParameterStore: where the model computes.
  const ParameterLayout& layout() const override { return fp32_.layout(); }
  Real* weight(const TensorInfo& t) override { return weights_->at(t); }
  Real* grad(const TensorInfo& t) override { return grads_->at(t); }
  void need_block(int block) override { gatherer_.need(block); }

  // Backward's report that every gradient at offset ≥ `offset` is final for this pass; 16-bit
  // gradients of the newly final tensors (they finish from the end of the layout) move into fp32,
  // divided by `loss_scale`, before the reduction hears of it.
  void ready_from(std::size_t offset, double loss_scale) {
    if constexpr (typed_copy) move_into_fp32(offset, float(1.0 / loss_scale));
    fp32_.reduction().ready_from(offset);
  }

  // The master weights changed (initialised, loaded, updated): make the model's weights agree —
  // round the owned slices into 16 bits (typed copy), gather every unit the model reads whole
  // (blocks of stage 3 are gathered on demand instead).
  void publish() {
    const ShardMap& map = fp32_.map();
    gatherer_.invalidate();
    if constexpr (typed_copy) {
      convert_owned<Real, float>(space_, owned_slices_, chunk_address(weights_->where()),
                                 chunk_address(fp32_.master().where()));
    }
    for (std::size_t u = 0; u < map.units(); ++u) {
      if (weights_->held() == Held::working_and_shard && map.is_block(u)) continue;
      weights_->gather(u, fp32_.shard_group(u));
    }
  }

  // Bytes of the typed copy (none under fp32: the optimizer counts its buffers).
  MemoryBytes memory() const {
    MemoryBytes m;
    if constexpr (typed_copy) {
      m[MemoryCategory::weights] = std::int64_t(own_weights_->bytes());
      m[MemoryCategory::grads] = std::int64_t(own_grads_->bytes());
    }
    return m;
  }

 private:
  const std::vector<TensorInfo>& tensors() const { return layout().tensors(); }

  const PlacedState<Real>* own_or_master(OptimizerState& fp32) {
    if constexpr (typed_copy) {
      own_weights_.emplace("meshtrain::low_precision::weights", fp32.map(), fp32.stage().compute_weights());
      return &*own_weights_;
    } else {
      return &fp32.master();
    }
  }
  const PlacedState<Real>* own_or_fp32_grads(OptimizerState& fp32) {
    if constexpr (typed_copy) {
      own_grads_.emplace("meshtrain::low_precision::grads", fp32.map(), fp32.stage().compute_grads());
      return &*own_grads_;
    } else {
      return &fp32.grads();
    }
  }

  // Each unit's owned slice whole, padding included.
  static std::vector<OwnedRun> owned_slices(const ShardMap& map) {
    std::vector<OwnedRun> runs;
    for (std::size_t u = 0; u < map.units(); ++u) runs.push_back({u, 0, map.shard(u), 0});
    return runs;
  }

  void move_into_fp32(std::size_t offset, float unscale) {
    // The newly final tensors from the last, gathered into ranges that lie end to end in both places.
    Real* g16 = nullptr;
    float* g32 = nullptr;
    std::size_t n = 0;
    const auto hand_off = [&] {
      if (n > 0) move_into<float, Real>(space_, Vec<float>(g32, n), Vec<Real>(g16, n), unscale, long(n));
    };
    while (next_ > 0 && tensors()[next_ - 1].offset >= offset) {
      const TensorInfo& t = tensors()[--next_];
      Real* const low = grads_->at(t);
      float* const high = fp32_.grads().at(t);
      if (n == 0 || low + t.numel != g16 || high + t.numel != g32) {
        hand_off();
        n = 0;
      }
      g16 = low;
      g32 = high;
      n += t.numel;
    }
    hand_off();
    if (next_ == 0) next_ = tensors().size();  // the pass is complete
  }

  ExecSpace space_;
  OptimizerState& fp32_;
  std::optional<PlacedState<Real>> own_weights_, own_grads_;  // the typed copy (16-bit runs)
  const PlacedState<Real>* weights_;
  const PlacedState<Real>* grads_;
  BlockGatherer<Real> gatherer_;
  OwnedChunks owned_slices_;  // every unit's owned slice, for the rounding into 16 bits
  std::size_t next_;          // tensors [next_, end) have been moved into fp32 in this backward pass
};

}  // namespace meshtrain
