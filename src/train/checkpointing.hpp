// Saving and loading training state (interface section 3) through io/'s layout-free HDF5 files.
//
// The model side of the contract lives here: which tensors a checkpoint holds (/model, and the
// AdamW moments under /optim), the root attributes, the checks that a file fits the config and
// that every tensor read back has the checksum it was saved with, which checkpoint `resume auto`
// takes, and saving in the background. Everything below the tensor records is io/'s business.
//
// Who writes what: every element once. Within a data-parallel group the ranks' save ranges split
// each tensor (state/state_source.hpp); replicated tensor-parallel pieces (LayerNorms, row-parallel
// biases) are written by tensor-parallel rank 0; the tied wte by the first pipeline stage.
#pragma once

#include "core/config.hpp"
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
namespace io {
class CheckpointReader;
}

inline constexpr const char* checkpoint_format = "meshtrain-checkpoint";
// 2: every dataset carries a checksum, and samples_seen gives the data position.
inline constexpr std::int64_t checkpoint_version = 2;

// What a checkpoint carries besides tensors. The schedule derives from `step`, the data position
// from `samples` (equal to step · global_batch unless the global batch changed between jobs).
struct TrainingProgress {
  std::int64_t step = 0;     // completed optimizer steps
  std::int64_t tokens = 0;   // tokens consumed so far
  std::int64_t samples = 0;  // sequences consumed so far
  // fp16's dynamic loss scale and its count of clean steps (0: none stored, start afresh).
  double loss_scale = 0;
  std::int64_t loss_scale_clean_steps = 0;
};

// A background save that has finished.
struct FinishedSave {
  std::string path;
  double write_s = 0;  // from the snapshot to `latest` naming the file
};

class Checkpointer {
 public:
  // Collective over `comm` (it duplicates it for background saves).
  Checkpointer(const Config& config, const ParameterLayout& layout, MPI_Comm comm);
  // Waits for a background save still in flight.
  ~Checkpointer();
  Checkpointer(const Checkpointer&) = delete;
  Checkpointer& operator=(const Checkpointer&) = delete;

  // Writes <dir>/step_<step>.h5: under a temporary name, flushed by every rank, renamed, then
  // `latest` replaced and old ones pruned. With `background` (checkpoint.async, where MPI allows
  // threads) this rank's pieces are copied to host memory and written by a background thread
  // while training goes on; a save still in flight is finished first. Returns the seconds the
  // caller was held.
  double save(const TrainingTensors& state, const TrainingProgress& progress, bool background);
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
  // model shape must match the config. A bad file is an InputError on every rank (the same one).
  TrainingProgress load(const std::string& path, const TrainingTensors& state);
  // Loads only /model from `path` (checkpoint.init_weights, or any checkpoint).
  void load_weights(const std::string& path, StateSource& weights);
  void load_weights(const std::string& path, Vec<float> weights);

 private:
  struct Snapshot;
  const Config& config_;
  const ParameterLayout& layout_;
  MPI_Comm comm_;
  MPI_Comm background_comm_ = MPI_COMM_NULL;  // the background thread's collectives
  bool threads_ = false;
  std::unique_ptr<Snapshot> snapshot_;
  std::future<FinishedSave> in_flight_;
  std::optional<FinishedSave> finished_;  // waited for, not yet reported
};


// Whether a file must carry a checksum on every tensor: a meshtrain checkpoint of version 2 or
// later (files from other tools, and older ones, carry none).
bool requires_checksums(const io::CheckpointReader& reader);

// Reads the resolved config stored in a checkpoint (for sample and inspect).
Config read_checkpoint_config(const std::string& path, MPI_Comm comm);

}  // namespace meshtrain
