// meshtrain inspect FILE: a checkpoint's step, layout, config and tensors, every tensor's checksum
// verified.
#include "commands/commands.hpp"

#include "core/command_line.hpp"
#include "core/errors.hpp"
#include "io/checkpoint_file.hpp"
#include "io/tensor_checksum.hpp"
#include "train/checkpointing.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <filesystem>

namespace meshtrain {
namespace {

// Reads dataset `name` in blocks of rows (any size of tensor fits in bounded memory) and returns
// the checksum of what it holds.
std::uint64_t checksum_of(const io::CheckpointReader& reader, const std::string& name) {
  const std::vector<std::uint64_t> shape = reader.shape(name);
  if (shape.empty()) return 0;
  std::uint64_t row = 1;
  for (std::size_t d = 1; d < shape.size(); ++d) row *= shape[d];
  const std::uint64_t rows_per_block = std::max<std::uint64_t>(1, (std::uint64_t{1} << 24) / std::max<std::uint64_t>(row, 1));
  std::vector<float> buffer;
  std::uint64_t sum = 0;
  for (std::uint64_t r = 0; r < shape[0]; r += rows_per_block) {
    io::TensorSlab block = io::TensorSlab::whole(name, shape);
    block.offset[0] = r;
    block.extent[0] = std::min(rows_per_block, shape[0] - r);
    buffer.resize(block.elements());
    reader.read(block, buffer.data());
    sum += io::partial_checksum(block, io::ElementRange{0, buffer.size()}, buffer.data());
  }
  return sum;
}

// Verifies every tensor's stored checksum; InputError naming the first that differs. Files that
// carry none (written by other tools, or before checkpoint version 2) are reported as such.
void verify_checksums(const io::CheckpointReader& reader, const std::string& path) {
  std::size_t verified = 0, without = 0;
  for (const char* group : {"/model", "/optim"}) {
    for (const auto& name : reader.datasets(group)) {
      const std::string dataset = fmt::format("{}/{}", group, name);
      const std::optional<std::uint64_t> stored = reader.checksum(dataset);
      if (!stored) {
        ++without;
        continue;
      }
      const std::uint64_t read = checksum_of(reader, dataset);
      if (read != *stored) {
        input_error("'{}' is corrupt: {} does not match its checksum (stored {:016x}, read {:016x})", path, dataset,
                    *stored, read);
      }
      ++verified;
    }
  }
  if (without > 0 && requires_checksums(reader)) {
    input_error("'{}' is damaged: {} tensors have lost their checksum attribute", path, without);
  }
  if (without > 0) {
    fmt::print("checksums: none stored for {} tensors (a file from another tool or an older meshtrain)\n", without);
  }
  if (verified > 0) fmt::print("checksums: all {} tensors verified ({})\n", verified, io::checksum_algorithm);
}

}  // namespace

int inspect_command(const Args& args, MPI_Comm comm) {
  if (wants_help(args) || args.size() != 1) {
    if (!wants_help(args)) input_error("expected one checkpoint file, got {} arguments", args.size());
    fmt::print("usage: meshtrain inspect FILE\n  prints the step, layout, config and tensors, and verifies every tensor's "
               "checksum (exit 2 naming the first that differs)\n");
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
  verify_checksums(reader, path);
  return 0;
}

}  // namespace meshtrain
