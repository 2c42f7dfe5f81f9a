// The config keys that name a choice (core/config.hpp, EnumNames): each name parses to its value,
// prints back the same into the INI that checkpoints store, and reads back from it; other names
// are refused with the valid ones listed; `--help` lists them as it always has. The expected names
// and texts are written out here by hand (share/docs/usage.md, Keys), not taken from the table.
#include "core/config.hpp"
#include "core/errors.hpp"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <regex>
#include <string>
#include <vector>

namespace meshtrain {
namespace test_config_names {

struct Choice {
  std::string key;
  std::vector<std::string> names;
};

const std::vector<Choice> kChoices = {
    {"train.precision", {"fp32", "bf16", "fp16"}},
    {"train.recompute", {"none", "selective", "full"}},
    {"optim.decay", {"cosine", "constant"}},
    {"parallel.schedule", {"gpipe", "1f1b"}},
    {"parallel.backend", {"mpi", "nccl", "auto"}},
    {"data.order", {"sequential", "shuffle"}},
    {"data.overlong", {"truncate", "drop"}},
    {"checkpoint.io", {"independent", "collective"}},
    {"checkpoint.resume", {"auto", "never", "ck/step_00000003.h5"}},
    {"train.nonfinite", {"stop", "skip"}},
};

// "key = value" of the INI's [section] for `key` ("train.precision" → the line "precision = ...").
std::string ini_line(const std::string& key, const std::string& value) {
  return fmt::format("\n{} = {}\n", key.substr(key.find('.') + 1), value);
}

TEST(ConfigNames, EveryNameRoundTripsThroughTheStoredIni) {
  for (const Choice& c : kChoices) {
    for (const std::string& name : c.names) {
      const Config cfg = parse_config({"--" + c.key, name});
      const std::string ini = cfg.to_ini();
      EXPECT_NE(ini.find(ini_line(c.key, name)), std::string::npos) << c.key << " = " << name << "\n" << ini;
      const Config back = config_from_ini(ini, "test");
      EXPECT_EQ(back.to_ini(), ini) << c.key << " = " << name;
    }
  }
}

TEST(ConfigNames, NamesParseToTheirValues) {
  const Config fp16 = parse_config({"--train.precision", "fp16", "--parallel.schedule", "gpipe"});
  EXPECT_EQ(fp16.train.precision, Precision::fp16);
  EXPECT_EQ(fp16.parallel.schedule, PipelineSchedule::gpipe);
  const Config defaults = parse_config({});
  EXPECT_EQ(defaults.train.precision, Precision::fp32);
  EXPECT_EQ(defaults.parallel.schedule, PipelineSchedule::one_f_one_b);
  EXPECT_EQ(defaults.parallel.backend, CommBackend::automatic);
  EXPECT_EQ(defaults.checkpoint.resume.mode, ResumeMode::automatic);
  const Config named = parse_config({"--checkpoint.resume", "ck/step_00000003.h5"});
  EXPECT_EQ(named.checkpoint.resume.mode, ResumeMode::file);
  EXPECT_EQ(named.checkpoint.resume.file, "ck/step_00000003.h5");
  EXPECT_EQ(parse_config({"--checkpoint.resume", "never"}).checkpoint.resume.mode, ResumeMode::never);
  EXPECT_EQ(defaults.data.overlong, OverlongRecords::truncate);
  EXPECT_EQ(parse_config({"--data.overlong", "drop"}).data.overlong, OverlongRecords::drop);
}

TEST(ConfigNames, OtherNamesAreRefusedListingTheValidOnes) {
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--train.precision", "fp8"}, "train.precision = 'fp8' is invalid: valid values are fp32, bf16, fp16"},
      {{"--train.recompute", "Full"}, "train.recompute = 'Full' is invalid: valid values are none, selective, full"},
      {{"--parallel.schedule", "zb-h1"}, "parallel.schedule = 'zb-h1' is invalid: valid values are gpipe, 1f1b"},
      {{"--data.order", "random"}, "data.order = 'random' is invalid: valid values are sequential, shuffle"},
      {{"--data.overlong", "split"}, "data.overlong = 'split' is invalid: valid values are truncate, drop"},
      {{"--checkpoint.resume", ""}, "checkpoint.resume is empty: valid values are auto, never or a checkpoint file"},
  };
  for (const auto& [args, message] : cases) {
    try {
      parse_config(args);
      ADD_FAILURE() << args[0] << " " << args[1] << " was accepted";
    } catch (const InputError& e) {
      EXPECT_EQ(std::string(e.what()), message);
    }
  }
  // The same checks on the INI a checkpoint stores.
  EXPECT_THROW(config_from_ini("[optim]\ndecay = linear\n", "test"), InputError);
}

TEST(ConfigNames, HelpListsTheNames) {
  // Boost wraps the help column; compare with runs of white space made one space.
  const std::string help = std::regex_replace(config_help(), std::regex("\\s+"), " ");
  for (const char* text : {
           "fp32 | bf16 | fp16: weights and activations in compute (fp32 master weights and moments always)",
           "activation recomputation: none | selective (attention probabilities) | full (whole blocks)",
           "cosine | constant",
           "pipeline schedule: gpipe | 1f1b",
           "collectives: mpi | nccl | auto",
           "sequential | shuffle",
           "auto | never | a checkpoint file",
           "independent | collective: how ranks write tensor data (MPI-IO)",
           "fine-tuning records longer than model.seq_len + 1 tokens: truncate (keep the first model.seq_len + 1 "
           "tokens) | drop (leave the record out)",
           "stop (exit 6, nothing saved over latest) | skip (drop the step's update, up to train.nonfinite_skips in a "
           "row)",
       }) {
    EXPECT_NE(help.find(text), std::string::npos) << text << "\n" << help;
  }
}

}  // namespace test_config_names
}  // namespace meshtrain
