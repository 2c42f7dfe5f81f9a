// Token shards: validation, memory mapping, stream reads across shards, atomic writes.
#include "io/token_shard.hpp"

#include "core/errors.hpp"
#include "io/atomic_file.hpp"
#include "io/file_mapping.hpp"
#include "io/sft_shard.hpp"

#include <glob.h>

#include <algorithm>
#include <bit>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <utility>

namespace meshtrain::io {
namespace {

std::uint16_t load_u16le(const unsigned char* p) {
  std::uint16_t v = 0;
  std::memcpy(&v, p, sizeof v);
  if constexpr (std::endian::native == std::endian::big) v = static_cast<std::uint16_t>((v >> 8) | (v << 8));
  return v;
}

std::uint32_t load_u32le(const unsigned char* p) {
  return std::uint32_t{p[0]} | (std::uint32_t{p[1]} << 8) | (std::uint32_t{p[2]} << 16) | (std::uint32_t{p[3]} << 24);
}

std::int32_t load_i32le(const unsigned char* p) {
  const std::uint32_t u =
      std::uint32_t{p[0]} | (std::uint32_t{p[1]} << 8) | (std::uint32_t{p[2]} << 16) | (std::uint32_t{p[3]} << 24);
  return static_cast<std::int32_t>(u);
}

void store_i32le(unsigned char* p, std::int32_t value) {
  const auto u = static_cast<std::uint32_t>(value);
  for (int i = 0; i < 4; ++i) p[i] = static_cast<unsigned char>(u >> (8 * i));
}

bool is_glob(const std::string& s) { return s.find_first_of("*?[") != std::string::npos; }

}  // namespace

std::vector<std::string> resolve_shard_paths(const std::string& path_or_glob, std::string_view what) {
  if (path_or_glob.empty()) input_error("no {} given: name a shard file or a glob such as 'data/train_*.bin'", what);
  std::vector<std::string> paths;
  if (!is_glob(path_or_glob)) {
    paths.push_back(path_or_glob);
    return paths;
  }
  glob_t g{};
  const int rc = ::glob(path_or_glob.c_str(), 0, nullptr, &g);
  if (rc == 0) {
    for (std::size_t i = 0; i < g.gl_pathc; ++i) paths.emplace_back(g.gl_pathv[i]);
  }
  globfree(&g);
  if (rc == GLOB_NOMATCH || (rc == 0 && paths.empty())) {
    input_error("{} pattern '{}' matches no file; give an existing shard or a glob that matches some", what,
                path_or_glob);
  }
  if (rc != 0) input_error("cannot expand {} pattern '{}' (glob error {})", what, path_or_glob, rc);
  std::sort(paths.begin(), paths.end());
  return paths;
}

struct TokenStream::Shard {
  std::string path;
  FileMapping map;
  const unsigned char* tokens = nullptr;  // count little-endian uint16 or uint32, just past the header
  std::size_t count = 0;
  std::size_t width = 2;  // bytes per token
  std::size_t begin = 0;  // stream position of the first token
  std::uint32_t max_token = 0;

