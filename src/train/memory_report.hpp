// How a rank's memory is shown: the `memory` object of the metrics line and the rank-by-rank table
// printed at the start and the end of training.
#pragma once

#include "core/memory_ledger.hpp"
#include "parallel/topology.hpp"

#include <nlohmann/json_fwd.hpp>

#include <mpi.h>

#include <string>

namespace meshtrain {

// {"weights": bytes, …, "workspace": bytes, "peak_rss": bytes}
nlohmann::json memory_json(const MemoryBytes& bytes, std::int64_t peak_rss);

// Collective over `comm`: every rank's categories and peak RSS, one line per rank (MiB), for rank 0
// to print; the other ranks get "".
std::string memory_table(MPI_Comm comm, const Layout& layout, const MemoryBytes& mine, const std::string& when);

}  // namespace meshtrain
