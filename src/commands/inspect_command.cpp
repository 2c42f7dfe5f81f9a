// meshtrain inspect FILE: a checkpoint's step, layout, config and tensors.
#include "commands/commands.hpp"

#include "core/command_line.hpp"
#include "core/errors.hpp"
#include "io/checkpoint_file.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <filesystem>

namespace meshtrain {

int inspect_command(const Args& args, MPI_Comm comm) {
  if (wants_help(args) || args.size() != 1) {
    if (!wants_help(args)) input_error("expected one checkpoint file, got {} arguments", args.size());
    fmt::print("usage: meshtrain inspect FILE\n");
    return 0;
  }
  const std::string& path = args[0];
  if (!std::filesystem::exists(path)) input_error("'{}': no such file", path);
  io::CheckpointReader reader(path, comm);
  int rank = 0;
  MPI_Comm_rank(comm, &rank);
  if (rank != 0) return 0;

  fmt::print("file: {}\n", path);
  for (const char* name : {"format", "layout", "data_order"}) {
    if (auto v = reader.string_attribute(name)) fmt::print("{}: {}\n", name, *v);
  }
  for (const char* name : {"version", "step", "tokens", "samples_seen", "seed"}) {
    if (auto v = reader.int_attribute(name)) fmt::print("{}: {}\n", name, *v);
  }
  for (const char* group : {"/model", "/optim/exp_avg", "/optim/exp_avg_sq"}) {
    const auto names = reader.datasets(group);
    if (names.empty()) continue;
    std::uint64_t elements = 0;
    for (const auto& name : names) {
      std::uint64_t n = 1;
      for (auto d : reader.shape(fmt::format("{}/{}", group, name))) n *= d;
      elements += n;
    }
    fmt::print("{}: {} tensors, {} elements\n", group, names.size(), elements);
    if (std::string(group) == "/model") {
      for (const auto& name : names) {
        fmt::print("  {:<28} [{}]\n", name, fmt::join(reader.shape(fmt::format("{}/{}", group, name)), ", "));
      }
    }
  }
  if (auto config = reader.string_attribute("config")) fmt::print("config:\n{}", *config);
  return 0;
}

}  // namespace meshtrain
