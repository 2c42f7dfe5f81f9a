// Reading user-given JSON under meshtrain's limits (io/json_input.hpp).
#include "io/json_input.hpp"

#include <fmt/format.h>

#include <functional>
#include <set>
#include <string>

namespace meshtrain::io {

namespace {

// nlohmann's what() without its "[json.exception.parse_error.101] parse error at line 1, column 15: "
// (or "[json.exception.out_of_range.406] ") prefix.
std::string reason_of(const nlohmann::json::exception& e) {
  const std::string what = e.what();
  const std::size_t id_end = what.find("] ");
  if (id_end == std::string::npos) return what;
  const std::size_t located = what.find(": ", id_end);
  return located == std::string::npos ? what.substr(id_end + 2) : what.substr(located + 2);
}

// Thrown by the parser callback, out of nlohmann's parser, at the first level past the limit.
struct TooDeep {};

}  // namespace

std::string JsonInputError::located() const {
  return byte ? fmt::format("byte {}: {}", *byte, what()) : std::string(what());
}

nlohmann::json parse_json_input(std::string_view text, DuplicateKeys duplicates) {
  using Event = nlohmann::json::parse_event_t;
  std::vector<std::set<std::string, std::less<>>> open_objects_keys;  // only under DuplicateKeys::refused
  const nlohmann::json::parser_callback_t check = [&](int depth, Event event, nlohmann::json& parsed) {
    if ((event == Event::object_start || event == Event::array_start) && depth >= max_json_nesting) throw TooDeep{};
    if (duplicates == DuplicateKeys::last_wins) return true;
    if (event == Event::object_start) open_objects_keys.emplace_back();
    if (event == Event::object_end) open_objects_keys.pop_back();
    if (event == Event::key && !open_objects_keys.back().insert(parsed.get<std::string>()).second) {
      throw JsonInputError(fmt::format("an object names the key {} twice", json_excerpt(parsed)), std::nullopt);
    }
    return true;
  };
  try {
    return nlohmann::json::parse(text, check);
  } catch (const TooDeep&) {
    throw JsonInputError(fmt::format("arrays and objects nest deeper than {} levels", max_json_nesting), std::nullopt);
  } catch (const nlohmann::json::parse_error& e) {
    throw JsonInputError(reason_of(e), e.byte);
  } catch (const nlohmann::json::out_of_range& e) {
    // 406, "number overflow parsing '1e999999'": the only range fault a parse raises.
    throw JsonInputError(fmt::format("{} (a number must lie within a double's range, about ±1.8e308)", reason_of(e)),
                         std::nullopt);
  }
}

std::string json_excerpt(const nlohmann::json& value, std::size_t limit) {
  std::string text = value.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  if (text.size() <= limit) return text;
  const std::size_t bytes = text.size();
  while (limit > 0 && (static_cast<unsigned char>(text[limit]) & 0xC0) == 0x80) --limit;  // not inside a character
  text.resize(limit);
  return fmt::format("{}… ({} bytes)", text, bytes);
}

}  // namespace meshtrain::io
