// Text files into a token shard: bytes, or a tokenizer's ids.
#include "io/prepare.hpp"

#include "core/errors.hpp"
#include "core/regular_file.hpp"
#include "io/atomic_file.hpp"
#include "io/chat_templates.hpp"
#include "io/output_guard.hpp"
#include "io/sft_records.hpp"
#include "io/sft_shard.hpp"
#include "io/token_shard.hpp"
#include "io/tokenizer.hpp"
#include "io/utf8.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cstdint>

namespace meshtrain::io {
namespace {

void append_bytes(const std::string& path, std::vector<std::uint16_t>& tokens) {
  read_regular_file(path, "text file", [&](std::string_view chunk) {
    for (unsigned char byte : chunk) tokens.push_back(byte);
  });
}

// Each file is a document: a tokenizer.json's post-processor puts its tokens (a BOS) around it.
void append_ids(const std::string& path, const Tokenizer& tokenizer, std::vector<std::uint32_t>& tokens) {
  const std::string text = read_regular_file(path, "text file");
  require_utf8_text(fmt::format("text file '{}'", path), text);
  for (int id : tokenizer.encode_document(text)) tokens.push_back(std::uint32_t(id));
}

// Before anything is read: the shard must not replace a file it is made from, or a file of another kind.
void require_texts_and_output(const std::vector<std::string>& text_files, const std::string& out,
                              const std::string& tokenizer = {}) {
  if (text_files.empty()) input_error("no text files given to tokenize (--text FILE...)");
  if (out.empty()) input_error("no output shard given (--out SHARD.bin)");
  std::vector<NamedPath> inputs;
  for (const std::string& text : text_files) inputs.push_back({"--text", text});
  if (!tokenizer.empty()) inputs.push_back({"--tokenizer", tokenizer});
  const Output shard{"--out", out, FileKind::token_shard, false, {atomic_temporary_path(out)}};
  require_safe_output(shard, inputs);
  require_output_directory(shard);
}

template <class Token>
std::size_t write_nonempty_shard(const std::vector<std::string>& text_files, const std::string& out,
                                 const std::vector<Token>& tokens) {
  if (tokens.empty())
    input_error("the text files {} are all empty; there is nothing to tokenize", fmt::join(text_files, ", "));
  if constexpr (sizeof(Token) == 4) {
    write_token_shard_uint32(out, tokens);
  } else {
    write_token_shard(out, tokens);
  }
  return tokens.size();
}

}  // namespace

std::size_t prepare_byte_shard(const std::vector<std::string>& text_files, const std::string& out) {
  require_texts_and_output(text_files, out);
  std::vector<std::uint16_t> tokens;
  for (const std::string& path : text_files) append_bytes(path, tokens);
  return write_nonempty_shard(text_files, out, tokens);
}

std::size_t prepare_subword_shard(const std::vector<std::string>& text_files, const std::string& tokenizer_path,
                                  const std::string& out) {
  require_texts_and_output(text_files, out, tokenizer_path);
  const Tokenizer tokenizer = Tokenizer::load(tokenizer_path);
  // SentencePiece models keep uint16 shards, as `tokenizer train` makes them (at most 65536 pieces).
  if (!tokenizer.is_json() && tokenizer.vocab_size() > max_tokenizer_vocab) {
    input_error(
        "tokenizer '{}' has {} pieces, but token shards hold uint16 ids: at most {} pieces fit (train one with "
        "meshtrain tokenizer train --vocab N, N <= {})",
        tokenizer_path, tokenizer.vocab_size(), max_tokenizer_vocab, max_tokenizer_vocab);
  }
  std::vector<std::uint32_t> tokens;
  for (const std::string& path : text_files) append_ids(path, tokenizer, tokens);
  // uint32 tokens only where uint16 cannot hold every id of a tokenizer.json's vocabulary (io/token_shard.hpp).
  if (tokenizer.vocab_size() > uint16_shard_vocab) return write_nonempty_shard(text_files, out, tokens);
  const std::vector<std::uint16_t> narrow(tokens.begin(), tokens.end());
  return write_nonempty_shard(text_files, out, narrow);
}

SftSummary prepare_sft_shard(const std::vector<std::string>& sft_files, const std::string& tokenizer_path,
                             const std::string& template_name, bool train_on_prompt, const std::string& out) {
  if (sft_files.empty()) input_error("no fine-tuning data given (--sft FILE.jsonl...)");
  if (out.empty()) input_error("no output shard given (--out SHARD.bin)");
  const ChatTemplate kind = parse_chat_template(template_name);
  std::vector<NamedPath> inputs;
  for (const std::string& file : sft_files) inputs.push_back({"--sft", file});
  inputs.push_back({"--tokenizer", tokenizer_path});
  const Output shard{"--out", out, FileKind::sft_shard, false, {atomic_temporary_path(out)}};
  require_safe_output(shard, inputs);
  require_output_directory(shard);

  const Tokenizer tokenizer = Tokenizer::load(tokenizer_path);
  const TemplateTokens tokens = resolve_template_tokens(kind, tokenizer);
  SftRecords shard_records;
  SftSummary summary;
  std::vector<int> ids;
  std::vector<std::uint8_t> mask;
  for (const std::string& file : sft_files) {
    for (const SftRecord& record : read_sft_records(file)) {
      encode_pieces(render_record(tokens, record), tokenizer, train_on_prompt, ids, mask);
      shard_records.tokens.insert(shard_records.tokens.end(), ids.begin(), ids.end());
      shard_records.mask.insert(shard_records.mask.end(), mask.begin(), mask.end());
      shard_records.offsets.push_back(std::int64_t(shard_records.tokens.size()));
      summary.longest = std::max(summary.longest, ids.size());
      for (std::uint8_t m : mask) summary.loss_tokens += m;
    }
  }
  summary.records = shard_records.offsets.size() - 1;
  summary.tokens = shard_records.tokens.size();
  write_sft_shard(out, shard_records, tokenizer.vocab_size());
  return summary;
}

}  // namespace meshtrain::io
