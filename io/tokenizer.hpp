// Subword tokenizers (share/docs/usage.md, Tokenizers): a SentencePiece BPE model or a Hugging Face
// tokenizer.json's byte-level BPE (io/tokenizer_json.hpp), loaded, used to encode and decode; a
// SentencePiece model trained. io/tokenizer.cpp is the one file that includes SentencePiece, so
// the rest of the code sees only this header.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace meshtrain::io {

// The most pieces `meshtrain tokenizer train` makes: ids that fit uint16 token shards. A
// tokenizer.json may have more; its shards then hold uint32 ids (io/token_shard.hpp).
inline constexpr int max_tokenizer_vocab = 65536;
// The pieces every model has before it learns any: <unk> and the 256 byte pieces of byte fallback.
inline constexpr int tokenizer_meta_pieces = 1 + 256;

// A loaded tokenizer: a SentencePiece model or a tokenizer.json. Move-only; encoding and decoding
// are const and thread-safe.
class Tokenizer {
 public:
  // Reads the file at `path` (a regular file, core/regular_file.hpp) and parses it: as a
  // tokenizer.json when its first character (past white space) is '{' (looks_like_json), else as
  // a SentencePiece model. InputError naming the file (and for a tokenizer.json the key) when it is
  // neither or asks for what is not supported.
  static Tokenizer load(const std::string& path);

  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;
  ~Tokenizer();

  const std::string& path() const { return path_; }
  // Whether the file is a tokenizer.json (else a SentencePiece model).
  bool is_json() const;
  // The pieces of the model: every id it gives is below this.
  int vocab_size() const;
  // tokenizer_hash of the model file's bytes, as they were parsed: what a checkpoint records.
  std::uint64_t content_hash() const { return hash_; }

  // The ids of `text`: any UTF-8 (byte fallback, or the byte-level BPE's bytes, covers characters
  // the pieces do not). SentencePiece reads each byte of an ill-formed UTF-8 sequence as U+FFFD
  // (io/utf8.hpp checks texts first).
  std::vector<int> encode(std::string_view text) const;
  // The ids of `text` where a template's special tokens can never come from text: a tokenizer.json's
  // special added tokens are left as text (TokenizerJson::encode_text); a SentencePiece model's
  // control pieces never come from text anyway, so this is encode's.
  std::vector<int> encode_text(std::string_view text) const;
  // The id of `token` as a template's special token: a tokenizer.json's special added token of that
  // content, or a SentencePiece control piece of that text (its <s> and </s> are control pieces,
  // and so are those `tokenizer train --special` adds). Nothing when there is none.
  std::optional<int> special_token_id(std::string_view token) const;
  // The ids of `text` as a document: encode's, between the tokens a tokenizer.json's post-processor
  // adds (Llama 3's <|begin_of_text|> first); encode's for a SentencePiece model, which adds none.
  std::vector<int> encode_document(std::string_view text) const;
  // The same without the tokens after the text: a prompt, the start of a document.
  std::vector<int> encode_document_start(std::string_view text) const;
  // Whether `id` may be part of a character: one of the byte pieces of byte fallback (<0x00> ...
  // <0xFF>), or a tokenizer.json's piece whose bytes are not UTF-8 on their own.
  bool is_byte(int id) const;
  // The text of `ids`; decode(encode(t)) == t for every UTF-8 t with the models train_bpe_model
  // makes (share/docs/usage.md, Tokenizers).
  // InputError for an id outside [0, vocab_size()).
  std::string decode(std::span<const int> ids) const;

 private:
  struct Model;
  Tokenizer(std::string path, std::uint64_t hash, std::unique_ptr<Model> model);

  std::string path_;
  std::uint64_t hash_ = 0;
  std::unique_ptr<Model> model_;
};

// Whether `bytes` are a SentencePiece model that Tokenizer::load accepts (the same test).
bool is_sentencepiece_model(std::string_view bytes);
// Whether Tokenizer::load reads `bytes` as a tokenizer.json: the first character past white space is '{'
// (which no SentencePiece model begins with).
bool looks_like_json(std::string_view bytes);

// A tokenizer's content hash: XXH64 (seed 0) of the model file's bytes, as the project hashes elsewhere.
std::uint64_t tokenizer_hash(std::string_view file_bytes);
// A tokenizer's hash as 16 lowercase hex digits: how checkpoints store it and messages print it.
std::string hash_hex(std::uint64_t hash);

// Trains a BPE model of `vocab` pieces on `lines` (each a sentence, without its newline) with the
// options of share/docs/usage.md, Tokenizers, and returns the model file's bytes: the same lines
// and vocab give the same bytes. InputError with SentencePiece's reason when it cannot train that
// vocabulary from these lines (too small for their characters, or more pieces than they offer).
// `special` are control pieces (ids 1, 2, ... after <unk>, before the byte pieces): pieces that
// text never produces, which chat templates insert by id (share/docs/usage.md, Fine-tuning data).
std::string train_bpe_model(const std::vector<std::string_view>& lines, int vocab,
                            const std::vector<std::string>& special = {});

}  // namespace meshtrain::io
