// Command-line parsing shared by the commands: Boost.ProgramOptions with stray arguments refused.
#pragma once

#include "core/errors.hpp"

#include <boost/program_options.hpp>
#include <fmt/format.h>

#include <sstream>

#include <string>
#include <vector>

namespace meshtrain {

// Parses `args` against `options`. A bare argument that belongs to no option (say `train run.ini`
// without --config) is an InputError naming it, with `usage` as the hint; Boost would drop it.
inline boost::program_options::parsed_options parse_command_line(
    const std::vector<std::string>& args, const boost::program_options::options_description& options,
    const std::string& usage) {
  namespace po = boost::program_options;
  po::parsed_options parsed = po::command_line_parser(args)
                                  .options(options)
                                  .style(po::command_line_style::unix_style ^ po::command_line_style::allow_guessing)
                                  .run();
  for (const po::option& o : parsed.options) {
    if (o.position_key >= 0) {
      input_error("unexpected argument '{}' (usage: {})", o.original_tokens.empty() ? "" : o.original_tokens.front(),
                  usage);
    }
  }
  return parsed;
}

// True when args ask for help (-h/--help); commands print their usage then.
inline bool wants_help(const std::vector<std::string>& args) {
  for (const auto& a : args) {
    if (a == "-h" || a == "--help") return true;
  }
  return false;
}

// Prints `usage` and the options when args ask for help, and says whether they did.
inline bool print_help_if_asked(const std::vector<std::string>& args,
                                const boost::program_options::options_description& options, const std::string& usage) {
  if (!wants_help(args)) return false;
  std::ostringstream text;
  text << options;
  fmt::print("usage: {}\n{}", usage, text.str());
  return true;
}

// Parses `args` into the variables bound to `options`; every fault is an InputError with the usage.
inline void parse_options(const std::vector<std::string>& args,
                          const boost::program_options::options_description& options, const std::string& usage) {
  namespace po = boost::program_options;
  try {
    po::variables_map vm;
    po::store(parse_command_line(args, options, usage), vm);
    po::notify(vm);
  } catch (const po::error& e) {
    input_error("{} (usage: {})", e.what(), usage);
  }
}

}  // namespace meshtrain
