// The core of a byte-level BPE (the model of GPT-2's, Llama 3's and Qwen2's tokenizer.json; share/docs/usage.md,
// Tokenizers): the byte-to-character map its vocabulary is written in, and the merges applied by rank to one
// pre-tokenized word. Knows nothing of JSON or of how words are split (io/tokenizer_json.hpp does both).
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace meshtrain::io {

// GPT-2's map of the 256 bytes onto printable characters, as UTF-8: the printable bytes of Latin-1
// ('!'..'~', '¡'..'¬', '®'..'ÿ') stand for themselves, the others, in byte order, for U+0100 onwards
// (so ' ' is 'Ġ', U+0120, and '\n' is 'Ċ', U+010A).
const std::array<std::string, 256>& byte_characters();

// The bytes a vocabulary piece stands for: each character read back through byte_characters();
// nothing when a character is not one of them (an added token such as "<my token>", whose space
// is no byte character).
std::optional<std::string> piece_bytes(std::string_view piece);

// A BPE over bytes. Pieces and merges are byte strings (piece_bytes of the file's), each merge
// naming two pieces whose concatenation is a piece too (the caller checks, naming the file's keys).
class BpeModel {
 public:
  // `pieces`: bytes → id, holding every single byte; `merges`: in rank order, the first merged
  // first. `ignore_merges`: a word that is a piece as a whole is that piece, merges or not
  // (tokenizer.json's model.ignore_merges, which Llama 3's files set).
  BpeModel(std::unordered_map<std::string, int> pieces, const std::vector<std::pair<std::string, std::string>>& merges,
           bool ignore_merges);

  // Appends the ids of `word`: its bytes, then repeatedly the adjacent pair of lowest rank merged
  // (the leftmost of equal ones), until no adjacent pair has a merge.
  void encode_word(std::string_view word, std::vector<int>& out) const;

  // The id of the piece of these bytes, if there is one.
  std::optional<int> find(std::string_view bytes) const;

 private:
  struct PairHash {
    std::size_t operator()(std::pair<int, int> p) const {
      return std::hash<std::uint64_t>()((std::uint64_t(std::uint32_t(p.first)) << 32) | std::uint32_t(p.second));
    }
  };
  struct Merge {
    int rank;
    int result;
  };
  std::unordered_map<std::string, int> pieces_;
  std::unordered_map<std::pair<int, int>, Merge, PairHash> merges_;
  std::array<int, 256> byte_ids_{};
  bool ignore_merges_ = false;
};

}  // namespace meshtrain::io
