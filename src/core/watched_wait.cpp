// The groups and the per-thread wait records the watchdog reads (core/watched_wait.hpp).
//
// Each thread that waits owns one slot, registered with the board the first time it waits and
// removed when the thread ends. Only the owning thread writes a slot; the watchdog reads it from
// its own thread without a lock, as a sequence lock: the writer makes the version odd, stores the
// fields, and makes it even again; a reader that sees an odd version, or a different one after
// reading, reads again. So a wait costs no lock and no system call.
#include "core/watched_wait.hpp"

#include <algorithm>
#include <chrono>
#include <deque>
#include <map>
#include <mutex>
#include <utility>

namespace meshtrain {
namespace {

struct WaitSlot {
  std::atomic<std::uint32_t> version{0};
  std::atomic<bool> active{false};
  std::atomic<const WaitGroup*> group{nullptr};
  std::atomic<const char*> kind{""};
  std::atomic<std::uint64_t> seq{0};
  std::atomic<std::size_t> count{0};
  std::atomic<int> peer{-1};
  std::atomic<std::int64_t> since_ns{0};
  std::atomic<std::int64_t> ended_ns{0};

  // Writer side (the owning thread only).
  void write(const WaitTicket& t, std::int64_t since, std::int64_t ended, bool is_active) {
    constexpr auto relaxed = std::memory_order_relaxed;
    const std::uint32_t v = version.load(relaxed);
    version.store(v + 1, relaxed);
    std::atomic_thread_fence(std::memory_order_release);
    group.store(t.group, relaxed);
    kind.store(t.kind, relaxed);
    seq.store(t.seq, relaxed);
    count.store(t.count, relaxed);
    peer.store(t.peer, relaxed);
    since_ns.store(since, relaxed);
    ended_ns.store(ended, relaxed);
    active.store(is_active, relaxed);
    version.store(v + 2, std::memory_order_release);
  }

  WaitRecord read() const {
    constexpr auto relaxed = std::memory_order_relaxed;
    for (;;) {
      const std::uint32_t before = version.load(std::memory_order_acquire);
      if (before % 2 != 0) continue;
      WaitRecord r;
      r.ticket = {group.load(relaxed), kind.load(relaxed), seq.load(relaxed), count.load(relaxed), peer.load(relaxed)};
      r.since_ns = since_ns.load(relaxed);
      r.ended_ns = ended_ns.load(relaxed);
      r.active = active.load(relaxed);
      std::atomic_thread_fence(std::memory_order_acquire);
      if (version.load(relaxed) == before) return r;
    }
  }
};

// The rank's slots and groups. Process-wide by nature: one watchdog per rank watches the waits of
// every thread (the trainer's, a background save's), as one signal handler serves them all.
struct Board {
  std::mutex mutex;
  std::vector<std::shared_ptr<WaitSlot>> slots;
  std::deque<std::unique_ptr<WaitGroup>> groups;  // never freed: records may point at them
  std::map<std::pair<std::string, MPI_Comm>, WaitGroup*> by_comm;
  std::atomic<bool> fired{false};
};

Board& board() {
  static Board b;
  return b;
}

// The calling thread's slot, registered on first use and removed when the thread ends.
class ThreadSlot {
 public:
  ThreadSlot() : slot_(std::make_shared<WaitSlot>()) {
    const std::lock_guard lock(board().mutex);
    board().slots.push_back(slot_);
  }
  ~ThreadSlot() {
    const std::lock_guard lock(board().mutex);
    auto& slots = board().slots;
    slots.erase(std::remove(slots.begin(), slots.end(), slot_), slots.end());
  }
  WaitSlot& get() { return *slot_; }

