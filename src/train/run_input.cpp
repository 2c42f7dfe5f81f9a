// The input checks of a training run, in the order that gives the most useful first error.
#include "train/run_input.hpp"

#include "core/accumulation.hpp"
#include "core/agreement.hpp"
#include "core/errors.hpp"
#include "core/exec.hpp"
#include "core/mpi_check.hpp"
#include "core/watched_wait.hpp"
#include "io/tokenizer.hpp"
#include "plan/fit.hpp"
#include "train/run_outputs.hpp"
#include "train/training_groups.hpp"

#include <type_traits>

namespace meshtrain {
namespace {

// data.train or data.valid, either kind; fine-tuning data packs documents into sequences, which only
// the fused attention's document mask keeps apart.
TrainingData open_training_data(const Config& cfg, DataRole role) {
  TrainingData data = TrainingData::open(cfg, role);
  if (data.packed() && cfg.model.attention == AttentionKernel::materialized) {
    input_error(
        "{} '{}' holds fine-tuning records, packed several to a sequence: model.attention = materialized has no "
        "document mask to keep them apart; use model.attention = fused",
        role == DataRole::train ? "data.train" : "data.valid",
        role == DataRole::train ? cfg.data.train : cfg.data.valid);
  }
  return data;
}

// data.tokenizer, when set: a SentencePiece model whose ids the model's vocabulary holds.
TokenizerRecord check_tokenizer(const Config& cfg) {
  if (cfg.data.tokenizer.empty()) return {};
  const io::Tokenizer tokenizer = io::Tokenizer::load(cfg.data.tokenizer);
  if (cfg.model.vocab < tokenizer.vocab_size()) {
    input_error(
        "model.vocab = {} is smaller than the vocabulary of data.tokenizer '{}', {} pieces: set --model.vocab {} "
        "or more",
        cfg.model.vocab, cfg.data.tokenizer, tokenizer.vocab_size(), tokenizer.vocab_size());
  }
  return {cfg.data.tokenizer, tokenizer.content_hash()};
}

// Every rank must have read the same tokenizer file: checkpoints record one hash, written by all.
void agree_on_same_tokenizer(const TokenizerRecord& mine, MPI_Comm comm) {
  if (mine.path.empty()) return;  // data.tokenizer is the same on every rank (core/config_agreement)
  std::uint64_t first = mine.hash;
  {
    const WatchedWait watched(collective_ticket(comm, "broadcast", 1));
    MESHTRAIN_MPI_CHECK(MPI_Bcast(&first, 1, MPI_UINT64_T, 0, comm), "is the communicator valid?");
  }
  agree_on_input(comm, [&] {
    if (mine.hash != first) {
      input_error(
          "data.tokenizer '{}' differs between ranks: xxh64 {} on rank {}, {} on rank 0; every rank must read "
          "the same file",
          mine.path, io::hash_hex(mine.hash), mpi::rank_of(comm), io::hash_hex(first));
    }
  });
}

}  // namespace

RunInput agree_on_run_input(const Config& cfg, MPI_Comm comm) {
  int world = 1;
  MESHTRAIN_MPI_CHECK(MPI_Comm_size(comm, &world), "is MPI initialized, and the communicator valid?");
  // The fit check counts the ranks that share this node's memory.
  MPI_Comm node = MPI_COMM_NULL;
  MESHTRAIN_MPI_CHECK(MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node),
                      "can MPI tell which ranks share a node?");
  int ranks_on_node = 1;
  MESHTRAIN_MPI_CHECK(MPI_Comm_size(node, &ranks_on_node), "is the node communicator valid?");
  MESHTRAIN_MPI_CHECK(MPI_Comm_free(&node), "is the node communicator valid?");
  Layout grid;
  int accum = 0;
  TokenizerRecord tokenizer;
  std::optional<TrainingData> valid;
  TrainingData data = agree_on_input(comm, [&] {
    if (cfg.parallel.backend == CommBackend::nccl && !nccl_usable()) {
      input_error(
          "parallel.backend = nccl needs a CUDA build of meshtrain with NCCL; this one keeps tensors in host "
          "memory (valid here: mpi, auto)");
    }
    grid = Topology::resolve(cfg.parallel, cfg.model, world);
    accum = accumulation_steps(cfg, grid.dp);
    // The one rule `meshtrain plan` applies (plan/fit.hpp): the same memory, the same largest micro-batch.
    require_fits_memory(cfg, world, training_cluster(cfg, ranks_on_node, !std::is_same_v<MemSpace, HostSpace>),
                        "the config");
    tokenizer = check_tokenizer(cfg);
    TrainingData opened = open_training_data(cfg, DataRole::train);
    std::vector<std::string> inputs = opened.paths();
    if (!cfg.data.valid.empty()) {
      valid.emplace(open_training_data(cfg, DataRole::valid));
      inputs.insert(inputs.end(), valid->paths().begin(), valid->paths().end());
    }
    // Every rank, on its own view of the files: no output may destroy an input or a file of another kind.
    check_run_outputs(cfg, inputs);
    return opened;
  });
  agree_on_same_tokenizer(tokenizer, comm);
  return RunInput{grid, accum, std::move(tokenizer), std::move(data), std::move(valid)};
}

}  // namespace meshtrain
