// Byte-level tokenization of text files into a token shard.
#include "io/prepare.hpp"

#include "core/errors.hpp"
#include "io/token_shard.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>

namespace meshtrain::io {
namespace {

void append_bytes(const std::string& path, std::vector<std::uint16_t>& tokens) {
  std::error_code ec;
  const auto status = std::filesystem::status(path, ec);
  if (!std::filesystem::exists(status)) input_error("text file {} does not exist", path);
  if (!std::filesystem::is_regular_file(status)) input_error("text file {} is not a regular file", path);
  std::ifstream in(path, std::ios::binary);
  if (!in) input_error("cannot open text file {}: {}", path, std::strerror(errno));
  char buffer[1 << 16];
  while (in) {
    in.read(buffer, sizeof buffer);
    const std::streamsize n = in.gcount();
    for (std::streamsize i = 0; i < n; ++i) tokens.push_back(static_cast<unsigned char>(buffer[i]));
  }
  if (in.bad()) input_error("cannot read text file {}: {}", path, std::strerror(errno));
}

}  // namespace

std::size_t prepare_byte_shard(const std::vector<std::string>& text_files, const std::string& out) {
  if (text_files.empty()) input_error("no text files given to tokenize (--text FILE...)");
  if (out.empty()) input_error("no output shard given (--out SHARD.bin)");
  std::vector<std::uint16_t> tokens;
  for (const std::string& path : text_files) append_bytes(path, tokens);
  if (tokens.empty())
    input_error("the text files {} are all empty; there is nothing to tokenize", fmt::join(text_files, ", "));
  write_token_shard(out, tokens);
  return tokens.size();
}

}  // namespace meshtrain::io
