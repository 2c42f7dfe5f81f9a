// Chat templates (share/docs/usage.md, Fine-tuning data): a record as a sequence of pieces — texts
// and special tokens, each marked whether it carries loss — and the pieces as token ids and a loss
// mask. Each text piece is encoded on its own (Tokenizer::encode_text: no BOS, EOS or
// post-processor, and a template's token is never read out of the text); each special token is
// inserted as its one id.
#pragma once

#include "io/sft_records.hpp"

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace meshtrain::io {

class Tokenizer;

enum class ChatTemplate { chatml, llama2, llama3, alpaca, plain };

// The template named `name`; InputError naming --template and the valid names otherwise.
ChatTemplate parse_chat_template(std::string_view name);
std::string_view template_name(ChatTemplate t);

struct Piece {
  bool special = false;  // a special token named by `text`; else text to encode
  std::string text;
  bool loss = false;  // whether its tokens carry loss (an assistant turn's content and its closing token)
};

// The special tokens of a template, resolved to ids of a tokenizer.
struct TemplateTokens {
  ChatTemplate kind;
  std::string eos;  // alpaca and plain: the EOS token's name (the first of eos_candidates the tokenizer has)
};

// The EOS tokens alpaca and plain look for, in this order.
inline constexpr std::string_view eos_candidates[] = {"</s>", "<|end_of_text|>", "<|endoftext|>"};

// Checks that every special token the template needs is one id of `tokenizer`
// (Tokenizer::special_token_id); InputError naming the token, the template and the tokenizer file.
TemplateTokens resolve_template_tokens(ChatTemplate t, const Tokenizer& tokenizer);

// The pieces of `record` under the template. InputError naming the record's file and line for a
// chat that alpaca or plain cannot hold (more than one user and one assistant turn).
std::vector<Piece> render_record(const TemplateTokens& tokens, const SftRecord& record);

// What a model reads before it answers, and the token that ends its answer (meshtrain sample --template).
struct GenerationPrompt {
  std::vector<Piece> pieces;  // the prompt, up to and including the template's opening of the answer
  std::string end_of_turn;    // the special token closing an answer: <|im_end|>, <|eot_id|>, or EOS
};

// The prompt of one exchange, `system` (when given) and `user`, exactly as render_record renders a
// record of these turns and an answer, up to the answer's first piece: chatml's "<|im_start|>"
// "assistant\n", llama3's assistant header and "\n\n", llama2's " [/INST] " and alpaca's
// "\n\n### Response:\n" end it; plain's is the prompt text alone. end_of_turn is the special token
// that closes the answer in that record (alpaca and plain: tokens.eos).
GenerationPrompt render_generation_prompt(const TemplateTokens& tokens, const std::optional<std::string>& system,
                                          const std::string& user);

// The pieces as ids and a loss mask of the same length. The first token's mask is 0; with
// `train_on_prompt` every other token's is 1.
void encode_pieces(const std::vector<Piece>& pieces, const Tokenizer& tokenizer, bool train_on_prompt,
                   std::vector<int>& ids, std::vector<std::uint8_t>& mask);

}  // namespace meshtrain::io
