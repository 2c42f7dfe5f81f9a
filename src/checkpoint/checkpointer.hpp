// Saving and loading training state through io/'s layout-free HDF5 files.
//
// The model side of the contract lives here: saving the flat states (/model, and the AdamW
// moments under /optim) with the root attributes, loading them checked against the config and
// their checksums, which checkpoint `resume auto` takes, and saving in the background. The names
// in the file are io/checkpoint/schema.hpp's; which datasets and which rank's part of each are
// checkpoint/plan.hpp's; the attributes checkpoint/attributes.hpp's.
//
// Who writes what: every element once. Within a data-parallel group the ranks' save ranges split
// each tensor (state/state_source.hpp); of a tensor several tensor-parallel ranks or stages hold
// (LayerNorms, row-parallel biases, the tied wte) the copy ParameterLayout::holds_counted_copy names.
#pragma once

#include "checkpoint/attributes.hpp"
#include "core/config.hpp"
#include "core/mpi_check.hpp"
#include "model/parameters.hpp"
#include "state/state_source.hpp"

#include <mpi.h>

#include <cstdint>
#include <future>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace meshtrain {

// A background save that has finished.
struct FinishedSave {
  std::string path;
  double write_s = 0;  // from the snapshot to `latest` naming the file
};

class Checkpointer {
 public:
  // Collective over `comm`, the run's world (it duplicates it for background saves; the save's
  // injected faults name ranks in it). `tokenizer` is the one the run's data was made with
  // (byte-level when its path is empty): saves record it, and loads refuse a checkpoint that
  // records another (checkpoint/tokenizer_identity.hpp). Nothing: a reader that checks the
  // tokenizer itself and saves nothing (`sample`).
  Checkpointer(const Config& config, const ParameterLayout& layout, MPI_Comm comm,
               std::optional<TokenizerRecord> tokenizer = std::nullopt);
  // Waits for a background save still in flight.
  ~Checkpointer();
  Checkpointer(const Checkpointer&) = delete;
  Checkpointer& operator=(const Checkpointer&) = delete;

  // Writes <dir>/step_<step>.h5: under a temporary name, flushed by every rank, renamed, then
  // `latest` replaced and old ones pruned. With `background` (checkpoint.async, where MPI allows
  // threads) this rank's pieces are copied to host memory and written by a background thread
  // while training goes on; a save still in flight is finished first. Returns the seconds the
  // caller was held. A save that cannot be written (share/docs/usage.md, A full disk during a
  // save) throws io::WriteFailed on every rank, from here or, in the background, from poll() or
  // wait(), having left the directory as it was.
  double save(const TrainingTensors& state, const TrainingProgress& progress, bool background);
  // The bytes one checkpoint of this model takes at most (checkpoint/plan.hpp).
  std::uint64_t file_bytes() const;
  // Whether background saves are possible: MPI must allow threads (MPI_THREAD_MULTIPLE).
  bool background_possible() const { return threads_; }
  // A background save finished since the last call (or waited for by save()), or nothing;
  // rethrows its failure. Collective.
  std::optional<FinishedSave> poll();
  // Waits for a background save in flight, if any; poll() reports it.
  std::optional<FinishedSave> wait();

  // The checkpoints `checkpoint.resume` offers, best first: one named file; for `auto` the one
  // `latest` names, then every other step_*.h5 of the directory, newest first (a later one is
  // tried when an earlier one cannot be loaded); none for `never` or an empty directory.
  std::vector<std::string> resume_candidates() const;
  // Restores weights, moments and progress from `path`, verifying every tensor's checksum; the
  // model shape must match the config. A bad file is an InputError on every rank (the same one);
  // a checkpoint of another tokenizer a TokenizerMismatch (unless data.tokenizer_change = allow).
  TrainingProgress load(const std::string& path, const TrainingTensors& state);
  // Loads only /model from `path` (checkpoint.init_weights, or any checkpoint); a meshtrain
  // checkpoint of another tokenizer is refused as load() refuses it.
  void load_weights(const std::string& path, StateSource& weights);
  void load_weights(const std::string& path, Vec<float> weights);
  // LoRA: the frozen base's weights from `path` (checkpoint.init_weights) into `weights`, a source of
  // `base` (the model's layout of this rank, beside the adapters' this checkpointer saves), checked as
  // load_weights checks them; adapter tensors beside them in the file are left alone.
  void load_base_weights(const std::string& path, const ParameterLayout& base, StateSource& weights);
  // Whether the /model group of `path` holds any LoRA adapter tensor (an init_weights file with a PEFT
  // adapter imported: training then starts from those adapters). Collective.
  bool holds_adapters(const std::string& path);

 private:
  struct Snapshot;
  // Refuses (TokenizerMismatch, on every rank) or warns of a checkpoint of another tokenizer than
  // the run's; `key` is the one that named the file. Collective.
  void require_run_tokenizer(const io::CheckpointReader& reader, const std::string& key, const std::string& path) const;
  // load_weights over any layout of this run (the saved one, or LoRA's frozen base).
  void load_weights_of(const ParameterLayout& layout, const std::string& path, StateSource& weights);

  const Config& config_;
  const ParameterLayout& layout_;
  MPI_Comm comm_;
  std::optional<TokenizerRecord> tokenizer_;
  mpi::OwnedComm background_comm_;  // the background thread's collectives
  bool threads_ = false;
  std::unique_ptr<Snapshot> snapshot_;
  std::future<FinishedSave> in_flight_;
  std::optional<FinishedSave> finished_;  // waited for, not yet reported
};

}  // namespace meshtrain
