// io/file_kind.hpp: every kind of file meshtrain writes told by its contents — and the output
// guard's edge cases: a truncated shard is still a shard, a text whose newlines parse as protocol
// buffer fields is no tokenizer model, an empty file is nothing to lose.
#include "io/file_kind.hpp"
#include "io/metrics_writer.hpp"
#include "io/safetensors_writer.hpp"
#include "io/token_shard.hpp"
#include "io/tokenizer_training.hpp"
#include "io_test_util.hpp"

#include <gtest/gtest.h>
#include <hdf5.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <string>
#include <vector>

namespace meshtrain::io::test {
namespace file_kind_test {

std::string text_lines() {
  std::string text;
  for (int line = 0; line < 300; ++line) text += "alpha beta gamma delta " + std::to_string(line % 10) + "\n";
  return text;
}

TEST(FileKind, EachKindMeshtrainWritesIsToldByItsContents) {
  LocalDir dir;
  write_text(dir / "text.txt", text_lines());
  train_tokenizer({dir / "text.txt"}, 300, dir / "tok.model");
  const std::vector<std::uint16_t> tokens = {1, 2, 3, 4};
  write_token_shard(dir / "shard.bin", tokens);
  write_safetensors(dir / "model.safetensors", {{"w", {2}, {1.0f, 2.0f}}}, {});
  MetricsWriter(dir / "m.jsonl").write({{"step", 1}, {"loss", 5.5}});
  write_text(dir / "t.json", nlohmann::json{{"counted", "the run's last step"}, {"ranks", {}}}.dump(1));
  H5Fclose(H5Fcreate((dir / "c.h5").c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT));
  write_text(dir / "empty", "");

  EXPECT_EQ(file_kind(dir / "tok.model"), FileKind::tokenizer);
  EXPECT_EQ(file_kind(dir / "shard.bin"), FileKind::token_shard);
  EXPECT_EQ(file_kind(dir / "model.safetensors"), FileKind::safetensors);
  EXPECT_EQ(file_kind(dir / "m.jsonl"), FileKind::metrics_jsonl);
  EXPECT_EQ(file_kind(dir / "t.json"), FileKind::traffic_json);
  EXPECT_EQ(file_kind(dir / "c.h5"), FileKind::hdf5);
  EXPECT_EQ(file_kind(dir / "empty"), FileKind::empty);
  EXPECT_EQ(file_kind(dir / "text.txt"), FileKind::other);  // its '\n' bytes read as protobuf field 1
}

TEST(FileKind, ATruncatedShardIsStillAShard) {
  LocalDir dir;
  write_token_shard(dir / "shard.bin", std::vector<std::uint16_t>(100, 7));
  std::filesystem::resize_file(dir / "shard.bin", 16);
  EXPECT_EQ(file_kind(dir / "shard.bin"), FileKind::token_shard);
}

TEST(FileKind, LookalikesAreOfAnotherKind) {
  LocalDir dir;
  write_text(dir / "a.json", R"({"step": 1})");    // one object with "step" and no newline: a metrics line
  write_text(dir / "b.json", R"({"ranks": []})");  // no "counted": not a traffic file
  write_text(dir / "c.ini", "[train]\nsteps = 4\n");
  write_bytes(dir / "d.bin", {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f, '{'});  // a header longer than the file
  EXPECT_EQ(file_kind(dir / "a.json"), FileKind::metrics_jsonl);
  EXPECT_EQ(file_kind(dir / "b.json"), FileKind::other);
  EXPECT_EQ(file_kind(dir / "c.ini"), FileKind::config_ini);  // meshtrain's [train] section: a config of its keys
  EXPECT_EQ(file_kind(dir / "d.bin"), FileKind::other);
}

// `import --ini`'s file and a config written by hand are INIs of meshtrain's keys; an INI of other sections,
// a line that is no key = value, or keys before any section are other texts.
TEST(FileKind, IniOfMeshtrainsSections) {
  LocalDir dir;
  write_text(dir / "import.ini",
             "# meshtrain import /m: LlamaForCausalLM\n[model]\narch = llama\nlayers = 2\n[lora]\nrank = 4\n"
             "[checkpoint]\ninit_weights = /w.h5\n[data]\ntokenizer = /m/tokenizer.json\n");
  write_text(dir / "run.ini", "; by hand\n\n[train]\r\n  steps = 10\r\n[optim]\nlr = 3e-4\n[parallel]\ntp=2\n[log]\n");
  write_text(dir / "other_section.ini", "[model]\nlayers = 2\n[server]\nport = 80\n");
  write_text(dir / "no_equals.ini", "[train]\nsteps 4\n");
  write_text(dir / "before_section.ini", "steps = 4\n[train]\n");
  write_text(dir / "comments_only.ini", "# [model]\n");
  EXPECT_EQ(file_kind(dir / "import.ini"), FileKind::config_ini);
  EXPECT_EQ(file_kind(dir / "run.ini"), FileKind::config_ini);
  for (const char* name : {"other_section.ini", "no_equals.ini", "before_section.ini", "comments_only.ini"}) {
    EXPECT_EQ(file_kind(dir / name), FileKind::other) << name;
  }
}

}  // namespace file_kind_test
}  // namespace meshtrain::io::test
