// Fine-tuning records (io/sft_records.hpp): both forms read as written, and every malformed line
// refused with a message naming the file, its 1-based line and the field (share/docs/usage.md,
// Fine-tuning data). tests/cli/test_sft_prepare.py runs a few of these through the command.
#include "io/sft_records.hpp"

#include "io_test_util.hpp"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace meshtrain::io::test {
namespace sft_records_test {

const std::string good = R"({"instruction": "Name a colour.", "output": "Blue"})";

TEST(SftRecords, BothFormsAreReadAsWritten) {
  LocalDir dir;
  write_text(dir / "d.jsonl", R"({"messages": [{"role": "system", "content": "S"}, {"role": "user", "content": ""}, )"
                              R"({"role": "assistant", "content": "A\n"}, {"role": "user", "content": "U2"}, )"
                              R"({"role": "assistant", "content": "caf\u00e9 \ud83d\udc4d", "extra": 1}], "id": 3})"
                              "\r\n \t\n\n" +
                                  good + "\n" + R"({"instruction": "I", "input": "In", "output": "O"})");
  const std::vector<SftRecord> records = read_sft_records(dir / "d.jsonl");
  ASSERT_EQ(records.size(), 3u);
  EXPECT_TRUE(records[0].chat);
  EXPECT_EQ(records[0].where, dir / "d.jsonl line 1");
  ASSERT_EQ(records[0].messages.size(), 5u);
  EXPECT_EQ(records[0].messages[0].role, Role::system);
  EXPECT_EQ(records[0].messages[1].content, "");
  EXPECT_EQ(records[0].messages[2].content, "A\n");
  EXPECT_EQ(records[0].messages[4].role, Role::assistant);
  EXPECT_EQ(records[0].messages[4].content, "caf\xc3\xa9 \xf0\x9f\x91\x8d");
  EXPECT_FALSE(records[1].chat);
  EXPECT_EQ(records[1].where, dir / "d.jsonl line 4");
  EXPECT_EQ(records[1].input, "");
  EXPECT_EQ(records[2].instruction, "I");
  EXPECT_EQ(records[2].input, "In");
  EXPECT_EQ(records[2].output, "O");
}

TEST(SftRecords, MalformedLinesNameFileLineAndField) {
  LocalDir dir;
  const std::string user = R"({"role": "user", "content": "a"})",
                    assistant = R"({"role": "assistant", "content": "b"})";
  const auto chat = [](const std::string& messages) { return R"({"messages": [)" + messages + "]}"; };
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  const std::vector<std::pair<std::string, std::vector<std::string>>> cases{
      {R"({"messages": [)", {"not valid JSON", "unexpected end of input"}},
      {"[1, 2]", {"the line is a JSON array, expected a JSON object"}},
      {R"({"foo": 1})", {"messages is missing", "instruction and output"}},
      {chat(user + R"(, {"role": "bot", "content": "b"})"),
       {R"(messages[1].role "bot" is not system, user or assistant)"}},
      {chat(user + ", " + user + ", " + assistant), {R"(messages[1].role is "user", expected "assistant")"}},
      {chat(assistant), {R"(messages[0].role is "assistant", expected "user")"}},
      {chat(user + ", " + assistant + R"(, {"role": "system", "content": "s"})"),
       {R"(messages[2].role is "system", but a system message comes only first)"}},
      {chat(user + ", " + assistant + ", " + user), {"messages[2] is the last message", "ends with an assistant turn"}},
      {chat(R"({"role": "system", "content": "s"})"), {"messages[0] is the last message"}},
      {chat(user + R"(, {"role": "assistant", "content": ""})"), {"messages[1].content is empty"}},
      {chat(user + R"(, {"role": "assistant"})"), {"messages[1].content is missing"}},
      {chat(R"({"content": "a"}, )" + assistant), {"messages[0].role is missing"}},
      {chat(R"({"role": 1, "content": "a"}, )" + assistant), {"messages[0].role is 1, expected a string"}},
      {chat(R"({"role": "user", "content": 5}, )" + assistant), {"messages[0].content is 5, expected a string"}},
      {chat(R"({"role": "user", "content": null}, )" + assistant), {"messages[0].content is null"}},
      {R"({"messages": "hi"})", {R"(messages is "hi", expected an array)"}},
      {R"({"messages": []})", {"messages is empty"}},
      {R"({"messages": [1]})", {"messages[0] is 1, expected an object"}},
      {R"({"output": "x"})", {"instruction is missing"}},
      {R"({"instruction": "x"})", {"output is missing"}},
      {R"({"instruction": "x", "output": ""})", {"output is empty"}},
      {R"({"instruction": "x", "input": 3, "output": "y"})", {"input is 3, expected a string"}},
      {R"({"instruction": null, "output": "y"})", {"instruction is null"}},
      {R"({"instruction": ["x"], "output": "y"})", {R"(instruction is ["x"])"}},
      {R"({"messages": [], "instruction": "x", "output": "y"})", {"both messages and instruction/output"}},
      {"{\"instruction\": \"x\", \"output\": \"caf\xc3(\"}", {"output is not UTF-8", "0xc3", "offset 35"}},
      {"{\"instruction\": \"\xff\", \"output\": \"y\"}", {"instruction is not UTF-8", "0xff"}},
      {"{\"\xff\": 1}", {"the line is not UTF-8", "0xff"}},
      // Nested 100,000 deep (a recursion over it once overflowed the stack), in messages and in a content; 50
      // deep, within the limit, named by an excerpt; a number beyond a double's range.
      {R"({"messages": )" + deep + "}", {"not valid JSON", "nest deeper than 64 levels"}},
      {chat(R"({"role": "user", "content": )" + deep + "}, " + assistant), {"nest deeper than 64 levels"}},
      {R"({"messages": [)" + std::string(50, '[') + std::string(50, ']') + "]}",
       {"messages[0] is [[[[", "… (100 bytes), expected an object"}},
      {R"({"instruction": "x", "output": "y", "n": 1e999999})",
       {"not valid JSON", "number overflow parsing '1e999999'"}},
  };
  for (std::size_t i = 0; i < cases.size(); ++i) {
    SCOPED_TRACE(cases[i].first);
    const std::string path = dir / ("bad" + std::to_string(i) + ".jsonl");
    // line 1 good, line 2 blank, line 3 good, line 4 the bad record, line 5 good
    write_text(path, good + "\n\n" + good + "\r\n" + cases[i].first + "\n" + good + "\n");
    const std::string message = expect_input_error([&] { read_sft_records(path); }, {path + " line 4: "});
    for (const std::string& needle : cases[i].second) {
      EXPECT_NE(message.find(needle), std::string::npos) << "message lacks '" << needle << "':\n" << message;
    }
  }
  for (const char* text : {"", "\n \n\t\r\n"}) {
    write_text(dir / "empty.jsonl", text);
    expect_input_error([&] { read_sft_records(dir / "empty.jsonl"); }, {dir / "empty.jsonl", "holds no records"});
  }
  expect_input_error([&] { read_sft_records(dir / "absent.jsonl"); }, {dir / "absent.jsonl"});
}

}  // namespace sft_records_test
}  // namespace meshtrain::io::test
