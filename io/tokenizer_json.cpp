// A tokenizer.json's byte-level BPE (io/tokenizer_json.hpp): the file's keys read and checked, then
// Hugging Face's pipeline — added tokens, normalizer, pre-tokenizer, model, post-processor, decoder.
#include "io/tokenizer_json.hpp"

#include "core/errors.hpp"
#include "io/bpe_model.hpp"
#include "io/json_input.hpp"
#include "io/tokenizer_json_keys.hpp"
#include "io/utf8.hpp"

#include <nlohmann/json.hpp>
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <unicode/unorm2.h>
#include <unicode/ustring.h>

#include <algorithm>
#include <array>
#include <functional>
#include <map>
#include <optional>
#include <stdexcept>

namespace meshtrain::io {
// The pipeline's parts, which TokenizerJson::Impl holds: in a named namespace, as a type with
// internal linkage may not be a member's (in a unity build, -Wsubobject-linkage).
namespace tokenizer_json_parts {

using nlohmann::json;

// GPT-2's split regex: what ByteLevel's use_regex applies.
constexpr std::string_view gpt2_split_pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

// A compiled split regex (PCRE2, UTF and Unicode properties: \p{L}, \s of every script).
class Regex {
 public:
  Regex(const Source& source, const std::string& key, std::string_view pattern, bool literal) {
    int error = 0;
    PCRE2_SIZE offset = 0;
    const std::uint32_t options = PCRE2_UTF | PCRE2_UCP | (literal ? PCRE2_LITERAL : 0);
    code_.reset(
        pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(), options, &error, &offset, nullptr));
    if (!code_) {
      std::array<PCRE2_UCHAR, 256> message{};
      pcre2_get_error_message(error, message.data(), message.size());
      source.fail(key, "the regex does not compile (PCRE2: {} at offset {})", reinterpret_cast<char*>(message.data()),
                  offset);
    }
    // Machine code where PCRE2 has a JIT for this CPU; the interpreter otherwise (same matches).
    pcre2_jit_compile(code_.get(), PCRE2_JIT_COMPLETE);
  }
  // The [begin, end) of each non-empty match, left to right. `text` must be UTF-8 (encode checks
  // it once: PCRE2's own check would read the whole text again at every match).
  std::vector<std::pair<std::size_t, std::size_t>> matches(std::string_view text) const {
    std::unique_ptr<pcre2_match_data, decltype(&pcre2_match_data_free)> data(
        pcre2_match_data_create_from_pattern(code_.get(), nullptr), &pcre2_match_data_free);
    std::vector<std::pair<std::size_t, std::size_t>> found;
    for (std::size_t at = 0; at < text.size();) {
      const int rc = pcre2_match(code_.get(), reinterpret_cast<PCRE2_SPTR>(text.data()), text.size(), at,
                                 PCRE2_NO_UTF_CHECK, data.get(), nullptr);
      if (rc == PCRE2_ERROR_NOMATCH) break;
      if (rc < 0) throw std::runtime_error(fmt::format("PCRE2 match failed with error {}", rc));
      const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(data.get());
      if (ovector[1] > ovector[0]) {
        found.emplace_back(ovector[0], ovector[1]);
        at = ovector[1];
      } else {  // an empty match splits nothing: go on from the next character
        at = ovector[0] + 1;
        while (at < text.size() && (static_cast<unsigned char>(text[at]) & 0xC0) == 0x80) ++at;
      }
    }
    return found;
  }

 private:
  struct Free {
    void operator()(pcre2_code* code) const { pcre2_code_free(code); }
  };
  std::unique_ptr<pcre2_code, Free> code_;
};

// One step of the pre-tokenizer, applied to each piece the steps before made.
struct PreTokenizerStep {
  std::shared_ptr<const Regex> regex;  // Split's, or GPT-2's for ByteLevel with use_regex; none: no split
  bool remove_matches = false;         // Split's behavior Removed (else Isolated)
  bool invert = false;                 // Split's invert: the parts between matches are the matches
  bool add_prefix_space = false;       // ByteLevel's: a piece not starting with ' ' gets one

