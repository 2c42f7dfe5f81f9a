// Reading user-given JSON under meshtrain's limits (io/json_input.hpp).
#include "io/json_input.hpp"

#include <fmt/format.h>

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

nlohmann::json parse_json_input(std::string_view text) {
  const nlohmann::json::parser_callback_t limit_depth = [](int depth, nlohmann::json::parse_event_t event,
                                                           nlohmann::json&) {
    const bool opens =
        event == nlohmann::json::parse_event_t::object_start || event == nlohmann::json::parse_event_t::array_start;
    if (opens && depth >= max_json_nesting) throw TooDeep{};
    return true;
  };
  try {
    return nlohmann::json::parse(text, limit_depth);
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
