// Training state to and from HDF5 checkpoints.
#include "train/checkpointing.hpp"

#include "core/agreement.hpp"
#include "core/errors.hpp"
#include "io/checkpoint_dir.hpp"
#include "io/checkpoint_file.hpp"
#include "io/tensor_checksum.hpp"
#include "state/shard_map.hpp"

#include <fmt/format.h>

#include <array>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <functional>
#include <utility>
#include <variant>

namespace meshtrain {
namespace {

using Clock = std::chrono::steady_clock;

// The HDF5 groups of the flat states a checkpoint holds, in the order TrainingTensors lists them.
constexpr std::array<const char*, 3> state_groups = {"/model", "/optim/exp_avg", "/optim/exp_avg_sq"};

std::vector<StateSource*> sources_of(const TrainingTensors& state) {
  return {&state.weights, &state.exp_avg, &state.exp_avg_sq};
}

// This rank's piece of a tensor as the layout describes it (model/parameters.hpp), or nothing.
io::TensorSlab tensor_piece(const std::string& group, const TensorInfo& t, bool holds) {
  io::TensorSlab slab;
  slab.name = group + "/" + t.name;
  slab.global_shape = t.shape;
  slab.offset = t.piece.offset;
  slab.count = t.piece.count;
  slab.stride = t.piece.stride;
  slab.extent = t.piece.block;
  if (!holds) slab.extent.assign(t.shape.size(), 0);
  return slab;
}

// One dataset of the file and this rank's part in it: every rank takes part in every dataset's
// collective write, most with nothing.
struct PlannedPiece {
  io::TensorSlab slab;
  io::ElementRange range;
  StateSource* source = nullptr;  // null where the rank writes nothing
  const TensorInfo* tensor = nullptr;
};

// The datasets of the first sources.size() state groups (all three, or /model alone), each group
// listing every stage's tensors in one order on every rank.
std::vector<PlannedPiece> plan_pieces(const ParameterLayout& layout, const std::vector<StateSource*>& sources) {
  const ParameterLayout all_stages(layout.model(), layout.tp(), layout.tp_rank());
  std::vector<PlannedPiece> plan;
  for (std::size_t g = 0; g < sources.size(); ++g) {
    for (const TensorInfo& t : all_stages.tensors()) {
      const TensorInfo* mine = layout.find_if_held(t.name);
      const bool writes = mine != nullptr && counts_once(layout, *mine);
      PlannedPiece p{tensor_piece(state_groups[g], t, writes), {}, nullptr, nullptr};
      if (writes) {
        p.range = sources[g]->save_range(*mine);
        p.source = sources[g];
        p.tensor = mine;
      }
      plan.push_back(std::move(p));
    }
  }
  return plan;
}

using AttributeValue = std::variant<std::string, std::int64_t, double>;
using Attributes = std::vector<std::pair<std::string, AttributeValue>>;

std::string layout_description(MPI_Comm comm, const ParallelConfig& parallel) {
  int world = 1;
  MPI_Comm_size(comm, &world);
  const int dp = world / (parallel.tp * parallel.pp);
  return fmt::format("world={} dp={} tp={} pp={} zero={}", world, dp, parallel.tp, parallel.pp, parallel.zero);
}

Attributes root_attributes(const Config& config, MPI_Comm comm, const TrainingProgress& progress) {
  Attributes a = {{"format", std::string(checkpoint_format)},
                  {"version", checkpoint_version},
                  {"step", progress.step},
                  {"tokens", progress.tokens},
                  {"samples_seen", progress.samples},
                  {"config", config.to_ini()},
                  {"layout", layout_description(comm, config.parallel)},
                  {"seed", std::int64_t(config.train.seed)},
                  {"data_order", config.data.order}};
  if (progress.loss_scale > 0) {
    a.emplace_back("loss_scale", progress.loss_scale);
    a.emplace_back("loss_scale_clean_steps", progress.loss_scale_clean_steps);
  }
  return a;
}

// Writes one checkpoint collectively over `comm` and makes it the latest: the file under a
// temporary name, flushed on every rank and renamed (io::CheckpointWriter::commit), then `latest`
// replaced atomically and old files pruned by rank 0. A kill at any instant leaves `latest` naming
// a complete file. data(k) gives the rank's elements of plan[k].
void write_checkpoint(const Config& config, MPI_Comm comm, const std::string& path, const Attributes& attributes,
                      const std::vector<PlannedPiece>& plan, const std::function<const float*(std::size_t)>& data) {
  int rank = 0;
  MPI_Comm_rank(comm, &rank);
  {
    const auto transfer = config.checkpoint.io == "collective" ? io::Transfer::collective : io::Transfer::independent;
    io::CheckpointWriter writer(path, comm, transfer);
    for (const auto& [name, value] : attributes) std::visit([&](const auto& v) { writer.set_attribute(name, v); }, value);
    for (std::size_t k = 0; k < plan.size(); ++k) {
      const PlannedPiece& p = plan[k];
      writer.write(p.slab, p.range, p.range.count > 0 ? data(k) : nullptr);
    }
    writer.commit();
  }
  if (rank == 0) {
    const std::string& dir = config.checkpoint.dir;
    io::write_latest(dir, std::filesystem::path(path).filename().string());
    io::prune_checkpoints(dir, config.checkpoint.keep);
  }
  MPI_Barrier(comm);
}

bool mpi_threads_usable() {
  int provided = MPI_THREAD_SINGLE;
  MPI_Query_thread(&provided);
  return provided == MPI_THREAD_MULTIPLE;
}

double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

void require_same_model(const Config& stored, const Config& wanted, const std::string& path) {
  const auto& a = stored.model;
  const auto& b = wanted.model;
  auto check = [&](const char* key, int have, int want) {
    if (have != want) {
      input_error("checkpoint '{}' holds a model with {} = {}, but the config asks for {}: set --{} {} or start "
                  "from another checkpoint",
                  path, key, have, want, key, have);
    }
  };
  check("model.layers", a.layers, b.layers);
  check("model.heads", a.heads, b.heads);
  check("model.d_model", a.d_model, b.d_model);
  check("model.vocab", a.vocab, b.vocab);
  check("model.seq_len", a.seq_len, b.seq_len);
}

// The progress attributes of a checkpoint, checked.
TrainingProgress read_progress(const io::CheckpointReader& reader, const Config& config, const std::string& path) {
  const auto format = reader.string_attribute("format");
  if (format != checkpoint_format) {
    input_error("'{}' is not a meshtrain checkpoint (root attribute format = '{}', expected '{}')", path,
                format.value_or("<missing>"), checkpoint_format);
  }
  const auto config_text = reader.string_attribute("config");
  const auto step = reader.int_attribute("step");
  const auto tokens = reader.int_attribute("tokens");
  if (!config_text || !step || !tokens || *step < 0 || *tokens < 0) {
    input_error("checkpoint '{}' lacks the config, step or tokens attribute, or they are invalid: it cannot be resumed",
                path);
  }
  const Config stored = config_from_ini(*config_text, fmt::format("config stored in '{}'", path));
  require_same_model(stored, config, path);
  TrainingProgress progress{*step, *tokens};
  // Version 1 files knew only step · global_batch.
  progress.samples = reader.int_attribute("samples_seen").value_or(*step * std::int64_t(stored.train.global_batch));
  if (progress.samples < 0) input_error("checkpoint '{}': samples_seen = {} is negative", path, progress.samples);
  const auto scale = reader.double_attribute("loss_scale");
  const auto clean = reader.int_attribute("loss_scale_clean_steps");
  if (scale && clean) {
    if (!(*scale >= 1) || *clean < 0) {
      input_error("checkpoint '{}': loss_scale = {} or loss_scale_clean_steps = {} is invalid (a scale >= 1 and a "
                  "count >= 0 are valid)",
                  path, *scale, *clean);
    }
    progress.loss_scale = *scale;
    progress.loss_scale_clean_steps = *clean;
  }
  return progress;
}

// Reads each tensor this rank holds into its source and adds the checksum of the part the rank
// would save (the data-parallel group's parts are disjoint and cover the tensor) into sums[k], k
// the tensor's dataset in `plan` (planned for the same targets).
void read_pieces(const io::CheckpointReader& reader, const std::vector<PlannedPiece>& plan,
                 const ParameterLayout& layout, const std::vector<StateSource*>& targets,
                 std::vector<std::uint64_t>& sums) {
  const std::size_t per_group = plan.size() / targets.size();
  for (std::size_t g = 0; g < targets.size(); ++g) {
    // A stage's tensors come in the order of every stage's (wte first where held), so the dataset
    // index only moves forward through the group.
    std::size_t k = g * per_group;
    for (const TensorInfo& t : layout.tensors()) {
      StateSource& target = *targets[g];
      const io::ElementRange load = target.load_range(t);
      const io::TensorSlab slab = tensor_piece(state_groups[g], t, true);
      float* out = target.load_target(t);
      reader.read(slab, load, out);
      while (plan[k].slab.name != slab.name) ++k;
      if (counts_once(layout, t)) {
        const io::ElementRange saved = target.save_range(t);
        sums[k] += io::partial_checksum(slab, saved, out + (saved.first - load.first));
      }
      target.commit_tensor(t);
    }
  }
}

// Every rank's sums added up and compared with the stored checksums; InputError naming the first
// dataset that differs (or has none) on every rank.
void verify_checksums(const io::CheckpointReader& reader, const std::vector<PlannedPiece>& plan,
                      std::vector<std::uint64_t>& sums, MPI_Comm comm, const std::string& path) {
  MPI_Allreduce(MPI_IN_PLACE, sums.data(), int(sums.size()), MPI_UINT64_T, MPI_SUM, comm);
  agree_on_input(comm, [&] {
    for (std::size_t k = 0; k < plan.size(); ++k) {
      const std::string& name = plan[k].slab.name;
      const std::optional<std::uint64_t> stored = reader.checksum(name);
      if (!stored) {
        input_error("checkpoint '{}': {} has no checksum attribute; the file is damaged or was not written by "
                    "meshtrain (resume from another checkpoint)",
                    path, name);
      }
      if (*stored != sums[k]) {
        input_error("checkpoint '{}' is corrupt: {} does not match its checksum (stored {:016x}, read {:016x}); "
                    "resume from another checkpoint",
                    path, name, *stored, sums[k]);
      }
    }
  });
}

}  // namespace

// A background save's copy of this rank's pieces: one host buffer, reused from save to save.
struct Checkpointer::Snapshot {
  std::vector<float> data;
  std::vector<std::size_t> at;  // where plan[k]'s elements start in data
  std::vector<PlannedPiece> plan;
  Attributes attributes;
  std::string path;
};

Checkpointer::Checkpointer(const Config& config, const ParameterLayout& layout, MPI_Comm comm)
    : config_(config), layout_(layout), comm_(comm), threads_(mpi_threads_usable()) {
  MPI_Comm_dup(comm, &background_comm_);
}

Checkpointer::~Checkpointer() {
  try {
    wait();
  } catch (const std::exception& e) {
    fmt::print(stderr, "meshtrain: the background checkpoint save failed: {}\n", e.what());
  }
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized && background_comm_ != MPI_COMM_NULL) MPI_Comm_free(&background_comm_);
}

