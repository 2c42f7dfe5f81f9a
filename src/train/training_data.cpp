// Opening either kind of training data, and the loss-carrying targets of its samples.
#include "train/training_data.hpp"

#include "core/errors.hpp"

#include <fmt/format.h>

#include <algorithm>

namespace meshtrain {
namespace {

// The loss-carrying targets each record keeps once packed into windows of T positions: its mask
// over targets 1 … min(L − 1, T) (truncate), none when it is dropped or holds a single token. One
// pass over the records at start-up, O(tokens), on memory-mapped files.
std::vector<std::int32_t> kept_loss_targets(const io::SftShards& records, int T, OverlongRecords overlong) {
  std::vector<std::int32_t> kept(records.record_count(), 0);
  std::vector<std::int32_t> tokens;
  std::vector<std::uint8_t> mask;
  for (std::size_t r = 0; r < records.record_count(); ++r) {
    const std::size_t length = records.record_length(r);
    if (length < 2 || (length - 1 > std::size_t(T) && overlong == OverlongRecords::drop)) continue;
    tokens.resize(length);
    mask.resize(length);
    records.copy_record(r, tokens.data(), mask.data());
    const std::size_t last = std::min(length - 1, std::size_t(T));
    kept[r] = std::int32_t(std::count(mask.begin() + 1, mask.begin() + std::ptrdiff_t(last) + 1, std::uint8_t(1)));
  }
  return kept;
}

}  // namespace

TrainingData TrainingData::open(const Config& cfg, DataRole role) {
  const char* key = role == DataRole::train ? "data.train" : "data.valid";
  if ((role == DataRole::train ? cfg.data.train : cfg.data.valid).empty()) {
    input_error(
        "{} is not set: give a token shard or a glob of them (meshtrain prepare --text), or fine-tuning shards "
        "(meshtrain prepare --sft)",
        key);
  }
  try {
    return open_role(cfg, role);
  } catch (const InputError& e) {
    // The readers name the file; the key says which of the run's data it is.
    input_error("{}: {}", key, e.what());
  }
}

TrainingData TrainingData::open_role(const Config& cfg, DataRole role) {
  const bool training = role == DataRole::train;
  const std::string& path = training ? cfg.data.train : cfg.data.valid;
  // Validation reads its windows in order from the start (sample j of its one pass: window j); its
  // order's global batch is never used (train/validation.hpp).
  const SampleOrder order = training ? cfg.data.order : SampleOrder::sequential;
  const int global_batch = training ? cfg.train.global_batch : 1;
  TrainingData data;
  data.seq_len_ = cfg.model.seq_len;
  if (!io::names_sft_shards(path)) {
    data.stream_.emplace(io::TokenStream::open(path));
    data.stream_->require_vocab(cfg.model.vocab);
    if (data.stream_->size() <= std::size_t(cfg.model.seq_len)) {
      input_error("'{}' holds {} tokens, fewer than model.seq_len + 1 = {}: no window fits", path, data.stream_->size(),
                  cfg.model.seq_len + 1);
    }
    data.order_ = DataOrder(data.stream_->size(), cfg.model.seq_len, global_batch, order, cfg.train.seed);
    return data;
  }
  data.records_.emplace(io::SftShards::open(path));
  data.records_->require_vocab(cfg.model.vocab);
  std::vector<std::int64_t> lengths(data.records_->record_count());
  for (std::size_t r = 0; r < lengths.size(); ++r) lengths[r] = std::int64_t(data.records_->record_length(r));
  data.packing_.emplace(lengths, cfg.model.seq_len, order, cfg.train.seed, cfg.data.overlong);
  data.record_loss_targets_ = kept_loss_targets(*data.records_, cfg.model.seq_len, cfg.data.overlong);
  data.first_epoch_windows_ = data.packing_->windows_in_epoch(0);
  data.order_ = DataOrder::of_samples(global_batch);
  return data;
}

const std::vector<std::string>& TrainingData::paths() const { return packed() ? records_->paths() : stream_->paths(); }

std::int64_t TrainingData::sample_loss_targets(std::uint64_t sample) {
  if (!packed()) return seq_len_;
  std::int64_t targets = 0;
  for (const PackedRecord& r : packing_->window(sample).records) targets += record_loss_targets_[r.record];
  return targets;
}

std::int64_t TrainingData::step_loss_targets(std::int64_t step, int global_batch) {
  std::int64_t targets = 0;
  for (int j = 0; j < global_batch; ++j) targets += sample_loss_targets(order_.sample_index(step, j));
  return targets;
}

std::string TrainingData::summary(SampleOrder order) const {
  if (!packed()) {
    return fmt::format("data: {} tokens in {} shard(s), {} windows, order {}", stream_->size(), paths().size(),
                       order_.windows(), order);
  }
  const PackedWindows& p = *packing_;
  std::string line = fmt::format(
      "data: {} fine-tuning records ({} tokens, {} carrying loss) in {} shard(s), packed into {} windows in the first "
      "epoch, order {}",
      records_->record_count(), records_->token_count(), records_->loss_token_count(), paths().size(),
      first_epoch_windows_, order);
  if (p.truncated() > 0) line += fmt::format("; {} over-long records truncated to {} targets", p.truncated(), seq_len_);
  if (p.dropped() > 0) line += fmt::format("; {} over-long records dropped", p.dropped());
  if (p.skipped_short() > 0) line += fmt::format("; {} records of one token skipped", p.skipped_short());
  return line;
}

}  // namespace meshtrain
