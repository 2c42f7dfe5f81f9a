// io/tokenizer.hpp and io/tokenizer_training.hpp: a BPE model trained on a small text round-trips
// any UTF-8, learns pieces longer than a byte, refuses text that is not UTF-8 (io/utf8.hpp, against
// hand-made cases), trains to the same file twice, refuses bad vocab
// sizes and files that are no model; the content hash against XXH64's published values; a subword
// shard decodes back to its texts.
#include "io/tokenizer.hpp"
#include "io/decoded_text.hpp"
#include "io/prepare.hpp"
#include "io/token_shard.hpp"
#include "io/tokenizer_training.hpp"
#include "io/utf8.hpp"
#include "io_test_util.hpp"

#include <gtest/gtest.h>

#include <filesystem>
#include <random>
#include <string>
#include <vector>

namespace meshtrain::io::test {
namespace tokenizer_test {

// Lines of English-like words, the same on every run: enough repeats for BPE to merge.
std::string training_text() {
  const std::vector<std::string> words = {"the", "quick",     "brown", "fox",   "jumps", "over",  "lazy",
                                          "dog", "meshtrain", "token", "shard", "model", "train", "sample"};
  std::string text;
  for (int line = 0; line < 400; ++line) {
    for (int w = 0; w < 8; ++w) text += (w ? " " : "") + words[(line * 7 + w * 3) % words.size()];
    text += "\n";
  }
  return text;
}

class TrainedModel : public ::testing::Test {
 protected:
  void SetUp() override {
    write_text(dir / "text.txt", training_text());
    trained = train_tokenizer({dir / "text.txt"}, vocab, dir / "tok.model");
  }
  static constexpr int vocab = 400;
  LocalDir dir;
  TrainedTokenizer trained;
};

TEST_F(TrainedModel, RoundTripsAnyUtf8AndLearnsWords) {
  const Tokenizer tok = Tokenizer::load(dir / "tok.model");
  EXPECT_EQ(tok.vocab_size(), vocab);
  // Leading, doubled and trailing spaces, tabs, newlines, a NUL, characters of 2, 3 and 4 bytes the
  // text never had (byte fallback), digits.
  const std::string odd = std::string("  the  dog\t\n\nj\xc3\xb6rd 2024 end", 25) + std::string(1, '\0') +
                          "\xe2\x82\xac \xf0\x9f\x99\x82 \xe6\x97\xa5\xe6\x9c\xac ";
  for (const std::string& text : {training_text(), odd, std::string(" "), std::string("\n")}) {
    const std::vector<int> ids = tok.encode(text);
    for (int id : ids) EXPECT_LT(id, tok.vocab_size());
    EXPECT_EQ(tok.decode(ids), text);
  }
  // "meshtrain" recurs in the text: learnt as fewer pieces than its 9 bytes.
  EXPECT_LT(tok.encode("meshtrain").size(), 5u);
}

TEST_F(TrainedModel, TheSameTextGivesTheSameFile) {
  train_tokenizer({dir / "text.txt"}, vocab, dir / "again.model");
  EXPECT_EQ(read_bytes(dir / "tok.model"), read_bytes(dir / "again.model"));
  EXPECT_EQ(Tokenizer::load(dir / "again.model").content_hash(), trained.hash);
  EXPECT_EQ(trained.lines, 400u);
}

TEST_F(TrainedModel, ASubwordShardDecodesToItsTextsInOrder) {
  write_text(dir / "second.txt", "lazy fox\n");
  const std::size_t n = prepare_subword_shard({dir / "second.txt", dir / "text.txt"}, dir / "tok.model", dir / "s.bin");
  const TokenStream stream = TokenStream::open(dir / "s.bin");
  ASSERT_EQ(stream.size(), n);
  std::vector<std::int32_t> ids(n);
  stream.copy(0, n, ids.data());
  const Tokenizer tok = Tokenizer::load(dir / "tok.model");
  EXPECT_EQ(tok.decode(std::vector<int>(ids.begin(), ids.end())), "lazy fox\n" + training_text());
  EXPECT_LT(n, training_text().size() / 2);  // subwords, not bytes
}

// Characters the model has no piece for come as several byte pieces: what is handed on while one is
// incomplete holds no U+FFFD, is always a prefix of the text, and is the whole text at the end.
TEST_F(TrainedModel, DecodedTextHandsOnOnlyFinishedCharacters) {
  const Tokenizer tok = Tokenizer::load(dir / "tok.model");
  const std::string text = "the \xe6\x97\xa5\xe6\x9c\xac dog \xf0\x9f\x99\x82\xc3\xa9";
  const std::vector<int> ids = tok.encode(text);
  ASSERT_GT(ids.size(), 12u);  // the 4 + 6 + 2 bytes of the CJK, emoji and é characters go by bytes
  std::string handed;
  int chunks = 0;
  DecodedText decoded(tok, [&](std::string_view chunk) {
    EXPECT_EQ(chunk.find("\xef\xbf\xbd"), std::string_view::npos) << "U+FFFD handed on";
    handed += chunk;
    ++chunks;
  });
  for (int id : ids) {
    decoded.add(id);
    EXPECT_EQ(text.compare(0, handed.size(), handed), 0) << "not a prefix: " << handed;
  }
  decoded.finish();
  EXPECT_EQ(handed, text);
  EXPECT_LT(chunks, int(ids.size()));  // byte pieces of one character were held back together
}

// An ill-formed sequence stays U+FFFD: handed on at the latest by finish().
TEST_F(TrainedModel, DecodedTextFinishHandsOnAHeldBackTail) {
  const Tokenizer tok = Tokenizer::load(dir / "tok.model");
  std::string handed;
  DecodedText decoded(tok, [&](std::string_view chunk) { handed += chunk; });
  decoded.add(tok.encode("dog")[0]);
  decoded.add(tok.encode("\xe6\x97\xa5")[0]);  // the first byte of three
  const std::string before_finish = handed;
  decoded.finish();
  EXPECT_EQ(handed, before_finish + "\xef\xbf\xbd");
  EXPECT_EQ(handed, tok.decode(std::vector<int>{tok.encode("dog")[0], tok.encode("\xe6\x97\xa5")[0]}));
}

// Any ids, byte pieces of ill-formed UTF-8 among them: at every step what was handed on is a prefix
// of the whole sequence's decoding (SentencePiece's, of all the ids at once), and after finish() it
// is that decoding, though each step decodes only a window.
TEST_F(TrainedModel, DecodedTextOfAnyIdsIsTheWholeDecoding) {
  const Tokenizer tok = Tokenizer::load(dir / "tok.model");
  std::mt19937 random(7);
  for (int trial = 0; trial < 50; ++trial) {
    std::vector<int> ids(1 + random() % 60);
    for (int& id : ids) {
      // Half byte pieces (ids 1 to 256: <0x00> to <0xFF>), so that characters span pieces, and fail to.
      id = random() % 2 ? 1 + int(random() % 256) : int(random() % vocab);
    }
    const std::string whole = tok.decode(ids);
    std::string handed;
    DecodedText decoded(tok, [&](std::string_view chunk) { handed += chunk; });
    for (int id : ids) {
      decoded.add(id);
      ASSERT_EQ(whole.compare(0, handed.size(), handed), 0) << "not a prefix of the whole: " << handed;
    }
    decoded.finish();
    EXPECT_EQ(handed, whole) << "trial " << trial;
  }
}

// 20 KB of text (words, and characters that go by byte pieces) decoded a token at a time does work
// linear in its ids: a few decodings of each. Decoding the whole list at every step, as sample once
// did, is quadratic (47 s for a 20 KB prompt).
TEST_F(TrainedModel, DecodedTextWorkIsLinearInTheIds) {
  const Tokenizer tok = Tokenizer::load(dir / "tok.model");
  std::string text;
  while (text.size() < 20000) text += training_text().substr(0, 300) + "\xe6\x97\xa5\xe6\x9c\xac \xf0\x9f\x99\x82\n";
  const std::vector<int> ids = tok.encode(text);
  ASSERT_GT(ids.size(), 4000u);
  std::string handed;
  DecodedText decoded(tok, [&](std::string_view chunk) { handed += chunk; });
  for (int id : ids) decoded.add(id);
  decoded.finish();
  EXPECT_EQ(handed, text);
  EXPECT_LE(decoded.decoded_ids(), 4 * ids.size()) << ids.size() << " ids";
}

TEST_F(TrainedModel, OutOfRangeIdsAreRefused) {
  const Tokenizer tok = Tokenizer::load(dir / "tok.model");
  expect_input_error([&] { tok.decode(std::vector<int>{vocab}); }, {std::to_string(vocab), "0 to 399"});
  expect_input_error([&] { tok.decode(std::vector<int>{-1}); }, {"-1"});
}

TEST(Tokenizer, FilesThatAreNoModelAreNamed) {
  LocalDir dir;
  write_text(dir / "text.txt", "just some text\n");
  expect_input_error([&] { Tokenizer::load(dir / "text.txt"); }, {dir / "text.txt", "not a SentencePiece model"});
  expect_input_error([&] { Tokenizer::load(dir / "missing.model"); }, {dir / "missing.model", "does not exist"});
  expect_input_error([&] { Tokenizer::load(dir.path()); }, {dir.path(), "not a regular file"});
}

TEST(Tokenizer, BadVocabSizesAndOutputsAreRefusedBeforeAnythingIsWritten) {
  LocalDir dir;
  write_text(dir / "text.txt", training_text());
  for (int vocab : {0, 257, 65537}) {
    expect_input_error([&] { train_tokenizer({dir / "text.txt"}, vocab, dir / "tok.model"); },
                       {"--vocab " + std::to_string(vocab), "258", "65536"});
  }
  // More pieces than the text offers: SentencePiece's bound is passed on.
  expect_input_error([&] { train_tokenizer({dir / "text.txt"}, 65536, dir / "tok.model"); },
                     {"--vocab 65536", "Vocabulary size too high"});
  expect_input_error([&] { train_tokenizer({dir / "text.txt"}, 400, dir / "text.txt"); }, {"--out", "the same file"});
  write_text(dir / "empty.txt", "\n\n");
  expect_input_error([&] { train_tokenizer({dir / "empty.txt"}, 400, dir / "tok.model"); }, {"empty.txt", "no text"});
  write_text(dir / "latin1.txt", "caf\xe9\n");
  expect_input_error([&] { train_tokenizer({dir / "latin1.txt"}, 400, dir / "tok.model"); },
                     {"latin1.txt", "not UTF-8", "0xe9", "offset 3"});
  EXPECT_FALSE(std::filesystem::exists(dir / "tok.model"));
  EXPECT_EQ(read_text(dir / "text.txt"), training_text());
}

TEST_F(TrainedModel, TextThatIsNotUtf8IsRefusedBeforeTheShardIsWritten) {
  write_text(dir / "bad.txt", "fine\n\xff");
  expect_input_error(
      [&] {
        prepare_subword_shard({dir / "text.txt", dir / "bad.txt"}, dir / "tok.model", dir / "s.bin");
      },
      {"bad.txt", "0xff", "offset 5"});
  EXPECT_FALSE(std::filesystem::exists(dir / "s.bin"));
}

// Hand-made sequences: where the first ill-formed byte is, by RFC 3629's table.
TEST(Utf8, FirstInvalidByteAgainstHandMadeCases) {
  EXPECT_EQ(first_invalid_utf8(""), std::nullopt);
  EXPECT_EQ(first_invalid_utf8("plain ascii\n"), std::nullopt);
  EXPECT_EQ(first_invalid_utf8("\xc3\xb6 \xe2\x82\xac \xf0\x9f\x99\x82 \xf4\x8f\xbf\xbf"),
            std::nullopt);                                       // up to U+10FFFF
  EXPECT_EQ(first_invalid_utf8("ab\x80"), 2u);                   // a lone continuation byte
  EXPECT_EQ(first_invalid_utf8("a\xc0\xaf"), 1u);                // overlong '/'
  EXPECT_EQ(first_invalid_utf8("a\xc1\xbf"), 1u);                // overlong
  EXPECT_EQ(first_invalid_utf8("\xe0\x80\xaf"), 0u);             // overlong in three bytes
  EXPECT_EQ(first_invalid_utf8("x\xed\xa0\x80"), 1u);            // a surrogate, U+D800
  EXPECT_EQ(first_invalid_utf8("\xed\x9f\xbf!"), std::nullopt);  // U+D7FF, just below the surrogates
  EXPECT_EQ(first_invalid_utf8("\xf4\x90\x80\x80"), 0u);         // U+110000
  EXPECT_EQ(first_invalid_utf8("\xf5\x80\x80\x80"), 0u);
  EXPECT_EQ(first_invalid_utf8("ok\xe2\x82"), 2u);    // cut short at the end
  EXPECT_EQ(first_invalid_utf8("\xe2\x28\xa1"), 0u);  // a second byte that continues nothing
  EXPECT_EQ(first_invalid_utf8("\xff"), 0u);
}

// XXH64 with seed 0 of "" and "a", as xxHash's own tests give them.
TEST(Tokenizer, ContentHashIsXxh64) {
  EXPECT_EQ(hash_hex(tokenizer_hash("")), "ef46db3751d8e999");
  EXPECT_EQ(hash_hex(tokenizer_hash("a")), "d24ec4f1a98c6e5b");
  EXPECT_EQ(hash_hex(0x1), "0000000000000001");
}

}  // namespace tokenizer_test
}  // namespace meshtrain::io::test