double Checkpointer::save(const TrainingTensors& state, const TrainingProgress& progress, bool background) {
  const auto start = Clock::now();
  wait();  // one save at a time, in step order
  int rank = 0;
  MPI_Comm_rank(comm_, &rank);
  if (rank == 0) io::ensure_directory(config_.checkpoint.dir);
  MPI_Barrier(comm_);  // ranks may create the file independently: the directory must exist first
  const std::string path = io::checkpoint_path(config_.checkpoint.dir, progress.step);
  std::vector<PlannedPiece> plan = plan_pieces(layout_, sources_of(state));
  Attributes attributes = root_attributes(config_, comm_, progress);
  if (!background || !threads_) {
    write_checkpoint(config_, comm_, path, attributes, plan,
                     [&](std::size_t k) { return plan[k].source->saved_data(*plan[k].tensor); });
    return seconds_since(start);
  }
  // Snapshot: this rank's pieces into host memory, so training may change the state at once.
  if (!snapshot_) snapshot_ = std::make_unique<Snapshot>();
  Snapshot& s = *snapshot_;
  s.at.assign(plan.size(), 0);
  std::size_t total = 0;
  for (std::size_t k = 0; k < plan.size(); ++k) {
    s.at[k] = total;
    total += plan[k].range.count;
  }
  s.data.resize(total);
  for (std::size_t k = 0; k < plan.size(); ++k) {
    if (plan[k].range.count == 0) continue;
    const float* from = plan[k].source->saved_data(*plan[k].tensor);
    std::memcpy(s.data.data() + s.at[k], from, plan[k].range.count * sizeof(float));
  }
  s.plan = std::move(plan);
  s.attributes = std::move(attributes);
  s.path = path;
  in_flight_ = std::async(std::launch::async, [this, start] {
    Snapshot& snap = *snapshot_;
    write_checkpoint(config_, background_comm_, snap.path, snap.attributes, snap.plan,
                     [&](std::size_t k) -> const float* { return snap.data.data() + snap.at[k]; });
    return FinishedSave{snap.path, seconds_since(start)};
  });
  return seconds_since(start);
}

