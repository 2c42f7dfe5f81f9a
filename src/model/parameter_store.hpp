// Where a model's weights and gradients live when it does not own them: the model states
// (state/working_copy.hpp) keep them as the ZeRO stage says — whole, or in shards and working
// rooms — and gather a block's weights only when the block is about to be computed.
#pragma once

#include "model/parameters.hpp"

#include <stdexcept>

namespace meshtrain {

template <class Real>
class ParameterStore {
 public:
  virtual ~ParameterStore() = default;
  // The layout the store holds (its shard units padded for the data-parallel group).
  virtual const ParameterLayout& layout() const = 0;
  // Where the model reads tensor t's weights and accumulates its gradient; fixed for the store's life.
  virtual Real* weight(const TensorInfo& t) = 0;
  virtual Real* grad(const TensorInfo& t) = 0;
  // Block `block` (global index) is about to be computed, forward or backward: its weights must be
  // in place at weight() when this returns.
  virtual void need_block(int block) = 0;
  // LoRA (model.lora): layout() lists the adapters, the only tensors with gradients, and the store
  // holds the base model's tensors besides, frozen: weights only, read at frozen_weight(). Null
  // without LoRA.
  virtual const ParameterLayout* frozen_layout() const { return nullptr; }
  virtual Real* frozen_weight(const TensorInfo& t) {
    throw std::logic_error("the parameter store holds no frozen tensor " + t.name);
  }
};

}  // namespace meshtrain
