// `meshtrain prepare`: text files into one token shard, byte-level (token = byte value, vocabulary
// 256) or with a SentencePiece model's ids (share/docs/usage.md, Tokenizers).
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

// The same with the ids of the SentencePiece model at `tokenizer` (io/tokenizer.hpp): each file is
// encoded on its own and the ids concatenated in the order given. Also InputError when a text is
// not UTF-8 (io/utf8.hpp), or the model cannot be loaded, has more pieces than a uint16 shard
// holds (io::max_tokenizer_vocab), or is what `out` would replace.
std::size_t prepare_subword_shard(const std::vector<std::string>& text_files, const std::string& tokenizer,
                                  const std::string& out);

}  // namespace meshtrain::io
