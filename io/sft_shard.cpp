// Fine-tuning shards: validation, memory mapping, record reads across shards, atomic writes.
#include "io/sft_shard.hpp"

#include "core/errors.hpp"
#include "io/atomic_file.hpp"
#include "io/file_kind.hpp"
#include "io/file_mapping.hpp"
#include "io/token_shard.hpp"

#include <algorithm>
#include <filesystem>
#include <limits>
#include <stdexcept>
#include <utility>

namespace meshtrain::io {
namespace {

std::uint64_t load_le(const unsigned char* p, int width) {
  std::uint64_t value = 0;
  for (int i = width - 1; i >= 0; --i) value = value << 8 | p[i];
  return value;
}

std::int32_t load_i32(const unsigned char* p) { return static_cast<std::int32_t>(load_le(p, 4)); }

void store_le(std::string& out, std::uint64_t value, int width) {
  for (int i = 0; i < width; ++i) out.push_back(static_cast<char>((value >> (8 * i)) & 0xff));
}

}  // namespace

struct SftShards::Shard {
  std::string path;
  FileMapping map;
  std::size_t count = 0;    // tokens
  std::size_t records = 0;  // records
  int width = 2;            // bytes per token
  const unsigned char* tokens = nullptr;
  const unsigned char* mask = nullptr;
  const unsigned char* offsets = nullptr;  // records + 1 int64
  std::size_t first_record = 0;            // list index of its record 0
  std::uint32_t max_token = 0;

