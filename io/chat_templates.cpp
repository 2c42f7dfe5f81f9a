// The five templates written out as pieces (share/docs/usage.md, Fine-tuning data, gives each with
// its source: Qwen's ChatML, Meta's Llama 2 and Llama 3 chat formats, Stanford Alpaca's prompt).
#include "io/chat_templates.hpp"

#include "core/errors.hpp"
#include "io/tokenizer.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <optional>

namespace meshtrain::io {
namespace {

constexpr ChatTemplate all_templates[] = {ChatTemplate::chatml, ChatTemplate::llama2, ChatTemplate::llama3,
                                          ChatTemplate::alpaca, ChatTemplate::plain};

// Appends pieces; an empty text is left out (it has no tokens).
struct Pieces {
  std::vector<Piece> list;
  void text(std::string t, bool loss = false) {
    if (!t.empty()) list.push_back({false, std::move(t), loss});
  }
  void special(std::string name, bool loss = false) { list.push_back({true, std::move(name), loss}); }
};

std::string_view role_text(Role role) {
  switch (role) {
    case Role::system: return "system";
    case Role::user: return "user";
    case Role::assistant: break;
  }
  return "assistant";
}

// An instruction record as a chat: one user turn (the instruction, then "\n\n" and the input when
// there is one) and one assistant turn (the output).
std::vector<Message> as_chat(const SftRecord& r) {
  if (r.chat) return r.messages;
  return {{Role::user, r.input.empty() ? r.instruction : r.instruction + "\n\n" + r.input},
          {Role::assistant, r.output}};
}

void render_chatml(const SftRecord& r, Pieces& p) {
  for (const Message& m : as_chat(r)) {
    const bool loss = m.role == Role::assistant;
    p.special("<|im_start|>");
    p.text(std::string(role_text(m.role)) + "\n");
    p.text(m.content, loss);
    p.special("<|im_end|>", loss);
    p.text("\n");
  }
}

void render_llama3(const SftRecord& r, Pieces& p) {
  p.special("<|begin_of_text|>");
  for (const Message& m : as_chat(r)) {
    const bool loss = m.role == Role::assistant;
    p.special("<|start_header_id|>");
    p.text(std::string(role_text(m.role)));
    p.special("<|end_header_id|>");
    p.text("\n\n");
    p.text(m.content, loss);
    p.special("<|eot_id|>", loss);
  }
}

// Meta's chat_completion: each user/assistant pair is <s>[INST] user [/INST] answer </s>, the system
// message folded into the first user turn between <<SYS>> lines.
void render_llama2(const SftRecord& r, Pieces& p) {
  const std::vector<Message> messages = as_chat(r);
  std::size_t i = 0;
  const Message* system = nullptr;
  if (messages[0].role == Role::system) system = &messages[i++];
  for (; i + 1 < messages.size(); i += 2) {
    p.special("<s>");
    if (system) {
      p.text("[INST] <<SYS>>\n");
      p.text(system->content);
      p.text("\n<</SYS>>\n\n");
      system = nullptr;
    } else {
      p.text("[INST] ");
    }
    p.text(messages[i].content);
    p.text(" [/INST] ");
    p.text(messages[i + 1].content, true);
    p.text(" ");
    p.special("</s>", true);
  }
}

// Alpaca and plain take one exchange: (system,) user, assistant. An instruction record is one.
void require_one_exchange(const SftRecord& r, ChatTemplate t) {
  if (!r.chat) return;
  const std::size_t system = r.messages[0].role == Role::system ? 1 : 0;
  if (r.messages.size() - system != 2) {
    input_error(
        "{}: messages holds {} user and assistant turns, but template {} takes one user turn and one assistant turn "
        "(after an optional system message); use chatml, llama2 or llama3 for conversations",
        r.where, r.messages.size() - system, template_name(t));
  }
}

constexpr std::string_view alpaca_with_input =
    "Below is an instruction that describes a task, paired with an input that provides further context. Write a "
    "response that appropriately completes the request.";
constexpr std::string_view alpaca_without_input =
    "Below is an instruction that describes a task. Write a response that appropriately completes the request.";

void render_alpaca(const SftRecord& r, const std::string& eos, Pieces& p) {
  std::string instruction = r.instruction, input = r.input, output = r.output;
  std::optional<std::string> system;
  if (r.chat) {
    const std::size_t s = r.messages[0].role == Role::system ? 1 : 0;
    if (s) system = r.messages[0].content;
    instruction = r.messages[s].content;
    input.clear();
    output = r.messages[s + 1].content;
  }
  // A system message takes the place of the preamble.
  if (system) {
    p.text(*system);
    p.text("\n\n### Instruction:\n");
  } else {
    p.text(fmt::format("{}\n\n### Instruction:\n", input.empty() ? alpaca_without_input : alpaca_with_input));
  }
  p.text(instruction);
  if (!input.empty()) {
    p.text("\n\n### Input:\n");
    p.text(input);
  }
  p.text("\n\n### Response:\n");
  p.text(output, true);
  p.special(eos, true);
}

// The prompt (instruction and input, or system and user, joined by "\n\n"), the response, EOS.
void render_plain(const SftRecord& r, const std::string& eos, Pieces& p) {
  std::string prompt = r.input.empty() ? r.instruction : r.instruction + "\n\n" + r.input, output = r.output;
  if (r.chat) {
    const std::size_t s = r.messages[0].role == Role::system ? 1 : 0;
    prompt = s ? r.messages[0].content + "\n\n" + r.messages[1].content : r.messages[0].content;
    output = r.messages[s + 1].content;
  }
  p.text(prompt);
  p.text(output, true);
  p.special(eos, true);
}

std::vector<std::string> required_tokens(ChatTemplate t) {
  switch (t) {
    case ChatTemplate::chatml: return {"<|im_start|>", "<|im_end|>"};
    case ChatTemplate::llama2: return {"<s>", "</s>"};
    case ChatTemplate::llama3: return {"<|begin_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"};
    case ChatTemplate::alpaca:
    case ChatTemplate::plain: break;
  }
  return {};
}

std::string token_help(const Tokenizer& tokenizer) {
  return tokenizer.is_json() ? "a special added token (added_tokens, \"special\": true)"
                             : "a control piece (meshtrain tokenizer train --special TOKEN)";
}

}  // namespace

ChatTemplate parse_chat_template(std::string_view name) {
  for (ChatTemplate t : all_templates) {
    if (template_name(t) == name) return t;
  }
  input_error("--template '{}' is not a chat template; valid are chatml, llama2, llama3, alpaca and plain", name);
}

std::string_view template_name(ChatTemplate t) {
  switch (t) {
    case ChatTemplate::chatml: return "chatml";
    case ChatTemplate::llama2: return "llama2";
    case ChatTemplate::llama3: return "llama3";
    case ChatTemplate::alpaca: return "alpaca";
    case ChatTemplate::plain: break;
  }
  return "plain";
}

TemplateTokens resolve_template_tokens(ChatTemplate t, const Tokenizer& tokenizer) {
  TemplateTokens tokens{t, {}};
  for (const std::string& token : required_tokens(t)) {
    if (!tokenizer.special_token_id(token)) {
      input_error("template {} needs {} as one token, but tokenizer '{}' has no such token: it must be {}",
                  template_name(t), token, tokenizer.path(), token_help(tokenizer));
    }
  }
  if (t == ChatTemplate::alpaca || t == ChatTemplate::plain) {
    for (std::string_view eos : eos_candidates) {
      if (tokenizer.special_token_id(eos)) {
        tokens.eos = eos;
        return tokens;
      }
    }
    input_error("template {} ends each record with an EOS token, but tokenizer '{}' has none of {}: one must be {}",
                template_name(t), tokenizer.path(), fmt::join(eos_candidates, ", "), token_help(tokenizer));
  }
  return tokens;
}

std::vector<Piece> render_record(const TemplateTokens& tokens, const SftRecord& record) {
  Pieces p;
  switch (tokens.kind) {
    case ChatTemplate::chatml: render_chatml(record, p); break;
    case ChatTemplate::llama2: render_llama2(record, p); break;
    case ChatTemplate::llama3: render_llama3(record, p); break;
    case ChatTemplate::alpaca:
      require_one_exchange(record, tokens.kind);
      render_alpaca(record, tokens.eos, p);
      break;
    case ChatTemplate::plain:
      require_one_exchange(record, tokens.kind);
      render_plain(record, tokens.eos, p);
      break;
  }
  return p.list;
}

GenerationPrompt render_generation_prompt(const TemplateTokens& tokens, const std::optional<std::string>& system,
                                          const std::string& user) {
  // The record's own rendering, cut where the answer starts, so that each template's text lives in its
  // render_ function alone. The answer is any non-empty text: its pieces are dropped, never encoded.
  SftRecord record{"--prompt", true, {}, {}, {}, {}};
  if (system) record.messages.push_back({Role::system, *system});
  record.messages.push_back({Role::user, user});
  record.messages.push_back({Role::assistant, "answer"});
  std::vector<Piece> pieces = render_record(tokens, record);
  // The answer's content is the record's first piece that carries loss; the first special piece
  // that carries loss after it closes the answer.
  const auto answer = std::find_if(pieces.begin(), pieces.end(), [](const Piece& p) { return p.loss; });
  const auto close = std::find_if(answer, pieces.end(), [](const Piece& p) { return p.loss && p.special; });
  return {{pieces.begin(), answer}, close->text};
}

void encode_pieces(const std::vector<Piece>& pieces, const Tokenizer& tokenizer, bool train_on_prompt,
                   std::vector<int>& ids, std::vector<std::uint8_t>& mask) {
  ids.clear();
  mask.clear();
  for (const Piece& piece : pieces) {
    const std::vector<int> piece_ids =
        piece.special ? std::vector<int>{*tokenizer.special_token_id(piece.text)} : tokenizer.encode_text(piece.text);
    ids.insert(ids.end(), piece_ids.begin(), piece_ids.end());
    mask.insert(mask.end(), piece_ids.size(), piece.loss || train_on_prompt ? 1 : 0);
  }
  // Nothing in the record predicts its first token.
  if (!mask.empty()) mask[0] = 0;
}

}  // namespace meshtrain::io
