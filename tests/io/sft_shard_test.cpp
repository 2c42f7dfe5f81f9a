// Fine-tuning shards: the bytes on disk against the format of share/docs/usage.md, Fine-tuning data
// (assembled here by hand), several shards read as one list of records, and every kind of bad file
// refused with a message naming it; token shards and fine-tuning shards refuse each other.
#include "io/sft_shard.hpp"

#include "io/token_shard.hpp"
#include "io_test_util.hpp"

#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <stdexcept>
#include <vector>

namespace meshtrain::io::test {
namespace sft_shard_test {

struct Layout {
  std::vector<std::uint32_t> tokens;
  std::vector<std::uint8_t> mask;
  std::vector<std::int64_t> offsets;
};

void put_le(std::vector<unsigned char>& bytes, std::uint64_t v, int width) {
  for (int i = 0; i < width; ++i) bytes.push_back(static_cast<unsigned char>(v >> (8 * i)));
}

// The file's bytes from the format's definition: 256 int32, tokens, mask bytes, int64 offsets.
std::vector<unsigned char> shard_bytes(const Layout& l, int width, std::int32_t magic = 20261203,
                                       std::int32_t version = 1) {
  std::vector<unsigned char> bytes;
  put_le(bytes, std::uint32_t(magic), 4);
  put_le(bytes, std::uint32_t(version), 4);
  put_le(bytes, l.tokens.size(), 4);
  put_le(bytes, l.offsets.size() - 1, 4);
  put_le(bytes, std::uint32_t(width), 4);
  bytes.resize(1024, 0);
  for (std::uint32_t t : l.tokens) put_le(bytes, t, width);
  bytes.insert(bytes.end(), l.mask.begin(), l.mask.end());
  for (std::int64_t o : l.offsets) put_le(bytes, std::uint64_t(o), 8);
  return bytes;
}

// Three records: 3, 1 and 4 tokens.
Layout three_records() { return {{5, 6, 7, 8, 9, 10, 11, 12}, {0, 1, 1, 0, 0, 0, 1, 1}, {0, 3, 4, 8}}; }

SftRecords as_records(const Layout& l) { return {l.tokens, l.mask, l.offsets}; }

TEST(SftShard, WrittenBytesFollowTheFormat) {
  LocalDir dir;
  const Layout l = three_records();
  write_sft_shard(dir / "a.bin", as_records(l), 1000);
  EXPECT_EQ(read_bytes(dir / "a.bin"), shard_bytes(l, 2));
  EXPECT_EQ(read_bytes(dir / "a.bin").size(), 1024u + 8 * 2 + 8 + 8 * 4);
  // A vocabulary past 65,536 ids takes 4 bytes a token.
  Layout wide = l;
  wide.tokens[2] = 70000;
  write_sft_shard(dir / "w.bin", as_records(wide), 70001);
  EXPECT_EQ(read_bytes(dir / "w.bin"), shard_bytes(wide, 4));
  // Only the shards are left: the temporaries were renamed.
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir.path()), {}), 2);
}

TEST(SftShard, ReadsRecordsBackAcrossShards) {
  LocalDir dir;
  const Layout a = three_records();
  const Layout b{{70000, 1, 2}, {0, 1, 0}, {0, 2, 3}};
  write_bytes(dir / "part_1.bin", shard_bytes(a, 2));
  write_bytes(dir / "part_0.bin", shard_bytes(b, 4));
  const SftShards list = SftShards::open(dir / "part_*.bin");
  ASSERT_EQ(list.record_count(), 5u);  // part_0's two, then part_1's three
  EXPECT_EQ(list.token_count(), 11u);
  EXPECT_EQ(list.loss_token_count(), 5u);
  EXPECT_EQ(list.max_token(), 70000u);
  const std::vector<std::vector<std::int32_t>> want_tokens{{70000, 1}, {2}, {5, 6, 7}, {8}, {9, 10, 11, 12}};
  const std::vector<std::vector<std::uint8_t>> want_mask{{0, 1}, {0}, {0, 1, 1}, {0}, {0, 0, 1, 1}};
  for (std::size_t r = 0; r < 5; ++r) {
    ASSERT_EQ(list.record_length(r), want_tokens[r].size()) << r;
    std::vector<std::int32_t> tokens(list.record_length(r));
    std::vector<std::uint8_t> mask(list.record_length(r));
    list.copy_record(r, tokens.data(), mask.data());
    EXPECT_EQ(tokens, want_tokens[r]) << r;
    EXPECT_EQ(mask, want_mask[r]) << r;
  }
  EXPECT_THROW(list.record_length(5), std::out_of_range);
  list.require_vocab(70001);
  expect_input_error([&] { list.require_vocab(70000); },
                     {dir / "part_0.bin", "token 70000", "record 0", "vocabulary of 70000"});
}

