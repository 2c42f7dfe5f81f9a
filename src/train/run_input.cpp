// The input checks of a training run, in the order that gives the most useful first error.
#include "train/run_input.hpp"

#include "core/accumulation.hpp"
#include "core/agreement.hpp"
#include "core/errors.hpp"
#include "core/mpi_check.hpp"
#include "model/language_model.hpp"
#include "train/training_groups.hpp"

namespace meshtrain {
namespace {

io::TokenStream open_training_data(const Config& cfg) {
  if (cfg.data.train.empty()) {
    input_error("data.train is not set: give a token shard or a glob of them (make one with meshtrain prepare)");
  }
  io::TokenStream stream = io::TokenStream::open(cfg.data.train);
  stream.require_vocab(cfg.model.vocab);
  return stream;
}

}  // namespace

RunInput agree_on_run_input(const Config& cfg, MPI_Comm comm) {
  int world = 1;
  MESHTRAIN_MPI_CHECK(MPI_Comm_size(comm, &world), "is MPI initialized, and the communicator valid?");
  Layout grid;
  int accum = 0;
  io::TokenStream stream = agree_on_input(comm, [&] {
    if (cfg.parallel.backend == CommBackend::nccl && !nccl_usable()) {
      input_error(
          "parallel.backend = nccl needs a CUDA build of meshtrain with NCCL; this one keeps tensors in host "
          "memory (valid here: mpi, auto)");
    }
    grid = Topology::resolve(cfg.parallel, cfg.model, world);
    accum = accumulation_steps(cfg, grid.dp);
    require_model_fits(cfg.model, cfg.train.micro_batch, 3, "the config", cfg.train.recompute);
    return open_training_data(cfg);
  });
  // The windows depend on the data's size, so the order is agreed once the data is.
  DataOrder order = agree_on_input(comm, [&] {
    return DataOrder(stream.size(), cfg.model.seq_len, cfg.train.global_batch, cfg.data.order, cfg.train.seed);
  });
  return RunInput{grid, accum, std::move(stream), std::move(order)};
}

}  // namespace meshtrain
