// Validation passes: which windows, on which rank, and their loss.
#include "train/validation.hpp"

#include "core/elapsed.hpp"

#include <fmt/format.h>

#include <algorithm>

namespace meshtrain {

std::uint64_t validation_samples(std::int64_t eval_tokens, int seq_len, std::uint64_t windows) {
  if (eval_tokens <= 0) return windows;
  const std::uint64_t asked = (std::uint64_t(eval_tokens) + std::uint64_t(seq_len) - 1) / std::uint64_t(seq_len);
  return std::min(asked, windows);
}

Validation::Validation(const Config& cfg, TrainingData* data, const Layout& grid, int dp_rank, const ExecSpace& space,
                       const ContextChunks& chunks)
    : cfg_(cfg), data_(data) {
  if (data_ == nullptr) return;
  const int B = cfg.train.micro_batch;
  samples_ = validation_samples(cfg.train.eval_tokens, cfg.model.seq_len, data_->windows_per_epoch());
  const std::uint64_t per_pass = std::uint64_t(grid.dp) * std::uint64_t(B);
  micro_batches_ = int((samples_ + per_pass - 1) / per_pass);
  for (std::uint64_t j = 0; j < samples_; ++j) loss_targets_ += data_->sample_loss_targets(j);
  loader_.emplace(*data_, B, cfg.model.seq_len, dp_rank * micro_batches_, space, chunks);
  loader_->limit_samples(samples_);
}

bool Validation::due(std::int64_t step) const {
  if (!enabled()) return false;
  return step == cfg_.train.steps || (cfg_.train.eval_every > 0 && step % cfg_.train.eval_every == 0);
}

ValidationResult Validation::evaluate(ModelState& state, TrainingGroups& groups, bool pipelined,
                                      const ExecSpace& space) {
  const auto start = Clock::now();
  sum_.clear(space);
  if (!pipelined) {
    for (int micro = 0; micro < micro_batches_; ++micro) {
      loader_->load(0, micro);
      state.evaluate(loader_->batch(), sum_);
    }
  } else {
    state.evaluate_pipeline(*loader_, micro_batches_, sum_);
  }
  host_fence(space, "validation: the loss sum written before MPI reads it");
  if (pipelined) groups.pp->allreduce_sum(sum_.data(), 1);
  groups.dp->allreduce_sum(sum_.data(), 1);
  ValidationResult r;
  r.loss_targets = loss_targets_;
  r.loss = loss_targets_ > 0 ? sum_.read(space) / double(loss_targets_) : 0.0;
  r.seconds = seconds_since(start);
  return r;
}

std::string Validation::summary() const {
  if (!enabled()) return {};
  return fmt::format("validation: {} windows of {} ({} targets carrying loss), {} micro-batch(es) per rank, {}",
                     samples_, cfg_.data.valid, loss_targets_, micro_batches_,
                     cfg_.train.eval_every > 0 ? fmt::format("every {} steps and after the last", cfg_.train.eval_every)
                                               : std::string("after the last step"));
}

}  // namespace meshtrain
