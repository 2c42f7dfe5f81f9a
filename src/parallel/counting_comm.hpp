// A Comm that counts its traffic: for every call, blocking or not, the kind of collective, one call
// and the bytes of the whole buffer it moves, the unit of the step-time model's alpha-beta
// functions (plan/step_time.hpp):
//   all-reduce, broadcast, send, recv: count elements;
//   reduce-scatter: the send buffer, size · recv_count elements;
//   all-gather: the receive buffer, size · send_count elements;
//   barrier: no bytes;
//   all-to-all (alltoallv, alltoall): the blocks this rank sends to the other ranks; its own block
//              is copied in memory, not sent, so it is not counted (nor is what it receives: that
//              is counted at its senders);
// each element the size of the type that travels (float 4, double 8, bf16 and fp16 2). A message is
// counted at its sender as a send and at its receiver as a recv. The trainer counts each group's
// calls (`log.traffic`, share/docs/usage.md) and the planner predicts the same figures
// (plan/traffic.hpp), so the two can be compared number for number.
#pragma once

#include "parallel/comm.hpp"

#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <string>

namespace meshtrain {

enum class Collective { allreduce, reduce_scatter, allgather, broadcast, send, recv, barrier, alltoall };
inline constexpr int collective_kinds = 8;
// "allreduce", "reduce_scatter", "allgather", "broadcast", "send", "recv", "barrier", "alltoall".
const char* collective_name(Collective kind);

struct TrafficCount {
  std::int64_t calls = 0;
  std::int64_t bytes = 0;
  bool operator==(const TrafficCount&) const = default;
};

// One group's traffic by kind.
struct GroupTraffic {
  std::array<TrafficCount, collective_kinds> by_kind{};
  TrafficCount& operator[](Collective kind) { return by_kind[static_cast<int>(kind)]; }
  const TrafficCount& operator[](Collective kind) const { return by_kind[static_cast<int>(kind)]; }
  void add(Collective kind, std::int64_t calls, std::int64_t bytes);
  bool empty() const;
  bool operator==(const GroupTraffic&) const = default;
};

// A rank's traffic by group name ("dp", "tp", "pp", "tied", "ep", "edp").
using RankTraffic = std::map<std::string, GroupTraffic>;

// Adds every call on the returned Comm to `counts`, which the caller owns and must outlive it.
std::unique_ptr<Comm> make_counting_comm(std::unique_ptr<Comm> inner, GroupTraffic& counts);

}  // namespace meshtrain
