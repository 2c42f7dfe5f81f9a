// meshtrain export FILE --format safetensors --out OUT: a checkpoint's /model (whatever layout wrote
// it: the tensors are stored whole) as a safetensors file with Hugging Face GPT-2 names and shapes
// (Conv1D [in, out], no `transformer.` prefix), float32, for other tools.
#include "commands/commands.hpp"

#include "core/command_line.hpp"
#include "core/errors.hpp"
#include "core/mpi_check.hpp"
#include "io/checkpoint_file.hpp"
#include "io/checkpoint_schema.hpp"
#include "io/safetensors_writer.hpp"

#include <boost/program_options.hpp>
#include <fmt/format.h>

#include <filesystem>

namespace meshtrain {

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
  const std::filesystem::path parent = std::filesystem::absolute(out).parent_path();
  if (!std::filesystem::is_directory(parent)) {
    input_error("--out '{}': directory '{}' does not exist", out, parent.string());
  }
  if (!std::filesystem::exists(path)) input_error("'{}': no such file (give a checkpoint or weights file)", path);

  io::CheckpointReader reader(path, comm);
  int rank = 0;
  MESHTRAIN_MPI_CHECK(MPI_Comm_rank(comm, &rank), "is the communicator valid?");
  if (rank != 0) return 0;
  namespace schema = io::schema;
  const auto names = reader.datasets(schema::model_group);
  if (names.empty()) {
    input_error("'{}' has no {} group: it is not a meshtrain checkpoint or weights file", path, schema::model_group);
  }
  std::vector<io::NamedTensor> tensors;
  for (const std::string& name : names) {
    io::NamedTensor t;
    t.name = name;
    const std::string dataset = schema::dataset(schema::model_group, name);
    t.shape = reader.shape(dataset);
    std::uint64_t n = 1;
    for (auto d : t.shape) n *= d;
    t.values.resize(n);
    reader.read(io::TensorSlab::whole(dataset, t.shape), t.values.data());
    tensors.push_back(std::move(t));
  }
  std::map<std::string, std::string> metadata = {{"format", "pt"}, {"source", path}};
  if (auto step = reader.int_attribute(schema::attr::step)) metadata[schema::attr::step] = std::to_string(*step);
  io::write_safetensors(out, tensors, metadata);
  fmt::print("wrote {} tensors from {} to {}\n", tensors.size(), path, out);
  return 0;
}

}  // namespace meshtrain
