// Training state to and from HDF5 checkpoints.
#include "train/checkpointing.hpp"

#include "core/errors.hpp"
#include "io/checkpoint_dir.hpp"
#include "io/checkpoint_file.hpp"

#include <fmt/format.h>

#include <array>
#include <filesystem>

namespace meshtrain {
namespace {

// This rank's piece of a tensor as the layout describes it (model/parameters.hpp), or nothing for a
// replica that leaves the writing to another rank.
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


// Every rank writes every tensor of the model (the writes are collective), its own piece where it
// holds one and writes it, nothing otherwise: replicas over dp leave it to dp rank 0, replicated
// tensors to tp rank 0, the tied wte to the first pipeline stage, other stages' tensors to them.
// Every rank asks its source for each tensor it holds, writer or not: a sharded source gathers
// the tensor over the data-parallel group.
void write_group(io::CheckpointWriter& writer, const std::string& group, const ParameterLayout& layout,
                 StateSource& source, bool holds) {
  const ParameterLayout all_stages(layout.model(), layout.tp(), layout.tp_rank());
  for (const TensorInfo& t : all_stages.tensors()) {
    const TensorInfo* mine = layout.find_if_held(t.name);
    const float* data = mine != nullptr ? source.read_tensor(*mine) : nullptr;
    const bool writes = holds && mine != nullptr && (!t.replicated || layout.tp_rank() == 0) &&
                        (t.name != "wte.weight" || layout.place().first());
    writer.write(tensor_piece(group, t, writes), writes ? data : nullptr);
  }
}

void read_group(const io::CheckpointReader& reader, const std::string& group, const ParameterLayout& layout,
                StateSource& target) {
  for (const TensorInfo& t : layout.tensors()) {
    reader.read(tensor_piece(group, t, true), target.tensor_target(t));
    target.commit_tensor(t);
  }
}

// The HDF5 group of each flat state a checkpoint holds.
std::array<std::pair<const char*, StateSource*>, 3> state_groups(const TrainingTensors& state) {
  return {{{"/model", &state.weights}, {"/optim/exp_avg", &state.exp_avg}, {"/optim/exp_avg_sq", &state.exp_avg_sq}}};
}

std::string layout_description(MPI_Comm comm, const ParallelConfig& parallel) {
  int world = 1;
  MPI_Comm_size(comm, &world);
  const int dp = world / (parallel.tp * parallel.pp);
  return fmt::format("world={} dp={} tp={} pp={} zero={}", world, dp, parallel.tp, parallel.pp, parallel.zero);
}

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

}  // namespace

Checkpointer::Checkpointer(const Config& config, const ParameterLayout& layout, MPI_Comm comm, bool writes_data)
    : config_(config), layout_(layout), comm_(comm), writes_data_(writes_data) {}

std::string Checkpointer::save(const TrainingTensors& state, const TrainingProgress& progress) {
  int rank = 0;
  MPI_Comm_rank(comm_, &rank);
  const std::string& dir = config_.checkpoint.dir;
  if (rank == 0) io::ensure_directory(dir);
  MPI_Barrier(comm_);
  const std::string path = io::checkpoint_path(dir, progress.step);
  {
    io::CheckpointWriter writer(path, comm_);
    writer.set_attribute("format", std::string(checkpoint_format));
    writer.set_attribute("version", checkpoint_version);
    writer.set_attribute("step", progress.step);
    writer.set_attribute("tokens", progress.tokens);
    writer.set_attribute("config", config_.to_ini());
    writer.set_attribute("layout", layout_description(comm_, config_.parallel));
    writer.set_attribute("seed", std::int64_t(config_.train.seed));
    writer.set_attribute("data_order", config_.data.order);
    writer.set_attribute("samples_seen", progress.step * std::int64_t(config_.train.global_batch));
    if (progress.loss_scale > 0) {
      writer.set_attribute("loss_scale", progress.loss_scale);
      writer.set_attribute("loss_scale_clean_steps", progress.loss_scale_clean_steps);
    }
    for (const auto& [group, source] : state_groups(state)) write_group(writer, group, layout_, *source, writes_data_);
    writer.commit();
  }
  if (rank == 0) {
    io::write_latest(dir, std::filesystem::path(path).filename().string());
    io::prune_checkpoints(dir, config_.checkpoint.keep);
  }
  MPI_Barrier(comm_);
  return path;
}

std::string Checkpointer::resume_path() const {
  const std::string& resume = config_.checkpoint.resume;
  if (resume == "never") return "";
  if (resume == "auto") {
    if (!std::filesystem::is_directory(config_.checkpoint.dir)) return "";
    return io::read_latest(config_.checkpoint.dir).value_or("");
  }
  if (!std::filesystem::exists(resume)) {
    input_error("checkpoint.resume = '{}': no such file (valid: auto, never, or an existing checkpoint file)", resume);
  }
  return resume;
}

TrainingProgress Checkpointer::load(const std::string& path, const TrainingTensors& state) {
  io::CheckpointReader reader(path, comm_);
  const auto format = reader.string_attribute("format");
  if (format != checkpoint_format) {
    input_error("'{}' is not a meshtrain checkpoint (root attribute format = '{}', expected '{}')", path,
                format.value_or("<missing>"), checkpoint_format);
  }
  const auto config_text = reader.string_attribute("config");
  const auto step = reader.int_attribute("step");
  const auto tokens = reader.int_attribute("tokens");
  if (!config_text || !step || !tokens || *step < 0) {
    input_error("checkpoint '{}' lacks the config, step or tokens attribute, or they are invalid: it cannot be resumed",
                path);
  }
  require_same_model(config_from_ini(*config_text, fmt::format("config stored in '{}'", path)), config_, path);
  for (const auto& [group, target] : state_groups(state)) read_group(reader, group, layout_, *target);
  TrainingProgress progress{*step, *tokens};
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

void Checkpointer::load_weights(const std::string& path, StateSource& weights) {
  if (!std::filesystem::exists(path)) {
    input_error("checkpoint.init_weights = '{}': no such file (it must be an HDF5 file with a /model group)", path);
  }
  io::CheckpointReader reader(path, comm_);
  read_group(reader, "/model", layout_, weights);
}

void Checkpointer::load_weights(const std::string& path, Vec<float> weights) {
  FlatSource source(weights, layout_);
  load_weights(path, source);
}

Config read_checkpoint_config(const std::string& path, MPI_Comm comm) {
  if (!std::filesystem::exists(path)) input_error("checkpoint '{}': no such file", path);
  io::CheckpointReader reader(path, comm);
  const auto text = reader.string_attribute("config");
  if (!text) input_error("'{}' has no config attribute: it is not a meshtrain checkpoint", path);
  return config_from_ini(*text, fmt::format("config stored in '{}'", path));
}

}  // namespace meshtrain
