// UTF-8 validation (io/utf8.hpp).
#include "io/utf8.hpp"

#include "core/errors.hpp"

namespace meshtrain::io {
namespace {

bool continuation(unsigned char b) { return (b & 0xC0) == 0x80; }

// What a lead byte begins: the sequence's length (0: no sequence) and the range of its second byte.
// The ranges are RFC 3629's table: they exclude overlong forms (E0, F0), surrogates (ED) and code
// points past U+10FFFF (F4).
struct LeadForm {
  std::size_t length = 0;
  unsigned char low = 0x80, high = 0xBF;
};

LeadForm lead_form(unsigned char lead) {
  LeadForm f;
  if (lead >= 0xC2 && lead <= 0xDF) {
    f.length = 2;
  } else if (lead >= 0xE0 && lead <= 0xEF) {
    f.length = 3;
    if (lead == 0xE0) f.low = 0xA0;
    if (lead == 0xED) f.high = 0x9F;
  } else if (lead >= 0xF0 && lead <= 0xF4) {
    f.length = 4;
    if (lead == 0xF0) f.low = 0x90;
    if (lead == 0xF4) f.high = 0x8F;
  }
  return f;
}

// How many bytes from text[at] agree with the sequence its lead byte f begins: f.length where the
// sequence is whole and well formed, fewer where a byte breaks it or the text ends.
std::size_t well_formed_prefix(std::string_view text, std::size_t at, const LeadForm& f) {
  std::size_t k = 1;
  for (; k < f.length && at + k < text.size(); ++k) {
    const auto b = static_cast<unsigned char>(text[at + k]);
    if (k == 1 ? (b < f.low || b > f.high) : !continuation(b)) break;
  }
  return k;
}

// The length of the well-formed sequence at text[at], or 0.
std::size_t sequence_length(std::string_view text, std::size_t at) {
  const auto lead = static_cast<unsigned char>(text[at]);
  if (lead < 0x80) return 1;
  const LeadForm f = lead_form(lead);
  if (f.length == 0) return 0;
  return well_formed_prefix(text, at, f) == f.length ? f.length : 0;
}

// The length of the longest start of a well-formed sequence at text[at] (1 when the lead byte
// begins none): what one U+FFFD replaces where sequence_length is 0.
std::size_t maximal_subpart(std::string_view text, std::size_t at) {
  const LeadForm f = lead_form(static_cast<unsigned char>(text[at]));
  return f.length == 0 ? 1 : well_formed_prefix(text, at, f);
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