std::optional<FinishedSave> Checkpointer::poll() {
  if (finished_) return std::exchange(finished_, std::nullopt);  // waited for by a save
  // Ranks finish at different moments: all agree that every one has finished before any reports.
  int done = !in_flight_.valid() || in_flight_.wait_for(std::chrono::seconds(0)) == std::future_status::ready;
  MPI_Allreduce(MPI_IN_PLACE, &done, 1, MPI_INT, MPI_MIN, comm_);
  if (!in_flight_.valid() || !done) return std::nullopt;
  return in_flight_.get();
}

std::optional<FinishedSave> Checkpointer::wait() {
  if (in_flight_.valid()) finished_ = in_flight_.get();
  return finished_;
}

std::vector<std::string> Checkpointer::resume_candidates() const {
  const std::string& resume = config_.checkpoint.resume;
  if (resume == "never") return {};
  if (resume != "auto") {
    if (!std::filesystem::exists(resume)) {
      input_error("checkpoint.resume = '{}': no such file (valid: auto, never, or an existing checkpoint file)", resume);
    }
    return {resume};
  }
  const std::string& dir = config_.checkpoint.dir;
  if (!std::filesystem::is_directory(dir)) return {};
  std::vector<std::string> candidates;
  std::string broken_latest;
  try {
    if (auto latest = io::read_latest(dir)) {
      candidates.push_back(*latest);
    } else if (!io::checkpoints_newest_first(dir).empty()) {
      // A job killed between its first checkpoint's rename and the first `latest`: that file is
      // complete (fsynced before the rename), and its checksums are verified as it loads.
      broken_latest = fmt::format("{}/latest does not exist", dir);
    }
  } catch (const InputError& e) {
    // A damaged `latest` is one more reason to fall back; the files themselves may be fine.
    broken_latest = e.what();
  }
  for (const std::string& path : io::checkpoints_newest_first(dir)) {
    if (candidates.empty() || !std::filesystem::equivalent(path, candidates.front())) candidates.push_back(path);
  }
  if (!broken_latest.empty()) {
    // A directory that had a `latest` had checkpoints: never start afresh over them unasked.
    if (candidates.empty()) {
      input_error("checkpoint.resume = auto: {}; there is no other checkpoint in {} to fall back to\nHINT: delete "
                  "{}/latest to start afresh",
                  broken_latest, dir, dir);
    }
    int rank = 0;
    MPI_Comm_rank(comm_, &rank);
    if (rank == 0) fmt::print("checkpoint.resume = auto: {}; falling back to {}\n", broken_latest, candidates.front());
  }
  return candidates;
}

