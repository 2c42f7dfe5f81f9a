// Fine-tuning shards (share/docs/usage.md, Fine-tuning data): records of tokens with a loss mask,
// written by `meshtrain prepare --sft`, read one or many as a single list of records.
//
// A header of 256 little-endian int32 — magic 20261203, version 1, token count N, record count R,
// bytes per token (2 or 4), zeros — then N little-endian tokens (uint16 or uint32), N mask bytes
// (0 or 1: mask[i] = 1 when predicting token i from the record's earlier tokens carries loss), then
// R + 1 little-endian int64 record offsets (0 first, N last, strictly increasing: record r is tokens
// [off_r, off_r+1)). Its size is exactly 1024 + N·width + N + 8·(R + 1) bytes. The first token of
// every record has mask 0 (nothing before it in the record predicts it). Plain token shards
// (io/token_shard.hpp) are another format, and each reader refuses the other's files by name.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace meshtrain::io {

inline constexpr std::int32_t sft_shard_magic = 20261203;
inline constexpr std::int32_t sft_shard_version = 1;
inline constexpr std::size_t sft_shard_header_bytes = 256 * sizeof(std::int32_t);

// A read-only view of every record in one or more fine-tuning shards, each memory-mapped for the
// object's lifetime. Move-only; reading is thread-safe. Every file is validated when opened (sizes,
// magic and version, offsets, mask values, each record's first token unmasked): any fault is an
// InputError naming the file and what a valid shard holds.
class SftShards {
 public:
  // A path (which must exist) or a glob(3) pattern that must match at least one file; several files
  // read as one list of records in sorted path order.
  static SftShards open(const std::string& path_or_glob);

  SftShards(SftShards&&) noexcept;
  SftShards& operator=(SftShards&&) noexcept;
  ~SftShards();

  std::size_t record_count() const { return records_; }
  // Tokens over all records.
  std::size_t token_count() const { return tokens_; }
  // Tokens whose mask is 1, over all records.
  std::size_t loss_token_count() const { return loss_tokens_; }
  // Tokens of record r; std::out_of_range unless r < record_count().
  std::size_t record_length(std::size_t r) const;
  // Copies record r's tokens (widened to int32) and mask into record_length(r) entries of each.
  void copy_record(std::size_t r, std::int32_t* tokens, std::uint8_t* mask) const;

  // The largest token (found once, at open).
  std::uint32_t max_token() const { return max_token_; }
  // InputError naming the shard, the record and the position of the first token >= vocab, if any.
  void require_vocab(int vocab) const;

  const std::vector<std::string>& paths() const { return paths_; }

  struct Shard;  // one mapped file, defined in io/sft_shard.cpp

 private:
  SftShards();
  // The shard holding record r and r's index in it.
  std::pair<const Shard*, std::size_t> locate(std::size_t r) const;

  std::vector<Shard> shards_;
  std::vector<std::string> paths_;
  std::size_t records_ = 0, tokens_ = 0, loss_tokens_ = 0;
  std::uint32_t max_token_ = 0;
};

// Whether `path_or_glob` names fine-tuning shards rather than token shards: the kind of its first
// file in sorted order (each reader refuses the other kind among the rest, naming the file); false
// for anything but a regular file, which the token-shard reader refuses.
// InputError as resolve_shard_paths when it names no file.
bool names_sft_shards(const std::string& path_or_glob);

// One shard's contents, as prepare builds them.
struct SftRecords {
  std::vector<std::uint32_t> tokens;
  std::vector<std::uint8_t> mask;        // one per token, 0 or 1
  std::vector<std::int64_t> offsets{0};  // record r is tokens [offsets[r], offsets[r + 1])
};

// Writes `records` atomically (io/atomic_file.hpp) with 2-byte tokens, or 4-byte ones when `vocab`
// passes 65,536. InputError naming the path when there are no records, more than INT32_MAX tokens
// or records, or the file cannot be written; std::invalid_argument when the parts disagree (a
// mask or offsets of another length, offsets not increasing from 0 to the token count, a mask value
// other than 0 and 1, a record's first token masked 1, a token outside the vocabulary).
void write_sft_shard(const std::string& path, const SftRecords& records, int vocab);

}  // namespace meshtrain::io
