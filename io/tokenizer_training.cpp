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

// Control pieces SentencePiece can hold: its option is a comma-separated list, and the names of
// <unk> and the byte pieces are taken.
void require_valid_special(const std::vector<std::string>& special) {
  for (std::size_t i = 0; i < special.size(); ++i) {
    const std::string& token = special[i];
    const bool byte_name = token.size() == 6 && token.starts_with("<0x") && token.ends_with(">");
    if (token.empty() || token.find_first_of(", \t\r\n") != std::string::npos || token == "<unk>" || byte_name) {
      input_error(
          "--special '{}' cannot be a special token: give a non-empty name without commas or white space, other "
          "than <unk> and the byte pieces <0x00> ... <0xFF> (such as <|im_start|>)",
          token);
    }
    for (std::size_t j = 0; j < i; ++j) {
      if (special[j] == token) input_error("--special names '{}' twice; name each special token once", token);
    }
  }
}

}  // namespace

TrainedTokenizer train_tokenizer(const std::vector<std::string>& text_files, int vocab, const std::string& out,
                                 const std::vector<std::string>& special) {
  if (text_files.empty()) input_error("no text files given to train on (--text FILE...)");
  if (out.empty()) input_error("no output model given (--out TOKENIZER.model)");
  require_vocab_in_range(vocab);
  require_valid_special(special);
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
  const std::string model = train_bpe_model(lines, vocab, special);
  write_file_atomically(out, "tokenizer", [&](const auto& write) { write(model); });
  return {lines.size(), tokenizer_hash(model)};
}

}  // namespace meshtrain::io
