// Incremental decoding, linear in the ids (io/decoded_text.hpp).
#include "io/decoded_text.hpp"

namespace meshtrain::io {
namespace {

constexpr std::string_view replacement_character = "\xEF\xBF\xBD";  // U+FFFD in UTF-8

}  // namespace

std::string DecodedText::decode_window() {
  decoded_ids_ += window_.size();
  return tokenizer_.decode(window_);
}

void DecodedText::add(int id) {
  window_.push_back(id);
  std::string text = decode_window();
  // A piece that is not a byte ends any byte run before it: all of the text is final then.
  const bool final = !tokenizer_.is_byte(id) || !text.ends_with(replacement_character);
  if (!final) {
    while (text.ends_with(replacement_character)) text.resize(text.size() - replacement_character.size());
  }
  hand_on_up_to(text);
  if (!final) return;
  // Start a new window behind `id`: what it decodes to alone is the text handed on of that window.
  // A piece of no text alone (a control piece, a space the first piece loses) keeps the window,
  // as the next piece would be first in a new one.
  const std::vector<int> context = {id};
  decoded_ids_ += 1;
  std::string context_text = tokenizer_.decode(context);
  if (context_text.empty()) return;
  window_ = context;
  handed_ = std::move(context_text);
}

void DecodedText::finish() { hand_on_up_to(decode_window()); }

void DecodedText::hand_on_up_to(const std::string& text) {
  // Decoded text only ever grows, but for a held-back tail: wait until it extends what was handed on.
  if (text.size() <= handed_.size() || text.compare(0, handed_.size(), handed_) != 0) return;
  out_(std::string_view(text).substr(handed_.size()));
  handed_ = text;
}

}  // namespace meshtrain::io
