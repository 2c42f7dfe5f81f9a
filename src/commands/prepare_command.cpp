// meshtrain prepare --text FILE... [--tokenizer TOKENIZER.model] --out SHARD.bin
#include "commands/commands.hpp"

#include "core/command_line.hpp"
#include "core/errors.hpp"
#include "core/mpi_check.hpp"
#include "io/prepare.hpp"

#include <boost/program_options.hpp>
#include <fmt/format.h>

namespace po = boost::program_options;

namespace meshtrain {

int prepare_command(const Args& args, MPI_Comm comm) {
  std::vector<std::string> texts;
  std::string tokenizer;
  std::string out;
  po::options_description options(
      "meshtrain prepare: a token shard, byte-level (token = byte value, vocab 256) or with a tokenizer's ids");
  options.add_options()("text", po::value(&texts)->multitoken(), "text files, concatenated in the order given")(
      "tokenizer", po::value(&tokenizer),
      "SentencePiece model (meshtrain tokenizer train) or tokenizer.json; none: byte-level")("out", po::value(&out),
                                                                                             "token shard to write");
  constexpr const char* usage = "meshtrain prepare --text FILE... [--tokenizer TOKENIZER.model] --out SHARD.bin";
  if (print_help_if_asked(args, options, usage)) return 0;
  parse_options(args, options, usage);
  if (texts.empty()) input_error("--text is missing: give one or more text files");
  if (out.empty()) input_error("--out is missing: give the path of the token shard to write");
  const int rank = mpi::rank_of(comm);
  if (rank == 0) {
    const std::size_t tokens =
        tokenizer.empty() ? io::prepare_byte_shard(texts, out) : io::prepare_subword_shard(texts, tokenizer, out);
    fmt::print("wrote {} tokens from {} file(s) to {}\n", tokens, texts.size(), out);
  }
  return 0;
}

}  // namespace meshtrain
