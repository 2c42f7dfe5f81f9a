// Checkpointer: saving training state, synchronously or in the background (loading is
// checkpoint/load.cpp, choosing what to resume checkpoint/resume.cpp).
#include "checkpoint/base_identity.hpp"
#include "checkpoint/checkpointer.hpp"

#include "checkpoint/plan.hpp"
#include "core/elapsed.hpp"
#include "core/errors.hpp"
#include "core/injected_fault.hpp"
#include "core/mpi_check.hpp"
#include "core/watched_wait.hpp"
#include "io/checkpoint/directory.hpp"
#include "io/checkpoint/file.hpp"
#include "io/checkpoint/schema.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <functional>
#include <thread>
#include <utility>

namespace meshtrain {
// Named, not anonymous: Checkpointer::Snapshot holds one, and a member of a type with linkage whose
// type has none draws -Wsubobject-linkage where this file is compiled inside a unity batch.
namespace checkpoint_save {

// Where a save goes and what it reserves there.
struct SaveTarget {
  std::string path;
  io::ExpectedSize expected;
};

}  // namespace checkpoint_save
using checkpoint_save::SaveTarget;

namespace {

// Rank 0's pruning: a file it cannot delete costs space, not the checkpoint just saved.
void prune(const std::string& dir, int keep) {
  try {
    io::prune_checkpoints(dir, keep);
  } catch (const std::runtime_error& e) {
    fmt::print(stderr, "meshtrain: warning: {}\n", e.what());
  }
}

// Rank 0 makes `latest` name the new file and prunes old ones. If `latest` cannot be written (a
// full disk has no room even for its line), the new file goes too, so that what is on disk is what
// was there before the save; every rank learns of it (io::WriteFailed).
void make_latest(const Config& config, MPI_Comm comm, const std::string& path, std::uint64_t needed_bytes) {
  std::string failure;
  if (mpi::rank_of(comm) == 0) {
    const std::string& dir = config.checkpoint.dir;
    try {
      io::write_latest(dir, std::filesystem::path(path).filename().string());
    } catch (const std::runtime_error& e) {
      std::error_code ignored;  // what the message says is what matters
      std::filesystem::remove(path, ignored);
      failure = io::write_failure_message(path, e.what(), needed_bytes);
    }
    if (failure.empty()) prune(dir, config.checkpoint.keep);
  }
  if (auto failed = io::agree_on_write_failure(failure, comm)) throw *failed;
}

// Writes one checkpoint collectively over `comm` and makes it the latest: the file under a
// temporary name, flushed on every rank and renamed (io::CheckpointWriter::commit), then `latest`
// replaced atomically and old files pruned by rank 0. A kill at any instant leaves `latest` naming
// a complete file; a failed write leaves what was there before (io::WriteFailed on every rank).
// data(k) gives the rank's elements of plan[k].
void write_checkpoint(const Config& config, MPI_Comm comm, const SaveTarget& target, const Attributes& attributes,
                      const std::vector<PlannedPiece>& plan, const std::function<const float*(std::size_t)>& data) {
  {
    const auto transfer =
        config.checkpoint.io == CheckpointIo::collective ? io::Transfer::collective : io::Transfer::independent;
    io::CheckpointWriter writer(target.path, comm, transfer, target.expected);
    for (const auto& [name, value] : attributes)
      std::visit([&](const auto& v) { writer.set_attribute(name, v); }, value);
    for (std::size_t k = 0; k < plan.size(); ++k) {
      const PlannedPiece& p = plan[k];
      writer.write(p.slab, p.range, p.range.count > 0 ? data(k) : nullptr);
    }
    writer.commit();
  }
  make_latest(config, comm, target.path, target.expected.bytes);
}

// Rank 0 makes the directory (it may have gone since the start); every rank learns whether it could.
void agree_on_directory(const std::string& dir, MPI_Comm comm, std::uint64_t needed_bytes) {
  std::string failure;
  if (mpi::rank_of(comm) == 0) {
    try {
      io::ensure_directory(dir);
    } catch (const InputError& e) {
      failure = io::write_failure_message(dir, e.what(), needed_bytes);
    }
  }
  if (auto failed = io::agree_on_write_failure(failure, comm)) throw *failed;
}

bool mpi_threads_usable() {
  int provided = MPI_THREAD_SINGLE;
  MESHTRAIN_MPI_CHECK(MPI_Query_thread(&provided), "is MPI initialised?");
  return provided == MPI_THREAD_MULTIPLE;
}

}  // namespace

// A background save's copy of this rank's pieces: one host buffer, reused from save to save.
struct Checkpointer::Snapshot {
  std::vector<float> data;
  std::vector<std::size_t> at;  // where plan[k]'s elements start in data
  std::vector<PlannedPiece> plan;
  Attributes attributes;
  SaveTarget target;

