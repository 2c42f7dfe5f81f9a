// The config keys that name a choice (core/config.hpp, EnumNames): each name parses to its value,
// prints back the same into the INI that checkpoints store, and reads back from it; other names
// are refused with the valid ones listed; `--help` lists them as it always has. The expected names
// and texts are written out here by hand (share/docs/usage.md, Keys), not taken from the table.
#include "core/config.hpp"
#include "core/config_keys.hpp"
#include "core/errors.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <gtest/gtest.h>

#include <map>
#include <optional>
#include <regex>
#include <sstream>
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
      {{"--parallel.schedule", "interleaved"},
       "parallel.schedule = 'interleaved' is invalid: valid values are gpipe, 1f1b, zb-h1"},
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

// The key table (core/config_keys.hpp) is what every reader of the keys reads: each of its keys is in
// `--help`, stands once in the stored INI under its section, and `config --get` (config_value) gives
// that line's value. The INI is split into lines here, not through the table, and the config's
// values differ from the defaults, so that a reader of a default Config would be caught.
TEST(ConfigKeys, EveryKeyIsInHelpAndInTheIniWhoseLineGetReads) {
  const Config cfg = parse_config({"--model.arch", "llama", "--model.experts", "4", "--model.rope_scaling", "llama3",
                                   "--model.rope_factor", "8", "--lora.rank", "4", "--lora.targets", "q_proj",
                                   "--checkpoint.init_weights", "base.h5", "--train.seed", "7", "--optim.lr", "0.001"});
  std::map<std::string, std::string> ini_values;  // "section.key" → value
  std::istringstream lines(cfg.to_ini());
  std::string line, section;
  while (std::getline(lines, line)) {
    if (line.starts_with("[")) {
      section = line.substr(1, line.size() - 2);
      continue;
    }
    const std::size_t eq = line.find(" = ");
    ASSERT_NE(eq, std::string::npos) << line;
    const std::string key = section + "." + line.substr(0, eq);
    EXPECT_TRUE(ini_values.emplace(key, line.substr(eq + 3)).second) << key << " stands twice in the INI";
  }
  const std::string help = config_help();
  EXPECT_EQ(ini_values.size(), config_keys().size());
  for (const ConfigKey& key : config_keys()) {
    EXPECT_NE(help.find(fmt::format("  --{} ", key.name)), std::string::npos) << key.name << " is not in --help";
    const auto in_ini = ini_values.find(key.name);
    ASSERT_NE(in_ini, ini_values.end()) << key.name << " is not in the INI";
    EXPECT_EQ(config_value(cfg, key.name), in_ini->second) << key.name;
  }
  EXPECT_EQ(config_value(cfg, "model.arch"), "llama");
  EXPECT_EQ(config_value(cfg, "model.rope_factor"), "8");
  EXPECT_EQ(config_value(cfg, "lora.targets"), "q_proj");
  EXPECT_EQ(config_value(cfg, "optim.lr"), "0.001");
  EXPECT_EQ(config_value(cfg, "train.seed"), "7");
  EXPECT_EQ(config_value(cfg, "model.layerz"), std::nullopt);
  EXPECT_EQ(config_value(cfg, "model"), std::nullopt);
}

// The message parse_config refuses `args` with, or "" when it accepts them.
std::string refusal(const std::vector<std::string>& args) {
  try {
    parse_config(args);
    return "";
  } catch (const InputError& e) {
    return e.what();
  }
}

