// The ids sample starts from (commands/sample_prompt.hpp).
#include "commands/sample_prompt.hpp"

#include "core/errors.hpp"
#include "io/utf8.hpp"

#include <cstdint>

namespace meshtrain {
namespace {

SamplePrompt chat_prompt(const std::string& prompt, const ChatPrompt& chat, const io::Tokenizer& tokenizer) {
  if (chat.system) io::require_utf8_text("--system", *chat.system);
  const io::TemplateTokens tokens = io::resolve_template_tokens(chat.kind, tokenizer);
  const io::GenerationPrompt rendered = io::render_generation_prompt(tokens, chat.system, prompt);
  SamplePrompt out;
  std::vector<std::uint8_t> unused_mask;
  io::encode_pieces(rendered.pieces, tokenizer, /*train_on_prompt=*/false, out.ids, unused_mask);
  out.stop = tokenizer.special_token_id(rendered.end_of_turn);
  return out;
}

}  // namespace

SamplePrompt sample_prompt(const std::string& prompt, const std::optional<ChatPrompt>& chat,
                           const std::optional<io::Tokenizer>& tokenizer, int vocab) {
  SamplePrompt out;
  if (tokenizer) io::require_utf8_text("--prompt", prompt);
  if (chat) {
    out = chat_prompt(prompt, *chat, *tokenizer);
  } else if (tokenizer) {
    out.ids = tokenizer->encode_document_start(prompt);
  } else {
    for (unsigned char c : prompt) out.ids.push_back(c);
  }
  for (int t : out.ids) {
    if (t >= vocab) input_error("the prompt holds token {} but the model's vocab is {}", t, vocab);
  }
  // An end-of-turn id the model cannot draw would let every answer run to --tokens.
  if (out.stop && *out.stop >= vocab) {
    input_error("--template {} ends an answer with token {}, but the model's vocab is {}",
                io::template_name(chat->kind), *out.stop, vocab);
  }
  return out;
}

}  // namespace meshtrain
