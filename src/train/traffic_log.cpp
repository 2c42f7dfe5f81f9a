// `log.traffic`: the counts of one step, gathered to rank 0 and written as JSON.
#include "train/traffic_log.hpp"

#include "core/errors.hpp"
#include "core/mpi_check.hpp"
#include "core/watched_wait.hpp"
#include "io/atomic_file.hpp"
#include "io/metrics_writer.hpp"

#include <functional>
#include <string_view>
#include <vector>

namespace meshtrain {

std::unique_ptr<Comm> TrafficLog::counted(const std::string& group, std::unique_ptr<Comm> comm) {
  if (path_.empty()) return comm;
  return make_counting_comm(std::move(comm), counts_[group]);
}

void TrafficLog::begin_step() {
  for (auto& [group, counts] : counts_) counts = GroupTraffic();
}

void TrafficLog::end_step(MPI_Comm world, const GridPosition& position, bool last) {
  if (path_.empty() || !last) return;
  const int rank = mpi::rank_of(world), size = mpi::size_of(world);
  const nlohmann::json mine = {{"rank", rank},
                               {"dp_rank", position.dp_rank},
                               {"tp_rank", position.tp_rank},
                               {"pp_rank", position.pp_rank},
                               {"traffic", traffic_json(counts_)}};
  const std::string text = mine.dump();
  constexpr const char* hint = "log.traffic is written collectively: every rank must finish the same steps";
  int length = static_cast<int>(text.size());
  std::vector<int> lengths(rank == 0 ? size : 0), starts(rank == 0 ? size : 0);
  std::string all;
  {
    const WatchedWait watched(collective_ticket(world, "gather", 1));
    MESHTRAIN_MPI_CHECK(MPI_Gather(&length, 1, MPI_INT, lengths.data(), 1, MPI_INT, 0, world), hint);
  }
  if (rank == 0) {
    for (int r = 0, at = 0; r < size; at += lengths[r], ++r) starts[r] = at;
    all.resize(std::size_t(starts.back() + lengths.back()));
  }
  {
    const WatchedWait watched(collective_ticket(world, "gatherv", std::size_t(length)));
    MESHTRAIN_MPI_CHECK(
        MPI_Gatherv(text.data(), length, MPI_CHAR, all.data(), lengths.data(), starts.data(), MPI_CHAR, 0, world),
        hint);
  }
  if (rank != 0) return;
  nlohmann::json ranks = nlohmann::json::array();
  for (int r = 0; r < size; ++r) ranks.push_back(nlohmann::json::parse(all.substr(starts[r], lengths[r])));
  const std::string json = nlohmann::json{{"counted", "the run's last step"}, {"ranks", ranks}}.dump(1) + "\n";
  try {
    // Whole or not at all: a failed write leaves the file that was there (checked at start to be a
    // traffic file, train/run_outputs.hpp).
    io::write_file_atomically(path_, "traffic file (log.traffic)",
                              [&](const std::function<void(std::string_view)>& write) { write(json); });
  } catch (const InputError& e) {
    throw io::LogWriteFailed(e.what());
  }
}

}  // namespace meshtrain
