// `meshtrain prepare`: text files into one token shard, byte-level (token = byte value, vocabulary
// 256) or with a tokenizer's ids (share/docs/usage.md, Tokenizers).
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace meshtrain::io {

inline constexpr int byte_vocab = 256;

// Concatenates the bytes of text_files, in the order given, into one token shard at `out`
// (written atomically), one token per byte. Returns the number of tokens written.
// Throws InputError naming the file if an input is missing, not a regular file or unreadable,
// if there are no inputs or they are all empty, or if `out` cannot be written; and, before anything
// is read, if `out` would replace one of the inputs, a directory or a file that is not a token
// shard (io/output_guard.hpp).
std::size_t prepare_byte_shard(const std::vector<std::string>& text_files, const std::string& out);

// The same with the ids of the tokenizer at `tokenizer` (io/tokenizer.hpp: a SentencePiece model or
// a tokenizer.json): each file is encoded on its own as a document (Tokenizer::encode_document) and
// the ids concatenated in the order given; uint16 tokens, uint32 for a vocabulary of more than
// 65,536 ids (io/token_shard.hpp; a tokenizer.json's only: a SentencePiece model of more pieces is
// refused, as before). Also InputError when a text is not UTF-8 (io/utf8.hpp), or the tokenizer
// cannot be loaded or is what `out` would replace.
std::size_t prepare_subword_shard(const std::vector<std::string>& text_files, const std::string& tokenizer,
                                  const std::string& out);

// What prepare_sft_shard wrote: the numbers `prepare --sft` reports.
struct SftSummary {
  std::size_t records = 0, tokens = 0, loss_tokens = 0, longest = 0;
};

// Fine-tuning records (io/sft_records.hpp) of the JSON-lines `sft_files`, in the order given, under
// the chat template `template_name` (io/chat_templates.hpp) with the ids of the tokenizer at
// `tokenizer`, into one fine-tuning shard at `out` (io/sft_shard.hpp, written atomically). InputError,
// with nothing written, for a malformed record (naming the file, line and field), an unknown
// template, a special token the template needs that is not one id of the tokenizer, and an `out` the
// output guard refuses (an input, a directory, a file that is not a fine-tuning shard).
SftSummary prepare_sft_shard(const std::vector<std::string>& sft_files, const std::string& tokenizer,
                             const std::string& template_name, bool train_on_prompt, const std::string& out);

}  // namespace meshtrain::io
