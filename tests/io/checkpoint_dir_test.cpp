// Checkpoint directory conventions: names, the `latest` pointer, pruning, directory creation.
#include "io/checkpoint/directory.hpp"

#include "io_test_util.hpp"

#include <gtest/gtest.h>

#include <filesystem>
#include <set>
#include <string>
#include <vector>

namespace meshtrain::io::test {
namespace checkpoint_dir_test {

std::set<std::string> names_in(const std::string& dir) {
  std::set<std::string> names;
  for (const auto& e : std::filesystem::directory_iterator(dir)) names.insert(e.path().filename().string());
  return names;
}

TEST(CheckpointDir, PathAndStep) {
  EXPECT_EQ(checkpoint_path("ckpt", 42), "ckpt/step_00000042.h5");
  EXPECT_EQ(checkpoint_path("ckpt/", 0), "ckpt/step_00000000.h5");
  EXPECT_EQ(checkpoint_path("/a/b", 123456789), "/a/b/step_123456789.h5");
  EXPECT_EQ(checkpoint_step("ckpt/step_00000042.h5"), 42);
  EXPECT_EQ(checkpoint_step("step_123456789.h5"), 123456789);
  EXPECT_FALSE(checkpoint_step("step_00000042.h5.tmp"));
  EXPECT_FALSE(checkpoint_step("step_.h5"));
  EXPECT_FALSE(checkpoint_step("step_12a.h5"));
  EXPECT_FALSE(checkpoint_step("latest"));
}

TEST(CheckpointDir, LatestRoundTrip) {
  LocalDir dir;
  EXPECT_FALSE(read_latest(dir.path()));
  EXPECT_FALSE(read_latest(dir / "not_there"));
  write_text(checkpoint_path(dir.path(), 7), "x");
  write_latest(dir.path(), checkpoint_path(dir.path(), 7));
  EXPECT_EQ(read_text(dir / "latest"), "step_00000007.h5\n");
  EXPECT_EQ(read_latest(dir.path()), checkpoint_path(dir.path(), 7));
  write_text(checkpoint_path(dir.path(), 9), "x");
  write_latest(dir.path(), "step_00000009.h5");
  EXPECT_EQ(read_latest(dir.path()), checkpoint_path(dir.path(), 9));
  EXPECT_EQ(names_in(dir.path()), (std::set<std::string>{"latest", "step_00000007.h5", "step_00000009.h5"}));
}

TEST(CheckpointDir, BadLatestIsAnInputError) {
  LocalDir dir;
  write_text(dir / "latest", "step_00000005.h5\n");
  expect_input_error([&] { read_latest(dir.path()); }, {dir / "latest", "step_00000005.h5", "does not exist"});
  write_text(dir / "latest", "\n");
  expect_input_error([&] { read_latest(dir.path()); }, {dir / "latest", "empty"});
  write_text(dir / "latest", "../elsewhere/step_00000005.h5\n");
  expect_input_error([&] { read_latest(dir.path()); }, {dir / "latest", "../elsewhere/step_00000005.h5"});
}

TEST(CheckpointDir, LatestThatIsADirectoryIsNamedAsOne) {
  LocalDir dir;
  write_text(dir / "step_00000005.h5", "x");
  std::filesystem::create_directory(dir / "latest");
  const std::string message = expect_input_error([&] { read_latest(dir.path()); }, {dir / "latest", "is a directory"});
  EXPECT_EQ(message.find("empty"), std::string::npos) << message;
}

TEST(CheckpointDir, PruneKeepsTheNewestAndTheLatestNamed) {
  LocalDir dir;
  for (int step : {100, 200, 300, 400, 500, 600}) write_text(checkpoint_path(dir.path(), step), "x");
  write_text(dir / "step_00000050.h5.tmp", "half-written");
  write_text(dir / "notes.txt", "mine");
  write_latest(dir.path(), checkpoint_path(dir.path(), 200));

  EXPECT_EQ(checkpoints_newest_first(dir.path()),
            (std::vector<std::string>{checkpoint_path(dir.path(), 600), checkpoint_path(dir.path(), 500),
                                      checkpoint_path(dir.path(), 400), checkpoint_path(dir.path(), 300),
                                      checkpoint_path(dir.path(), 200), checkpoint_path(dir.path(), 100)}));

  prune_checkpoints(dir.path(), 0);  // keep every checkpoint; a killed save's .tmp is only litter
  EXPECT_EQ(names_in(dir.path()).size(), 8u);
  EXPECT_EQ(names_in(dir.path()).count("step_00000050.h5.tmp"), 0u);

  write_text(dir / "notes.h5.tmp", "not ours");
  prune_checkpoints(dir.path(), 2);
  EXPECT_EQ(names_in(dir.path()), (std::set<std::string>{"step_00000200.h5", "step_00000500.h5", "step_00000600.h5",
                                                         "notes.h5.tmp", "notes.txt", "latest"}));
  prune_checkpoints(dir.path(), 1);
  EXPECT_EQ(names_in(dir.path()),
            (std::set<std::string>{"step_00000200.h5", "step_00000600.h5", "notes.h5.tmp", "notes.txt", "latest"}));
}

TEST(CheckpointDir, PruneOrdersByStepNotByName) {
  LocalDir dir;
  write_text(dir / "step_99999999.h5", "x");
  write_text(dir / "step_100000000.h5", "x");  // newer, though it sorts first as text
  prune_checkpoints(dir.path(), 1);
  EXPECT_EQ(names_in(dir.path()), (std::set<std::string>{"step_100000000.h5"}));
}

TEST(CheckpointDir, EnsureDirectory) {
  LocalDir dir;
  const std::string nested = dir / "a/b/c";
  ensure_directory(nested);
  EXPECT_TRUE(std::filesystem::is_directory(nested));
  ensure_directory(nested);  // exists already: fine
  write_text(dir / "file", "x");
  expect_input_error([&] { ensure_directory(dir / "file"); }, {dir / "file", "not a directory"});
  expect_input_error([&] { ensure_directory(dir / "file/sub"); }, {dir / "file/sub"});
}

}  // namespace checkpoint_dir_test
}  // namespace meshtrain::io::test
