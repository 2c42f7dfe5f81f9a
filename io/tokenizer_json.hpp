// A Hugging Face tokenizer.json with a byte-level BPE model (GPT-2's, Llama 3's, Qwen2's), loaded and used to
// encode and decode (share/docs/usage.md, Tokenizers, lists what is supported). io/tokenizer_json.cpp is the one
// file that includes PCRE2 (the pre-tokenizer's split regex) and ICU (the NFC normalizer).
#pragma once

#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace meshtrain::io {

class TokenizerJson {
 public:
  // Parses the file's bytes. InputError naming `path` and the key at fault (model.type,
  // model.merges[3], pre_tokenizer.pretokenizers[0].pattern.Regex, ...) and what is supported, for
  // anything this tokenizer would not encode exactly as Hugging Face's do.
  static TokenizerJson parse(const std::string& path, std::string_view bytes);

  TokenizerJson(TokenizerJson&&) noexcept;
  TokenizerJson& operator=(TokenizerJson&&) noexcept;
  ~TokenizerJson();

  // One past the largest id of the vocabulary and the added tokens.
  int vocab_size() const;
  // The ids of `text` without the post-processor's tokens: added tokens matched first (never
  // split), the rest normalized, pre-tokenized and merged. InputError unless `text` is UTF-8 (as
  // Hugging Face's, which take strings; the commands check their texts first, naming them).
  std::vector<int> encode(std::string_view text) const;
  // The same with the special added tokens (`"special": true`) left as text, as Hugging Face's
  // encode_special_tokens (split_special_tokens) does: a fine-tuning record's text never becomes
  // a template's token (io/chat_templates.hpp). Other added tokens are still matched.
  std::vector<int> encode_text(std::string_view text) const;
  // The id of the special added token whose content is `content`, if there is one.
  std::optional<int> special_token(std::string_view content) const;
  // The ids the post-processor puts around a text (TemplateProcessing's single template: Llama 3's
  // <|begin_of_text|> before it); empty without one.
  const std::vector<int>& prefix() const;
  const std::vector<int>& suffix() const;
  // The text of `ids`: their bytes, as UTF-8 with each ill-formed sequence one U+FFFD (as Rust's
  // from_utf8_lossy, which the ByteLevel decoder uses). An id no piece has gives no text.
  // InputError for an id outside [0, vocab_size()).
  std::string decode(std::span<const int> ids) const;
  // Whether the bytes of `id` are not well-formed UTF-8 on their own: part of a character.
  bool is_partial_character(int id) const;

  struct Impl;  // defined in io/tokenizer_json.cpp, whose readers fill it

 private:
  explicit TokenizerJson(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Whether `bytes` look like a tokenizer.json: a JSON object with a "model" object (a detection:
// TokenizerJson::parse says whether it is one this tokenizer supports).
bool is_tokenizer_json(std::string_view bytes);

}  // namespace meshtrain::io
