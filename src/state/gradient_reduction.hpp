// Reduce-on-ready: the data-parallel reduction of one step's gradients, started as backward
// finishes each range (LanguageModel::backward reports the offset from which every gradient is final) so
// that it overlaps the rest of backward. Two strategies, chosen once by the ZeRO stage
// (state/zero_stage.hpp):
//
//   BucketedAllReduce  stage 0 (PyTorch DDP's idea): the whole fp32 gradient buffer cut into
//                      buckets of about parallel.bucket_mb from its end (backward finishes tensors
//                      in reverse layout order); each complete bucket's non-blocking all-reduce
//                      over the replicas starts at once.
//   UnitReduceScatter  ZeRO: each finished shard unit is reduce-scattered over its shard group into
//                      the owned slice; under stages 2–3 in every backward pass, accumulating into
//                      the gradient shard and zeroing the unit's working gradients, under stage 1
//                      in the step's last pass only.
//
// Under expert parallelism the routed experts' units are summed over the expert-data-parallel
// group only (state/unit_groups.hpp): the ranks of the data-parallel group that hold other experts
// have other tensors there. Stage 0's buckets then never straddle a dense and an expert unit.
//
// Per-rank gradients are scaled by 1/(global tokens), so the sums are the mean. Without arm()
// (pipeline schedules interleave micro-batches) stage 0 and 1 reduce everything in finish().
#pragma once

#include "core/exec.hpp"
#include "parallel/comm.hpp"
#include "state/placed_state.hpp"

#include <cstddef>
#include <memory>
#include <utility>
#include <vector>

namespace meshtrain {

class GradientReduction {
 public:
  virtual ~GradientReduction() = default;
  // A new step: the accumulated gradients are zero and nothing is reduced yet.
  virtual void start_step() = 0;
  // The step's last backward pass begins: reductions may start during it.
  virtual void arm() = 0;
  // Every gradient at flat offset ≥ `offset` is final for this pass.
  virtual void ready_from(std::size_t offset) = 0;
  // Reduces what is left and waits; then sums the tied wte gradient between the first and last
  // pipeline stage over `tied` (none without pipeline). The owned slices then hold the mean.
  virtual void finish(Comm* tied) = 0;
  // Bytes of receive buffers it allocated (what buffer_elements plans).
  virtual std::size_t buffer_bytes() const = 0;
};

// The strategy for `stage` over `grads` (the fp32 gradients, held as the stage says); `groups` the
// units' data-parallel groups: the replicas of stage 0, ZeRO's shard groups.
std::unique_ptr<GradientReduction> make_gradient_reduction(const ExecSpace& space, const ZeroStage& stage,
                                                           const PlacedState<float>& grads, const UnitComms& groups,
                                                           std::size_t bucket_bytes);

// One of stage 0's buckets: flat range [begin, end), reduced over the expert units' group or the
// dense units'.
struct GradientBucket {
  std::size_t begin = 0, end = 0;
  bool experts = false;
};
// Stage 0's buckets over the whole fp32 gradients of `layout`: ranges of about `bucket_bytes`, cut
// from the end of the buffer (the first one is the last to finish in backward); with
// `split_experts` (the expert units have a group of their own), cut from the end of each run of
// consecutive units of one kind.
std::vector<GradientBucket> gradient_buckets(const ParameterLayout& layout, bool split_experts,
                                             std::size_t bucket_bytes);
// Elements of receive buffer the strategy for `stage` allocates.
std::size_t reduction_buffer_elements(const ShardMap& map, const ZeroStage& stage);

}  // namespace meshtrain
