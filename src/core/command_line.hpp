// Command-line parsing shared by the commands: Boost.ProgramOptions with stray arguments refused.
#pragma once

#include "core/errors.hpp"

#include <boost/program_options.hpp>

#include <string>
#include <vector>

namespace meshtrain {

// Parses `args` against `options`. A bare argument that belongs to no option (say `train run.ini`
// without --config) is an InputError naming it, with `usage` as the hint; Boost would drop it.
inline boost::program_options::parsed_options parse_command_line(const std::vector<std::string>& args,
                                                                 const boost::program_options::options_description& options,
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

}  // namespace meshtrain