  std::uint32_t at(std::size_t i) const { return width == 2 ? load_u16le(tokens + 2 * i) : load_u32le(tokens + 4 * i); }
};

namespace {

struct ShardShape {
  std::size_t count;
  std::size_t width;
};

// Checks the header and size; returns the token count and width.
ShardShape validate(const std::string& path, const FileMapping& map) {
  const std::size_t bytes = map.size();
  if (bytes < token_shard_header_bytes) {
    input_error(
        "token shard {} is {} bytes, shorter than the {}-byte header of a token shard "
        "(256 int32: {}, {}, token count, zeros); is it a shard written by 'meshtrain prepare'?",
        path, bytes, token_shard_header_bytes, token_shard_magic, token_shard_version);
  }
  const std::int32_t magic = load_i32le(map.data());
  const std::int32_t version = load_i32le(map.data() + 4);
  const std::int32_t count = load_i32le(map.data() + 8);
  if (magic == sft_shard_magic) {
    input_error(
        "{} is a fine-tuning shard (records with loss masks, written by 'meshtrain prepare --sft'), not a token "
        "stream; give a token shard written by 'meshtrain prepare --text'",
        path);
  }
  if (magic != token_shard_magic && magic != token_shard_magic_uint32) {
    input_error(
        "token shard {} starts with magic number {} (0x{:08x}), expected {} (uint16 tokens) or {} (uint32 tokens); "
        "it is not a token shard",
        path, magic, static_cast<std::uint32_t>(magic), token_shard_magic, token_shard_magic_uint32);
  }
  const bool wide = magic == token_shard_magic_uint32;
  const std::int32_t expected_version = wide ? token_shard_version_uint32 : token_shard_version;
  if (version != expected_version) {
    input_error("token shard {} has version {}, expected {} ({} tokens under magic {})", path, version,
                expected_version, wide ? "uint32" : "uint16", magic);
  }
  const std::size_t width = wide ? 4 : 2;
  if (count < 0) input_error("token shard {} declares a negative token count {}; the count must be >= 1", path, count);
  const std::size_t expected = token_shard_header_bytes + width * static_cast<std::size_t>(count);
  if (bytes != expected) {
    input_error(
        "token shard {} declares {} tokens, so it should be {} + {}*{} = {} bytes, but it is {} bytes "
        "(truncated or wrong header)",
        path, count, token_shard_header_bytes, width, count, expected, bytes);
  }
  if (count == 0) input_error("token shard {} holds no tokens; a shard needs at least one", path);
  return {static_cast<std::size_t>(count), width};
}

}  // namespace

TokenStream::TokenStream() = default;
TokenStream::TokenStream(TokenStream&&) noexcept = default;
TokenStream& TokenStream::operator=(TokenStream&&) noexcept = default;
TokenStream::~TokenStream() = default;

TokenStream TokenStream::open(const std::string& path_or_glob) {
  TokenStream stream;
  stream.paths_ = resolve_shard_paths(path_or_glob, "token shard");
  stream.shards_.reserve(stream.paths_.size());
  for (const std::string& path : stream.paths_) {
    FileMapping map(path, "token shard");
    const auto [count, width] = validate(path, map);
    Shard shard{path, std::move(map), nullptr, count, width, stream.size_, 0};
    shard.tokens = shard.map.data() + token_shard_header_bytes;
    for (std::size_t i = 0; i < count; ++i) shard.max_token = std::max(shard.max_token, shard.at(i));
    stream.max_token_ = std::max(stream.max_token_, shard.max_token);
    stream.shards_.push_back(std::move(shard));
    stream.size_ += count;
  }
  return stream;
}

void TokenStream::copy(std::size_t begin, std::size_t count, std::int32_t* out) const {
  if (begin > size_ || count > size_ - begin) {
    throw std::out_of_range("TokenStream::copy: tokens [" + std::to_string(begin) + ", " + std::to_string(begin) +
                            " + " + std::to_string(count) + ") outside the stream of " + std::to_string(size_) +
                            " tokens");
  }
  if (count == 0) return;
  // The shard holding `begin`: the last one whose first token is at or before it.
  auto it = std::upper_bound(shards_.begin(), shards_.end(), begin,
                             [](std::size_t pos, const Shard& s) { return pos < s.begin; });
  --it;
  std::size_t local = begin - it->begin;
  while (count > 0) {
    const std::size_t n = std::min(count, it->count - local);
    // A uint32 token past INT32_MAX wraps negative: require_vocab refuses such data first.
    for (std::size_t i = 0; i < n; ++i) out[i] = static_cast<std::int32_t>(it->at(local + i));
    out += n;
    count -= n;
    local = 0;
    ++it;
  }
}

void TokenStream::require_vocab(int vocab) const {
  if (vocab <= 0)
    input_error("model.vocab = {} is not a vocabulary size; it must be at least {}", vocab, max_token_ + 1);
  if (std::int64_t{max_token_} < vocab) return;
  for (const Shard& s : shards_) {
    if (std::int64_t{s.max_token} < vocab) continue;
    for (std::size_t i = 0; i < s.count; ++i) {
      if (std::int64_t{s.at(i)} >= vocab) {
        input_error(
            "token shard {}: token {} at position {} (stream position {}) is outside the vocabulary "
            "of {} (model.vocab); valid tokens are 0..{}, and the largest in the data is {}",
            s.path, s.at(i), i, s.begin + i, vocab, vocab - 1, max_token_);
      }
    }
  }
}

namespace {

// The shard of `tokens` (uint16_t or uint32_t) under `magic` and `version`.
template <class Token>
void write_shard(const std::string& path, std::span<const Token> tokens, std::int32_t magic, std::int32_t version) {
  if (tokens.empty()) input_error("refusing to write token shard {}: there are no tokens", path);
  if (tokens.size() > static_cast<std::size_t>(std::numeric_limits<std::int32_t>::max())) {
    input_error("cannot write token shard {}: {} tokens, but a shard holds at most {}; split the text", path,
                tokens.size(), std::numeric_limits<std::int32_t>::max());
  }
  write_file_atomically(path, "token shard", [&](const std::function<void(std::string_view)>& write) {
    unsigned char header[token_shard_header_bytes] = {};
    store_i32le(header, magic);
    store_i32le(header + 4, version);
    store_i32le(header + 8, static_cast<std::int32_t>(tokens.size()));
    write(std::string_view(reinterpret_cast<const char*>(header), sizeof header));

    std::string buffer;
    constexpr std::size_t chunk = 1 << 20;
    for (std::size_t at = 0; at < tokens.size(); at += chunk) {
      const std::size_t n = std::min(chunk, tokens.size() - at);
      buffer.resize(sizeof(Token) * n);
      for (std::size_t i = 0; i < n; ++i) {
        for (std::size_t k = 0; k < sizeof(Token); ++k) {
          buffer[sizeof(Token) * i + k] = static_cast<char>((tokens[at + i] >> (8 * k)) & 0xff);
        }
      }
      write(buffer);
    }
  });
}

}  // namespace

void write_token_shard(const std::string& path, std::span<const std::uint16_t> tokens) {
  write_shard(path, tokens, token_shard_magic, token_shard_version);
}

void write_token_shard_uint32(const std::string& path, std::span<const std::uint32_t> tokens) {
  write_shard(path, tokens, token_shard_magic_uint32, token_shard_version_uint32);
}

}  // namespace meshtrain::io
