// Fine-tuning records from JSON lines (share/docs/usage.md, Fine-tuning data): a chat
// {"messages": [{"role", "content"}, ...]} or an instruction {"instruction", "input", "output"} a
// line, read and checked before anything is tokenized.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace meshtrain::io {

enum class Role { system, user, assistant };

struct Message {
  Role role;
  std::string content;
};

struct SftRecord {
  std::string where;                       // "data.jsonl line 7", for messages
  bool chat = true;                        // the chat form; else the instruction form
  std::vector<Message> messages;           // chat: an optional system message, then user, assistant, ... assistant
  std::string instruction, input, output;  // instruction form: input "" when absent
};

// The records of `path`, one JSON object a line; lines of white space only are skipped. InputError
// naming the file, the 1-based line and the field for a line that is not a JSON object of either
// form: bad JSON, text that is not UTF-8, a missing or non-string field, a role other than system,
// user and assistant, roles out of order, an empty assistant turn or output; and for a file without
// records.
std::vector<SftRecord> read_sft_records(const std::string& path);

}  // namespace meshtrain::io
