// meshtrain export FILE --format safetensors --out OUT: a checkpoint's /model (whatever layout wrote
// it: the tensors are stored whole) as a safetensors file in the checkpoint's names and shapes
// (gpt2: Hugging Face GPT-2's, Conv1D [in, out]; llama: Hugging Face Llama's, [out, in]), float32,
// for other tools.
#include "commands/commands.hpp"

#include "checkpoint/contents.hpp"
#include "core/command_line.hpp"
#include "core/errors.hpp"
#include "core/mpi_check.hpp"
#include "io/checkpoint/checksum_verifier.hpp"
#include "io/checkpoint/file.hpp"
#include "io/checkpoint/schema.hpp"
#include "io/checkpoint/tensor_checksum.hpp"
#include "io/output_guard.hpp"
#include "io/safetensors_writer.hpp"

#include <boost/program_options.hpp>
#include <fmt/format.h>

namespace meshtrain {

namespace {

namespace schema = io::schema;

// Every /model tensor read whole (each checked finite by the reader) and verified against its stored
// checksum by io's one verifier, the one `inspect` and loading use, before anything is written; the
// file checked first as loading checks it (checkpoint/contents.hpp): exactly its stored
// config's tensors, in their shapes.
std::vector<io::NamedTensor> read_verified_model(const io::CheckpointReader& reader) {
  checked_stored_model(reader, /*with_optimizer=*/false);
  std::vector<io::NamedTensor> tensors;
  std::vector<std::string> datasets;
  for (const std::string& name : schema::model_tensors(reader)) {
    io::NamedTensor t;
    t.name = name;
    datasets.push_back(schema::dataset(schema::model_group, name));
    t.shape = reader.shape(datasets.back());
    std::uint64_t n = 1;
    for (auto d : t.shape) n *= d;
    t.values.resize(n);
    reader.read(io::TensorSlab::whole(datasets.back(), t.shape), t.values.data());
    tensors.push_back(std::move(t));
  }
  io::verify_checksums(
      reader, datasets,
      [&](std::size_t k) { return io::tensor_checksum(tensors[k].values.data(), tensors[k].values.size()); },
      schema::requires_checksums(reader));
  return tensors;
}

}  // namespace

int export_command(const Args& args, MPI_Comm comm) {
  namespace po = boost::program_options;
  const std::string usage = "meshtrain export FILE --format safetensors --out OUT";
  std::string format, out;
  po::options_description options("meshtrain export");
  options.add_options()("format", po::value(&format), "output format: safetensors")(
      "out", po::value(&out), "file to write (written as OUT.tmp, renamed when complete)");
  if (print_help_if_asked(args, options, usage)) return 0;
  if (args.empty() || args[0].rfind("--", 0) == 0) input_error("expected a checkpoint FILE first (usage: {})", usage);
  const std::string path = args[0];
  parse_options(Args(args.begin() + 1, args.end()), options, usage);
  if (format != "safetensors") {
    input_error("--format = '{}' is invalid: valid formats are safetensors (usage: {})", format, usage);
  }
  if (out.empty()) input_error("--out is missing: name the file to write (usage: {})", usage);
  // Before anything is read: the output must not replace the checkpoint, a directory or a file
  // that is not a safetensors file.
  const io::Output safetensors{"--out", out, io::FileKind::safetensors, false, {io::safetensors_temporary_path(out)}};
  io::require_safe_output(safetensors, {{"the checkpoint", path}});
  io::require_output_directory(safetensors);

  io::CheckpointReader reader(path, comm);
  int rank = 0;
  MESHTRAIN_MPI_CHECK(MPI_Comm_rank(comm, &rank), "is the communicator valid?");
  if (rank != 0) return 0;
  const std::vector<io::NamedTensor> tensors = read_verified_model(reader);
  std::map<std::string, std::string> metadata = {{"format", "pt"}, {"source", path}};
  if (auto step = reader.int_attribute(schema::attr::step)) metadata[schema::attr::step] = std::to_string(*step);
  if (auto family = schema::model_family(reader)) metadata[schema::attr::model_family] = *family;
  io::write_safetensors(out, tensors, metadata);
  fmt::print("wrote {} tensors from {} to {}\n", tensors.size(), path, out);
  return 0;
}

}  // namespace meshtrain
