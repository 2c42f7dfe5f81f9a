// meshtrain config [--config FILE.ini] [--section.key VALUE ...] [--get KEY ...]: the configuration
// `meshtrain train` would run with these arguments, parsed and checked by the same code, so that
// scripts read keys from the one source of truth instead of parsing the INI and copying defaults
// (slurm/train.sbatch). Runs without MPI and Kokkos (main.cpp): a batch script asks it before any
// launcher starts.
#include "commands/commands.hpp"

#include "core/command_line.hpp"
#include "core/config.hpp"
#include "core/errors.hpp"

#include <fmt/format.h>

#include <optional>
#include <string>
#include <vector>

namespace meshtrain {

namespace {

constexpr const char* config_usage = "meshtrain config [--config FILE.ini] [--section.key VALUE ...] [--get KEY ...]";

struct ConfigRequest {
  Args train_args;                // everything but --get and its keys: what `train` would be given
  std::vector<std::string> keys;  // --get's keys, in order; none: the whole configuration
  bool get = false;
};

// --get takes the arguments after it up to the next option; it may come anywhere and more than once.
ConfigRequest split_get(const Args& args) {
  ConfigRequest req;
  for (std::size_t i = 0; i < args.size(); ++i) {
    if (args[i] != "--get") {
      req.train_args.push_back(args[i]);
      continue;
    }
    req.get = true;
    while (i + 1 < args.size() && args[i + 1].rfind("--", 0) != 0) req.keys.push_back(args[++i]);
  }
  if (req.get && req.keys.empty()) input_error("--get names no key (usage: {})", config_usage);
  return req;
}

}  // namespace

int config_command(const Args& args) {
  if (wants_help(args)) {
    fmt::print(
        "usage: {}\n\n"
        "Prints the configuration `meshtrain train` would run with the same arguments, after the same\n"
        "checks (bad input exits 2): every key as INI, or with --get the values of the keys named, one a\n"
        "line, in that order. The keys are `meshtrain train --help`'s.\n",
        config_usage);
    return 0;
  }
  const ConfigRequest req = split_get(args);
  const Config config = parse_config(req.train_args);
  if (!req.get) {
    fmt::print("{}", config.to_ini());
    return 0;
  }
  std::string out;
  for (const std::string& key : req.keys) {
    // The key table's text of the value, the same as the INI line checkpoints store (Config::to_ini).
    const std::optional<std::string> value = config_value(config, key);
    if (!value) input_error("--get {}: no such key (`meshtrain train --help` lists the keys)", key);
    out += *value + "\n";
  }
  fmt::print("{}", out);  // all or nothing: a bad key prints no value
  return 0;
}

}  // namespace meshtrain
