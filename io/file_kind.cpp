// The kind tests of io/file_kind.hpp.
#include "io/file_kind.hpp"

#include "io/hdf5_handles.hpp"
#include "io/sft_shard.hpp"
#include "io/token_shard.hpp"
#include "io/tokenizer.hpp"
#include "io/tokenizer_json.hpp"

#include <hdf5.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <vector>

namespace meshtrain::io {
namespace {

namespace fs = std::filesystem;

// Files larger than this are not read whole by a test (a SentencePiece model or a traffic file is
// far smaller; a file that large is of another kind).
constexpr std::uintmax_t whole_file_limit = std::uintmax_t(64) << 20;

// A metrics record's line is at most this long (an MoE model's adds a few numbers per expert).
constexpr std::size_t first_line_limit = std::size_t(16) << 20;

std::uintmax_t size_of(const std::string& path) {
  std::error_code ec;
  const std::uintmax_t size = fs::file_size(path, ec);
  return ec ? 0 : size;
}

// Up to `count` bytes from the start of the file (fewer if it is shorter or unreadable).
std::string head(const std::string& path, std::size_t count) {
  std::ifstream in(path, std::ios::binary);
  std::string bytes(count, '\0');
  in.read(bytes.data(), std::streamsize(count));
  bytes.resize(std::size_t(in.gcount()));
  return bytes;
}

std::uint64_t load_le(std::string_view bytes, int width) {
  std::uint64_t value = 0;
  for (int i = width - 1; i >= 0; --i) value = value << 8 | static_cast<unsigned char>(bytes[std::size_t(i)]);
  return value;
}

}  // namespace

bool is_hdf5(const std::string& path) {
  h5::quiet_errors();
  return H5Fis_hdf5(path.c_str()) > 0;
}

bool is_token_shard(const std::string& path) {
  const std::string bytes = head(path, 8);
  if (bytes.size() != 8) return false;
  const auto magic = std::int32_t(load_le(bytes, 4)), version = std::int32_t(load_le(bytes.substr(4), 4));
  return (magic == token_shard_magic && version == token_shard_version) ||
         (magic == token_shard_magic_uint32 && version == token_shard_version_uint32);
}

bool is_sft_shard(const std::string& path) {
  const std::string bytes = head(path, 8);
  return bytes.size() == 8 && std::int32_t(load_le(bytes, 4)) == sft_shard_magic &&
         std::int32_t(load_le(bytes.substr(4), 4)) == sft_shard_version;
}

bool is_safetensors(const std::string& path) {
  const std::string bytes = head(path, 9);
  return bytes.size() == 9 && load_le(bytes, 8) <= size_of(path) - 8 && bytes[8] == '{';
}

bool is_traffic_json(const std::string& path) {
  if (size_of(path) > whole_file_limit || head(path, 1) != "{") return false;
  std::ifstream in(path);
  const nlohmann::json j = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  return j.is_object() && j.contains("counted") && j.contains("ranks");
}

bool is_metrics_jsonl(const std::string& path) {
  // Most first lines are short: every rank checks the file at start, so read more only if needed.
  std::string first = head(path, 64 << 10);
  if (first.empty() || first.front() != '{') return false;
  if (first.find('\n') == std::string::npos) first = head(path, first_line_limit);
  first.resize(std::min(first.size(), first.find('\n')));
  const nlohmann::json j = nlohmann::json::parse(first, nullptr, /*allow_exceptions=*/false);
  return j.is_object() && j.contains("step");
}

bool is_tokenizer_model(const std::string& path) {
  const std::uintmax_t size = size_of(path);
  return size <= whole_file_limit && is_sentencepiece_model(head(path, std::size_t(size)));
}

bool is_tokenizer_json_file(const std::string& path) {
  const std::uintmax_t size = size_of(path);
  return size <= whole_file_limit && head(path, 1) == "{" && is_tokenizer_json(head(path, std::size_t(size)));
}

// The sections of meshtrain's keys (share/docs/usage.md, Keys; core/config.cpp's table), which an INI of
// them is made of. A text is one when its first line that is no comment or blank is such a section and
// every other is a section of them, `key = value`, a comment or blank: a config a user wrote by hand is
// one too, and no --out replaces it.
bool is_config_ini(const std::string& path) {
  static const std::vector<std::string> sections = {"[checkpoint]", "[data]",  "[log]",      "[lora]",
                                                    "[model]",      "[optim]", "[parallel]", "[train]"};
  constexpr std::uintmax_t ini_limit = std::uintmax_t(1) << 20;
  const std::uintmax_t size = size_of(path);
  if (size > ini_limit) return false;
  std::istringstream lines(head(path, std::size_t(size)));
  bool in_section = false;
  for (std::string line; std::getline(lines, line);) {
    const auto first = line.find_first_not_of(" \t\r");
    if (first == std::string::npos || line[first] == '#' || line[first] == ';') continue;
    const auto last = line.find_last_not_of(" \t\r");
    const std::string text = line.substr(first, last - first + 1);
    if (text.front() == '[') {
      if (std::find(sections.begin(), sections.end(), text) == sections.end()) return false;
      in_section = true;
    } else if (!in_section || text.find('=') == std::string::npos || text.front() == '=') {
      return false;
    }
  }
  return in_section;
}

FileKind file_kind(const std::string& path) {
  if (size_of(path) == 0) return FileKind::empty;
  if (is_hdf5(path)) return FileKind::hdf5;
  if (is_token_shard(path)) return FileKind::token_shard;
  if (is_sft_shard(path)) return FileKind::sft_shard;
  if (is_safetensors(path)) return FileKind::safetensors;
  if (is_traffic_json(path)) return FileKind::traffic_json;
  if (is_metrics_jsonl(path)) return FileKind::metrics_jsonl;
  if (is_tokenizer_model(path)) return FileKind::tokenizer;
  if (is_tokenizer_json_file(path)) return FileKind::tokenizer_json;
  if (is_config_ini(path)) return FileKind::config_ini;
  return FileKind::other;
}

std::string_view describe(FileKind kind) {
  switch (kind) {
    case FileKind::empty: return "an empty file";
    case FileKind::hdf5: return "an HDF5 file (a checkpoint?)";
    case FileKind::token_shard: return "a token shard";
    case FileKind::sft_shard: return "a fine-tuning shard";
    case FileKind::safetensors: return "a safetensors file";
    case FileKind::traffic_json: return "a traffic file (log.traffic)";
    case FileKind::metrics_jsonl: return "a metrics file (log.metrics)";
    case FileKind::tokenizer: return "a SentencePiece tokenizer model";
    case FileKind::tokenizer_json: return "a tokenizer.json";
    case FileKind::config_ini: return "a meshtrain INI of keys";
    case FileKind::other: break;
  }
  return "a file of another kind";
}

}  // namespace meshtrain::io