  std::uint32_t token(std::size_t i) const { return std::uint32_t(load_le(tokens + width * i, width)); }
  std::int64_t offset(std::size_t r) const { return std::int64_t(load_le(offsets + 8 * r, 8)); }
};

namespace {

// Checks the header and the size; fills count, records, width and the section pointers.
void validate_layout(SftShards::Shard& s) {
  const std::size_t bytes = s.map.size();
  const std::string& path = s.path;
  if (bytes < sft_shard_header_bytes) {
    input_error(
        "fine-tuning shard {} is {} bytes, shorter than the {}-byte header (256 int32: {}, {}, token count, record "
        "count, bytes per token, zeros); is it a shard written by 'meshtrain prepare --sft'?",
        path, bytes, sft_shard_header_bytes, sft_shard_magic, sft_shard_version);
  }
  const unsigned char* h = s.map.data();
  const std::int32_t magic = load_i32(h), version = load_i32(h + 4), count = load_i32(h + 8),
                     records = load_i32(h + 12), width = load_i32(h + 16);
  if (magic == token_shard_magic || magic == token_shard_magic_uint32) {
    input_error(
        "{} is a token shard (one stream of tokens, written by 'meshtrain prepare --text'), not a fine-tuning shard "
        "(records with loss masks); write one with 'meshtrain prepare --sft'",
        path);
  }
  if (magic != sft_shard_magic) {
    input_error(
        "fine-tuning shard {} starts with magic number {} (0x{:08x}), expected {}; it is not a fine-tuning "
        "shard",
        path, magic, static_cast<std::uint32_t>(magic), sft_shard_magic);
  }
  if (version != sft_shard_version) {
    input_error("fine-tuning shard {} has version {}, expected {}", path, version, sft_shard_version);
  }
  if (width != 2 && width != 4) {
    input_error("fine-tuning shard {} declares {} bytes per token (header int32 4); valid are 2 and 4", path, width);
  }
  if (count <= 0 || records <= 0) {
    input_error(
        "fine-tuning shard {} declares {} tokens and {} records; a shard holds at least one record of at "
        "least one token",
        path, count, records);
  }
  for (std::size_t i = 5; i < 256; ++i) {
    if (load_i32(h + 4 * i) != 0) {
      input_error("fine-tuning shard {}: header int32 {} is {}, but header int32 5 to 255 are 0", path, i,
                  load_i32(h + 4 * i));
    }
  }
  s.count = std::size_t(count);
  s.records = std::size_t(records);
  s.width = width;
  const std::size_t expected = sft_shard_header_bytes + (std::size_t(width) + 1) * s.count + 8 * (s.records + 1);
  if (bytes != expected) {
    input_error(
        "fine-tuning shard {} declares {} tokens of {} bytes and {} records, so it should be 1024 + {}*{} + {} + "
        "8*{} = {} bytes, but it is {} bytes (truncated or wrong header)",
        path, count, width, records, width, count, count, records + 1, expected, bytes);
  }
  s.tokens = h + sft_shard_header_bytes;
  s.mask = s.tokens + std::size_t(width) * s.count;
  s.offsets = s.mask + s.count;
}

// Checks the offsets and the mask; returns the number of mask ones.
std::size_t validate_records(const SftShards::Shard& s) {
  const std::string& path = s.path;
  if (s.offset(0) != 0) input_error("fine-tuning shard {}: record offset 0 is {}, expected 0", path, s.offset(0));
  if (s.offset(s.records) != std::int64_t(s.count)) {
    input_error("fine-tuning shard {}: the last record offset (offset {}) is {}, expected the token count {}", path,
                s.records, s.offset(s.records), s.count);
  }
  for (std::size_t r = 0; r < s.records; ++r) {
    if (s.offset(r + 1) <= s.offset(r)) {
      input_error(
          "fine-tuning shard {}: record offsets {} and {} are {} and {}; offsets increase strictly (every record "
          "has a token)",
          path, r, r + 1, s.offset(r), s.offset(r + 1));
    }
  }
  std::size_t ones = 0;
  for (std::size_t i = 0; i < s.count; ++i) {
    if (s.mask[i] > 1) {
      input_error("fine-tuning shard {}: loss mask byte {} is {}; mask bytes are 0 or 1", path, i, int(s.mask[i]));
    }
    ones += s.mask[i];
  }
  for (std::size_t r = 0; r < s.records; ++r) {
    if (s.mask[s.offset(r)] != 0) {
      input_error(
          "fine-tuning shard {}: record {} starts at token {} whose loss mask is 1; a record's first token has mask 0 "
          "(nothing in the record predicts it)",
          path, r, s.offset(r));
    }
  }
  return ones;
}

}  // namespace

SftShards::SftShards() = default;
SftShards::SftShards(SftShards&&) noexcept = default;
SftShards& SftShards::operator=(SftShards&&) noexcept = default;
SftShards::~SftShards() = default;

SftShards SftShards::open(const std::string& path_or_glob) {
  SftShards list;
  list.paths_ = resolve_shard_paths(path_or_glob, "fine-tuning shard");
  list.shards_.reserve(list.paths_.size());
  for (const std::string& path : list.paths_) {
    Shard shard{path, FileMapping(path, "fine-tuning shard")};
    validate_layout(shard);
    list.loss_tokens_ += validate_records(shard);
    for (std::size_t i = 0; i < shard.count; ++i) shard.max_token = std::max(shard.max_token, shard.token(i));
    shard.first_record = list.records_;
    list.max_token_ = std::max(list.max_token_, shard.max_token);
    list.records_ += shard.records;
    list.tokens_ += shard.count;
    list.shards_.push_back(std::move(shard));
  }
  return list;
}

std::pair<const SftShards::Shard*, std::size_t> SftShards::locate(std::size_t r) const {
  if (r >= records_) {
    throw std::out_of_range("SftShards: record " + std::to_string(r) + " of " + std::to_string(records_));
  }
  auto it = std::upper_bound(shards_.begin(), shards_.end(), r,
                             [](std::size_t rec, const Shard& s) { return rec < s.first_record; });
  --it;
  return {&*it, r - it->first_record};
}

std::size_t SftShards::record_length(std::size_t r) const {
  const auto [s, local] = locate(r);
  return std::size_t(s->offset(local + 1) - s->offset(local));
}

void SftShards::copy_record(std::size_t r, std::int32_t* tokens, std::uint8_t* mask) const {
  const auto [s, local] = locate(r);
  const auto begin = std::size_t(s->offset(local)), end = std::size_t(s->offset(local + 1));
  for (std::size_t i = begin; i < end; ++i) {
    // A uint32 token past INT32_MAX wraps negative: require_vocab refuses such data first.
    tokens[i - begin] = static_cast<std::int32_t>(s->token(i));
    mask[i - begin] = s->mask[i];
  }
}

void SftShards::require_vocab(int vocab) const {
  if (vocab <= 0)
    input_error("model.vocab = {} is not a vocabulary size; it must be at least {}", vocab, max_token_ + 1);
  if (std::int64_t{max_token_} < vocab) return;
  for (const Shard& s : shards_) {
    if (std::int64_t{s.max_token} < vocab) continue;
    for (std::size_t r = 0; r < s.records; ++r) {
      for (auto i = std::size_t(s.offset(r)); i < std::size_t(s.offset(r + 1)); ++i) {
        if (std::int64_t{s.token(i)} < vocab) continue;
        input_error(
            "fine-tuning shard {}: token {} at position {} of record {} (record {} of the list) is outside the "
            "vocabulary of {} (model.vocab); valid tokens are 0..{}, and the largest in the data is {}",
            s.path, s.token(i), i - std::size_t(s.offset(r)), r, s.first_record + r, vocab, vocab - 1, max_token_);
      }
    }
  }
}

namespace {

void require_consistent(const SftRecords& rec, int vocab) {
  const std::size_t n = rec.tokens.size();
  if (rec.mask.size() != n) throw std::invalid_argument("write_sft_shard: mask and tokens differ in length");
  if (rec.offsets.empty() || rec.offsets.front() != 0 || rec.offsets.back() != std::int64_t(n)) {
    throw std::invalid_argument("write_sft_shard: offsets do not run from 0 to the token count");
  }
  for (std::size_t r = 0; r + 1 < rec.offsets.size(); ++r) {
    if (rec.offsets[r + 1] <= rec.offsets[r]) throw std::invalid_argument("write_sft_shard: offsets not increasing");
    if (rec.mask[std::size_t(rec.offsets[r])] != 0) {
      throw std::invalid_argument("write_sft_shard: a record's first token has mask 1");
    }
  }
  for (std::size_t i = 0; i < n; ++i) {
    if (rec.mask[i] > 1) throw std::invalid_argument("write_sft_shard: a mask value is not 0 or 1");
    if (std::int64_t{rec.tokens[i]} >= vocab) throw std::invalid_argument("write_sft_shard: a token past the vocab");
  }
}

}  // namespace

void write_sft_shard(const std::string& path, const SftRecords& rec, int vocab) {
  const std::size_t n = rec.tokens.size(), records = rec.offsets.size() - 1;
  if (rec.offsets.size() < 2 || n == 0)
    input_error("refusing to write fine-tuning shard {}: there are no records", path);
  constexpr auto limit = static_cast<std::size_t>(std::numeric_limits<std::int32_t>::max());
  if (n > limit || records > limit) {
    input_error(
        "cannot write fine-tuning shard {}: {} tokens in {} records, but a shard holds at most {} of each; "
        "split the records over several files",
        path, n, records, limit);
  }
  require_consistent(rec, vocab);
  const int width = vocab > uint16_shard_vocab ? 4 : 2;
  write_file_atomically(path, "fine-tuning shard", [&](const std::function<void(std::string_view)>& write) {
    std::string buffer;
    for (std::int64_t value : {std::int64_t{sft_shard_magic}, std::int64_t{sft_shard_version}, std::int64_t(n),
                               std::int64_t(records), std::int64_t{width}}) {
      store_le(buffer, std::uint64_t(value), 4);
    }
    buffer.resize(sft_shard_header_bytes, '\0');
    write(buffer);
    constexpr std::size_t chunk = 1 << 20;
    for (std::size_t at = 0; at < n; at += chunk) {
      buffer.clear();
      for (std::size_t i = at; i < std::min(n, at + chunk); ++i) store_le(buffer, rec.tokens[i], width);
      write(buffer);
    }
    write(std::string_view(reinterpret_cast<const char*>(rec.mask.data()), n));
    buffer.clear();
    for (std::int64_t offset : rec.offsets) store_le(buffer, std::uint64_t(offset), 8);
    write(buffer);
  });
}

bool names_sft_shards(const std::string& path_or_glob) {
  const std::string first = resolve_shard_paths(path_or_glob, "token shard or fine-tuning shard").front();
  // Only a regular file is read for its magic: a FIFO would block the read, and the token-shard
  // reader refuses anything else by name.
  std::error_code ec;
  return std::filesystem::is_regular_file(first, ec) && is_sft_shard(first);
}

}  // namespace meshtrain::io
