// Validation (share/docs/usage.md, Validation): the loss of the model on the first windows of
// data.valid, every train.eval_every steps and after the last one, forward passes only.
//
// A pass reads S windows — all of data.valid's first epoch, or the first ⌈train.eval_tokens / T⌉ —
// in order, the same ones under every layout: data-parallel rank d takes samples d·m·B … of them in
// m micro-batches of B (m = ⌈S / (dp·B)⌉, the same on every rank and pipeline stage), rows past S
// empty and without loss. Its value is the sum of the cross-entropies of the loss-carrying targets
// over their count, summed over the pipeline and data-parallel groups as a step's loss is: one number
// whatever the layout, up to the order of the sums.
#pragma once

#include "core/config.hpp"
#include "kernels/loss_sum.hpp"
#include "parallel/topology.hpp"
#include "state/model_state.hpp"
#include "train/batch_loader.hpp"
#include "train/progress.hpp"
#include "train/training_data.hpp"
#include "train/training_groups.hpp"

#include <cstdint>
#include <optional>
#include <string>

namespace meshtrain {

class Validation {
 public:
  // `data`: data.valid, opened (none: no validation). It must outlive this object.
  // `chunks`: this rank's rows of each sequence under context parallelism (BatchLoader).
  Validation(const Config& cfg, TrainingData* data, const Layout& grid, int dp_rank, const ExecSpace& space,
             const ContextChunks& chunks = {});

  bool enabled() const { return loader_.has_value(); }
  // Whether a pass follows step `step` (1-based, completed).
  bool due(std::int64_t step) const;
  // One pass. Collective over every group; returns once the execution space is idle.
  ValidationResult evaluate(ModelState& state, TrainingGroups& groups, bool pipelined, const ExecSpace& space);

  std::size_t bytes() const { return loader_ ? loader_->bytes() : 0; }
  // The start banner's line (empty without validation).
  std::string summary() const;

 private:
  const Config& cfg_;
  TrainingData* data_;
  std::uint64_t samples_ = 0;  // S
  int micro_batches_ = 0;      // m, per rank
  std::int64_t loss_targets_ = 0;
  std::optional<BatchLoader> loader_;
  LossSum sum_{LossTerm::token_sum};
};

// The validation windows S of a pass over `windows` (data.valid's first epoch) under train.eval_tokens.
std::uint64_t validation_samples(std::int64_t eval_tokens, int seq_len, std::uint64_t windows);

}  // namespace meshtrain
