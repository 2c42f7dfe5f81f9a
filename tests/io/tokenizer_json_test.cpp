// io/bpe_model.hpp and io/tokenizer_json.hpp against hand-computed closed forms: a vocabulary of
// three merges, GPT-2's byte map at points its definition fixes, lossy UTF-8's replacements, a
// hand-written tokenizer.json's added and template tokens, and bad keys named in the errors.
#include "io/tokenizer_json.hpp"
#include "core/errors.hpp"
#include "io/bpe_model.hpp"
#include "io/decoded_text.hpp"
#include "io/file_kind.hpp"
#include "io/tokenizer.hpp"
#include "io/utf8.hpp"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>

namespace tokenizer_json_test {
namespace {

using namespace meshtrain::io;
using nlohmann::json;

// Bytes 0..255 have ids 0..255; "ab" 256, "bc" 257, "abc" 258; merges by rank: a+b, b+c, ab+c.
BpeModel three_merges() {
  std::unordered_map<std::string, int> pieces;
  for (int b = 0; b < 256; ++b) pieces[std::string(1, char(b))] = b;
  pieces["ab"] = 256;
  pieces["bc"] = 257;
  pieces["abc"] = 258;
  return BpeModel(pieces, {{"a", "b"}, {"b", "c"}, {"ab", "c"}}, false);
}

std::vector<int> encode(const BpeModel& model, std::string_view word) {
  std::vector<int> ids;
  model.encode_word(word, ids);
  return ids;
}

TEST(BpeModel, MergesByRankLeftmostFirst) {
  const BpeModel model = three_merges();
  // abc: a+b (rank 0) before b+c (rank 1), then ab+c.
  EXPECT_EQ(encode(model, "abc"), (std::vector<int>{258}));
  // bcab: a+b at 2 first, then b+c at 0; bc+ab has no merge.
  EXPECT_EQ(encode(model, "bcab"), (std::vector<int>{257, 256}));
  EXPECT_EQ(encode(model, "abab"), (std::vector<int>{256, 256}));
  // cabc: a+b, then ab+c; the c before stays a byte.
  EXPECT_EQ(encode(model, "cabc"), (std::vector<int>{'c', 258}));
  // bbc: b+c at 1; b stays.
  EXPECT_EQ(encode(model, "bbc"), (std::vector<int>{'b', 257}));
  EXPECT_EQ(encode(model, "aaa"), (std::vector<int>{'a', 'a', 'a'}));
  EXPECT_EQ(encode(model, std::string_view("\xff\x00", 2)), (std::vector<int>{255, 0}));
  EXPECT_TRUE(encode(model, "").empty());
}

TEST(BpeModel, IgnoreMergesTakesAWholeWordPiece) {
  std::unordered_map<std::string, int> pieces;
  for (int b = 0; b < 256; ++b) pieces[std::string(1, char(b))] = b;
  pieces["ab"] = 256;
  pieces["abc"] = 257;  // no merge makes it
  const BpeModel with(pieces, {{"a", "b"}}, true), without(pieces, {{"a", "b"}}, false);
  EXPECT_EQ(encode(with, "abc"), (std::vector<int>{257}));
  EXPECT_EQ(encode(without, "abc"), (std::vector<int>{256, 'c'}));
}

TEST(ByteCharacters, Gpt2sMap) {
  const auto& chars = byte_characters();
  EXPECT_EQ(chars['a'], "a");
  EXPECT_EQ(chars['!'], "!");
  EXPECT_EQ(chars[' '], "\xC4\xA0");   // Ġ U+0120: 0x00-0x20 are the first 33 unprintable bytes
  EXPECT_EQ(chars['\n'], "\xC4\x8A");  // Ċ U+010A
  EXPECT_EQ(chars[0x00], "\xC4\x80");  // Ā U+0100
  EXPECT_EQ(chars[0xAD], "\xC5\x83");  // Ń U+0143: the 68th unprintable byte (33 + 34 before it)
  EXPECT_EQ(chars[0xE9], "\xC3\xA9");  // é stands for itself
  EXPECT_EQ(piece_bytes("\xC4\xA0the"), std::string(" the"));
  EXPECT_EQ(piece_bytes("<my token>"), std::nullopt);  // ' ' is no byte character
  for (int b = 0; b < 256; ++b) EXPECT_EQ(piece_bytes(chars[std::size_t(b)]), std::string(1, char(b)));
}

TEST(LossyUtf8, MaximalSubpartsBecomeOneReplacementEach) {
  const std::string r = "\xEF\xBF\xBD";
  EXPECT_EQ(lossy_utf8("abc"), "abc");
  EXPECT_EQ(lossy_utf8("\xE4\xB8"), r);  // a cut 3-byte character: one
  EXPECT_EQ(lossy_utf8("\xE4\xB8x"), r + "x");
  EXPECT_EQ(lossy_utf8("\x80\x80"), r + r);          // lone continuations: one each
  EXPECT_EQ(lossy_utf8("\xC0\xAF"), r + r);          // overlong lead: one each
  EXPECT_EQ(lossy_utf8("\xED\xA0\x80"), r + r + r);  // a surrogate: ED then two continuations
  EXPECT_EQ(lossy_utf8("\xF0\x9F\x91"), r);          // a cut emoji: one
  EXPECT_EQ(lossy_utf8("\xF0\x9F\x91\x8D"), "\xF0\x9F\x91\x8D");
}

// A tokenizer.json over the three merges, written as the byte characters spell them, with a
// Llama-3-style Split, a BOS template and two added tokens.
json small_file() {
  json vocab = json::object();
  for (int b = 0; b < 256; ++b) vocab[byte_characters()[std::size_t(b)]] = b;
  vocab["ab"] = 256;
  vocab["bc"] = 257;
  vocab["abc"] = 258;
  vocab
      ["\xC4\xA0"
       "a"] = 259;  // " a"
  const auto added = [](const char* content, int id) {
    return json{{"id", id},        {"content", content},  {"single_word", false}, {"lstrip", false},
                {"rstrip", false}, {"normalized", false}, {"special", true}};
  };
  return json{{"version", "1.0"},
              {"truncation", nullptr},
              {"padding", nullptr},
              {"added_tokens", {added("<s>", 300), added("<e>", 301)}},
              {"normalizer", nullptr},
              {"pre_tokenizer",
               {{"type", "Sequence"},
                {"pretokenizers",
                 {{{"type", "Split"},
                   {"pattern", {{"Regex", " ?\\p{L}+|\\p{N}|\\s+"}}},
                   {"behavior", "Isolated"},
                   {"invert", false}},
                  {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}}}}}},
              {"post_processor",
               {{"type", "TemplateProcessing"},
                {"single",
                 {{{"SpecialToken", {{"id", "<s>"}, {"type_id", 0}}}},
                  {{"Sequence", {{"id", "A"}, {"type_id", 0}}}},
                  {{"SpecialToken", {{"id", "<e>"}, {"type_id", 0}}}}}},
                {"special_tokens",
                 {{"<s>", {{"id", "<s>"}, {"ids", {300}}, {"tokens", {"<s>"}}}},
                  {"<e>", {{"id", "<e>"}, {"ids", {301}}, {"tokens", {"<e>"}}}}}}}},
              {"decoder", {{"type", "ByteLevel"}}},
              {"model",
               {{"type", "BPE"},
                {"dropout", nullptr},
                {"unk_token", nullptr},
                {"byte_fallback", false},
                {"vocab", vocab},
                {"merges", {"a b", json::array({"b", "c"}), "ab c", "\xC4\xA0 a"}}}}};
}

TEST(TokenizerJson, EncodesThroughAddedTokensSplitAndMerges) {
  const TokenizerJson tokenizer = TokenizerJson::parse("small.json", small_file().dump());
  EXPECT_EQ(tokenizer.vocab_size(), 302);
  // "abc" one word; " a" a word (Ġ + a merged); "12" two digits; "<e>" an added token, never split.
  EXPECT_EQ(tokenizer.encode("abc a12<e>bcab"), (std::vector<int>{258, 259, '1', '2', 301, 257, 256}));
  EXPECT_EQ(tokenizer.prefix(), (std::vector<int>{300}));
  EXPECT_EQ(tokenizer.suffix(), (std::vector<int>{301}));
  for (const std::string text : {"abc a12<e>bcab", "caf\xC3\xA9 \xE6\x97\xA5\xE6\x9C\xAC  \n\n x", "", "<s><s>"}) {
    EXPECT_EQ(tokenizer.decode(tokenizer.encode(text)), text);
  }
  // é's two bytes: each a piece, neither UTF-8 alone.
  const std::vector<int> e_acute = tokenizer.encode("\xC3\xA9");
  ASSERT_EQ(e_acute, (std::vector<int>{0xC3, 0xA9}));
  EXPECT_TRUE(tokenizer.is_partial_character(0xC3));
  EXPECT_FALSE(tokenizer.is_partial_character(258));
  EXPECT_EQ(tokenizer.decode(std::vector<int>{0xC3}), "\xEF\xBF\xBD");
  EXPECT_THROW(tokenizer.decode(std::vector<int>{302}), meshtrain::InputError);
}

TEST(TokenizerJson, TheTokenizerFacadeAddsTheTemplateToDocuments) {
  const auto path = std::filesystem::path(::testing::TempDir()) / "facade_tokenizer.json";
  std::ofstream(path) << small_file().dump(1);
  const Tokenizer tokenizer = Tokenizer::load(path.string());
  EXPECT_EQ(tokenizer.encode("ab"), (std::vector<int>{256}));
  EXPECT_EQ(tokenizer.encode_document("ab"), (std::vector<int>{300, 256, 301}));
  EXPECT_EQ(tokenizer.encode_document_start("ab"), (std::vector<int>{300, 256}));
  EXPECT_EQ(tokenizer.vocab_size(), 302);
  std::ifstream in(path, std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(tokenizer.content_hash(), tokenizer_hash(bytes));
  EXPECT_TRUE(is_tokenizer_json(bytes));
  EXPECT_FALSE(is_sentencepiece_model(bytes));
}

TEST(TokenizerJson, StreamedDecodingEqualsTheWholeAndFileKindTellsIt) {
  const auto path = std::filesystem::path(::testing::TempDir()) / "stream_tokenizer.json";
  std::ofstream(path) << small_file().dump();
  const Tokenizer tokenizer = Tokenizer::load(path.string());
  // Byte pieces that split characters (é, CJK, an emoji and its modifier), added tokens, merges.
  const std::string text = "ab caf\xC3\xA9<s>\xE6\x97\xA5\xF0\x9F\x91\x8D\xF0\x9F\x8F\xBD abc<e> a";
  std::vector<int> ids = tokenizer.encode(text);
  ids.push_back(0xF0);  // a character that never completes: held back, then handed on by finish()
  std::string streamed;
  DecodedText decoded(tokenizer, [&](std::string_view piece) {
    // Each piece handed on is final: the streamed text stays a prefix of the whole.
    streamed += piece;
    EXPECT_EQ(tokenizer.decode(ids).compare(0, streamed.size(), streamed), 0) << streamed;
  });
  for (int id : ids) decoded.add(id);
  decoded.finish();
  EXPECT_EQ(streamed, tokenizer.decode(ids));
  EXPECT_EQ(streamed, text + "\xEF\xBF\xBD");
  EXPECT_EQ(file_kind(path.string()), FileKind::tokenizer_json);
}

void expect_refused(const json& file, std::initializer_list<std::string> needles) {
  try {
    TokenizerJson::parse("bad.json", file.dump());
    ADD_FAILURE() << "accepted: " << file.dump().substr(0, 200);
  } catch (const meshtrain::InputError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("bad.json"), std::string::npos) << what;
    for (const std::string& needle : needles) EXPECT_NE(what.find(needle), std::string::npos) << needle << ": " << what;
  }
}

TEST(TokenizerJson, BadKeysAreNamed) {
  json f = small_file();
  f["model"]["merges"][2] = "ab zz";
  expect_refused(f, {"model.merges[2]", "'zz'"});
  f = small_file();
  f["model"]["merges"][1] = json::array({"b"});
  expect_refused(f, {"model.merges[1]"});
  f = small_file();
  f["model"]["type"] = "Unigram";
  expect_refused(f, {"model.type", "Unigram"});
  f = small_file();
  f["model"]["vocab"]["xy"] = 5;
  expect_refused(f, {"model.vocab", "id 5"});
  f = small_file();
  f["pre_tokenizer"]["pretokenizers"][0]["behavior"] = "MergedWithNext";
  expect_refused(f, {"pre_tokenizer.pretokenizers[0].behavior", "MergedWithNext"});
  f = small_file();
  f["pre_tokenizer"]["pretokenizers"].erase(1);
  expect_refused(f, {"pre_tokenizer", "ByteLevel"});
  f = small_file();
  f["added_tokens"][1]["lstrip"] = true;
  expect_refused(f, {"added_tokens[1].lstrip"});
  // An added token on a piece's id with another text (byte 65 is "A"), or on another added token's id: the
  // id would decode as two texts. On a piece's id with that piece's text it is one token (GPT-2's <|endoftext|>).
  f = small_file();
  f["added_tokens"][1]["id"] = 65;
  expect_refused(f, {"added_tokens", "'<e>' has id 65", "piece 'A'"});
  f = small_file();
  f["added_tokens"][1]["id"] = 300;
  expect_refused(f, {"added_tokens[1].id", "300 is also '<s>''s id"});
  f = small_file();
  f["added_tokens"][1]["content"] = "abc";
  f["added_tokens"][1]["id"] = 258;
  f["post_processor"]["single"].erase(2);
  EXPECT_EQ(TokenizerJson::parse("ok.json", f.dump()).decode(std::vector<int>{258}), "abc");
  f = small_file();
  f["post_processor"]["special_tokens"]["<s>"]["ids"][0] = 5000;
  expect_refused(f, {"post_processor.special_tokens[\"<s>\"].ids[0]", "5000"});
  f = small_file();
  f["decoder"]["type"] = "WordPiece";
  expect_refused(f, {"decoder.type", "WordPiece"});
  f = small_file();
  f["truncation"] = json{{"max_length", 512}};
  expect_refused(f, {"truncation"});
  expect_refused(json::array(), {"top level"});
  // Truncated; nested 100,000 deep in a key meshtrain never reads; a number beyond a double's range.
  const std::string text = small_file().dump();
  const std::string beside = text.substr(0, text.size() - 1) + ", \"extra\": ";
  const std::vector<std::pair<std::string, std::string>> broken = {
      {"{\"model\": ", "unexpected end of input"},
      {beside + std::string(100000, '[') + std::string(100000, ']') + "}", "nest deeper than 64 levels"},
      {beside + "1e999999}", "number overflow parsing '1e999999'"},
  };
  for (const auto& [bytes, reason] : broken) {
    try {
      TokenizerJson::parse("bad.json", bytes);
      ADD_FAILURE() << "accepted: " << reason;
    } catch (const meshtrain::InputError& e) {
      const std::string message = e.what();
      for (const std::string& needle : {std::string("bad.json"), std::string("not valid JSON"), reason}) {
        EXPECT_NE(message.find(needle), std::string::npos) << message;
      }
    }
  }
}

}  // namespace
}  // namespace tokenizer_json_test