  void apply(const std::string& piece, std::vector<std::string>& out) const {
    const std::string text = add_prefix_space && !piece.starts_with(' ') ? " " + piece : piece;
    if (!regex) {
      out.push_back(text);
      return;
    }
    std::size_t at = 0;
    const auto emit = [&](std::size_t begin, std::size_t end, bool matched) {
      if (end > begin && !(remove_matches && matched != invert)) out.push_back(text.substr(begin, end - begin));
    };
    for (const auto& [begin, end] : regex->matches(text)) {
      emit(at, begin, false);
      emit(begin, end, true);
      at = end;
    }
    emit(at, text.size(), false);
  }
};

struct AddedToken {
  std::string content;
  int id;
};

// Added tokens matched in a text as Hugging Face's Aho-Corasick (leftmost-longest) matches them:
// the first position where one starts, the longest of those starting there.
class AddedTokenMatcher {
 public:
  void add(AddedToken token) {
    auto& bucket = by_first_byte_[static_cast<unsigned char>(token.content[0])];
    bucket.push_back(std::move(token));
    std::stable_sort(bucket.begin(), bucket.end(),
                     [](const AddedToken& a, const AddedToken& b) { return a.content.size() > b.content.size(); });
  }
  // Calls text(part) for each stretch between tokens and ids.push_back for each token, in order.
  void split(std::string_view text, const std::function<void(std::string_view)>& on_text, std::vector<int>& ids) const {
    std::size_t start = 0;
    for (std::size_t at = 0; at < text.size();) {
      const AddedToken* found = nullptr;
      for (const AddedToken& token : by_first_byte_[static_cast<unsigned char>(text[at])]) {
        if (text.substr(at).starts_with(token.content)) {
          found = &token;
          break;
        }
      }
      if (!found) {
        ++at;
        continue;
      }
      if (at > start) on_text(text.substr(start, at - start));
      ids.push_back(found->id);
      at += found->content.size();
      start = at;
    }
    if (text.size() > start) on_text(text.substr(start));
  }

 private:
  std::array<std::vector<AddedToken>, 256> by_first_byte_;
};

// Canonical composition (NFC) through ICU, by way of UTF-16.
std::string nfc(std::string_view text) {
  UErrorCode status = U_ZERO_ERROR;
  const UNormalizer2* normalizer = unorm2_getNFCInstance(&status);
  const auto check = [&](const char* step) {
    if (U_FAILURE(status)) throw std::runtime_error(fmt::format("ICU NFC: {} failed: {}", step, u_errorName(status)));
  };
  check("unorm2_getNFCInstance");
  std::int32_t length = 0;
  u_strFromUTF8(nullptr, 0, &length, text.data(), std::int32_t(text.size()), &status);
  if (status == U_BUFFER_OVERFLOW_ERROR) status = U_ZERO_ERROR;
  check("u_strFromUTF8");
  std::u16string utf16(std::size_t(length), u'\0');
  u_strFromUTF8(utf16.data(), length, nullptr, text.data(), std::int32_t(text.size()), &status);
  check("u_strFromUTF8");
  std::int32_t composed_length = unorm2_normalize(normalizer, utf16.data(), length, nullptr, 0, &status);
  if (status == U_BUFFER_OVERFLOW_ERROR) status = U_ZERO_ERROR;
  check("unorm2_normalize");
  std::u16string composed(std::size_t(composed_length), u'\0');
  unorm2_normalize(normalizer, utf16.data(), length, composed.data(), composed_length, &status);
  check("unorm2_normalize");
  std::int32_t out_length = 0;
  u_strToUTF8(nullptr, 0, &out_length, composed.data(), composed_length, &status);
  if (status == U_BUFFER_OVERFLOW_ERROR) status = U_ZERO_ERROR;
  check("u_strToUTF8");
  std::string out(std::size_t(out_length), '\0');
  u_strToUTF8(out.data(), out_length, nullptr, composed.data(), composed_length, &status);
  check("u_strToUTF8");
  return out;
}

json parse_json(const Source& source, std::string_view bytes) {
  try {
    return parse_json_input(bytes);
  } catch (const JsonInputError& e) {
    input_error(
        "tokenizer '{}' starts as JSON but is not valid JSON ({}); give a tokenizer.json or a SentencePiece .model",
        source.path, e.located());
  }
}

}  // namespace tokenizer_json_parts

