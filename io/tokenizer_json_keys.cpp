// Reading the keys of a tokenizer.json that need neither PCRE2 nor ICU (io/tokenizer_json_keys.hpp).
#include "io/tokenizer_json_keys.hpp"

#include "io/bpe_model.hpp"

namespace meshtrain::io::tokenizer_json_parts {

namespace {

void read_template(const Source& source, const json& processor, const std::string& key,
                   const std::vector<bool>& id_known, Affixes& out) {
  const json& single = source.member(processor, key, "single");
  if (!single.is_array()) source.fail(key + ".single", "is not an array");
  const json& specials = source.member(processor, key, "special_tokens");
  bool seen_text = false;
  for (std::size_t i = 0; i < single.size(); ++i) {
    const std::string item = fmt::format("{}.single[{}]", key, i);
    if (const json* sequence = single[i].is_object() ? source.optional(single[i], "Sequence") : nullptr) {
      const std::string which =
          source.string(source.member(*sequence, item + ".Sequence", "id"), item + ".Sequence.id");
      if (which != "A" || seen_text) source.fail(item, "a single template holds sequence A once");
      seen_text = true;
    } else if (const json* special = single[i].is_object() ? source.optional(single[i], "SpecialToken") : nullptr) {
      const std::string name =
          source.string(source.member(*special, item + ".SpecialToken", "id"), item + ".SpecialToken.id");
      const std::string entry = key + ".special_tokens[\"" + name + "\"]";
      const json& ids = source.member(source.member(specials, key + ".special_tokens", name), entry, "ids");
      if (!ids.is_array()) source.fail(entry + ".ids", "is not an array");
      for (std::size_t k = 0; k < ids.size(); ++k) {
        const int id = source.id(ids[k], fmt::format("{}.ids[{}]", entry, k));
        if (std::size_t(id) >= id_known.size() || !id_known[std::size_t(id)]) {
          source.fail(fmt::format("{}.ids[{}]", entry, k), "id {} is no piece of the vocabulary or added tokens", id);
        }
        (seen_text ? out.suffix : out.prefix).push_back(id);
      }
    } else {
      source.fail(item, "is {}, expected {{\"SpecialToken\": ...}} or {{\"Sequence\": ...}}", json_excerpt(single[i]));
    }
  }
  if (!seen_text) source.fail(key + ".single", "has no {{\"Sequence\": {{\"id\": \"A\"}}}}");
}

}  // namespace

std::map<std::string, int> read_vocab(const Source& source, const json& model) {
  const json& vocab = source.member(model, "model", "vocab");
  if (!vocab.is_object()) source.fail("model.vocab", "is not an object of piece: id");
  std::map<std::string, int> pieces;
  std::map<int, std::string> owner;
  for (const auto& [piece, value] : vocab.items()) {
    const int id = source.id(value, "model.vocab[\"" + piece + "\"]");
    const auto [it, fresh] = owner.emplace(id, piece);
    if (!fresh) source.fail("model.vocab", "pieces '{}' and '{}' both have id {}", it->second, piece, id);
    pieces.emplace(piece, id);
  }
  for (int b = 0; b < 256; ++b) {
    if (!pieces.contains(byte_characters()[std::size_t(b)])) {
      source.fail("model.vocab", "has no piece '{}' for byte 0x{:02x}; a byte-level BPE has one for each of the 256",
                  byte_characters()[std::size_t(b)], b);
    }
  }
  return pieces;
}

std::vector<std::pair<std::string, std::string>> read_merges(const Source& source, const json& model,
                                                             const std::map<std::string, int>& pieces) {
  const json& merges = source.member(model, "model", "merges");
  if (!merges.is_array()) source.fail("model.merges", "is not an array");
  std::vector<std::pair<std::string, std::string>> out;
  out.reserve(merges.size());
  for (std::size_t i = 0; i < merges.size(); ++i) {
    const std::string key = fmt::format("model.merges[{}]", i);
    std::string left, right;
    if (merges[i].is_string()) {
      const std::string line = merges[i].get<std::string>();
      const auto space = line.find(' ');
      if (space == std::string::npos || line.find(' ', space + 1) != std::string::npos) {
        source.fail(key, "'{}' is not two pieces separated by one space", line);
      }
      left = line.substr(0, space);
      right = line.substr(space + 1);
    } else if (merges[i].is_array() && merges[i].size() == 2 && merges[i][0].is_string() && merges[i][1].is_string()) {
      left = merges[i][0].get<std::string>();
      right = merges[i][1].get<std::string>();
    } else {
      source.fail(key, "is {}, expected \"left right\" or [\"left\", \"right\"]", json_excerpt(merges[i]));
    }
    for (const std::string& piece : {left, right, left + right}) {
      if (!pieces.contains(piece)) source.fail(key, "names piece '{}', which model.vocab does not hold", piece);
      if (!piece_bytes(piece)) source.fail(key, "piece '{}' is not written in byte characters", piece);
    }
    out.emplace_back(*piece_bytes(left), *piece_bytes(right));
  }
  return out;
}

std::vector<SequencePart> sequence_parts(const Source& source, const json& value, const std::string& key,
                                         const std::string& list_key) {
  std::vector<SequencePart> parts;
  const std::string type = source.string(source.member(value, key, "type"), key + ".type");
  if (type != "Sequence") return {{&value, key}};
  const json& list = source.member(value, key, list_key);
  if (!list.is_array()) source.fail(key + "." + list_key, "is not an array");
  for (std::size_t i = 0; i < list.size(); ++i) parts.push_back({&list[i], fmt::format("{}.{}[{}]", key, list_key, i)});
  return parts;
}

Affixes read_post_processor(const Source& source, const json& file, const std::vector<bool>& id_known) {
  Affixes out;
  const json* processor = source.optional(file, "post_processor");
  if (!processor) return out;
  const std::vector<SequencePart> parts = sequence_parts(source, *processor, "post_processor", "processors");
  bool templated = false;
  for (const auto& [part, key] : parts) {
    const std::string part_type = source.string(source.member(*part, key, "type"), key + ".type");
    if (part_type == "ByteLevel") continue;  // offsets only: no ids
    if (part_type != "TemplateProcessing" || templated) {
      source.fail(key + ".type",
                  "post-processor '{}' is not supported (supported: null, ByteLevel, TemplateProcessing, a Sequence of "
                  "them with one TemplateProcessing)",
                  part_type);
    }
    templated = true;
    read_template(source, *part, key, id_known, out);
  }
  return out;
}

void read_decoder(const Source& source, const json& file) {
  const json* decoder = source.optional(file, "decoder");
  const std::string type =
      decoder ? source.string(source.member(*decoder, "decoder", "type"), "decoder.type") : std::string("null");
  if (type != "ByteLevel") source.fail("decoder.type", "'{}' is not supported (supported: ByteLevel)", type);
}

}  // namespace meshtrain::io::tokenizer_json_parts
