// Training a tokenizer from files: the checks, the lines, the atomic write.
#include "io/tokenizer_training.hpp"

#include "core/errors.hpp"
#include "core/regular_file.hpp"
#include "io/atomic_file.hpp"
#include "io/output_guard.hpp"
#include "io/tokenizer.hpp"
#include "io/utf8.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <string_view>

namespace meshtrain::io {
namespace {

void require_vocab_in_range(int vocab) {
  constexpr int smallest = tokenizer_meta_pieces + 1;
  if (vocab < smallest || vocab > max_tokenizer_vocab) {
    input_error(
        "--vocab {} is invalid: it must be between {} (<unk>, the 256 byte pieces and one more) and {} (token "
        "shards hold uint16 ids)",
        vocab, smallest, max_tokenizer_vocab);
  }
}

// The non-empty lines of `text`, without their newlines: SentencePiece's training sentences.
void append_lines(std::string_view text, std::vector<std::string_view>& lines) {
  while (!text.empty()) {
    const std::size_t end = std::min(text.find('\n'), text.size());
    if (end > 0) lines.push_back(text.substr(0, end));
    text.remove_prefix(std::min(end + 1, text.size()));
  }
}

}  // namespace

TrainedTokenizer train_tokenizer(const std::vector<std::string>& text_files, int vocab, const std::string& out) {
  if (text_files.empty()) input_error("no text files given to train on (--text FILE...)");
  if (out.empty()) input_error("no output model given (--out TOKENIZER.model)");
  require_vocab_in_range(vocab);
  std::vector<NamedPath> inputs;
  for (const std::string& text : text_files) inputs.push_back({"--text", text});
  const Output model_file{"--out", out, FileKind::tokenizer, false, {atomic_temporary_path(out)}};
  require_safe_output(model_file, inputs);
  require_output_directory(model_file);

  std::vector<std::string> texts;
  for (const std::string& path : text_files) {
    texts.push_back(read_regular_file(path, "text file"));
    require_utf8_text(fmt::format("text file '{}'", path), texts.back());
  }
  std::vector<std::string_view> lines;
  for (const std::string& text : texts) append_lines(text, lines);
  if (lines.empty()) {
    input_error("the text files {} hold no text (only empty lines); there is nothing to train on",
                fmt::join(text_files, ", "));
  }
  const std::string model = train_bpe_model(lines, vocab);
  write_file_atomically(out, "tokenizer", [&](const auto& write) { write(model); });
  return {lines.size(), tokenizer_hash(model)};
}

}  // namespace meshtrain::io