TEST(SftShard, EveryCorruptionIsRefusedNamingTheFile) {
  LocalDir dir;
  const std::vector<unsigned char> good = shard_bytes(three_records(), 2);
  struct Case {
    const char* name;
    std::vector<unsigned char> bytes;
    std::vector<std::string> needles;
  };
  const auto changed = [&](auto change) {
    std::vector<unsigned char> b = good;
    change(b);
    return b;
  };
  const auto set32 = [](std::vector<unsigned char>& b, std::size_t at, std::uint32_t v) {
    for (int i = 0; i < 4; ++i) b[at + i] = static_cast<unsigned char>(v >> (8 * i));
  };
  const std::size_t mask_at = 1024 + 16, offsets_at = mask_at + 8;
  Layout unsorted = three_records();
  unsorted.offsets = {0, 3, 3, 8};
  Layout masked_first = three_records();
  masked_first.mask[3] = 1;
  const std::vector<Case> cases{
      {"short.bin", std::vector<unsigned char>(good.begin(), good.begin() + 100), {"100 bytes", "1024"}},
      {"magic.bin", changed([&](auto& b) { set32(b, 0, 12345); }), {"12345", "expected 20261203"}},
      {"version.bin", changed([&](auto& b) { set32(b, 4, 2); }), {"version 2", "expected 1"}},
      {"width.bin", changed([&](auto& b) { set32(b, 16, 3); }), {"3 bytes per token"}},
      {"records0.bin", changed([&](auto& b) { set32(b, 12, 0); }), {"0 records"}},
      {"reserved.bin", changed([&](auto& b) { set32(b, 400, 1); }), {"header int32 100"}},
      {"count.bin", changed([&](auto& b) { set32(b, 8, 9); }), {"declares 9 tokens", "truncated or wrong header"}},
      {"truncated.bin", std::vector<unsigned char>(good.begin(), good.end() - 1), {"truncated or wrong header"}},
      {"longer.bin", changed([&](auto& b) { b.push_back(0); }), {"truncated or wrong header"}},
      {"mask2.bin", changed([&](auto& b) { b[mask_at + 2] = 2; }), {"loss mask byte 2 is 2"}},
      {"first.bin", shard_bytes(masked_first, 2), {"record 1 starts at token 3", "mask 0"}},
      {"offset0.bin", changed([&](auto& b) { b[offsets_at] = 1; }), {"record offset 0 is 1"}},
      {"last.bin", changed([&](auto& b) { b[offsets_at + 24] = 7; }), {"last record offset", "is 7", "8"}},
      {"order.bin", shard_bytes(unsorted, 2), {"offsets 1 and 2 are 3 and 3", "increase strictly"}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const std::string path = dir / c.name;
    write_bytes(path, c.bytes);
    const std::string message = expect_input_error([&] { SftShards::open(path); }, {path});
    for (const std::string& needle : c.needles) EXPECT_NE(message.find(needle), std::string::npos) << message;
  }
  expect_input_error([&] { SftShards::open(dir / "none.bin"); }, {dir / "none.bin"});
  expect_input_error([&] { SftShards::open(dir / "zz_*.bin"); }, {"zz_*.bin", "matches no file"});
}

TEST(SftShard, TokenShardsAndFineTuningShardsRefuseEachOther) {
  LocalDir dir;
  write_sft_shard(dir / "sft.bin", as_records(three_records()), 100);
  expect_input_error([&] { TokenStream::open(dir / "sft.bin"); },
                     {dir / "sft.bin", "is a fine-tuning shard", "not a token stream"});
  const std::vector<std::uint16_t> tokens{1, 2, 3};
  write_token_shard(dir / "plain.bin", tokens);
  expect_input_error([&] { SftShards::open(dir / "plain.bin"); },
                     {dir / "plain.bin", "is a token shard", "not a fine-tuning shard"});
  const std::vector<std::uint32_t> wide{1, 2, 3};
  write_token_shard_uint32(dir / "wide.bin", wide);
  expect_input_error([&] { SftShards::open(dir / "wide.bin"); }, {dir / "wide.bin", "is a token shard"});
}

TEST(SftShard, WritingRefusesInconsistentParts) {
  LocalDir dir;
  expect_input_error([&] { write_sft_shard(dir / "e.bin", SftRecords{}, 100); }, {dir / "e.bin", "no records"});
  Layout bad = three_records();
  bad.mask[0] = 1;
  EXPECT_THROW(write_sft_shard(dir / "b.bin", as_records(bad), 100), std::invalid_argument);
  bad = three_records();
  bad.offsets[1] = 0;
  EXPECT_THROW(write_sft_shard(dir / "b.bin", as_records(bad), 100), std::invalid_argument);
  bad = three_records();
  bad.mask.pop_back();
  EXPECT_THROW(write_sft_shard(dir / "b.bin", as_records(bad), 100), std::invalid_argument);
  EXPECT_THROW(write_sft_shard(dir / "b.bin", as_records(three_records()), 12), std::invalid_argument);
  EXPECT_FALSE(std::filesystem::exists(dir / "e.bin"));
  EXPECT_FALSE(std::filesystem::exists(dir / "b.bin"));
}

}  // namespace sft_shard_test
}  // namespace meshtrain::io::test
