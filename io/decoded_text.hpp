// The text of a growing list of token ids, handed on as it grows (`meshtrain sample`).
#pragma once

#include "io/tokenizer.hpp"

#include <cstddef>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace meshtrain::io {

// A byte piece may end inside a UTF-8 character, which decodes as U+FFFD until the character's
// last byte comes: such a tail is held back, so that what has been handed to `out` is always a
// prefix of the decoded whole, and the whole once finish() has been called.
//
// The work is linear in the ids: each add() decodes only a window, the ids since the text last
// became final (every character complete, or a piece that is not a byte ending any byte run) behind
// one context id, the last id of final text, whose own text was handed on already. SentencePiece's
// decoding is a concatenation but for two things the window keeps exact: a run of byte pieces is
// decoded as one UTF-8 string (the window starts at a character boundary, and a context byte is one
// that completed a character), and the first piece of a text may lose its leading space (the
// context, whose text is not empty, is that first piece, in the window as in its own decoding). A
// run of byte pieces that never completes a character keeps the window growing: quadratic in that
// run alone.
class DecodedText {
 public:
  DecodedText(const Tokenizer& tokenizer, std::function<void(std::string_view)> out)
      : tokenizer_(tokenizer), out_(std::move(out)) {}
  // Appends `id` and hands on what of the text has become final.
  void add(int id);
  // Hands on the rest of the text, a held-back tail included.
  void finish();
  // The ids decoded so far, counted once per decoding: the work done (a test checks it is linear).
  std::size_t decoded_ids() const { return decoded_ids_; }

 private:
  std::string decode_window();
  void hand_on_up_to(const std::string& text);
  const Tokenizer& tokenizer_;
  std::function<void(std::string_view)> out_;
  std::vector<int> window_;  // the context id (where there is one), then the ids whose text may still change
  std::string handed_;       // what of the window's text has been handed on
  std::size_t decoded_ids_ = 0;
};

}  // namespace meshtrain::io
