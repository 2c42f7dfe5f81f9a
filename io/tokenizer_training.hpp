// `meshtrain tokenizer train`: a SentencePiece BPE model from text files (share/docs/usage.md,
// Tokenizers), checked before anything is read and written atomically.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace meshtrain::io {

struct TrainedTokenizer {
  std::size_t lines = 0;   // the training sentences: the texts' non-empty lines
  std::uint64_t hash = 0;  // XXH64 of the model file written
};

// Trains a model of `vocab` pieces on the lines of text_files and writes it to `out`. InputError,
// with nothing written, when there are no texts or they are all empty, a text is missing, not a
// regular file or not UTF-8, vocab is outside [io::tokenizer_meta_pieces + 1, io::max_tokenizer_vocab], `out`
// would replace an input, a directory or a file that is not a tokenizer model (io/output_guard.hpp), or SentencePiece
// cannot train that vocabulary from these texts.
// `special` (tokenizer train --special) become control pieces: InputError for an empty one, one
// with a comma or white space, one named twice, <unk>, or a byte piece's name <0xNN>.
TrainedTokenizer train_tokenizer(const std::vector<std::string>& text_files, int vocab, const std::string& out,
                                 const std::vector<std::string>& special = {});

}  // namespace meshtrain::io
