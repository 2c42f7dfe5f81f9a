// UTF-8 validation (io/utf8.hpp).
#include "io/utf8.hpp"

#include "core/errors.hpp"

namespace meshtrain::io {
namespace {

bool continuation(unsigned char b) { return (b & 0xC0) == 0x80; }

// The length of the well-formed sequence at text[at], or 0. The ranges of the second byte are
// RFC 3629's table: they exclude overlong forms (E0, F0), surrogates (ED) and code points past
// U+10FFFF (F4).
std::size_t sequence_length(std::string_view text, std::size_t at) {
  const auto byte = [&](std::size_t k) { return static_cast<unsigned char>(text[at + k]); };
  const unsigned char lead = byte(0);
  if (lead < 0x80) return 1;
  std::size_t length = 0;
  unsigned char low = 0x80, high = 0xBF;
  if (lead >= 0xC2 && lead <= 0xDF) {
    length = 2;
  } else if (lead >= 0xE0 && lead <= 0xEF) {
    length = 3;
    if (lead == 0xE0) low = 0xA0;
    if (lead == 0xED) high = 0x9F;
  } else if (lead >= 0xF0 && lead <= 0xF4) {
    length = 4;
    if (lead == 0xF0) low = 0x90;
    if (lead == 0xF4) high = 0x8F;
  } else {
    return 0;
  }
  if (at + length > text.size() || byte(1) < low || byte(1) > high) return 0;
  for (std::size_t k = 2; k < length; ++k) {
    if (!continuation(byte(k))) return 0;
  }
  return length;
}

// The length of the longest start of a well-formed sequence at text[at] (1 when the lead byte
// begins none): what one U+FFFD replaces where sequence_length is 0.
std::size_t maximal_subpart(std::string_view text, std::size_t at) {
  const auto lead = static_cast<unsigned char>(text[at]);
  std::size_t length = 0;
  unsigned char low = 0x80, high = 0xBF;
  if (lead >= 0xC2 && lead <= 0xDF) {
    length = 2;
  } else if (lead >= 0xE0 && lead <= 0xEF) {
    length = 3;
    if (lead == 0xE0) low = 0xA0;
    if (lead == 0xED) high = 0x9F;
  } else if (lead >= 0xF0 && lead <= 0xF4) {
    length = 4;
    if (lead == 0xF0) low = 0x90;
    if (lead == 0xF4) high = 0x8F;
  } else {
    return 1;
  }
  std::size_t k = 1;
  for (; k < length && at + k < text.size(); ++k) {
    const auto b = static_cast<unsigned char>(text[at + k]);
    if (k == 1 ? (b < low || b > high) : !continuation(b)) break;
  }
  return k;
}

}  // namespace

std::optional<std::size_t> first_invalid_utf8(std::string_view text) {
  for (std::size_t at = 0; at < text.size();) {
    const std::size_t length = sequence_length(text, at);
    if (length == 0) return at;
    at += length;
  }
  return std::nullopt;
}

void require_utf8_text(std::string_view what, std::string_view text) {
  if (const auto at = first_invalid_utf8(text)) {
    input_error(
        "{} is not UTF-8: byte 0x{:02x} at offset {} begins no valid UTF-8 character; SentencePiece "
        "tokenizers take UTF-8 text (convert it, e.g. with iconv, or prepare it byte-level without --tokenizer)",
        what, static_cast<unsigned char>(text[*at]), *at);
  }
}

std::string lossy_utf8(std::string_view bytes) {
  std::string text;
  text.reserve(bytes.size());
  for (std::size_t at = 0; at < bytes.size();) {
    const std::size_t length = sequence_length(bytes, at);
    if (length > 0) {
      text.append(bytes.substr(at, length));
      at += length;
    } else {
      text.append("\xEF\xBF\xBD");  // U+FFFD
      at += maximal_subpart(bytes, at);
    }
  }
  return text;
}

}  // namespace meshtrain::io