// Each family's keys (share/docs/usage.md, Keys): a value outside the key's range refused naming the key,
// the value and the range where the family's setting is on; the bounds themselves as open or closed as the
// range says; the key held to its default where the setting is off.
TEST(ConfigKeys, EachFamilysRangesWhereItIsOnAndItsDefaultsWhereItIsOff) {
  const std::vector<std::string> llama = {"--model.arch", "llama"};
  const std::vector<std::string> moe = {"--model.arch", "llama", "--model.experts", "4"};
  const std::vector<std::string> linear = {"--model.arch", "llama", "--model.rope_scaling", "linear"};
  const std::vector<std::string> llama3 = {"--model.arch", "llama", "--model.rope_scaling", "llama3"};
  const std::vector<std::string> lora = {"--lora.rank", "4", "--checkpoint.init_weights", "base.h5"};
  auto with = [](std::vector<std::string> base, const std::vector<std::string>& more) {
    base.insert(base.end(), more.begin(), more.end());
    return base;
  };
  struct Refused {
    std::vector<std::string> args;
    std::vector<std::string> needles;
  };
  const std::vector<Refused> refused = {
      {{"--model.layers", "0"}, {"model.layers = 0 is invalid", "1..4096"}},
      {{"--model.layers", "4097"}, {"model.layers = 4097 is invalid", "1..4096"}},
      {{"--optim.beta2", "1"}, {"optim.beta2 = 1 is invalid", "[0, 1)"}},
      {{"--optim.lr", "inf"}, {"optim.lr = inf is invalid", "finite number > 0"}},
      {{"--train.loss_scale", "nan"}, {"train.loss_scale = nan is invalid", ">= 1", "(fp16's initial loss scale"}},
      {{"--parallel.zero", "4"}, {"parallel.zero = 4 is invalid", "0..3", "(0: none"}},
      {with(llama, {"--model.head_dim", "1026"}), {"model.head_dim = 1026 is invalid", "0..1024"}},
      {{"--model.head_dim", "0"}, {"model.head_dim is a llama key", "(even at its default value"}},
      {with(moe, {"--model.aux_loss_coef", "-1"}), {"model.aux_loss_coef = -1 is invalid", "finite number >= 0"}},
      {with(llama, {"--model.moe_every", "2"}), {"model.moe_every is a mixture-of-experts key", "model.experts > 0"}},
      {{"--model.moe_every", "2"}, {"model.moe_every is a llama key", "model.arch = llama"}},
      {with(linear, {"--model.rope_factor", "0"}), {"model.rope_factor = 0 is invalid", "finite number > 0"}},
      {with(llama, {"--model.rope_factor", "2"}), {"model.rope_factor is a rotary scaling key"}},
      {with(llama3, {"--model.rope_original_max_position", "0"}),
       {"model.rope_original_max_position = 0 is invalid", "positive integer"}},
      {with(linear, {"--model.rope_low_freq_factor", "2"}),
       {"model.rope_low_freq_factor is a key of model.rope_scaling = llama3 only"}},
      {with(llama, {"--model.rope_high_freq_factor", "8"}), {"model.rope_high_freq_factor is a rotary scaling key"}},
      {with(lora, {"--lora.dropout", "1"}), {"lora.dropout = 1 is invalid", "[0, 1)"}},
      {{"--lora.rank", "65537"}, {"lora.rank = 65537 is invalid", "0..65536", "(0: off)"}},
      {{"--lora.alpha", "8"}, {"lora.alpha is a LoRA key", "lora.rank = 0", "set lora.rank > 0"}},
  };
  for (const auto& [args, needles] : refused) {
    const std::string why = refusal(args);
    EXPECT_NE(why, "") << fmt::format("{} was accepted", fmt::join(args, " "));
    for (const std::string& needle : needles) {
      EXPECT_NE(why.find(needle), std::string::npos) << fmt::format("{}: {}", fmt::join(args, " "), why);
    }
  }
  const std::vector<std::vector<std::string>> accepted = {
      {"--model.layers", "4096"},
      {"--optim.beta2", "0"},
      {"--train.loss_scale", "inf"},  // not held finite: the scaler halves it at the first overflow
      {"--parallel.zero", "3"},
      with(llama, {"--model.head_dim", "1024"}),
      with(llama, {"--model.experts_per_token", "2"}),  // an MoE key at its default without experts
      with(moe, {"--model.aux_loss_coef", "0"}),
      with(linear, {"--model.rope_factor", "0.5"}),
      with(llama3, {"--model.rope_original_max_position", "1"}),
      with(lora, {"--lora.dropout", "0"}),
  };
  for (const auto& args : accepted) EXPECT_EQ(refusal(args), "") << fmt::format("{}", fmt::join(args, " "));
  // A stored config lists every key, [lora]'s under lora.rank = 0 too: not a mistake of its author.
  Config stored;
  stored.model.lora.alpha = 16;
  EXPECT_NO_THROW(config_from_ini(stored.to_ini(), "a stored config"));
}

}  // namespace test_config_names
}  // namespace meshtrain