struct TokenizerJson::Impl {
  std::optional<BpeModel> model;
  // Added tokens with normalized = false, matched in the text as given; normalized = true, in the
  // normalized text. The *_text ones leave the special tokens out, for encode_text.
  tokenizer_json_parts::AddedTokenMatcher raw_added, normalized_added, raw_added_text, normalized_added_text;
  std::map<std::string, int, std::less<>> special_ids;  // the special added tokens by content
  bool nfc = false;
  std::vector<tokenizer_json_parts::PreTokenizerStep> steps;
  std::vector<int> prefix, suffix;
  std::vector<std::string> id_bytes;  // what each id decodes to
  std::vector<bool> id_known;         // whether some piece has that id
  int vocab_size = 0;

  void pre_tokenize(std::string_view text, std::vector<int>& ids) const {
    std::vector<std::string> pieces{std::string(text)};
    for (const tokenizer_json_parts::PreTokenizerStep& step : steps) {
      std::vector<std::string> next;
      for (const std::string& piece : pieces) step.apply(piece, next);
      pieces = std::move(next);
    }
    for (const std::string& piece : pieces) model->encode_word(piece, ids);
  }
};

namespace tokenizer_json_parts {

void read_normalizer(const Source& source, const json& file, TokenizerJson::Impl& impl) {
  const json* normalizer = source.optional(file, "normalizer");
  if (!normalizer) return;
  for (const auto& [part, key] : sequence_parts(source, *normalizer, "normalizer", "normalizers")) {
    const std::string part_type = source.string(source.member(*part, key, "type"), key + ".type");
    if (part_type != "NFC") {
      source.fail(key + ".type", "normalizer '{}' is not supported (supported: null, NFC, a Sequence of NFC)",
                  part_type);
    }
    impl.nfc = true;
  }
}

PreTokenizerStep read_pre_tokenizer_step(const Source& source, const json& step, const std::string& key,
                                         bool& byte_level) {
  const std::string type = source.string(source.member(step, key, "type"), key + ".type");
  if (byte_level) source.fail(key, "comes after ByteLevel; ByteLevel must be the last pre-tokenizer");
  PreTokenizerStep out;
  if (type == "ByteLevel") {
    byte_level = true;
    out.add_prefix_space = source.boolean(step, key, "add_prefix_space", true);
    if (source.boolean(step, key, "use_regex", true)) {
      out.regex = std::make_shared<Regex>(source, key, gpt2_split_pattern, false);
    }
    return out;
  }
  if (type != "Split") {
    source.fail(key + ".type", "pre-tokenizer '{}' is not supported (supported: ByteLevel, Split, a Sequence of them)",
                type);
  }
  const json& pattern = source.member(step, key, "pattern");
  if (const json* regex = pattern.is_object() ? source.optional(pattern, "Regex") : nullptr) {
    out.regex =
        std::make_shared<Regex>(source, key + ".pattern.Regex", source.string(*regex, key + ".pattern.Regex"), false);
  } else if (const json* literal = pattern.is_object() ? source.optional(pattern, "String") : nullptr) {
    out.regex = std::make_shared<Regex>(source, key + ".pattern.String",
                                        source.string(*literal, key + ".pattern.String"), true);
  } else {
    source.fail(key + ".pattern", "is {}, expected {{\"Regex\": ...}} or {{\"String\": ...}}", json_excerpt(pattern));
  }
  const std::string behavior = source.string(source.member(step, key, "behavior"), key + ".behavior");
  if (behavior != "Isolated" && behavior != "Removed") {
    source.fail(key + ".behavior", "'{}' is not supported (supported: Isolated, Removed)", behavior);
  }
  out.remove_matches = behavior == "Removed";
  out.invert = source.boolean(step, key, "invert", false);
  return out;
}

void read_pre_tokenizer(const Source& source, const json& file, TokenizerJson::Impl& impl) {
  const json* pre = source.optional(file, "pre_tokenizer");
  if (!pre) source.fail("pre_tokenizer", "is null; a byte-level BPE needs a ByteLevel pre-tokenizer");
  bool byte_level = false;
  for (const auto& [step, key] : sequence_parts(source, *pre, "pre_tokenizer", "pretokenizers")) {
    impl.steps.push_back(read_pre_tokenizer_step(source, *step, key, byte_level));
  }
  if (!byte_level) {
    source.fail("pre_tokenizer", "has no ByteLevel step; a byte-level BPE needs one (last, after any Split)");
  }
}

void read_model(const Source& source, const json& file, TokenizerJson::Impl& impl, std::map<std::string, int>& pieces) {
  const json& model = source.member(file, "", "model");
  const std::string type = source.string(source.member(model, "model", "type"), "model.type");
  if (type != "BPE") source.fail("model.type", "'{}' is not supported (supported: BPE, byte-level)", type);
  if (const json* dropout = source.optional(model, "dropout")) {
    source.fail("model.dropout", "is {}; meshtrain encodes deterministically (set it to null)", json_excerpt(*dropout));
  }
  if (source.boolean(model, "model", "byte_fallback", false)) {
    source.fail("model.byte_fallback", "is true; that is a SentencePiece-style BPE, not a byte-level one");
  }
  for (const char* affix : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    const json* value = source.optional(model, affix);
    if (value && !(value->is_string() && value->get<std::string>().empty())) {
      source.fail(std::string("model.") + affix, "is {}; a byte-level BPE has none (null)", json_excerpt(*value));
    }
  }
  pieces = read_vocab(source, model);
  const auto merges = read_merges(source, model, pieces);
  std::unordered_map<std::string, int> by_bytes;
  for (const auto& [piece, id] : pieces) {
    if (const auto bytes = piece_bytes(piece)) by_bytes.emplace(*bytes, id);
  }
  impl.model.emplace(std::move(by_bytes), merges, source.boolean(model, "model", "ignore_merges", false));
}

// added_tokens; returns them by id, for decoding.
std::map<int, std::string> read_added_tokens(const Source& source, const json& file, TokenizerJson::Impl& impl) {
  std::map<int, std::string> by_id;
  const json* added = source.optional(file, "added_tokens");
  if (!added) return by_id;
  if (!added->is_array()) source.fail("added_tokens", "is not an array");
  for (std::size_t i = 0; i < added->size(); ++i) {
    const std::string key = fmt::format("added_tokens[{}]", i);
    const json& token = (*added)[i];
    AddedToken parsed{source.string(source.member(token, key, "content"), key + ".content"),
                      source.id(source.member(token, key, "id"), key + ".id")};
    if (parsed.content.empty()) source.fail(key + ".content", "is empty");
    for (const char* option : {"single_word", "lstrip", "rstrip"}) {
      if (source.boolean(token, key, option, false)) {
        source.fail(key + "." + option, "is true; not supported (added tokens match their content exactly)");
      }
    }
    const auto [earlier, fresh] = by_id.emplace(parsed.id, parsed.content);
    if (!fresh && earlier->second != parsed.content) {
      source.fail(key + ".id", "{} is also '{}''s id: an id decodes as one text", parsed.id, earlier->second);
    }
    // Hugging Face's default: special tokens are matched in the raw text, others after normalizing.
    const bool special = source.boolean(token, key, "special", false);
    const bool normalized = source.boolean(token, key, "normalized", !special);
    if (special) {
      impl.special_ids[parsed.content] = parsed.id;
    } else {
      (normalized ? impl.normalized_added_text : impl.raw_added_text).add(parsed);
    }
    (normalized ? impl.normalized_added : impl.raw_added).add(std::move(parsed));
  }
  return by_id;
}

}  // namespace tokenizer_json_parts

