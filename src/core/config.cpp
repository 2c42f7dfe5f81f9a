// The run configuration read with Boost.ProgramOptions from the command line and an INI file, and
// written back as INI and `--help`. The keys are core/config_keys.cpp's table, the checks
// core/config_checks.cpp's: this file only connects them to Boost.
#include "core/config.hpp"

#include "core/command_line.hpp"
#include "core/config_checks.hpp"
#include "core/config_keys.hpp"
#include "core/errors.hpp"
#include "core/model_sizes.hpp"
#include "core/regular_file.hpp"

#include <boost/program_options.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <sstream>
#include <type_traits>
#include <variant>

namespace po = boost::program_options;

namespace meshtrain {

// Boost.ProgramOptions converts a key's text with validate(), found by argument-dependent lookup:
// the enums' names are checked as the text is read, so a bad name fails like any other bad value.
template <NamedEnum E>
void validate(boost::any& out, const std::vector<std::string>& values, E*, int) {
  out = parse_name<E>(po::validators::get_single_string(values));
}

void validate(boost::any& out, const std::vector<std::string>& values, ResumeFrom*, int) {
  const std::string& text = po::validators::get_single_string(values);
  if (text.empty()) input_error("checkpoint.resume is empty: valid values are auto, never or a checkpoint file");
  const std::optional<ResumeMode> mode = from_name<ResumeMode>(text);
  out = mode ? ResumeFrom{*mode, {}} : ResumeFrom{ResumeMode::file, text};
}

namespace {

// Every key as a Boost option bound to its field of `cfg`, whose value there is the default.
po::options_description key_options(Config& cfg) {
  po::options_description options("meshtrain train options");
  for (const ConfigKey& key : config_keys()) {
    std::visit(
        [&](auto* field) {
          options.add_options()(key.name, po::value(field)->default_value(*field, key_value_text(key, cfg)),
                                key_help(key));
        },
        key.field(cfg));
  }
  return options;
}

// What a key's value must be, for Boost's type errors: "an integer", "a number" or "text".
const char* value_kind(const std::string& name) {
  const ConfigKey* key = find_config_key(name);
  if (key == nullptr) return "a value";
  const Config defaults;
  return std::visit(
      [](const auto* field) {
        using T = std::remove_cvref_t<decltype(*field)>;
        return std::is_same_v<T, bool>       ? "true or false"
               : std::is_integral_v<T>       ? "an integer"
               : std::is_floating_point_v<T> ? "a number"
                                             : "text";
      },
      key->value(defaults));
}

// What the model's stages read of the run's keys: the multiple the layouts pad the vocabulary to, from
// train.vocab_multiple and this build (check_config() refuses a key out of range; the layouts never see
// less than 1), parallel.sequence_parallel and parallel.cp.
void resolve_model_settings(Config& c) {
  c.model.vocab_multiple = std::max(1, resolved_vocab_multiple(c.train.vocab_multiple));
  c.model.sequence_parallel = c.parallel.sequence_parallel;
  c.model.context_parallel = c.parallel.cp;
}

// Boost's messages name the option as "--model.layers"; ours say the key.
[[noreturn]] void rethrow_as_input_error(const po::error& e, const std::string& origin) {
  std::string hint;
  if (dynamic_cast<const po::unknown_option*>(&e) != nullptr) {
    hint = " (`meshtrain train --help` lists the valid keys)";
  } else if (const auto* bad = dynamic_cast<const po::invalid_option_value*>(&e)) {
    std::string key = bad->get_option_name();
    key.erase(0, key.find_first_not_of('-'));
    hint = fmt::format(": {} takes {}", key, value_kind(key));
  }
  input_error("{}: {}{}", origin, e.what(), hint);
}

void parse_ini_stream(std::istream& in, const po::options_description& options, po::variables_map& vm,
                      const std::string& origin) {
  try {
    po::store(po::parse_config_file(in, options, /*allow_unregistered=*/false), vm);
  } catch (const po::error& e) {
    rethrow_as_input_error(e, origin);
  }
}

}  // namespace

Config parse_config(const std::vector<std::string>& args) {
  Config cfg;
  const po::options_description keys = key_options(cfg);
  po::options_description cli;
  std::string config_file;
  cli.add_options()("config", po::value<std::string>(&config_file), "INI file of keys");
  cli.add(keys);

  po::variables_map vm;
  try {
    po::parsed_options parsed =
        parse_command_line(args, cli, "meshtrain train [--config FILE.ini] [--section.key VALUE ...]");
    // A key given twice takes its last value, so scripts can append overrides to a base command.
    auto& options = parsed.options;
    for (auto it = options.begin(); it != options.end();) {
      const bool repeated = std::any_of(std::next(it), options.end(),
                                        [&](const po::option& later) { return later.string_key == it->string_key; });
      it = repeated ? options.erase(it) : std::next(it);
    }
    // Command line first: Boost keeps the first value stored for a key, so it wins over the file.
    po::store(parsed, vm);
  } catch (const po::error& e) {
    rethrow_as_input_error(e, "command line");
  }
  if (vm.count("config")) {
    const std::string path = vm["config"].as<std::string>();
    // A directory would read as an empty file and a FIFO would block: regular files only.
    std::istringstream in(read_regular_file(path, "config file"));
    parse_ini_stream(in, keys, vm, fmt::format("config file '{}'", path));
    cfg.config_file = path;
  }
  try {
    po::notify(vm);
  } catch (const po::error& e) {
    rethrow_as_input_error(e, "configuration");
  }
  GivenKeys given;
  for (const auto& [key, value] : vm) {
    if (!value.defaulted()) given.insert(key);
  }
  resolve_model_settings(cfg);
  check_config(cfg, given);
  return cfg;
}

Config config_from_ini(const std::string& ini_text, const std::string& origin) {
  Config cfg;
  po::variables_map vm;
  std::istringstream in(ini_text);
  parse_ini_stream(in, key_options(cfg), vm, origin);
  po::notify(vm);
  resolve_model_settings(cfg);
  // The checks name keys, not where they were read: a stored config's refusal names its file too.
  try {
    check_config(cfg, {});
  } catch (const InputError& e) {
    input_error("{}: {}", origin, e.what());
  }
  return cfg;
}

double LoraConfig::scaling() const { return rslora ? alpha / std::sqrt(double(rank)) : alpha / double(rank); }

std::string Config::to_ini() const {
  std::map<std::string, std::string, std::less<>> sections;  // sorted by name; their keys in the table's order
  for (const ConfigKey& key : config_keys()) {
    const std::string_view name = key.name;
    const std::size_t dot = name.find('.');
    sections[std::string(name.substr(0, dot))] +=
        fmt::format("{} = {}\n", name.substr(dot + 1), key_value_text(key, *this));
  }
  std::string out;
  for (const auto& [section, lines] : sections) out += fmt::format("[{}]\n{}", section, lines);
  return out;
}

std::string config_help() {
  Config cfg;
  std::ostringstream out;
  out << key_options(cfg);
  return out.str();
}

}  // namespace meshtrain
