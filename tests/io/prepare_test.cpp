// The byte-level tokenizer: two text files become their bytes, in the order given.
#include "io/prepare.hpp"

#include "io/token_shard.hpp"
#include "io_test_util.hpp"

#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

namespace meshtrain::io::test {
namespace prepare_test {

TEST(Prepare, TwoTextFilesGiveTheirBytesInOrder) {
  LocalDir dir;
  const std::string first = "Hello, w\xc3\xb6rld!\n";                // UTF-8: two bytes for the o-umlaut
  const std::string second = std::string("tab\there\0nul\xff", 13);  // a NUL and a 0xff byte
  write_text(dir / "b.txt", first);
  write_text(dir / "a.txt", second);

  // Given b before a: the order of the arguments, not of the names, counts.
  const std::size_t n = prepare_byte_shard({dir / "b.txt", dir / "a.txt"}, dir / "out.bin");
  EXPECT_EQ(n, first.size() + second.size());

  const TokenStream stream = TokenStream::open(dir / "out.bin");
  ASSERT_EQ(stream.size(), n);
  std::vector<std::int32_t> tokens(n);
  stream.copy(0, n, tokens.data());
  std::vector<std::int32_t> expected;
  for (char c : first + second) expected.push_back(static_cast<unsigned char>(c));
  EXPECT_EQ(tokens, expected);
  EXPECT_EQ(stream.max_token(), 0xff);
  EXPECT_NO_THROW(stream.require_vocab(byte_vocab));
}

TEST(Prepare, MissingInputIsNamedAndNothingIsWritten) {
  LocalDir dir;
  write_text(dir / "a.txt", "some text");
  const std::string missing = dir / "missing.txt";
  expect_input_error([&] { prepare_byte_shard({dir / "a.txt", missing}, dir / "out.bin"); }, {missing});
  EXPECT_FALSE(std::filesystem::exists(dir / "out.bin"));
  expect_input_error([&] { prepare_byte_shard({dir.path()}, dir / "out.bin"); }, {dir.path(), "not a regular file"});
}

TEST(Prepare, NoInputOrOnlyEmptyInputIsAnError) {
  LocalDir dir;
  write_text(dir / "empty.txt", "");
  expect_input_error([&] { prepare_byte_shard({}, dir / "out.bin"); }, {"--text"});
  expect_input_error([&] { prepare_byte_shard({dir / "empty.txt"}, dir / "out.bin"); }, {dir / "empty.txt", "empty"});
  EXPECT_FALSE(std::filesystem::exists(dir / "out.bin"));
}

}  // namespace prepare_test
TEST(Prepare, NeverWritesOverAnInputADirectoryOrAnHdf5File) {
  LocalDir dir;
  write_text(dir / "a.txt", "some text");
  write_text(dir / "b.txt", "more text");
  std::filesystem::create_hard_link(dir / "b.txt", dir / "hard.txt");
  std::filesystem::create_directory(dir / "d.bin");
  write_bytes(dir / "ck.h5", {0x89, 'H', 'D', 'F', '\r', '\n', 0x1a, '\n'});  // an HDF5 signature is enough
  const std::vector<std::string> texts = {dir / "a.txt", dir / "b.txt"};
  for (const auto& [out, needle] : std::vector<std::pair<std::string, std::string>>{{dir / "b.txt", "the same file"},
                                                                                    {dir / "hard.txt", "the same file"},
                                                                                    {dir / "d.bin", "a directory"},
                                                                                    {dir / "ck.h5", "an HDF5 file"}}) {
    expect_input_error([&] { prepare_byte_shard(texts, out); }, {out, needle, "nothing was written"});
  }
  EXPECT_EQ(read_text(dir / "a.txt"), "some text");
  EXPECT_EQ(read_text(dir / "b.txt"), "more text");
  EXPECT_TRUE(std::filesystem::is_empty(dir / "d.bin"));
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir.path()), {}), 5) << "prepare left a file behind";
}

}  // namespace meshtrain::io::test
