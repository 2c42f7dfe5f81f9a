// The waits a rank's watchdog watches (share/docs/usage.md, The collective watchdog). Every wait
// on other ranks (a collective, a message, the wait on a non-blocking one) is bracketed by a
// WatchedWait, which notes what it waits in where the watchdog (parallel/watchdog.hpp) can read it:
//
//   WatchedWait watched(wait_group(comm, "world").collective("allreduce", 1));
//   MPI_Allreduce(MPI_IN_PLACE, &flag, 1, MPI_INT, MPI_MAX, comm);
//
// Each group counts the collectives, and the messages to and from each peer, that this rank has
// started: every rank of a group starts its collectives in the same order, so "allreduce #41 of
// group tp" names the same call on all of them, and a rank that has started fewer than 41 has not
// arrived. A non-blocking operation takes its ticket (and number) when it starts, and brackets its
// wait with it later.
//
// Cost: a ticket is one atomic increment; a WatchedWait is a clock read (no system call) and a few
// atomic stores into a slot of the waiting thread. Nothing else happens on the waiting thread: the
// watchdog reads the slots from its own.
#pragma once

#include <mpi.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace meshtrain {

class WaitGroup;

// A wait the watchdog gave up on, thrown by waits that can give up (the NCCL backend's polling);
// main() exits 5 (exit_code::collective_timeout), the watchdog having reported it.
class CollectiveTimeout : public std::runtime_error {
 public:
  explicit CollectiveTimeout(const std::string& what) : std::runtime_error(what) {}
};

// What one wait waits in. `kind` is a string literal ("allreduce", "send").
struct WaitTicket {
  const WaitGroup* group = nullptr;  // null: not watched
  const char* kind = "";
  std::uint64_t seq = 0;  // 1-based, per group: collectives; per group and peer: sends, receives
  std::size_t count = 0;  // elements
  int peer = -1;          // world rank of a message's peer; -1 for a collective
};

// One group of ranks as the watchdog knows it. Made once per group and kept for the process's
// life (a wait's record may name it after its Comm is gone).
class WaitGroup {
 public:
  // `members`: the world ranks of the group in group-rank order; `me` this rank's group rank.
  WaitGroup(std::string name, std::vector<int> members, int me);
  WaitGroup(const WaitGroup&) = delete;
  WaitGroup& operator=(const WaitGroup&) = delete;

  const std::string& name() const { return name_; }
  const std::vector<int>& members() const { return members_; }
  int me() const { return me_; }
  // The group rank of world rank `world`, or -1.
  int group_rank_of(int world) const;

  // Tickets: the next number of this group's collectives, or of the messages to / from `peer`
  // (a group rank).
  WaitTicket collective(const char* kind, std::size_t count);
  WaitTicket send(int peer, std::size_t count);
  WaitTicket recv(int peer, std::size_t count);

  // How many this rank has started, for another rank's question.
  std::uint64_t collectives_started() const { return collectives_.load(std::memory_order_relaxed); }
  std::uint64_t sends_started(int peer) const { return sends_[peer].load(std::memory_order_relaxed); }
  std::uint64_t recvs_started(int peer) const { return recvs_[peer].load(std::memory_order_relaxed); }

 private:
  std::string name_;
  std::vector<int> members_;
  int me_;
  std::atomic<std::uint64_t> collectives_{0};
  std::unique_ptr<std::atomic<std::uint64_t>[]> sends_, recvs_;
};

// The group `name` over `comm` (its members translated to world ranks), made on first use and the
// same one after: a name and a communicator name one group for the life of the process. Local (no
// communication). For raw MPI collectives; the Comms make theirs with new_wait_group.
WaitGroup& wait_group(MPI_Comm comm, std::string_view name);
// The ticket of one raw MPI collective over `comm`, in group `group` (wait_group's):
//   const WatchedWait watched(collective_ticket(comm, "allreduce", 1));
WaitTicket collective_ticket(MPI_Comm comm, const char* kind, std::size_t count, std::string_view group = "world");
// A new group `name` over `comm`, which from now on answers questions about `name`.
WaitGroup& new_wait_group(MPI_Comm comm, std::string_view name);
// The group named `name` that was made last, or null.
const WaitGroup* find_wait_group(std::string_view name);

// Brackets one wait; nests (the inner wait is the one reported while it lasts).
class WatchedWait {
 public:
  explicit WatchedWait(const WaitTicket& ticket);
  ~WatchedWait();
  WatchedWait(const WatchedWait&) = delete;
  WatchedWait& operator=(const WatchedWait&) = delete;

 private:
  struct Saved {
    WaitTicket ticket;
    std::int64_t since_ns = 0;
    bool active = false;
  } previous_;
};

// What a thread waits in, or last waited in, as the watchdog reads it.
struct WaitRecord {
  WaitTicket ticket;
  std::int64_t since_ns = 0;  // when the wait began
  std::int64_t ended_ns = 0;  // when it ended (inactive records)
  bool active = false;
};

// The monotonic clock the records use, in nanoseconds.
std::int64_t wait_clock_ns();

// Every thread's record (threads that never waited have none).
std::vector<WaitRecord> wait_records();

// The longest-running active wait that began more than `timeout_s` before `now_ns`; nothing when
// timeout_s is 0 (the watchdog is off) or no wait is that old.
std::optional<WaitRecord> overdue_wait(const std::vector<WaitRecord>& records, std::int64_t now_ns, double timeout_s);

// Set once the watchdog has reported and is ending the job: waits that can give up do.
void mark_watchdog_fired();
bool watchdog_fired();

}  // namespace meshtrain
