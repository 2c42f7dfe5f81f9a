// Memory as the metrics line and the start/end table show it.
#include "train/memory_report.hpp"

#include "core/mpi_check.hpp"
#include "core/watched_wait.hpp"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <vector>

namespace meshtrain {

nlohmann::json memory_json(const MemoryBytes& bytes, std::int64_t peak_rss) {
  nlohmann::json j;
  for (int c = 0; c < memory_categories; ++c) j[category_name(MemoryCategory(c))] = bytes.bytes[c];
  j["peak_rss"] = peak_rss;
  return j;
}

std::string memory_table(MPI_Comm comm, const Layout& layout, const MemoryBytes& mine, const std::string& when) {
  const int rank = mpi::rank_of(comm), world = mpi::size_of(comm);
  constexpr int fields = memory_categories + 1;  // the categories and the peak RSS
  std::vector<std::int64_t> row(mine.bytes.begin(), mine.bytes.end());
  row.push_back(peak_rss_bytes());
  std::vector<std::int64_t> all(rank == 0 ? std::size_t(world) * fields : 0);
  const WatchedWait watched(collective_ticket(comm, "gather", fields));
  MESHTRAIN_MPI_CHECK(MPI_Gather(row.data(), fields, MPI_INT64_T, all.data(), fields, MPI_INT64_T, 0, comm),
                      "the memory table is collective: every rank must print it at the same point");
  if (rank != 0) return {};

  const double mib = 1 << 20;
  std::string out = fmt::format("memory per rank {} (MiB):\n{:>5} {:>9}", when, "rank", "dp/tp/pp");
  for (int c = 0; c < memory_categories; ++c) out += fmt::format(" {:>12}", category_name(MemoryCategory(c)));
  out += fmt::format(" {:>10} {:>10}\n", "counted", "peak_rss");
  for (int r = 0; r < world; ++r) {
    const std::int64_t* f = all.data() + std::size_t(r) * fields;
    const GridPosition p = Topology::position(layout, r);
    std::int64_t counted = 0;
    out += fmt::format("{:>5} {:>9}", r, fmt::format("{}/{}/{}", p.dp_rank, p.tp_rank, p.pp_rank));
    for (int c = 0; c < memory_categories; ++c) {
      out += fmt::format(" {:>12.2f}", double(f[c]) / mib);
      counted += f[c];
    }
    out += fmt::format(" {:>10.2f} {:>10.2f}\n", double(counted) / mib, double(f[memory_categories]) / mib);
  }
  return out;
}

}  // namespace meshtrain