TrainingProgress Checkpointer::load(const std::string& path, const TrainingTensors& state) {
  std::optional<io::CheckpointReader> reader;
  agree_on_input(comm_, [&] { reader.emplace(path, comm_); });
  const std::vector<StateSource*> sources = sources_of(state);
  const std::vector<PlannedPiece> plan = plan_pieces(layout_, sources);
  std::vector<std::uint64_t> sums(plan.size(), 0);
  // Reads fail on the ranks that read the bad part; all agree before the next collective.
  const TrainingProgress progress = agree_on_input(comm_, [&] {
    TrainingProgress p = read_progress(*reader, config_, path);
    read_pieces(*reader, plan, layout_, sources, sums);
    return p;
  });
  verify_checksums(*reader, plan, sums, comm_, path);
  return progress;
}

void Checkpointer::load_weights(const std::string& path, StateSource& weights) {
  if (!std::filesystem::exists(path)) {
    input_error("checkpoint.init_weights = '{}': no such file (it must be an HDF5 file with a /model group)", path);
  }
  std::optional<io::CheckpointReader> reader;
  agree_on_input(comm_, [&] { reader.emplace(path, comm_); });
  // Weights alone. Files from other tools (h5py) carry no checksums.
  const std::vector<StateSource*> sources = {&weights};
  const std::vector<PlannedPiece> plan = plan_pieces(layout_, sources);
  std::vector<std::uint64_t> sums(plan.size(), 0);
  const bool checked = agree_on_input(comm_, [&] {
    read_pieces(*reader, plan, layout_, sources, sums);
    return requires_checksums(*reader);
  });
  if (checked) verify_checksums(*reader, plan, sums, comm_, path);
}

void Checkpointer::load_weights(const std::string& path, Vec<float> weights) {
  // A model that owns its weights holds them whole, as one rank of its own.
  const ShardMap whole(layout_, 1, 0);
  CheckpointStaging staging(layout_);
  StateSlices source(StatePlace<float>{&whole, Held::whole, weights.data(), nullptr}, staging);
  load_weights(path, source);
}

bool requires_checksums(const io::CheckpointReader& reader) {
  return reader.string_attribute("format") == checkpoint_format && reader.int_attribute("version") >= 2;
}

Config read_checkpoint_config(const std::string& path, MPI_Comm comm) {
  if (!std::filesystem::exists(path)) input_error("checkpoint '{}': no such file", path);
  io::CheckpointReader reader(path, comm);
  const auto text = reader.string_attribute("config");
  if (!text) input_error("'{}' has no config attribute: it is not a meshtrain checkpoint", path);
  return config_from_ini(*text, fmt::format("config stored in '{}'", path));
}

}  // namespace meshtrain