TokenizerJson::TokenizerJson(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
TokenizerJson::TokenizerJson(TokenizerJson&&) noexcept = default;
TokenizerJson& TokenizerJson::operator=(TokenizerJson&&) noexcept = default;
TokenizerJson::~TokenizerJson() = default;

TokenizerJson TokenizerJson::parse(const std::string& path, std::string_view bytes) {
  using namespace tokenizer_json_parts;
  const Source source{path};
  const json file = parse_json(source, bytes);
  if (!file.is_object()) source.fail("(top level)", "is not a JSON object");
  for (const char* key : {"truncation", "padding"}) {
    if (const json* value = source.optional(file, key)) {
      source.fail(key, "is {}; meshtrain tokenizes whole documents (set it to null)", json_excerpt(*value));
    }
  }
  auto impl = std::make_unique<Impl>();
  std::map<std::string, int> pieces;
  read_model(source, file, *impl, pieces);
  const std::map<int, std::string> added = read_added_tokens(source, file, *impl);
  read_normalizer(source, file, *impl);
  read_pre_tokenizer(source, file, *impl);
  read_decoder(source, file);

  // An added token may name a piece's id only with that piece's text (GPT-2's <|endoftext|> is both):
  // with another, the id would decode as two texts.
  std::map<int, const std::string*> piece_of;
  for (const auto& [piece, id] : pieces) piece_of.emplace(id, &piece);
  for (const auto& [id, content] : added) {
    const auto same_id = piece_of.find(id);
    if (same_id != piece_of.end() && piece_bytes(*same_id->second).value_or(*same_id->second) != content) {
      source.fail("added_tokens", "'{}' has id {}, which is model.vocab's piece '{}': an id decodes as one text",
                  content, id, *same_id->second);
    }
  }

  // Each id's text, as the ByteLevel decoder reads a token: its characters mapped back to bytes
  // when all are byte characters, else its UTF-8 as it is. An added token's content wins.
  int largest = 0;
  for (const auto& [piece, id] : pieces) largest = std::max(largest, id);
  for (const auto& [id, content] : added) largest = std::max(largest, id);
  impl->vocab_size = largest + 1;
  impl->id_bytes.resize(std::size_t(impl->vocab_size));
  impl->id_known.resize(std::size_t(impl->vocab_size));
  const auto set_text = [&](int id, const std::string& token) {
    impl->id_bytes[std::size_t(id)] = piece_bytes(token).value_or(token);
    impl->id_known[std::size_t(id)] = true;
  };
  for (const auto& [piece, id] : pieces) set_text(id, piece);
  for (const auto& [id, content] : added) set_text(id, content);
  Affixes affixes = read_post_processor(source, file, impl->id_known);
  impl->prefix = std::move(affixes.prefix);
  impl->suffix = std::move(affixes.suffix);
  return TokenizerJson(std::move(impl));
}

int TokenizerJson::vocab_size() const { return impl_->vocab_size; }
const std::vector<int>& TokenizerJson::prefix() const { return impl_->prefix; }
const std::vector<int>& TokenizerJson::suffix() const { return impl_->suffix; }

namespace {

std::vector<int> encode_with(const TokenizerJson::Impl& impl, const tokenizer_json_parts::AddedTokenMatcher& raw,
                             const tokenizer_json_parts::AddedTokenMatcher& normalized, std::string_view text) {
  using tokenizer_json_parts::nfc;
  require_utf8_text("the text to encode", text);
  std::vector<int> ids;
  raw.split(
      text,
      [&](std::string_view part) {
        const std::string normal = impl.nfc ? nfc(part) : std::string(part);
        normalized.split(
            normal, [&](std::string_view rest) { impl.pre_tokenize(rest, ids); }, ids);
      },
      ids);
  return ids;
}

}  // namespace

std::vector<int> TokenizerJson::encode(std::string_view text) const {
  return encode_with(*impl_, impl_->raw_added, impl_->normalized_added, text);
}

std::vector<int> TokenizerJson::encode_text(std::string_view text) const {
  return encode_with(*impl_, impl_->raw_added_text, impl_->normalized_added_text, text);
}

std::optional<int> TokenizerJson::special_token(std::string_view content) const {
  const auto it = impl_->special_ids.find(content);
  return it == impl_->special_ids.end() ? std::nullopt : std::optional<int>(it->second);
}

std::string TokenizerJson::decode(std::span<const int> ids) const {
  std::string bytes;
  for (int id : ids) {
    if (id < 0 || id >= impl_->vocab_size) {
      input_error("token {} is outside the tokenizer's ids (0 to {})", id, impl_->vocab_size - 1);
    }
    bytes += impl_->id_bytes[std::size_t(id)];
  }
  return lossy_utf8(bytes);
}

bool TokenizerJson::is_partial_character(int id) const {
  return id >= 0 && id < impl_->vocab_size && first_invalid_utf8(impl_->id_bytes[std::size_t(id)]).has_value();
}

bool is_tokenizer_json(std::string_view bytes) {
  const auto first = bytes.find_first_not_of(" \t\r\n");
  if (first == std::string_view::npos || bytes[first] != '{') return false;
  const auto file = nlohmann::json::parse(bytes, nullptr, /*allow_exceptions=*/false);
  return file.is_object() && file.contains("model") && file["model"].is_object();
}

}  // namespace meshtrain::io
