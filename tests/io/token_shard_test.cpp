// Token shards: the bytes on disk against the format of share/docs/usage.md, Token shards (decoded here by hand),
// streams over several shards, and every kind of bad shard rejected with a message naming it.
#include "io/token_shard.hpp"

#include "io_test_util.hpp"

#include <gtest/gtest.h>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <future>
#include <limits>
#include <random>
#include <stdexcept>
#include <vector>

namespace meshtrain::io::test {
namespace token_shard_test {

// A shard's bytes, assembled independently of write_token_shard: header ints, then tokens.
std::vector<unsigned char> shard_bytes(std::int32_t magic, std::int32_t version, std::int32_t declared,
                                       const std::vector<std::uint16_t>& tokens) {
  std::vector<unsigned char> bytes(1024, 0);
  auto put32 = [&](std::size_t at, std::int32_t v) {
    const auto u = static_cast<std::uint32_t>(v);
    for (int i = 0; i < 4; ++i) bytes[at + i] = static_cast<unsigned char>(u >> (8 * i));
  };
  put32(0, magic);
  put32(4, version);
  put32(8, declared);
  for (std::uint16_t t : tokens) {
    bytes.push_back(static_cast<unsigned char>(t & 0xff));
    bytes.push_back(static_cast<unsigned char>(t >> 8));
  }
  return bytes;
}

std::vector<std::uint16_t> random_tokens(std::size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> dist(0, 50000);
  std::vector<std::uint16_t> v(n);
  for (auto& t : v) t = static_cast<std::uint16_t>(dist(rng));
  return v;
}

std::vector<std::int32_t> widen(const std::vector<std::uint16_t>& v) { return {v.begin(), v.end()}; }

TEST(TokenShard, WrittenBytesFollowTheFormat) {
  LocalDir dir;
  const std::vector<std::uint16_t> tokens = {0, 1, 255, 256, 0x1234, 65535, 7};
  write_token_shard(dir / "a.bin", tokens);
  EXPECT_EQ(read_bytes(dir / "a.bin"), shard_bytes(20240520, 1, 7, tokens));
  // Only the shard is left: the temporary file was renamed.
  std::size_t files = 0;
  for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator(dir.path())) ++files;
  EXPECT_EQ(files, 1u);
}

TEST(TokenShard, RoundTrip) {
  LocalDir dir;
  const auto tokens = random_tokens(5000, 1);
  write_token_shard(dir / "one.bin", tokens);
  const TokenStream stream = TokenStream::open(dir / "one.bin");
  ASSERT_EQ(stream.size(), tokens.size());
  std::vector<std::int32_t> all(stream.size(), -1);
  stream.copy(0, all.size(), all.data());
  EXPECT_EQ(all, widen(tokens));
  EXPECT_EQ(stream.max_token(), *std::max_element(tokens.begin(), tokens.end()));
  ASSERT_EQ(stream.paths().size(), 1u);
  EXPECT_EQ(stream.paths()[0], dir / "one.bin");

  std::vector<std::int32_t> part(10, -1);
  stream.copy(4990, 10, part.data());
  EXPECT_EQ(part, std::vector<std::int32_t>(tokens.begin() + 4990, tokens.end()));
  EXPECT_THROW(stream.copy(4991, 10, part.data()), std::out_of_range);
  EXPECT_THROW(stream.copy(std::numeric_limits<std::size_t>::max(), 2, part.data()), std::out_of_range);
}

TEST(TokenShard, GlobReadsShardsInSortedOrderAsOneStream) {
  LocalDir dir;
  const auto a = random_tokens(300, 2);
  const auto b = random_tokens(5, 3);
  const auto c = random_tokens(200, 4);
  // Written out of order: the stream must follow the sorted names, not creation order.
  write_token_shard(dir / "train_02.bin", c);
  write_token_shard(dir / "train_00.bin", a);
  write_token_shard(dir / "train_01.bin", b);
  write_token_shard(dir / "valid_00.bin", random_tokens(9, 5));  // not matched

  const TokenStream stream = TokenStream::open(dir / "train_*.bin");
  EXPECT_EQ(stream.paths(),
            (std::vector<std::string>{dir / "train_00.bin", dir / "train_01.bin", dir / "train_02.bin"}));
  std::vector<std::int32_t> expected = widen(a);
  expected.insert(expected.end(), b.begin(), b.end());
  expected.insert(expected.end(), c.begin(), c.end());
  ASSERT_EQ(stream.size(), expected.size());

  std::vector<std::int32_t> all(stream.size());
  stream.copy(0, all.size(), all.data());
  EXPECT_EQ(all, expected);
  // Windows crossing one and two shard boundaries.
  for (std::size_t begin : {295u, 298u, 300u, 303u, 304u, 305u}) {
    std::vector<std::int32_t> window(12, -1);
    stream.copy(begin, window.size(), window.data());
    EXPECT_EQ(window, std::vector<std::int32_t>(expected.begin() + static_cast<long>(begin),
                                                expected.begin() + static_cast<long>(begin) + 12))
        << "begin " << begin;
  }
}

class BadShard : public ::testing::Test {
 protected:
  LocalDir dir;
  std::string file(const std::string& name, const std::vector<unsigned char>& bytes) {
    const std::string path = dir / name;
    write_bytes(path, bytes);
    return path;
  }
};

TEST_F(BadShard, MissingFile) {
  const std::string path = dir / "nope.bin";
  expect_input_error([&] { TokenStream::open(path); }, {path, "does not exist"});
}

TEST_F(BadShard, GlobMatchingNothing) {
  const std::string pattern = dir / "train_*.bin";
  expect_input_error([&] { TokenStream::open(pattern); }, {pattern, "matches no file"});
}

TEST_F(BadShard, ShorterThanHeader) {
  const std::string path = file("short.bin", std::vector<unsigned char>(100, 0));
  expect_input_error([&] { TokenStream::open(path); }, {path, "100 bytes", "1024"});
  const std::string empty_file = file("zero.bin", {});
  expect_input_error([&] { TokenStream::open(empty_file); }, {empty_file, "0 bytes"});
}

TEST_F(BadShard, WrongMagic) {
  const std::string path = file("magic.bin", shard_bytes(12345, 1, 3, {1, 2, 3}));
  expect_input_error([&] { TokenStream::open(path); }, {path, "12345", "expected 20240520"});
}

TEST_F(BadShard, WrongVersion) {
  const std::string path = file("version.bin", shard_bytes(20240520, 2, 3, {1, 2, 3}));
  expect_input_error([&] { TokenStream::open(path); }, {path, "version 2", "expected 1"});
}

TEST_F(BadShard, NegativeCount) {
  const std::string path = file("negative.bin", shard_bytes(20240520, 1, -4, {1, 2, 3}));
  expect_input_error([&] { TokenStream::open(path); }, {path, "-4"});
}

TEST_F(BadShard, LyingLengthClaimsMore) {
  // Declares 10 tokens (1044 bytes) but holds 5 (1034 bytes).
  const std::string path = file("more.bin", shard_bytes(20240520, 1, 10, {1, 2, 3, 4, 5}));
  expect_input_error([&] { TokenStream::open(path); }, {path, "1044", "1034"});
}

TEST_F(BadShard, LyingLengthClaimsFewer) {
  // Declares 2 tokens (1028 bytes) but holds 5 (1034 bytes).
  const std::string path = file("fewer.bin", shard_bytes(20240520, 1, 2, {1, 2, 3, 4, 5}));
  expect_input_error([&] { TokenStream::open(path); }, {path, "1028", "1034"});
}

TEST_F(BadShard, OddByteCount) {
  auto bytes = shard_bytes(20240520, 1, 2, {1, 2});
  bytes.push_back(0);
  const std::string path = file("odd.bin", bytes);
  expect_input_error([&] { TokenStream::open(path); }, {path, "1028", "1029"});
}

TEST_F(BadShard, Empty) {
  const std::string path = file("empty.bin", shard_bytes(20240520, 1, 0, {}));
  expect_input_error([&] { TokenStream::open(path); }, {path, "no tokens"});
}

TEST_F(BadShard, OneBadShardInAGlobIsNamed) {
  write_token_shard(dir / "s_0.bin", std::vector<std::uint16_t>{1, 2, 3});
  const std::string bad = file("s_1.bin", shard_bytes(20240520, 1, 9, {1, 2, 3}));
  expect_input_error([&] { TokenStream::open(dir / "s_*.bin"); }, {bad});
}

TEST_F(BadShard, ADirectory) {
  std::filesystem::create_directory(dir / "d.bin");
  expect_input_error([&] { TokenStream::open(dir / "d.bin"); }, {dir / "d.bin", "not a regular file"});
}

// A FIFO blocks open(2) until a writer comes: it must be refused as what it is, at once. Opened in
// another thread with a deadline; past it the test opens the FIFO for writing, releasing the reader,
// and fails.
TEST_F(BadShard, AFifoIsRefusedWithoutWaitingForAWriter) {
  const std::string path = dir / "fifo.bin";
  ASSERT_EQ(::mkfifo(path.c_str(), 0600), 0);
  auto opened = std::async(std::launch::async, [&] {
    return expect_input_error([&] { TokenStream::open(path); }, {path, "is a FIFO (named pipe), not a regular file"});
  });
  if (opened.wait_for(std::chrono::seconds(10)) != std::future_status::ready) {
    const int writer = ::open(path.c_str(), O_WRONLY | O_NONBLOCK);
    if (writer >= 0) ::close(writer);
    ADD_FAILURE() << "TokenStream::open(" << path << ") blocked on a FIFO";
  }
  opened.get();
}

TEST(TokenShard, TokensOutsideTheVocabularyAreNamedByFileAndPosition) {
  LocalDir dir;
  write_token_shard(dir / "p0.bin", std::vector<std::uint16_t>{1, 2, 3, 4});
  std::vector<std::uint16_t> second = {5, 6, 7, 8, 9, 10, 11, 300, 12, 400};
  write_token_shard(dir / "p1.bin", second);
  const TokenStream stream = TokenStream::open(dir / "p*.bin");
  EXPECT_EQ(stream.max_token(), 400);
  EXPECT_NO_THROW(stream.require_vocab(401));
  expect_input_error([&] { stream.require_vocab(256); },
                     {dir / "p1.bin", "token 300", "position 7", "stream position 11", "256"});
  expect_input_error([&] { stream.require_vocab(301); }, {dir / "p1.bin", "token 400", "position 9"});
  expect_input_error([&] { stream.require_vocab(0); }, {"0"});
}

TEST(TokenShard, WriteRefusesEmptyAndOversizedShards) {
  LocalDir dir;
  expect_input_error([&] { write_token_shard(dir / "e.bin", {}); }, {dir / "e.bin"});
  EXPECT_FALSE(std::filesystem::exists(dir / "e.bin"));

  // INT32_MAX + 1 tokens of untouched (never read) anonymous memory.
  const std::size_t n = std::size_t{1} << 31;
  void* memory = ::mmap(nullptr, n * 2, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  ASSERT_NE(memory, MAP_FAILED);
  const std::span<const std::uint16_t> huge(static_cast<const std::uint16_t*>(memory), n);
  expect_input_error([&] { write_token_shard(dir / "huge.bin", huge); },
                     {dir / "huge.bin", "2147483648", "2147483647"});
  ::munmap(memory, n * 2);
  EXPECT_FALSE(std::filesystem::exists(dir / "huge.bin"));
}

TEST(TokenShard, WriteIntoAMissingDirectoryNamesThePath) {
  LocalDir dir;
  const std::string path = dir / "no/such/dir/x.bin";
  expect_input_error([&] { write_token_shard(path, std::vector<std::uint16_t>{1}); }, {path});
}

// The uint32 form (magic 20240801, version 7: llm.c's Llama 3 shards), its bytes assembled here.
std::vector<unsigned char> wide_shard_bytes(const std::vector<std::uint32_t>& tokens) {
  std::vector<unsigned char> bytes = shard_bytes(20240801, 7, std::int32_t(tokens.size()), {});
  for (std::uint32_t t : tokens) {
    for (int i = 0; i < 4; ++i) bytes.push_back(static_cast<unsigned char>(t >> (8 * i)));
  }
  return bytes;
}

TEST(TokenShard, Uint32ShardsReadBesideUint16Ones) {
  LocalDir dir;
  const std::vector<std::uint32_t> wide = {0, 65535, 65536, 151642, 7, 0x00FFFFFF};
  write_token_shard_uint32(dir / "s1.bin", wide);
  const std::vector<unsigned char> expected = wide_shard_bytes(wide);
  std::ifstream in(std::string(dir / "s1.bin"), std::ios::binary);
  const std::vector<unsigned char> written((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(written, expected);
  EXPECT_EQ(written.size(), 1024 + 4 * wide.size());

  write_token_shard(dir / "s0.bin", std::vector<std::uint16_t>{3, 65535});  // an old shard, first in the stream
  const TokenStream stream = TokenStream::open(dir / "s*.bin");
  ASSERT_EQ(stream.size(), 2 + wide.size());
  std::vector<std::int32_t> got(stream.size());
  stream.copy(0, got.size(), got.data());
  std::vector<std::int32_t> want = {3, 65535};
  want.insert(want.end(), wide.begin(), wide.end());
  EXPECT_EQ(got, want);
  EXPECT_EQ(stream.max_token(), 0x00FFFFFFu);
  expect_input_error([&] { stream.require_vocab(151643); }, {dir / "s1.bin", "token 16777215", "position 5"});
}

TEST_F(BadShard, Uint32ShardWithAnotherVersionOrSize) {
  std::vector<unsigned char> bytes = wide_shard_bytes({1, 2, 3});
  bytes[4] = 1;  // version 1 under the uint32 magic
  const std::string version = file("wide_version.bin", bytes);
  expect_input_error([&] { TokenStream::open(version); }, {version, "version 1", "expected 7", "uint32"});
  std::vector<unsigned char> cut = wide_shard_bytes({1, 2, 3});
  cut.erase(cut.end() - 2, cut.end());  // the size a uint16 shard of 3 tokens would have
  const std::string truncated = file("wide_cut.bin", cut);
  expect_input_error([&] { TokenStream::open(truncated); }, {truncated, "1024 + 4*3"});
}

}  // namespace token_shard_test
}  // namespace meshtrain::io::test
