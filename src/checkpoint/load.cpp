// Checkpointer::load and load_weights: each rank reads the pieces it holds, adds the checksums of
// the parts it would save, and all ranks verify the sums together through io's one verifier
// (io/checkpoint/checksum_verifier.hpp), the one `meshtrain inspect` uses.
#include "checkpoint/adapter_keys.hpp"
#include "checkpoint/attributes.hpp"
#include "checkpoint/checkpointer.hpp"

#include "checkpoint/contents.hpp"
#include "checkpoint/plan.hpp"
#include "checkpoint/tokenizer_identity.hpp"
#include "core/agreement.hpp"
#include "core/errors.hpp"
#include "core/mpi_check.hpp"
#include "core/watched_wait.hpp"
#include "io/checkpoint/checksum_verifier.hpp"
#include "io/checkpoint/file.hpp"
#include "io/checkpoint/schema.hpp"
#include "io/checkpoint/tensor_checksum.hpp"
#include "model/lora_adapters.hpp"

#include <fmt/format.h>

#include <filesystem>
#include <optional>

namespace meshtrain {
namespace {

std::vector<StateSource*> sources_of(const TrainingTensors& state) {
  return {&state.weights, &state.exp_avg, &state.exp_avg_sq};
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
      const io::TensorSlab slab = tensor_piece(io::schema::state_groups[g], t, true);
      float* out = target.load_target(t);
      reader.read(slab, load, out);
      while (plan[k].slab.name != slab.name) ++k;
      if (layout.holds_counted_copy(t)) {
        const io::ElementRange saved = target.save_range(t);
        sums[k] += io::partial_checksum(slab, saved, out + (saved.first - load.first));
      }
      target.commit_tensor(t);
    }
  }
}

// The state groups loaded, the first `groups` of io::schema::state_groups.
std::vector<const char*> loaded_groups(std::size_t groups) {
  return {io::schema::state_groups.begin(), io::schema::state_groups.begin() + groups};
}

// Every rank's sums added up and verified against the stored checksums; InputError naming the
// first dataset that differs (or has none) on every rank.
void verify_sums(const io::CheckpointReader& reader, const std::vector<PlannedPiece>& plan,
                 std::vector<std::uint64_t>& sums, MPI_Comm comm) {
  const WatchedWait watched(collective_ticket(comm, "allreduce", sums.size()));
  MESHTRAIN_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, sums.data(), int(sums.size()), MPI_UINT64_T, MPI_SUM, comm),
                      "is every rank loading the same checkpoint?");
  const std::vector<std::string> names = dataset_names(plan);
  agree_on_input(comm, [&] {
    io::verify_checksums(
        reader, names, [&](std::size_t k) { return sums[k]; }, /*required=*/true);
  });
}

}  // namespace

TrainingProgress Checkpointer::load(const std::string& path, const TrainingTensors& state) {
  std::optional<io::CheckpointReader> reader;
  agree_on_input(comm_, [&] { reader.emplace(path, comm_); });
  const std::vector<StateSource*> sources = sources_of(state);
  const std::vector<PlannedPiece> plan = plan_pieces(layout_, sources);
  std::vector<std::uint64_t> sums(plan.size(), 0);
  const TrainingProgress progress = agree_on_input(comm_, [&] {
    io::schema::require_known_version(*reader);
    return read_progress(*reader, config_, path);
  });
  require_run_tokenizer(*reader, "checkpoint.resume", path);
  // Reads fail on the ranks that read the bad part; all agree before the next collective.
  agree_on_input(comm_, [&] {
    // A file from a deeper or wider model would otherwise load its first layers and drop the rest unseen.
    require_model_tensors(*reader, layout_.model(), loaded_groups(sources.size()), "this model", layout_.content());
    read_pieces(*reader, plan, layout_, sources, sums);
  });
  verify_sums(*reader, plan, sums, comm_);
  return progress;
}

void Checkpointer::load_weights(const std::string& path, StateSource& weights) {
  load_weights_of(layout_, path, weights);
}

void Checkpointer::load_weights_of(const ParameterLayout& layout, const std::string& path, StateSource& weights) {
  if (!std::filesystem::exists(path)) {
    input_error("checkpoint.init_weights = '{}': no such file (it must be an HDF5 file with a {} group)", path,
                io::schema::model_group);
  }
  std::optional<io::CheckpointReader> reader;
  agree_on_input(comm_, [&] { reader.emplace(path, comm_); });
  // Weights alone. Files from other tools (h5py) carry no checksums.
  const std::vector<StateSource*> sources = {&weights};
  const std::vector<PlannedPiece> plan = plan_pieces(layout, sources);
  std::vector<std::uint64_t> sums(plan.size(), 0);
  agree_on_input(comm_, [&] {
    io::schema::require_known_version(*reader);
    require_same_family(*reader, config_, path);
    // Adapters taken up from an `import --adapter` file: only under the keys they were made with.
    if (layout.content() == LayoutContent::adapters) {
      if (const std::optional<Config> stored = read_stored_config(*reader, path)) {
        require_same_adapter_keys(*stored, config_, "checkpoint.init_weights", path);
      }
    }
  });
  require_run_tokenizer(*reader, "checkpoint.init_weights", path);
  const bool checked = agree_on_input(comm_, [&] {
    require_model_tensors(*reader, layout.model(), loaded_groups(sources.size()), "this model", layout.content());
    read_pieces(*reader, plan, layout, sources, sums);
    return io::schema::requires_checksums(*reader);
  });
  if (checked) verify_sums(*reader, plan, sums, comm_);
}

void Checkpointer::require_run_tokenizer(const io::CheckpointReader& reader, const std::string& key,
                                         const std::string& path) const {
  if (!tokenizer_) return;  // the caller checks the tokenizer itself
  const std::optional<TokenizerRecord> recorded =
      agree_on_input(comm_, [&] { return recorded_tokenizer(reader, path); });
  if (!recorded) return;  // a weights file of another tool says nothing of its ids
  std::optional<std::string> warning;
  try {
    warning = agree_on_input(
        comm_, [&] { return tokenizer_change(*recorded, *tokenizer_, config_.data.tokenizer_change, key, path); });
  } catch (const AgreedInputError& e) {
    throw TokenizerMismatch(e.what(), e.reporter());
  }
  if (warning && mpi::rank_of(comm_) == 0) fmt::print(stderr, "meshtrain train: warning: {}\n", *warning);
}

void Checkpointer::load_weights(const std::string& path, Vec<float> weights) {
  // A model that owns its weights holds them whole, as one rank of its own.
  const ShardMap whole(layout_, 1, 0);
  CheckpointStaging staging(layout_);
  StateSlices source(StatePlace<float>{&whole, Held::whole, weights.data(), nullptr}, staging);
  load_weights(path, source);
}

void Checkpointer::load_base_weights(const std::string& path, const ParameterLayout& base, StateSource& weights) {
  load_weights_of(base, path, weights);
}

bool Checkpointer::holds_adapters(const std::string& path) {
  return agree_on_input(comm_, [&] {
    const io::CheckpointReader reader(path, comm_);
    for (const std::string& name : reader.datasets(io::schema::model_group)) {
      if (is_lora_tensor_name(name)) return true;
    }
    return false;
  });
}

}  // namespace meshtrain
