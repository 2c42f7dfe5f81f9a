// Ranks comparing their resolved configurations (core/config_agreement.hpp).
#include "core/config_agreement.hpp"

#include "core/errors.hpp"
#include "core/mpi_check.hpp"

#include <xxhash.h>

#include <cstdint>
#include <map>
#include <sstream>

namespace meshtrain {
namespace {

// The hash the project already uses for names (model/init.cpp): the same text gives the same hash in
// any process and build.
std::uint64_t text_hash(const std::string& text) { return XXH64(text.data(), text.size(), 0); }

// section.key → value, in the text's order of keys (to_ini sorts sections, then keeps key order).
std::vector<std::pair<std::string, std::string>> ini_entries(const std::string& text) {
  std::vector<std::pair<std::string, std::string>> entries;
  std::istringstream in(text);
  std::string line, section;
  while (std::getline(in, line)) {
    if (line.size() >= 2 && line.front() == '[' && line.back() == ']') {
      section = line.substr(1, line.size() - 2);
      continue;
    }
    const auto eq = line.find(" = ");
    if (eq != std::string::npos) entries.emplace_back(section + "." + line.substr(0, eq), line.substr(eq + 3));
  }
  return entries;
}

// Rank 0's text on every rank (collective).
std::string rank0_text(const std::string& mine, MPI_Comm comm, int rank) {
  std::string text = rank == 0 ? mine : std::string();
  unsigned long long length = text.size();
  MESHTRAIN_MPI_CHECK(MPI_Bcast(&length, 1, MPI_UNSIGNED_LONG_LONG, 0, comm), "every rank compares its config");
  text.resize(length);
  MESHTRAIN_MPI_CHECK(MPI_Bcast(text.data(), int(length), MPI_CHAR, 0, comm), "every rank compares its config");
  return text;
}

}  // namespace

std::optional<ConfigDifference> first_config_difference(const std::string& mine, const std::string& theirs) {
  const auto my_entries = ini_entries(mine);
  const std::map<std::string, std::string> their_values = [&] {
    const auto entries = ini_entries(theirs);
    return std::map<std::string, std::string>(entries.begin(), entries.end());
  }();
  const std::string absent = "(absent)";
  for (const auto& [key, value] : my_entries) {
    const auto it = their_values.find(key);
    const std::string& other = it == their_values.end() ? absent : it->second;
    if (other != value) return ConfigDifference{key, value, other};
  }
  const std::map<std::string, std::string> my_values(my_entries.begin(), my_entries.end());
  for (const auto& [key, value] : ini_entries(theirs)) {
    if (my_values.find(key) == my_values.end()) return ConfigDifference{key, absent, value};
  }
  return std::nullopt;
}

void require_same_config(const Config& config, MPI_Comm comm) {
  int rank = 0;
  MESHTRAIN_MPI_CHECK(MPI_Comm_rank(comm, &rank), "is MPI initialized?");
  const std::string mine = config.to_ini();
  const std::uint64_t h = text_hash(mine);
  std::uint64_t extremes[2] = {h, ~h};  // the largest hash, and the complement of the smallest
  MESHTRAIN_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, extremes, 2, MPI_UINT64_T, MPI_MAX, comm),
                      "every rank compares its config at start");
  if (extremes[0] == h && extremes[1] == ~h) return;  // every rank's hash is this one
  const std::string reference = rank0_text(mine, comm, rank);
  if (const auto d = first_config_difference(mine, reference)) {
    input_error(
        "the ranks were given different configurations: {} is {} on rank {} but {} on rank 0; every rank must get "
        "the same config file and --section.key options",
        d->key, d->mine, rank, d->theirs);
  }
}

}  // namespace meshtrain
