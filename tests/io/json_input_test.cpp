// io/json_input.hpp: the nesting limit at its bound and far past it (no crash at 100,000 levels),
// numbers at and beyond a double's range, syntax errors located, and the excerpt of a value for
// messages. The expected texts and bounds are written out here, not taken from the code.
#include "io/json_input.hpp"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <string>

namespace meshtrain::io {
namespace test_json_input {

std::string nested(int levels, const std::string& inner = "") {
  return std::string(std::size_t(levels), '[') + inner + std::string(std::size_t(levels), ']');
}

// The error parse_json_input raises for `text`, or "" when it accepts it.
std::string refusal(const std::string& text) {
  try {
    parse_json_input(text);
    return "";
  } catch (const JsonInputError& e) {
    return e.located();
  }
}

TEST(JsonInput, NestingUpTo64LevelsAndNoDeeper) {
  EXPECT_EQ(refusal(nested(64)), "");
  EXPECT_EQ(refusal(fmt::format("{{\"a\": {}}}", nested(63))), "");
  EXPECT_EQ(refusal(nested(65)), "arrays and objects nest deeper than 64 levels");
  std::string objects;
  for (int i = 0; i < 65; ++i) objects += "{\"k\": ";
  objects += fmt::format("1{}", std::string(65, '}'));
  EXPECT_EQ(refusal(objects), "arrays and objects nest deeper than 64 levels");
  // Far past the limit, and unterminated: refused at level 65, long before the end.
  EXPECT_EQ(refusal(nested(100000)), "arrays and objects nest deeper than 64 levels");
  EXPECT_EQ(refusal(std::string(100000, '[')), "arrays and objects nest deeper than 64 levels");
  EXPECT_EQ(parse_json_input(nested(64, "7")).dump(), nested(64, "7"));
}

TEST(JsonInput, NumbersWithinADoublesRangeOnly) {
  EXPECT_DOUBLE_EQ(parse_json_input("[1.5e308]")[0].get<double>(), 1.5e308);
  EXPECT_DOUBLE_EQ(parse_json_input("[-1.5e308]")[0].get<double>(), -1.5e308);
  EXPECT_EQ(parse_json_input("[1e-999999]")[0].get<double>(), 0.0);  // underflow is zero, as in every parser
  for (const std::string number : {"1e999999", "-1e999999", "2e308"}) {
    const std::string why = refusal(fmt::format("{{\"n\": {}}}", number));
    EXPECT_NE(why.find(fmt::format("number overflow parsing '{}'", number)), std::string::npos) << why;
    EXPECT_NE(why.find("within a double's range"), std::string::npos) << why;
    EXPECT_EQ(why.find("json.exception"), std::string::npos) << why;
  }
}

TEST(JsonInput, SyntaxErrorsNameTheByteWithoutTheLibrarysPrefix) {
  const std::string why = refusal("{\"a\": tru}");
  EXPECT_EQ(why.rfind("byte 10: syntax error while parsing value - invalid literal", 0), 0u) << why;
  EXPECT_EQ(why.find("json.exception"), std::string::npos) << why;
  EXPECT_NE(refusal("").find("unexpected end of input"), std::string::npos);
}

TEST(JsonInput, KeysNamedTwiceRefusedWhereAsked) {
  const std::string twice = R"({"a": 1, "b": {"c": 2, "c": 3}})";
  EXPECT_EQ(parse_json_input(twice)["b"]["c"], 3);  // the library's reading: the last
  try {
    parse_json_input(twice, DuplicateKeys::refused);
    ADD_FAILURE() << "accepted";
  } catch (const JsonInputError& e) {
    EXPECT_EQ(std::string(e.what()), R"(an object names the key "c" twice)");
  }
  // One key in two objects, at any depth, is no repetition.
  const nlohmann::json apart =
      parse_json_input(R"({"c": 1, "b": {"c": 2, "d": [{"c": 3}, {"c": 4}]}})", DuplicateKeys::refused);
  EXPECT_EQ(apart["b"]["d"][1]["c"], 4);
}

TEST(JsonInput, ExcerptKeepsShortValuesAndCutsLongOnesAtACharacter) {
  EXPECT_EQ(json_excerpt(nlohmann::json::parse(R"({"a":[1,2]})")), R"({"a":[1,2]})");
  EXPECT_EQ(json_excerpt(parse_json_input(nested(50))),
            fmt::format("{}{}… (100 bytes)", std::string(50, '['), std::string(30, ']')));
  // "\"xxxxxxxxxxéé\"" is 16 bytes, each é 2: a cut after 14 would split the second é, so 13 are kept.
  const std::string cut = json_excerpt(nlohmann::json(fmt::format("{}éé", std::string(10, 'x'))), 14);
  EXPECT_EQ(cut, "\"xxxxxxxxxxé… (16 bytes)");
  EXPECT_EQ(json_excerpt(nlohmann::json("\xff"), 80), "\"\xEF\xBF\xBD\"");  // invalid UTF-8 replaced, not thrown
}

}  // namespace test_json_input
}  // namespace meshtrain::io
