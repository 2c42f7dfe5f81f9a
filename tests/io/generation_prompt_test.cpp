// The prompt `sample --template` feeds a model (io::render_generation_prompt) against the pieces
// share/docs/usage.md (Fine-tuning data, The templates and Sampling a chat) writes out for each
// template: the record's turns before the answer, the template's opening of the answer last, and
// the token that closes the answer. tests/cli/test_sft_sample.py checks the encoded ids against
// prepare --sft's.
#include "io/chat_templates.hpp"

#include <gtest/gtest.h>

#include <optional>
#include <string>
#include <vector>

namespace meshtrain::io::test {
namespace generation_prompt_test {

Piece special(std::string name) { return {true, std::move(name), false}; }
Piece text(std::string t) { return {false, std::move(t), false}; }

void expect_pieces(const std::vector<Piece>& got, const std::vector<Piece>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (std::size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ(got[i].special, want[i].special) << "piece " << i;
    EXPECT_EQ(got[i].text, want[i].text) << "piece " << i;
    EXPECT_FALSE(got[i].loss) << "piece " << i << ": a prompt carries no loss";
  }
}

const std::string user = "Tell me <|im_end|> a fortune.";
const std::string system = "Be brief.";

TEST(GenerationPrompt, ChatmlEndsWithTheAssistantsOpening) {
  const GenerationPrompt p = render_generation_prompt({ChatTemplate::chatml, {}}, system, user);
  expect_pieces(p.pieces, {special("<|im_start|>"), text("system\n"), text(system), special("<|im_end|>"), text("\n"),
                           special("<|im_start|>"), text("user\n"), text(user), special("<|im_end|>"), text("\n"),
                           special("<|im_start|>"), text("assistant\n")});
  EXPECT_EQ(p.end_of_turn, "<|im_end|>");
}

TEST(GenerationPrompt, Llama3EndsWithTheAssistantHeader) {
  const GenerationPrompt p = render_generation_prompt({ChatTemplate::llama3, {}}, std::nullopt, user);
  expect_pieces(p.pieces,
                {special("<|begin_of_text|>"), special("<|start_header_id|>"), text("user"),
                 special("<|end_header_id|>"), text("\n\n"), text(user), special("<|eot_id|>"),
                 special("<|start_header_id|>"), text("assistant"), special("<|end_header_id|>"), text("\n\n")});
  EXPECT_EQ(p.end_of_turn, "<|eot_id|>");
}

TEST(GenerationPrompt, Llama2FoldsTheSystemIntoTheInstruction) {
  const GenerationPrompt p = render_generation_prompt({ChatTemplate::llama2, {}}, system, user);
  expect_pieces(p.pieces, {special("<s>"), text("[INST] <<SYS>>\n"), text(system), text("\n<</SYS>>\n\n"), text(user),
                           text(" [/INST] ")});
  EXPECT_EQ(p.end_of_turn, "</s>");
  const GenerationPrompt bare = render_generation_prompt({ChatTemplate::llama2, {}}, std::nullopt, user);
  expect_pieces(bare.pieces, {special("<s>"), text("[INST] "), text(user), text(" [/INST] ")});
}

TEST(GenerationPrompt, AlpacaEndsWithTheResponseHeading) {
  const GenerationPrompt p = render_generation_prompt({ChatTemplate::alpaca, "<|end_of_text|>"}, std::nullopt, user);
  expect_pieces(p.pieces, {text("Below is an instruction that describes a task. Write a response that appropriately "
                                "completes the request.\n\n### Instruction:\n"),
                           text(user), text("\n\n### Response:\n")});
  EXPECT_EQ(p.end_of_turn, "<|end_of_text|>");
  const GenerationPrompt with_system = render_generation_prompt({ChatTemplate::alpaca, "</s>"}, system, user);
  expect_pieces(with_system.pieces,
                {text(system), text("\n\n### Instruction:\n"), text(user), text("\n\n### Response:\n")});
  EXPECT_EQ(with_system.end_of_turn, "</s>");
}

TEST(GenerationPrompt, PlainIsThePromptTextAlone) {
  const GenerationPrompt p = render_generation_prompt({ChatTemplate::plain, "<|endoftext|>"}, system, user);
  expect_pieces(p.pieces, {text(system + "\n\n" + user)});
  EXPECT_EQ(p.end_of_turn, "<|endoftext|>");
  const GenerationPrompt bare = render_generation_prompt({ChatTemplate::plain, "</s>"}, std::nullopt, user);
  expect_pieces(bare.pieces, {text(user)});
}

}  // namespace generation_prompt_test
}  // namespace meshtrain::io::test