 private:
  std::shared_ptr<WaitSlot> slot_;
};

WaitSlot& my_slot() {
  thread_local ThreadSlot slot;
  return slot.get();
}

std::vector<int> world_ranks_of(MPI_Comm comm, int& me) {
  MPI_Group group = MPI_GROUP_NULL, world = MPI_GROUP_NULL;
  MPI_Comm_group(comm, &group);
  MPI_Comm_group(MPI_COMM_WORLD, &world);
  int size = 0;
  MPI_Group_size(group, &size);
  MPI_Group_rank(group, &me);
  std::vector<int> ranks(static_cast<std::size_t>(size)), world_ranks(ranks.size());
  for (int r = 0; r < size; ++r) ranks[r] = r;
  MPI_Group_translate_ranks(group, size, ranks.data(), world, world_ranks.data());
  MPI_Group_free(&group);
  MPI_Group_free(&world);
  return world_ranks;
}

// Under the board's lock.
WaitGroup& add_group(MPI_Comm comm, std::string_view name) {
  int me = 0;
  std::vector<int> members = world_ranks_of(comm, me);
  board().groups.push_back(std::make_unique<WaitGroup>(std::string(name), std::move(members), me));
  return *board().groups.back();
}

}  // namespace

WaitGroup::WaitGroup(std::string name, std::vector<int> members, int me)
    : name_(std::move(name)),
      members_(std::move(members)),
      me_(me),
      sends_(new std::atomic<std::uint64_t>[members_.size()]),
      recvs_(new std::atomic<std::uint64_t>[members_.size()]) {
  for (std::size_t i = 0; i < members_.size(); ++i) {
    sends_[i].store(0);
    recvs_[i].store(0);
  }
}

int WaitGroup::group_rank_of(int world) const {
  const auto it = std::find(members_.begin(), members_.end(), world);
  return it == members_.end() ? -1 : static_cast<int>(it - members_.begin());
}

WaitTicket WaitGroup::collective(const char* kind, std::size_t count) {
  return {this, kind, collectives_.fetch_add(1, std::memory_order_relaxed) + 1, count, -1};
}
WaitTicket WaitGroup::send(int peer, std::size_t count) {
  return {this, "send", sends_[peer].fetch_add(1, std::memory_order_relaxed) + 1, count, members_[peer]};
}
WaitTicket WaitGroup::recv(int peer, std::size_t count) {
  return {this, "recv", recvs_[peer].fetch_add(1, std::memory_order_relaxed) + 1, count, members_[peer]};
}

WaitGroup& wait_group(MPI_Comm comm, std::string_view name) {
  const std::lock_guard lock(board().mutex);
  WaitGroup*& found = board().by_comm[{std::string(name), comm}];
  if (found == nullptr) found = &add_group(comm, name);
  return *found;
}

WaitTicket collective_ticket(MPI_Comm comm, const char* kind, std::size_t count, std::string_view group) {
  return wait_group(comm, group).collective(kind, count);
}

WaitGroup& new_wait_group(MPI_Comm comm, std::string_view name) {
  const std::lock_guard lock(board().mutex);
  return add_group(comm, name);
}

const WaitGroup* find_wait_group(std::string_view name) {
  const std::lock_guard lock(board().mutex);
  const auto& groups = board().groups;
  const auto it = std::find_if(groups.rbegin(), groups.rend(), [&](const auto& g) { return g->name() == name; });
  return it == groups.rend() ? nullptr : it->get();
}

std::int64_t wait_clock_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

WatchedWait::WatchedWait(const WaitTicket& ticket) {
  WaitSlot& slot = my_slot();
  constexpr auto relaxed = std::memory_order_relaxed;
  previous_.active = slot.active.load(relaxed);
  if (previous_.active) {
    previous_.ticket = {slot.group.load(relaxed), slot.kind.load(relaxed), slot.seq.load(relaxed),
                        slot.count.load(relaxed), slot.peer.load(relaxed)};
    previous_.since_ns = slot.since_ns.load(relaxed);
  }
  slot.write(ticket, wait_clock_ns(), 0, true);
}

WatchedWait::~WatchedWait() {
  WaitSlot& slot = my_slot();
  if (previous_.active) {
    slot.write(previous_.ticket, previous_.since_ns, 0, true);
    return;
  }
  const WaitRecord mine = slot.read();
  slot.write(mine.ticket, mine.since_ns, wait_clock_ns(), false);
}

std::vector<WaitRecord> wait_records() {
  std::vector<std::shared_ptr<WaitSlot>> slots;
  {
    const std::lock_guard lock(board().mutex);
    slots = board().slots;
  }
  std::vector<WaitRecord> records;
  for (const auto& slot : slots) {
    WaitRecord r = slot->read();
    if (r.ticket.group != nullptr) records.push_back(r);
  }
  return records;
}

std::optional<WaitRecord> overdue_wait(const std::vector<WaitRecord>& records, std::int64_t now_ns, double timeout_s) {
  if (timeout_s <= 0) return std::nullopt;
  std::optional<WaitRecord> oldest;
  for (const WaitRecord& r : records) {
    if (!r.active || double(now_ns - r.since_ns) <= timeout_s * 1e9) continue;
    if (!oldest || r.since_ns < oldest->since_ns) oldest = r;
  }
  return oldest;
}

void mark_watchdog_fired() { board().fired.store(true); }
bool watchdog_fired() { return board().fired.load(std::memory_order_relaxed); }

}  // namespace meshtrain
