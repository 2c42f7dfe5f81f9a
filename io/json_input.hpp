// JSON that a user hands meshtrain (config.json, tokenizer.json, adapter_config.json, a safetensors
// header or index, a JSON-lines record) read with the same two limits everywhere, so that no such
// file can crash a command or end it with the library's raw text (share/docs/usage.md, Faults):
// - nesting: arrays and objects deeper than max_json_nesting are refused while parsing. nlohmann's
//   parser is iterative, but its dump() and any walk of the value recurse once per level, and a
//   100,000-deep record overflowed the stack there;
// - numbers: a number beyond a double's range (1e999999) is refused naming its text;
// - keys: where the caller asks, an object naming a key twice is refused naming the key.
#pragma once

#include <nlohmann/json.hpp>

#include <cstddef>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace meshtrain::io {

// Deeper than any file meshtrain reads needs (tokenizer.json: 5 levels; a chat record: 3), far from a
// recursion's stack limit.
inline constexpr int max_json_nesting = 64;

// Why a text is not JSON meshtrain reads, in words ("syntax error while parsing value - invalid
// literal; last read: 'tru'", "arrays and objects nest deeper than 64 levels"), without nlohmann's
// "[json.exception…]" prefix; byte is where the parser stopped, where nlohmann tells it.
class JsonInputError : public std::runtime_error {
 public:
  JsonInputError(const std::string& reason, std::optional<std::size_t> at) : std::runtime_error(reason), byte(at) {}
  // "byte 15: <reason>", or the reason alone.
  std::string located() const;
  std::optional<std::size_t> byte;
};

// Whether an object may name a key twice. JSON leaves it open and most readers keep the last; where
// the keys are what a file declares (a safetensors header's tensors, a config's fields), the second
// naming is refused, as either reading would be a guess.
enum class DuplicateKeys { last_wins, refused };

// Parses `text` as one JSON value; JsonInputError for a syntax error, a nesting deeper than
// max_json_nesting, a number out of a double's range, or under DuplicateKeys::refused a key an object
// names twice.
nlohmann::json parse_json_input(std::string_view text, DuplicateKeys duplicates = DuplicateKeys::last_wins);

// `value` as JSON text for a message, cut to about `limit` characters ("[[[[[[[[… (100000 bytes)").
std::string json_excerpt(const nlohmann::json& value, std::size_t limit = 80);

}  // namespace meshtrain::io
