// Fills a micro-batch's input and target tokens from the training data in the data-order contract:
// windows of the token stream, or packed windows of fine-tuning records with their documents and
// kNoLossTarget where a target carries no loss (share/docs/usage.md, Packing and the fine-tuning loss).
//
// Micro-batch k of a step holds samples j = (first + k)·B … (first + k)·B + B − 1 of that step
// (B = micro_batch); a data-parallel rank d starts at first = d · accum. Under context parallelism
// (ContextChunks) each rank of the cp group reads the same samples and keeps its two chunks of every
// sequence: inputs and targets are its B·Tl rows, the documents stay the whole sequences' (the ring's
// mask and the positions are global).
//
// Uploaded without a global fence: each load fills host staging in pinned memory (core/exec.hpp
// PinnedSpace) and copies it with deep_copy on the execution space, so the host goes on while the
// device works. Two slots take turns, each its own staging and device buffer: a load refills its
// slot only once the device has finished what was queued before the previous load — the kernels
// that read that slot's tokens and its copy — which it learns from a mark the device writes to
// pinned memory, not from a fence. On host builds the staging is the device buffer itself.
// Host staging and device buffers are allocated once; load() allocates nothing.
#pragma once

#include "core/exec.hpp"
#include "io/token_shard.hpp"
#include "model/language_model.hpp"
#include "train/data_order.hpp"
#include "train/training_data.hpp"

#include <array>
#include <cstdint>
#include <type_traits>
#include <vector>

namespace meshtrain {

class BatchLoader {
 public:
  // Windows of a token stream.
  BatchLoader(const io::TokenStream& stream, DataOrder& order, int micro_batch, int seq_len, int first_micro = 0,
              const ExecSpace& space = ExecSpace(), const ContextChunks& chunks = {});
  // Either kind of training data.
  BatchLoader(TrainingData& data, int micro_batch, int seq_len, int first_micro = 0,
              const ExecSpace& space = ExecSpace(), const ContextChunks& chunks = {});

  // Loads micro-batch `micro` of step `step` into inputs(), targets() (B·Tl tokens each: this rank's
  // rows, B·T without context parallelism) and documents(), which hold it until the next load but one.
  void load(std::int64_t step, int micro);

  CVec<int> inputs() const { return CVec<int>(slots_[current_].device.data(), tokens()); }
  CVec<int> targets() const { return CVec<int>(slots_[current_].device.data() + tokens(), tokens()); }
  // The documents of the loaded sequences (none on plain data: one per sequence).
  AttentionSegments documents() const {
    const int docs = slots_[current_].docs;
    return {CVec<int>(slots_[current_].device.data() + 2 * whole_tokens(), attention_segments_size(micro_batch_, docs)),
            docs};
  }
  MicroBatch batch() const { return {inputs(), targets(), documents(), step_, first_sample()}; }
  // The step's index of the loaded micro-batch's first sample: (first + micro)·B.
  std::uint64_t first_sample() const { return std::uint64_t(first_micro_ + micro_) * std::uint64_t(micro_batch_); }
  std::int64_t step() const { return step_; }
  // Samples from index `samples` on load as empty rows: inputs 0, no target carrying loss (the last
  // micro-batches of a validation pass, train/validation.hpp). Default: none.
  void limit_samples(std::uint64_t samples) { sample_limit_ = samples; }
  // Fine-tuning data: the loss-carrying targets of step `step`'s `global_batch` samples, all ranks' (the
  // step's divisor, counted from the packing on every rank alike).
  bool packed() const { return data_ != nullptr && data_->packed(); }
  std::int64_t step_loss_targets(std::int64_t step, int global_batch) const {
    return data_->step_loss_targets(step, global_batch);
  }

  // Bytes of its buffers (host staging counts only where it is a separate allocation); packed data
  // adds each slot's document offsets.
  std::size_t bytes() const { return bytes_for(micro_batch_, seq_len_, packed()); }
  static std::size_t bytes_for(int micro_batch, int seq_len, bool packed = false) {
    constexpr bool mirrored = !std::is_same_v<MemSpace, PinnedSpace>;
    const std::size_t n = slot_elements(micro_batch, seq_len, packed);
    return sizeof(int) * (std::size_t(seq_len) + 1) + slots * n * sizeof(int) * (mirrored ? 2 : 1) +
           slots * sizeof(std::int64_t);
  }

 private:
  static constexpr int slots = 2;
  // Ints per slot: inputs and targets, then (packed data) the document offsets of B sequences of up
  // to T documents each (a record takes at least one position, padding one document of its own).
  static std::size_t slot_elements(int micro_batch, int seq_len, bool packed) {
    const std::size_t n = std::size_t(micro_batch) * std::size_t(seq_len);
    return 2 * n + (packed ? attention_segments_size(micro_batch, seq_len) : 0);
  }
  struct Slot {
    Buffer<int> device;                       // inputs (B·T), targets (B·T), document offsets (packed data)
    Kokkos::View<int*, PinnedSpace> staging;  // the same on host builds (no allocation of its own)
    int docs = 0;                             // documents per sequence in the last load (0: plain data)
  };
  // Both public constructors' work: the stream (plain data) or the records (packed) to read.
  BatchLoader(const io::TokenStream* stream, TrainingData* data, DataOrder& order, int micro_batch, int seq_len,
              int first_micro, const ExecSpace& space, const ContextChunks& chunks);
  // The tokens of the B whole sequences (what a load fills), and of this rank's rows of them.
  std::size_t whole_tokens() const { return std::size_t(micro_batch_) * std::size_t(seq_len_); }
  std::size_t tokens() const {
    return std::size_t(micro_batch_) * std::size_t(chunks_.split() ? chunks_.local_rows() : seq_len_);
  }
  // Context parallelism: moves this rank's rows of the whole sequences' inputs and targets to the front of
  // each (in place: a row never moves back past one still to be read).
  void keep_local_rows(const Slot& slot) const;
  void wait_for_slot(int slot) const;
  // The slot's sequences from windows of the stream, or from packed records; returns the documents
  // per sequence (0 for the stream).
  int fill_plain(const Slot& slot, std::int64_t step, int micro);
  int fill_packed(const Slot& slot, std::int64_t step, int micro);

  const io::TokenStream* stream_ = nullptr;
  TrainingData* data_ = nullptr;  // null: the stream alone (tests)
  DataOrder& order_;
  int micro_batch_;
  int seq_len_;
  int first_micro_;
  ExecSpace space_;
  ContextChunks chunks_;
  Kokkos::View<int*, HostSpace> window_;  // T + 1 tokens
  // Packed data: one record's tokens and mask (sized for the longest record once), and each
  // sequence's document ends.
  std::vector<std::int32_t> record_tokens_;
  std::vector<std::uint8_t> record_mask_;
  std::vector<std::vector<int>> ends_;
  std::array<Slot, slots> slots_;
  std::uint64_t sample_limit_ = ~std::uint64_t(0);
  int current_ = slots - 1;  // the slot the last load filled
  std::int64_t step_ = 0;    // the last load's step and micro-batch
  int micro_ = 0;
  // marks_(s) reaches awaited_[s] once the device is done with slot s's last use.
  Kokkos::View<std::int64_t*, PinnedSpace> marks_;
  std::array<std::int64_t, slots> awaited_{};
  std::int64_t tickets_ = 0;
};

}  // namespace meshtrain
