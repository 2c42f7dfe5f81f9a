// A program built against an installed meshtrain (tests/install): parses a run configuration as
// `meshtrain train` does, writes one tensor of a checkpoint from every rank (each its own rows),
// reads it back whole on every rank and compares. Prints "meshtrain_consumer: ok" and exits 0, or
// names what differs and exits 1.
//
//   mpiexec -n 2 meshtrain_consumer FILE.h5
#include <mpi.h>

#include <cstdint>
#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include "core/config.hpp"
#include "io/checkpoint/file.hpp"

namespace {

int check(bool ok, const char* what) {
  if (!ok) std::fprintf(stderr, "meshtrain_consumer: %s\n", what);
  return ok ? 0 : 1;
}

int run(const std::string& path) {
  int rank = 0, world = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);

  const meshtrain::Config config = meshtrain::parse_config({"--model.layers", "3", "--model.seq_len", "8"});
  int failures = check(config.model.layers == 3 && config.model.seq_len == 8,
                       "parse_config did not take --model.layers 3 --model.seq_len 8");
  failures += check(config.model.d_model == meshtrain::ModelConfig{}.d_model, "d_model is not its default");

  // wpe [T, C]: rank r writes rows [r·rows, (r+1)·rows), element i of the tensor holds i.
  const auto rows = static_cast<std::uint64_t>(config.model.seq_len) / static_cast<std::uint64_t>(world);
  const auto C = static_cast<std::uint64_t>(config.model.d_model);
  const std::vector<std::uint64_t> shape = {rows * static_cast<std::uint64_t>(world), C};
  const meshtrain::io::TensorSlab mine{
      "/model/wpe.weight", shape, {rows * static_cast<std::uint64_t>(rank), 0}, {rows, C}};
  std::vector<float> piece(mine.elements());
  for (std::uint64_t i = 0; i < piece.size(); ++i) piece[i] = static_cast<float>(mine.offset[0] * C + i);
  {
    meshtrain::io::CheckpointWriter writer(path, MPI_COMM_WORLD);
    writer.write(mine, piece.data());
    writer.set_attribute("config", config.to_ini());
    writer.commit();
  }

  const meshtrain::io::CheckpointReader reader(path, MPI_COMM_WORLD);
  const auto whole = meshtrain::io::TensorSlab::whole("/model/wpe.weight", shape);
  std::vector<float> all(whole.elements(), -1.0f);
  reader.read(whole, all.data());
  bool equal = true;
  for (std::uint64_t i = 0; i < all.size(); ++i) equal = equal && all[i] == static_cast<float>(i);
  failures += check(equal, "the tensor read back differs from what the ranks wrote");
  failures += check(reader.checksum("/model/wpe.weight").has_value(), "the tensor has no checksum");
  failures += check(reader.string_attribute("config") == config.to_ini(), "the config attribute differs");

  int total = 0;
  MPI_Allreduce(&failures, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (rank == 0 && total == 0) {
    std::printf("meshtrain_consumer: ok (%d ranks, %llu floats written and read back)\n", world,
                static_cast<unsigned long long>(all.size()));
  }
  return total == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int code = 1;
  if (argc != 2) {
    std::fprintf(stderr, "usage: meshtrain_consumer FILE.h5\n");
  } else {
    try {
      code = run(argv[1]);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "meshtrain_consumer: error: %s\n", e.what());
      MPI_Abort(MPI_COMM_WORLD, 1);
    }
  }
  MPI_Finalize();
  return code;
}
