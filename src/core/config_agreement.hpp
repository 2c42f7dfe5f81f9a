// Every rank trains with one resolved configuration (share/docs/usage.md, Ranks that disagree).
//
// A job whose ranks were handed different options (an MPMD launch, a wrapper script that edits the
// command line per node, a config file that differs between nodes) would otherwise run on until a
// collective mismatched or hung. At start every rank hashes its resolved configuration
// (Config::to_ini()); the ranks compare the hashes with one all-reduce, and only when they differ
// does rank 0 send its text, so that each differing rank can name the first key that differs.
#pragma once

#include "core/config.hpp"

#include <mpi.h>

#include <optional>
#include <string>

namespace meshtrain {

// The first key whose value differs between two resolved configurations (INI text as to_ini()
// writes it), with both values; a key one of them lacks has the value "(absent)".
struct ConfigDifference {
  std::string key;
  std::string mine, theirs;
};
std::optional<ConfigDifference> first_config_difference(const std::string& mine, const std::string& theirs);

// Collective over `comm`. Throws InputError on each rank whose configuration differs from rank 0's,
// naming the first differing key and both values with their ranks; run it inside agree_on_input
// (core/agreement.hpp) so that every rank leaves with exit 2.
void require_same_config(const Config& config, MPI_Comm comm);

}  // namespace meshtrain
