// UTF-8 text for the SentencePiece tokenizers, which replace each byte of an ill-formed sequence
// with U+FFFD: text given to them is checked first, so that every text they take round-trips
// exactly (share/docs/usage.md, Tokenizers).
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

namespace meshtrain::io {

// The offset of the first byte that does not begin a well-formed UTF-8 sequence (RFC 3629: no
// overlong forms, no surrogates, nothing above U+10FFFF), or nothing when all of `text` is UTF-8.
std::optional<std::size_t> first_invalid_utf8(std::string_view text);

// InputError naming `what` ("text file 'a.txt'", "--prompt"), the offset and the byte unless
// `text` is UTF-8.
void require_utf8_text(std::string_view what, std::string_view text);

}  // namespace meshtrain::io

namespace meshtrain::io {

// `bytes` as UTF-8 text, each ill-formed part replaced by one U+FFFD: the longest start of a
// well-formed sequence, or else one byte (Unicode's "maximal subparts", as Rust's
// String::from_utf8_lossy and the WHATWG decoder replace them).
std::string lossy_utf8(std::string_view bytes);

}  // namespace meshtrain::io
