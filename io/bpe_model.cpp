// Byte-level BPE: the byte map and the merges (io/bpe_model.hpp).
#include "io/bpe_model.hpp"

#include <stdexcept>

namespace meshtrain::io {
namespace {

std::string utf8_of(std::uint32_t code_point) {
  std::string s;
  if (code_point < 0x80) {
    s += char(code_point);
  } else if (code_point < 0x800) {
    s += char(0xC0 | (code_point >> 6));
    s += char(0x80 | (code_point & 0x3F));
  } else {
    s += char(0xE0 | (code_point >> 12));
    s += char(0x80 | ((code_point >> 6) & 0x3F));
    s += char(0x80 | (code_point & 0x3F));
  }
  return s;
}

bool printable_latin1(int b) { return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF); }

std::array<std::string, 256> make_byte_characters() {
  std::array<std::string, 256> characters;
  std::uint32_t next = 256;
  for (int b = 0; b < 256; ++b) characters[b] = utf8_of(printable_latin1(b) ? std::uint32_t(b) : next++);
  return characters;
}

// Every byte character is U+0021..U+0143: one or two UTF-8 bytes. Indexed by code point.
std::array<int, 0x144> make_character_bytes() {
  std::array<int, 0x144> bytes;
  bytes.fill(-1);
  std::uint32_t next = 256;
  for (int b = 0; b < 256; ++b) bytes[printable_latin1(b) ? std::size_t(b) : std::size_t(next++)] = b;
  return bytes;
}

}  // namespace

const std::array<std::string, 256>& byte_characters() {
  static const std::array<std::string, 256> characters = make_byte_characters();
  return characters;
}

std::optional<std::string> piece_bytes(std::string_view piece) {
  static const std::array<int, 0x144> character_bytes = make_character_bytes();
  std::string bytes;
  for (std::size_t at = 0; at < piece.size();) {
    const auto lead = static_cast<unsigned char>(piece[at]);
    std::uint32_t code_point = 0;
    if (lead < 0x80) {
      code_point = lead;
      at += 1;
    } else if ((lead & 0xE0) == 0xC0 && at + 1 < piece.size()) {
      code_point = (std::uint32_t(lead & 0x1F) << 6) | (static_cast<unsigned char>(piece[at + 1]) & 0x3F);
      at += 2;
    } else {
      return std::nullopt;  // three bytes or more: past U+07FF, no byte character
    }
    if (code_point >= character_bytes.size() || character_bytes[code_point] < 0) return std::nullopt;
    bytes += char(character_bytes[code_point]);
  }
  return bytes;
}

BpeModel::BpeModel(std::unordered_map<std::string, int> pieces,
                   const std::vector<std::pair<std::string, std::string>>& merges, bool ignore_merges)
    : pieces_(std::move(pieces)), ignore_merges_(ignore_merges) {
  for (int b = 0; b < 256; ++b) {
    const auto it = pieces_.find(std::string(1, char(b)));
    if (it == pieces_.end()) throw std::logic_error("BpeModel: a byte has no piece");
    byte_ids_[b] = it->second;
  }
  for (std::size_t rank = 0; rank < merges.size(); ++rank) {
    const auto& [left, right] = merges[rank];
    const int result = pieces_.at(left + right);
    // A pair named twice has the rank of its last naming, as in Hugging Face's tokenizers (Rust and JavaScript).
    merges_.insert_or_assign({pieces_.at(left), pieces_.at(right)}, Merge{int(rank), result});
  }
}

std::optional<int> BpeModel::find(std::string_view bytes) const {
  const auto it = pieces_.find(std::string(bytes));
  if (it == pieces_.end()) return std::nullopt;
  return it->second;
}

void BpeModel::encode_word(std::string_view word, std::vector<int>& out) const {
  if (word.empty()) return;
  if (ignore_merges_) {
    if (const auto whole = find(word)) {
      out.push_back(*whole);
      return;
    }
  }
  std::vector<int> symbols;
  symbols.reserve(word.size());
  for (unsigned char b : word) symbols.push_back(byte_ids_[b]);
  // Words are short (a pre-token): a scan per merge costs less than keeping a queue.
  while (symbols.size() > 1) {
    int best_rank = -1, best_result = 0;
    std::size_t best_at = 0;
    for (std::size_t i = 0; i + 1 < symbols.size(); ++i) {
      const auto it = merges_.find({symbols[i], symbols[i + 1]});
      if (it != merges_.end() && (best_rank < 0 || it->second.rank < best_rank)) {
        best_rank = it->second.rank;
        best_result = it->second.result;
        best_at = i;
      }
    }
    if (best_rank < 0) break;
    symbols[best_at] = best_result;
    symbols.erase(symbols.begin() + std::ptrdiff_t(best_at) + 1);
  }
  out.insert(out.end(), symbols.begin(), symbols.end());
}

}  // namespace meshtrain::io
