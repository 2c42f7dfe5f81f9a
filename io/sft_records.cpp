// JSON lines into fine-tuning records, each line checked field by field.
#include "io/sft_records.hpp"

#include "core/errors.hpp"
#include "core/regular_file.hpp"
#include "io/json_input.hpp"
#include "io/utf8.hpp"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <string_view>

namespace meshtrain::io {
namespace {

using nlohmann::json;

constexpr std::string_view replacement_character = "\xEF\xBF\xBD";

template <class... Args>
[[noreturn]] void record_error(const std::string& where, fmt::format_string<Args...> format, Args&&... args) {
  input_error("{}: {}", where, fmt::format(format, std::forward<Args>(args)...));
}

// A line that is not UTF-8, with the field that holds the bad byte where it can be told: the first
// string of the record that the lossy reading turns into U+FFFD.
[[noreturn]] void utf8_error(const std::string& where, std::string_view line, std::size_t at) {
  const std::string byte =
      fmt::format("byte 0x{:02x} at offset {} of the line", static_cast<unsigned char>(line[at]), at);
  const json j = json::parse(lossy_utf8(line), nullptr, /*allow_exceptions=*/false);
  std::string field;
  const auto holds = [](const json& v) {
    return v.is_string() && v.get<std::string>().find(replacement_character) != std::string::npos;
  };
  if (j.is_object()) {
    if (const auto m = j.find("messages"); m != j.end() && m->is_array()) {
      for (std::size_t i = 0; i < m->size() && field.empty(); ++i) {
        for (const char* key : {"role", "content"}) {
          if (field.empty() && (*m)[i].is_object() && (*m)[i].contains(key) && holds((*m)[i][key])) {
            field = fmt::format("messages[{}].{}", i, key);
          }
        }
      }
    }
    for (const char* key : {"instruction", "input", "output"}) {
      if (field.empty() && j.contains(key) && holds(j[key])) field = key;
    }
  }
  if (field.empty()) record_error(where, "the line is not UTF-8 ({}); records are UTF-8 text", byte);
  record_error(where, "{} is not UTF-8 ({}); records are UTF-8 text", field, byte);
}

const json& string_field(const std::string& where, const json& object, const std::string& key,
                         const std::string& name) {
  const auto it = object.find(key);
  if (it == object.end()) record_error(where, "{} is missing", name);
  if (!it->is_string()) record_error(where, "{} is {}, expected a string", name, json_excerpt(*it));
  return *it;
}

Role parse_role(const std::string& where, const std::string& name, const std::string& role) {
  if (role == "system") return Role::system;
  if (role == "user") return Role::user;
  if (role == "assistant") return Role::assistant;
  record_error(where, "{} {} is not system, user or assistant", name, json_excerpt(json(role)));
}

std::string_view role_name(Role role) {
  switch (role) {
    case Role::system: return "system";
    case Role::user: return "user";
    case Role::assistant: break;
  }
  return "assistant";
}

void read_chat(SftRecord& record, const json& messages) {
  const std::string& where = record.where;
  if (!messages.is_array())
    record_error(where, "messages is {}, expected an array of messages", json_excerpt(messages));
  if (messages.empty()) record_error(where, "messages is empty; a chat needs a user turn and an assistant turn");
  for (std::size_t i = 0; i < messages.size(); ++i) {
    const std::string name = fmt::format("messages[{}]", i);
    const json& m = messages[i];
    if (!m.is_object())
      record_error(where, "{} is {}, expected an object with role and content", name, json_excerpt(m));
    const Role role = parse_role(where, name + ".role", string_field(where, m, "role", name + ".role"));
    std::string content = string_field(where, m, "content", name + ".content").get<std::string>();
    // The order: an optional system message first, then user, assistant, user, ...
    const bool after_system = !record.messages.empty() && record.messages.front().role == Role::system;
    const std::size_t turn = record.messages.size() - (after_system ? 1 : 0);
    const Role expected = turn % 2 == 0 ? Role::user : Role::assistant;
    if (role == Role::system && i > 0) {
      record_error(where, "{}.role is \"system\", but a system message comes only first", name);
    }
    if (role != Role::system && role != expected) {
      record_error(where,
                   "{}.role is \"{}\", expected \"{}\" (after an optional system message, turns alternate "
                   "user, assistant, starting with user)",
                   name, role_name(role), role_name(expected));
    }
    if (role == Role::assistant && content.empty()) {
      record_error(where, "{}.content is empty; an assistant turn carries the loss and needs text", name);
    }
    record.messages.push_back({role, std::move(content)});
  }
  if (record.messages.back().role != Role::assistant) {
    record_error(where, "messages[{}] is the last message and its role is \"{}\"; a chat ends with an assistant turn",
                 messages.size() - 1, role_name(record.messages.back().role));
  }
}

void read_instruction(SftRecord& record, const json& j) {
  const std::string& where = record.where;
  record.instruction = string_field(where, j, "instruction", "instruction").get<std::string>();
  if (j.contains("input")) record.input = string_field(where, j, "input", "input").get<std::string>();
  record.output = string_field(where, j, "output", "output").get<std::string>();
  if (record.output.empty()) record_error(where, "output is empty; the output carries the loss and needs text");
}

SftRecord read_record(const std::string& where, std::string_view line) {
  if (const auto at = first_invalid_utf8(line)) utf8_error(where, line, *at);
  json j;
  try {
    j = parse_json_input(line);
  } catch (const JsonInputError& e) {
    record_error(where, "not valid JSON ({}); each line holds one JSON object", e.located());
  }
  if (!j.is_object()) {
    record_error(where,
                 "the line is a JSON {}, expected a JSON object with \"messages\", or \"instruction\" and \"output\"",
                 j.type_name());
  }
  SftRecord record;
  record.where = where;
  const bool chat = j.contains("messages"), instruction = j.contains("instruction") || j.contains("output");
  if (chat && instruction) {
    record_error(where, "the record has both messages and instruction/output; give one form a line");
  }
  if (!chat && !instruction) {
    record_error(where, "messages is missing (a chat), as are instruction and output (an instruction record)");
  }
  record.chat = chat;
  if (chat) {
    read_chat(record, j["messages"]);
  } else {
    read_instruction(record, j);
  }
  return record;
}

}  // namespace

std::vector<SftRecord> read_sft_records(const std::string& path) {
  const std::string text = read_regular_file(path, "fine-tuning data");
  std::vector<SftRecord> records;
  std::size_t number = 0;
  for (std::string_view rest = text; !rest.empty();) {
    const std::size_t end = std::min(rest.find('\n'), rest.size());
    std::string_view line = rest.substr(0, end);
    rest.remove_prefix(std::min(end + 1, rest.size()));
    ++number;
    if (line.ends_with('\r')) line.remove_suffix(1);
    if (line.find_first_not_of(" \t\r") == std::string_view::npos) continue;
    records.push_back(read_record(fmt::format("{} line {}", path, number), line));
  }
  if (records.empty()) {
    input_error(
        "{} holds no records (it is empty or blank); give one JSON object a line: {{\"messages\": [...]}} "
        "or {{\"instruction\": ..., \"output\": ...}}",
        path);
  }
  return records;
}

}  // namespace meshtrain::io
