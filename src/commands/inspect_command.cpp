// meshtrain inspect FILE: a checkpoint's model family, step, layout, loss scale, tokenizer, config and tensors, the
// file checked as loading checks it (checkpoint/contents.hpp), every tensor's checksum verified by io's one
// verifier (io/checkpoint/checksum_verifier.hpp), the loader's, and every value checked finite by the reader as it
// is read.
#include "commands/commands.hpp"

#include "checkpoint/contents.hpp"
#include "core/command_line.hpp"
#include "core/errors.hpp"
#include "core/mpi_check.hpp"
#include "io/checkpoint/checksum_verifier.hpp"
#include "io/checkpoint/file.hpp"
#include "io/checkpoint/schema.hpp"
#include "io/checkpoint/tensor_checksum.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace meshtrain {
namespace {

namespace schema = io::schema;

// Every dataset under the state groups, as absolute names.
std::vector<std::string> state_datasets(const io::CheckpointReader& reader) {
  std::vector<std::string> names;
  for (const char* group : {schema::model_group, schema::optim_group}) {
    for (const auto& name : reader.datasets(group)) names.push_back(schema::dataset(group, name));
  }
  return names;
}

// Verifies every tensor's stored checksum, each tensor read whole by this rank. Files that carry
// none (written by other tools, or before checkpoint version 2) are reported as such.
void verify_file(const io::CheckpointReader& reader) {
  const std::vector<std::string> names = state_datasets(reader);
  const io::ChecksumTally tally = io::verify_checksums(
      reader, names, [&](std::size_t k) { return io::whole_dataset_checksum(reader, names[k]); },
      schema::requires_checksums(reader));
  if (tally.without > 0) {
    fmt::print("checksums: none stored for {} tensors (a file from another tool or an older meshtrain)\n",
               tally.without);
  }
  if (tally.verified > 0)
    fmt::print("checksums: all {} tensors verified ({})\n", tally.verified, io::checksum_algorithm);
}

// The root attributes a person asks of a checkpoint, those the file has.
void print_attributes(const io::CheckpointReader& reader) {
  namespace attr = schema::attr;
  for (const char* name : {attr::format, attr::layout, attr::data_order}) {
    if (auto v = reader.string_attribute(name)) fmt::print("{}: {}\n", name, *v);
  }
  if (auto family = schema::model_family(reader)) {
    const bool recorded = reader.string_attribute(attr::model_family).has_value();
    fmt::print("{}: {}{}\n", attr::model_family, *family,
               recorded ? "" : " (not recorded: written before the families)");
  }
  for (const char* name : {attr::version, attr::step, attr::tokens, attr::samples_seen, attr::seed}) {
    if (auto v = reader.int_attribute(name)) fmt::print("{}: {}\n", name, *v);
  }
  // fp16 checkpoints only. {} prints the shortest text that reads back as the same double.
  if (auto v = reader.double_attribute(attr::loss_scale)) fmt::print("{}: {}\n", attr::loss_scale, *v);
  if (auto v = reader.int_attribute(attr::loss_scale_clean_steps)) {
    fmt::print("{}: {}\n", attr::loss_scale_clean_steps, *v);
  }
  // The tokenizer of the data; files without one (older ones too) are byte-level.
  const auto tokenizer = reader.string_attribute(attr::tokenizer);
  if (tokenizer) {
    fmt::print("{}: {} ({} {})\n", attr::tokenizer, *tokenizer, attr::tokenizer_xxh64,
               reader.string_attribute(attr::tokenizer_xxh64).value_or("<missing>"));
  } else {
    fmt::print("{}: none recorded (byte-level)\n", attr::tokenizer);
  }
}

// Each state group's tensor and element counts, and /model's tensors with their shapes.
void print_tensors(const io::CheckpointReader& reader) {
  for (const char* group : schema::state_groups) {
    const auto names = reader.datasets(group);
    if (names.empty()) continue;
    std::uint64_t elements = 0;
    for (const auto& name : names) {
      std::uint64_t n = 1;
      for (auto d : reader.shape(schema::dataset(group, name))) n *= d;
      elements += n;
    }
    fmt::print("{}: {} tensors, {} elements\n", group, names.size(), elements);
    if (std::string(group) == schema::model_group) {
      for (const auto& name : names) {
        fmt::print("  {:<28} [{}]\n", name, fmt::join(reader.shape(schema::dataset(group, name)), ", "));
      }
    }
  }
}

}  // namespace

int inspect_command(const Args& args, MPI_Comm comm) {
  if (wants_help(args) || args.size() != 1) {
    if (!wants_help(args)) input_error("expected one checkpoint file, got {} arguments", args.size());
    fmt::print(
        "usage: meshtrain inspect FILE\n  prints the step, layout, loss scale, config and tensors, and verifies "
        "every tensor's checksum (exit 2 naming the first that differs)\n");
    return 0;
  }
  const std::string& path = args[0];
  io::CheckpointReader reader(path, comm);
  int rank = 0;
  MESHTRAIN_MPI_CHECK(MPI_Comm_rank(comm, &rank), "is the communicator valid?");
  if (rank != 0) return 0;

  fmt::print("file: {}\n", path);
  print_attributes(reader);
  // What the file claims is printed first; then a file the trainer would refuse (a version this
  // build cannot read, no weights, a stored config that does not parse or contradicts model_family,
  // tensors that are not its model's) is refused with the loader's own checks.
  checked_stored_model(reader, /*with_optimizer=*/true);
  print_tensors(reader);
  if (auto config = reader.string_attribute(schema::attr::config)) fmt::print("config:\n{}", *config);
  verify_file(reader);
  return 0;
}

}  // namespace meshtrain
