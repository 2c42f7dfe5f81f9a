// The metrics file: one JSON object per line, appended, parent directories created.
#include "io/metrics_writer.hpp"

#include "io_test_util.hpp"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <sstream>
#include <string>
#include <vector>

namespace meshtrain::io::test {
namespace metrics_writer_test {

std::vector<nlohmann::json> read_lines(const std::string& path) {
  std::istringstream in(read_text(path));
  std::vector<nlohmann::json> records;
  for (std::string line; std::getline(in, line);) records.push_back(nlohmann::json::parse(line));
  return records;
}

TEST(MetricsWriter, WritesOneFlushedLinePerRecordAndAppends) {
  LocalDir dir;
  const std::string path = dir / "logs/run1/metrics.jsonl";
  {
    MetricsWriter writer(path);
    EXPECT_TRUE(writer.enabled());
    writer.write({{"step", 1}, {"loss", 10.5}, {"lr", 0.001}});
    // Flushed: readable before the writer goes away.
    const auto records = read_lines(path);
    ASSERT_EQ(records.size(), 1u);
    EXPECT_EQ(records[0]["step"], 1);
    EXPECT_DOUBLE_EQ(records[0]["loss"].get<double>(), 10.5);
    writer.write({{"step", 2}, {"loss", 9.25}, {"note", "two\nlines"}});
  }
  {
    MetricsWriter writer(path);
    writer.write({{"step", 3}});
  }
  const auto records = read_lines(path);
  ASSERT_EQ(records.size(), 3u);
  EXPECT_EQ(records[1]["step"], 2);
  EXPECT_EQ(records[1]["note"], "two\nlines");
  EXPECT_EQ(records[2]["step"], 3);
}

TEST(MetricsWriter, EmptyPathDisables) {
  MetricsWriter writer("");
  EXPECT_FALSE(writer.enabled());
  EXPECT_NO_THROW(writer.write({{"step", 1}}));
  MetricsWriter none;
  EXPECT_FALSE(none.enabled());
}

TEST(MetricsWriter, UnwritablePathIsAnInputError) {
  LocalDir dir;
  write_text(dir / "file", "x");
  expect_input_error([&] { MetricsWriter writer(dir / "file/metrics.jsonl"); }, {dir / "file"});
}

}  // namespace metrics_writer_test
}  // namespace meshtrain::io::test
