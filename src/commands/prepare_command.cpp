// meshtrain prepare --text FILE... [--tokenizer TOKENIZER.model] --out SHARD.bin
// meshtrain prepare --sft FILE.jsonl... --tokenizer T --template NAME --out SHARD.bin [--train-on-prompt]
#include "commands/commands.hpp"

#include "core/command_line.hpp"
#include "core/errors.hpp"
#include "core/mpi_check.hpp"
#include "io/prepare.hpp"

#include <boost/program_options.hpp>
#include <fmt/format.h>

namespace po = boost::program_options;

namespace meshtrain {
namespace {

int prepare_sft(const std::vector<std::string>& sft, const std::string& tokenizer, const std::string& chat_template,
                bool train_on_prompt, const std::vector<std::string>& texts, const std::string& out, MPI_Comm comm) {
  if (!texts.empty()) input_error("--sft and --text make different shards: give one of them");
  if (tokenizer.empty()) input_error("--tokenizer is missing: --sft needs a SentencePiece model or a tokenizer.json");
  if (chat_template.empty()) input_error("--template is missing: give chatml, llama2, llama3, alpaca or plain");
  if (out.empty()) input_error("--out is missing: give the path of the fine-tuning shard to write");
  if (mpi::rank_of(comm) == 0) {
    const io::SftSummary s = io::prepare_sft_shard(sft, tokenizer, chat_template, train_on_prompt, out);
    fmt::print("wrote {} records, {} tokens ({} carry loss, the longest record {} tokens) from {} file(s) to {}\n",
               s.records, s.tokens, s.loss_tokens, s.longest, sft.size(), out);
  }
  return 0;
}

}  // namespace

int prepare_command(const Args& args, MPI_Comm comm) {
  std::vector<std::string> texts;
  std::string tokenizer;
  std::string out;
  std::vector<std::string> sft;
  std::string chat_template;
  bool train_on_prompt = false;
  po::options_description options(
      "meshtrain prepare: a token shard, byte-level (token = byte value, vocab 256) or with a tokenizer's ids");
  options.add_options()("text", po::value(&texts)->multitoken(), "text files, concatenated in the order given")(
      "tokenizer", po::value(&tokenizer),
      "SentencePiece model (meshtrain tokenizer train) or tokenizer.json; none: byte-level")("out", po::value(&out),
                                                                                             "token shard to write");
  options.add_options()("sft", po::value(&sft)->multitoken(),
                        "fine-tuning records (JSON lines: chats or instructions) for a fine-tuning shard")(
      "template", po::value(&chat_template), "with --sft: chatml, llama2, llama3, alpaca or plain")(
      "train-on-prompt", po::bool_switch(&train_on_prompt), "with --sft: loss on every token, the prompts' too");
  constexpr const char* usage =
      "meshtrain prepare --text FILE... [--tokenizer TOKENIZER.model] --out SHARD.bin\n"
      "       meshtrain prepare --sft FILE.jsonl... --tokenizer T --template NAME --out SHARD.bin [--train-on-prompt]";
  if (print_help_if_asked(args, options, usage)) return 0;
  parse_options(args, options, usage);
  if (!sft.empty()) return prepare_sft(sft, tokenizer, chat_template, train_on_prompt, texts, out, comm);
  if (!chat_template.empty() || train_on_prompt)
    input_error("--template and --train-on-prompt go with --sft FILE.jsonl...");
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
