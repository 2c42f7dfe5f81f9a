// The 16-bit working copy a bf16/fp16 run computes with: a Gpt2<bf16|fp16> over 16-bit weights and
// gradients, beside the fp32 states (master weights, fp32 gradients, moments — whole or ZeRO
// shards) that the optimizer and the reductions use.
//
// As backward finishes each tensor's 16-bit gradient, it is divided by the loss scale and added
// into the fp32 gradient in fp32 (so micro-batches accumulate in fp32), and zeroed; only then is
// the fp32 side told that the range is final, so its data-parallel reduction runs on fp32 sums.
// After each update the fp32 master weights are rounded into the 16-bit copy.
#pragma once

#include "core/config.hpp"
#include "model/gpt2.hpp"
#include "train/memory_ledger.hpp"

#include <functional>
#include <memory>

namespace meshtrain {

class LowPrecisionCopy {
 public:
  // Where the fp32 side keeps tensor t's master weights and gradient.
  using Locate = std::function<float*(const TensorInfo&)>;

  virtual ~LowPrecisionCopy() = default;
  // Mean loss of the micro-batch; dlogits scaled by grad_scale · loss_scale.
  virtual double forward(CVec<int> inputs, CVec<int> targets, double grad_scale, double loss_scale) = 0;
  // Backward; each finished range is moved into the fp32 gradients (÷ loss_scale) before
  // `fp32_ready` hears of it.
  virtual void backward(CVec<int> inputs, double loss_scale, const Gpt2<float>::ReadyFrom& fp32_ready) = 0;
  // Rounds the fp32 master weights into the 16-bit copy.
  virtual void copy_master() = 0;
  // Bytes: the 16-bit weights and gradients, activations, GEMM workspace.
  virtual MemoryBytes memory() const = 0;

  // A copy for cfg.train.precision (bf16 or fp16) over `layout` (the fp32 side's, padded alike).
  static std::unique_ptr<LowPrecisionCopy> make(const ExecSpace& space, const Config& cfg, const ParameterLayout& layout,
                                                Comm* tp, StagePlace place, int slots, Locate master, Locate grad);
  // What memory() will report, for the planner.
  static MemoryBytes planned(const Config& cfg, const ParameterLayout& layout, int tp, StagePlace place, int slots);
};

}  // namespace meshtrain
