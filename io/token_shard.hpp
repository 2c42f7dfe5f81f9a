// Token shards (share/docs/usage.md, Token shards): reading one or many as a single stream, and writing one.
//
// A shard is a header of 256 little-endian int32 — magic, version, token count, then zeros —
// followed by `count` little-endian tokens: uint16 under magic 20240520 and version 1, uint32 under
// magic 20240801 and version 7 (a vocabulary past 65,536 ids: Llama 3's, Qwen2's), so its size is
// exactly 1024 + 2·count or 1024 + 4·count bytes (the two formats llm.c's data scripts write, for
// GPT-2 and Llama 3). Several shards, named by a glob, read as one stream in sorted path order,
// either form in any mix. Every file is validated when opened; any fault is an InputError naming
// the file and what a valid shard holds.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace meshtrain::io {

inline constexpr std::int32_t token_shard_magic = 20240520;  // uint16 tokens
inline constexpr std::int32_t token_shard_version = 1;
inline constexpr std::int32_t token_shard_magic_uint32 = 20240801;  // uint32 tokens
inline constexpr std::int32_t token_shard_version_uint32 = 7;
// The ids a uint16 shard holds: prepare writes uint32 tokens for a vocabulary larger than this.
inline constexpr std::int64_t uint16_shard_vocab = 65536;
inline constexpr std::size_t token_shard_header_bytes = 256 * sizeof(std::int32_t);

// A read-only view of every token in one or more shards, each memory-mapped for the object's
// lifetime. Move-only. Reading is thread-safe (nothing is mutated after open()). A shard that is
// truncated by someone else while mapped ends the process with SIGBUS: don't rewrite live data.
class TokenStream {
 public:
  // path_or_glob is a path (which must exist) or a glob(3) pattern (containing *, ? or [) that
  // must match at least one file. Throws InputError naming the file or pattern at fault.
  static TokenStream open(const std::string& path_or_glob);

  TokenStream(TokenStream&&) noexcept;
  TokenStream& operator=(TokenStream&&) noexcept;
  ~TokenStream();

  // Total number of tokens over all shards.
  std::size_t size() const { return size_; }

  // Copies tokens [begin, begin + count) of the stream, which may span shards, widening to int32.
  // Throws std::out_of_range if the range is not inside [0, size()).
  void copy(std::size_t begin, std::size_t count, std::int32_t* out) const;

  // The largest token in the stream (found once, at open).
  std::uint32_t max_token() const { return max_token_; }

  // Throws InputError naming the shard and position of the first token >= vocab, if any.
  void require_vocab(int vocab) const;

  // The shards, in stream order.
  const std::vector<std::string>& paths() const { return paths_; }

 private:
  struct Shard;
  TokenStream();

  std::vector<Shard> shards_;
  std::vector<std::string> paths_;
  std::size_t size_ = 0;
  std::uint32_t max_token_ = 0;
};

// The files path_or_glob names, sorted: the path itself (which need not exist yet), or every match
// of a glob(3) pattern (containing *, ? or [). InputError naming the pattern and `what` ("token
// shard") when it is empty or matches nothing.
std::vector<std::string> resolve_shard_paths(const std::string& path_or_glob, std::string_view what);

// Writes a shard atomically (a temporary file in the same directory, then rename), so a reader never
// sees a partial one. Throws InputError if tokens is empty, holds more than INT32_MAX tokens, or
// the file cannot be created (naming the path and the reason).
void write_token_shard(const std::string& path, std::span<const std::uint16_t> tokens);
// The same in the uint32 form (magic 20240801, version 7).
void write_token_shard_uint32(const std::string& path, std::span<const std::uint32_t> tokens);

}  // namespace meshtrain::io
