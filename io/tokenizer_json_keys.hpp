// The keys of a tokenizer.json that need neither PCRE2 nor ICU (io/tokenizer_json.cpp, the one file
// that includes them, reads the rest and builds the pipeline): the file named in every refusal, the
// vocabulary and merges of model, the post-processor's template and the decoder, each checked.
#pragma once

#include "core/errors.hpp"
#include "io/json_input.hpp"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace meshtrain::io::tokenizer_json_parts {

using nlohmann::json;

// Ids are kept in tables one entry per id: a bound keeps a file from asking for gigabytes.
inline constexpr int max_id = (1 << 24) - 1;

// The file being read, for messages: "tokenizer 'tok.json': model.merges[3]: ...".
struct Source {
  const std::string& path;

  template <class... Args>
  [[noreturn]] void fail(const std::string& key, fmt::format_string<Args...> format, Args&&... args) const {
    input_error("tokenizer '{}': {}: {}", path, key, fmt::format(format, std::forward<Args>(args)...));
  }
  const json& member(const json& object, const std::string& where, const std::string& key) const {
    const std::string name = where.empty() ? key : where + "." + key;
    if (!object.is_object()) fail(where, "is not a JSON object");
    const auto it = object.find(key);
    if (it == object.end()) fail(name, "missing");
    return *it;
  }
  // A member that may be absent or null: nullptr then.
  const json* optional(const json& object, const std::string& key) const {
    const auto it = object.find(key);
    return it == object.end() || it->is_null() ? nullptr : &*it;
  }
  std::string string(const json& value, const std::string& key) const {
    if (!value.is_string()) fail(key, "is {}, expected a string", json_excerpt(value));
    return value.get<std::string>();
  }
  bool boolean(const json& object, const std::string& where, const std::string& key, bool absent) const {
    const json* value = optional(object, key);
    if (!value) return absent;
    if (!value->is_boolean()) fail(where + "." + key, "is {}, expected true or false", json_excerpt(*value));
    return value->get<bool>();
  }
  int id(const json& value, const std::string& key) const {
    if (!value.is_number_integer() || value.get<std::int64_t>() < 0 || value.get<std::int64_t>() > max_id) {
      fail(key, "is {}, expected an id from 0 to {}", json_excerpt(value), max_id);
    }
    return value.get<int>();
  }
};

// One part of a normalizer, pre-tokenizer or post-processor that may be a Sequence: the part and its key
// for messages ("normalizer.normalizers[1]").
struct SequencePart {
  const json* part;
  std::string key;
};

// `value` (the object under `key`) as its parts: the list under `list_key` where its type is Sequence,
// else itself alone.
std::vector<SequencePart> sequence_parts(const Source& source, const json& value, const std::string& key,
                                         const std::string& list_key);

// The ids TemplateProcessing's single template puts before and after a text.
struct Affixes {
  std::vector<int> prefix, suffix;
};

// The pieces of model.vocab by their text, checked: each id once, in range, a piece for each byte.
std::map<std::string, int> read_vocab(const Source& source, const json& model);

// model.merges as pairs of byte strings, in rank order; each side and their union a piece of `pieces`.
std::vector<std::pair<std::string, std::string>> read_merges(const Source& source, const json& model,
                                                             const std::map<std::string, int>& pieces);

// post_processor (null, ByteLevel, TemplateProcessing or a Sequence of them with one template): the ids
// around a text; `id_known[id]` tells which ids some piece or added token has.
Affixes read_post_processor(const Source& source, const json& file, const std::vector<bool>& id_known);

// decoder: ByteLevel, the one meshtrain decodes as.
void read_decoder(const Source& source, const json& file);

}  // namespace meshtrain::io::tokenizer_json_parts
