// meshtrain prepare --text FILE... --out SHARD.bin
#include "commands/commands.hpp"

#include "core/command_line.hpp"
#include "core/errors.hpp"
#include "io/prepare.hpp"

#include <boost/program_options.hpp>
#include <fmt/format.h>

#include <sstream>

namespace po = boost::program_options;

namespace meshtrain {

int prepare_command(const Args& args, MPI_Comm comm) {
  std::vector<std::string> texts;
  std::string out;
  po::options_description options("meshtrain prepare: byte-level tokenizer (token = byte value, vocab 256)");
  options.add_options()("text", po::value(&texts)->multitoken(), "text files, concatenated in the order given")(
      "out", po::value(&out), "token shard to write");
  if (wants_help(args)) {
    std::ostringstream usage;
    usage << options;
    fmt::print("usage: meshtrain prepare --text FILE... --out SHARD.bin\n{}", usage.str());
    return 0;
  }
  try {
    po::variables_map vm;
    po::store(parse_command_line(args, options, "meshtrain prepare --text FILE... --out SHARD.bin"), vm);
    po::notify(vm);
  } catch (const po::error& e) {
    input_error("prepare: {} (usage: meshtrain prepare --text FILE... --out SHARD.bin)", e.what());
  }
  if (texts.empty()) input_error("prepare: --text is missing: give one or more text files");
  if (out.empty()) input_error("prepare: --out is missing: give the path of the token shard to write");
  int rank = 0;
  MPI_Comm_rank(comm, &rank);
  if (rank == 0) {
    const std::size_t tokens = io::prepare_byte_shard(texts, out);
    fmt::print("wrote {} tokens from {} file(s) to {}\n", tokens, texts.size(), out);
  }
  return 0;
}

}  // namespace meshtrain
