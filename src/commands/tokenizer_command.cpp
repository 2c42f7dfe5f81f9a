// meshtrain tokenizer train --text FILE... --vocab N --out TOKENIZER.model
//
// Trains a SentencePiece BPE model (io/tokenizer_training.hpp) for `prepare --tokenizer` and
// `data.tokenizer` (share/docs/usage.md, Tokenizers). Rank 0 trains; under a launcher the others wait.
#include "commands/commands.hpp"

#include "core/command_line.hpp"
#include "core/errors.hpp"
#include "core/mpi_check.hpp"
#include "io/tokenizer.hpp"
#include "io/tokenizer_training.hpp"

#include <boost/program_options.hpp>
#include <fmt/format.h>

namespace po = boost::program_options;

namespace meshtrain {
namespace {

constexpr const char* train_usage =
    "meshtrain tokenizer train --text FILE... --vocab N --out TOKENIZER.model [--special TOKEN...]";

int train_subcommand(const Args& args, MPI_Comm comm) {
  std::vector<std::string> texts;
  int vocab = 0;  // missing: refused with the valid range
  std::string out;
  std::vector<std::string> special;
  po::options_description options(
      "meshtrain tokenizer train: a SentencePiece BPE model (byte fallback, exact round trips)");
  options.add_options()("text", po::value(&texts)->multitoken(), "text files to learn from (one sentence a line)")(
      "vocab", po::value(&vocab), "pieces in the model, <unk> and the 256 byte pieces included (258..65536)")(
      "out", po::value(&out), "the model file to write")(
      "special", po::value(&special)->multitoken(),
      "special tokens of chat templates (<|im_start|> ...): control pieces, ids 1, 2, ... (prepare --sft)");
  if (print_help_if_asked(args, options, train_usage)) return 0;
  parse_options(args, options, train_usage);
  if (texts.empty()) input_error("--text is missing: give one or more text files");
  if (out.empty()) input_error("--out is missing: give the path of the model file to write");
  if (mpi::rank_of(comm) == 0) {
    const io::TrainedTokenizer trained = io::train_tokenizer(texts, vocab, out, special);
    fmt::print("wrote tokenizer {}: {} pieces learnt from {} lines of {} file(s), xxh64 {}\n", out, vocab,
               trained.lines, texts.size(), io::hash_hex(trained.hash));
  }
  return 0;
}

}  // namespace

int tokenizer_command(const Args& args, MPI_Comm comm) {
  if (args.empty() || args[0] == "--help" || args[0] == "-h") {
    if (args.empty()) input_error("tokenizer needs a subcommand: train (usage: {})", train_usage);
    fmt::print("usage: {}\n  trains a SentencePiece BPE model; `meshtrain tokenizer train --help` lists its options\n",
               train_usage);
    return 0;
  }
  if (args[0] != "train")
    input_error("unknown tokenizer subcommand '{}': valid is train (usage: {})", args[0], train_usage);
  return train_subcommand(Args(args.begin() + 1, args.end()), comm);
}

}  // namespace meshtrain
