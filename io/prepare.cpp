// Byte-level tokenization of text files into a token shard.
#include "io/prepare.hpp"

#include "core/errors.hpp"
#include "core/regular_file.hpp"
#include "io/output_guard.hpp"
#include "io/token_shard.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cstdint>

namespace meshtrain::io {
namespace {

void append_bytes(const std::string& path, std::vector<std::uint16_t>& tokens) {
  read_regular_file(path, "text file", [&](std::string_view chunk) {
    for (unsigned char byte : chunk) tokens.push_back(byte);
  });
}

}  // namespace

std::size_t prepare_byte_shard(const std::vector<std::string>& text_files, const std::string& out) {
  if (text_files.empty()) input_error("no text files given to tokenize (--text FILE...)");
  if (out.empty()) input_error("no output shard given (--out SHARD.bin)");
  // Before anything is read: the shard must not replace a text it is made from, or a checkpoint.
  require_safe_output("--out", out, text_files);
  std::vector<std::uint16_t> tokens;
  for (const std::string& path : text_files) append_bytes(path, tokens);
  if (tokens.empty())
    input_error("the text files {} are all empty; there is nothing to tokenize", fmt::join(text_files, ", "));
  write_token_shard(out, tokens);
  return tokens.size();
}

}  // namespace meshtrain::io
