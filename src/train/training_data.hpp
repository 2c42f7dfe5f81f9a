// The training data of a run, either kind (share/docs/usage.md, Token shards and Fine-tuning data):
// plain token shards, one stream cut into windows by the data order, or fine-tuning shards, records
// with loss masks packed into windows (train/packed_windows.hpp). The kind is the files' (their
// magic), so a run needs no key to say which. Both kinds number their samples alike (DataOrder's
// sample index), so resuming, changing the global batch and every layout work the same on both.
#pragma once

#include "core/config.hpp"
#include "io/sft_shard.hpp"
#include "io/token_shard.hpp"
#include "train/data_order.hpp"
#include "train/packed_windows.hpp"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace meshtrain {

// Which data a run reads: data.train in data.order, or data.valid (Validation) in sequential order.
enum class DataRole { train, valid };

class TrainingData {
 public:
  // Opens the role's key, checks its tokens against model.vocab and makes its order. InputError
  // naming the key or file at fault: no data, a file of neither kind, a glob that mixes the two, a
  // token outside the vocabulary, too little data for one window, no record that can be packed.
  static TrainingData open(const Config& cfg, DataRole role = DataRole::train);

  // Fine-tuning records (packed windows with loss masks and documents) rather than a token stream.
  bool packed() const { return records_.has_value(); }
  const std::vector<std::string>& paths() const;
  DataOrder& order() { return order_; }
  const DataOrder& order() const { return order_; }

  // Plain data: the stream DataOrder's windows cut.
  const io::TokenStream& stream() const { return *stream_; }
  // Fine-tuning data: the records, their packing, and the loss-carrying targets record r has once
  // packed (its mask over the targets it keeps: none when dropped or too short).
  const io::SftShards& records() const { return *records_; }
  // Valid until a window of another epoch is asked for (train/packed_windows.hpp).
  PackedWindow window(std::uint64_t sample) { return packing_->window(sample); }
  std::int64_t record_loss_targets(std::uint64_t record) const { return record_loss_targets_[record]; }

  // The loss-carrying targets of sample `sample`'s window (T on plain data, every target carrying
  // loss), and of step `step`'s G samples: what every rank divides the step's loss by.
  std::int64_t sample_loss_targets(std::uint64_t sample);
  std::int64_t step_loss_targets(std::int64_t step, int global_batch);

  // Windows in one pass over the data: the stream's, or the first epoch's packed ones.
  std::uint64_t windows_per_epoch() const { return packed() ? first_epoch_windows_ : order_.windows(); }

  // The start banner's line: the data, its kind and its windows.
  std::string summary(SampleOrder order) const;

 private:
  TrainingData() = default;
  static TrainingData open_role(const Config& cfg, DataRole role);

  int seq_len_ = 0;
  std::optional<io::TokenStream> stream_;
  std::optional<io::SftShards> records_;
  std::optional<PackedWindows> packing_;
  std::vector<std::int32_t> record_loss_targets_;
  std::uint64_t first_epoch_windows_ = 0;  // packed windows of epoch 0, for the banner
  DataOrder order_ = DataOrder::of_samples(0);
};

}  // namespace meshtrain
