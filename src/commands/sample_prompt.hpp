// The ids `meshtrain sample` feeds the model before it draws (share/docs/usage.md, Commands and
// Fine-tuning data): --prompt as the start of a document, as bytes, or as one user turn of a chat
// template; and, under a template, the id that ends the answer.
#pragma once

#include "io/chat_templates.hpp"
#include "io/tokenizer.hpp"

#include <optional>
#include <string>
#include <vector>

namespace meshtrain {

// sample --template NAME [--system TEXT].
struct ChatPrompt {
  io::ChatTemplate kind;
  std::optional<std::string> system;
};

struct SamplePrompt {
  std::vector<int> ids;     // what the model reads first
  std::optional<int> stop;  // under a template: its end-of-turn id, whose drawing ends the answer
};

// The prompt's ids. Under `chat` (which needs `tokenizer`): the system turn, when given, and the user
// turn `prompt`, rendered and encoded as `prepare --sft` renders and encodes a record's prompt
// (io::render_generation_prompt, io::encode_pieces: special tokens as their one ids, BOS only where
// the template puts it). Without: the tokenizer's document start (a tokenizer.json's BOS first, as in
// prepare's token shards), or the bytes for a byte-level model (no tokenizer). InputError for a
// --prompt or --system that is not UTF-8, a template token the tokenizer lacks (naming the token,
// the template and the file) and an id outside the model's `vocab`.
SamplePrompt sample_prompt(const std::string& prompt, const std::optional<ChatPrompt>& chat,
                           const std::optional<io::Tokenizer>& tokenizer, int vocab);

}  // namespace meshtrain
