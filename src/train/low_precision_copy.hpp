// The 16-bit working copy a bf16/fp16 run computes with: a Gpt2<bf16|fp16> over 16-bit weights and
// gradients, beside the fp32 states (master weights, fp32 gradients, moments — whole, or ZeRO
// shards in a master-only ZeroState) that the optimizer and the gradient reductions use.
//
// The copy's weights are laid out as ZeRO lays out the fp32 weights of an fp32 run: whole under
// stages 0–2, under stage 3 a 16-bit shard plus the resident units and one working block, gathered
// (in 16 bits) before each block's forward and backward. After each update every rank rounds its
// fp32 master slices into its 16-bit slices and the group all-gathers them in 16 bits: weights
// travel in 16 bits, the optimizer state never does.
//
// As backward finishes each tensor's 16-bit gradient, it is divided by the loss scale and added
// into the fp32 gradient in fp32 (so micro-batches accumulate in fp32), and zeroed; only then is
// the fp32 side told that the range is final, so its data-parallel reduction sums in fp32.
#pragma once

#include "core/config.hpp"
#include "model/gpt2.hpp"
#include "parallel/schedule.hpp"
#include "train/batch_loader.hpp"
#include "train/memory_ledger.hpp"
#include "train/shard_map.hpp"

#include <functional>
#include <memory>
#include <vector>

namespace meshtrain {

// Where the fp32 side keeps what the copy reads and feeds.
struct Fp32Side {
  std::function<float*(const TensorInfo&)> grad;     // tensor t's fp32 gradient (accumulated into)
  std::function<float*(const TensorInfo&)> master;   // stage 0: tensor t's fp32 master weights
  std::function<Vec<float>(std::size_t)> master_shard;  // ZeRO: the owned fp32 slice of unit u
};

// A pipeline stage's schedule, its micro-batches and its group (none without pipeline).
struct PipelineParts {
  std::vector<Action> schedule;
  BatchLoader* loader = nullptr;
  Comm* pp = nullptr;
};

class LowPrecisionCopy {
 public:
  virtual ~LowPrecisionCopy() = default;
  // Mean loss of the micro-batch; dlogits scaled by grad_scale · loss_scale.
  virtual double forward(CVec<int> inputs, CVec<int> targets, double grad_scale, double loss_scale) = 0;
  // Backward; each finished range is moved into the fp32 gradients (÷ loss_scale) before
  // `fp32_ready` hears of it.
  virtual void backward(CVec<int> inputs, double loss_scale, const Gpt2<float>::ReadyFrom& fp32_ready) = 0;
  // One step of the pipeline schedule (with PipelineParts): Σ of the micro-batches' mean losses.
  virtual double run_pipeline(std::int64_t step, double grad_scale, double loss_scale,
                              const Gpt2<float>::ReadyFrom& fp32_ready) = 0;
  // Rounds the fp32 master weights into the 16-bit copy (and gathers it under ZeRO).
  virtual void copy_master() = 0;
  // Bytes: the 16-bit weights and gradients, activations, GEMM workspace.
  virtual MemoryBytes memory() const = 0;

  // A copy for cfg.train.precision (bf16 or fp16) over `layout` (the fp32 side's, padded alike),
  // sharded as cfg.parallel.zero says over `dp`.
  static std::unique_ptr<LowPrecisionCopy> make(const ExecSpace& space, const Config& cfg, const ParameterLayout& layout,
                                                Comm* tp, Comm* dp, StagePlace place, const PipelineParts& pipeline,
                                                Fp32Side fp32);
  // What memory() will report, for the planner.
  static MemoryBytes planned(const Config& cfg, const ParameterLayout& layout, int tp, int dp, StagePlace place,
                             int slots);
};

}  // namespace meshtrain