  // Copies this rank's pieces of the plan's sources, so training may change the state at once.
  void take(std::vector<PlannedPiece> planned, Attributes attrs, SaveTarget to) {
    at.assign(planned.size(), 0);
    std::size_t total = 0;
    for (std::size_t k = 0; k < planned.size(); ++k) {
      at[k] = total;
      total += planned[k].range.count;
    }
    data.resize(total);
    for (std::size_t k = 0; k < planned.size(); ++k) {
      if (planned[k].range.count == 0) continue;
      const float* from = planned[k].source->saved_data(*planned[k].tensor);
      std::memcpy(data.data() + at[k], from, planned[k].range.count * sizeof(float));
    }
    plan = std::move(planned);
    attributes = std::move(attrs);
    target = std::move(to);
  }
};

Checkpointer::Checkpointer(const Config& config, const ParameterLayout& layout, MPI_Comm comm,
                           std::optional<TokenizerRecord> tokenizer)
    : config_(config), layout_(layout), comm_(comm), tokenizer_(std::move(tokenizer)), threads_(mpi_threads_usable()) {
  MESHTRAIN_MPI_CHECK(MPI_Comm_dup(comm, background_comm_.out()), "is every rank creating the Checkpointer?");
}

Checkpointer::~Checkpointer() {
  try {
    wait();
  } catch (const io::WriteFailed& e) {
    if (e.reporter()) fmt::print(stderr, "meshtrain: the background checkpoint save failed: {}\n", e.what());
  } catch (const std::exception& e) {
    fmt::print(stderr, "meshtrain: the background checkpoint save failed: {}\n", e.what());
  }
}

namespace {

// The test fault stall_in_save (core/injected_fault.hpp): this rank falls asleep inside the save's
// collective steps, after the file is created, for the watchdog to report the writer's wait.
std::function<const float*(std::size_t)> stalling_first(std::function<const float*(std::size_t)> data,
                                                        double timeout_s) {
  return [data = std::move(data), timeout_s, stalled = false](std::size_t k) mutable {
    if (!stalled) std::this_thread::sleep_for(std::chrono::duration<double>(3 * std::max(timeout_s, 1.0)));
    stalled = true;
    return data(k);
  };
}

}  // namespace

double Checkpointer::save(const TrainingTensors& state, const TrainingProgress& progress, bool background) {
  const auto start = Clock::now();
  wait();  // one save at a time, in step order
  const SaveTarget target{io::checkpoint_path(config_.checkpoint.dir, progress.step),
                          {file_bytes(), !fault_fires("unreserved_save", progress.step, mpi::rank_of(comm_))}};
  // Ranks may create the file independently: the directory must exist first.
  agree_on_directory(config_.checkpoint.dir, comm_, target.expected.bytes);
  std::vector<PlannedPiece> plan = plan_pieces(layout_, {&state.weights, &state.exp_avg, &state.exp_avg_sq});
  Attributes attributes = root_attributes(config_, comm_, progress, tokenizer_.value_or(TokenizerRecord{}));
  if (layout_.content() == LayoutContent::adapters) {  // LoRA: the frozen base the adapters were trained on
    attributes.emplace_back(io::schema::attr::lora_base, config_.checkpoint.init_weights);
    attributes.emplace_back(io::schema::attr::lora_base_hash, base_model_hash(config_.checkpoint.init_weights));
  }
  if (!background || !threads_) {
    std::function<const float*(std::size_t)> data = [&](std::size_t k) {
      return plan[k].source->saved_data(*plan[k].tensor);
    };
    if (fault_fires("stall_in_save", progress.step, mpi::rank_of(comm_))) {
      data = stalling_first(std::move(data), config_.parallel.timeout);
    }
    write_checkpoint(config_, comm_, target, attributes, plan, data);
    return seconds_since(start);
  }
  if (!snapshot_) snapshot_ = std::make_unique<Snapshot>();
  snapshot_->take(std::move(plan), std::move(attributes), target);
  in_flight_ = std::async(std::launch::async, [this, start] {
    Snapshot& snap = *snapshot_;
    write_checkpoint(config_, background_comm_.get(), snap.target, snap.attributes, snap.plan,
                     [&](std::size_t k) -> const float* { return snap.data.data() + snap.at[k]; });
    return FinishedSave{snap.target.path, seconds_since(start)};
  });
  return seconds_since(start);
}

std::uint64_t Checkpointer::file_bytes() const { return checkpoint_file_bytes(layout_); }

std::optional<FinishedSave> Checkpointer::poll() {
  if (finished_) return std::exchange(finished_, std::nullopt);  // waited for by a save
  // Ranks finish at different moments: all agree that every one has finished before any reports.
  int done = !in_flight_.valid() || in_flight_.wait_for(std::chrono::seconds(0)) == std::future_status::ready;
  const WatchedWait watched(collective_ticket(comm_, "allreduce", 1));
  MESHTRAIN_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &done, 1, MPI_INT, MPI_MIN, comm_),
                      "is every rank polling the background save once a step?");
  if (!in_flight_.valid() || !done) return std::nullopt;
  return in_flight_.get();
}

std::optional<FinishedSave> Checkpointer::wait() {
  if (in_flight_.valid()) finished_ = in_flight_.get();
  return finished_;
}

}  // namespace meshtrain
