// The watchdog's words (share/docs/usage.md, The collective watchdog): the question a rank whose
// wait ran out asks the other ranks of the group, their answers, and the one line it prints.
//
//   meshtrain: watchdog: rank 0 waited 5.0 s (parallel.timeout 5 s) in allreduce #12 of group dp
//   (1 elements); not arrived: rank 1 waits in allreduce #4 of group world (1 elements) for 5.0 s,
//   its last collective of group dp is #11; rank 3 did not answer (stopped, or its node is gone)
//
// (one line in the output). The wire forms are plain bytes of a fixed size, sent as MPI_BYTE.
#pragma once

#include "core/watched_wait.hpp"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace meshtrain {

// "Have you arrived at my wait?"
struct WaitQuestion {
  char group[32] = {};
  char kind[24] = {};
  std::uint64_t seq = 0;
  std::int32_t asker = -1;  // world rank
};

struct WaitAnswer {
  std::int32_t arrived = 0;  // 1: has started the asker's collective (or the message's other end)
  char doing[456] = {};      // what the rank waits in, or that it waits in nothing
};

WaitQuestion question_about(const WaitRecord& wait, int asker_world_rank);

// This rank's answer from its records; `group` is its group named in the question (null: none).
WaitAnswer answer_question(const WaitQuestion& question, const WaitGroup* group, const std::vector<WaitRecord>& records,
                           std::int64_t now_ns);

// "allreduce #12 of group dp (1 elements)", "recv #3 of group pp (4096 elements) from rank 1".
std::string describe_wait(const WaitTicket& ticket);

// One rank asked, and what came back (nothing: no answer in time).
struct AskedRank {
  int world_rank = -1;
  std::optional<WaitAnswer> answer;
};

// The report of world rank `rank`, whose wait ran out, from the answers of the ranks it asked.
std::string watchdog_report(int rank, const WaitRecord& wait, double timeout_s, std::int64_t now_ns,
                            const std::vector<AskedRank>& asked, double grace_s);

}  // namespace meshtrain
