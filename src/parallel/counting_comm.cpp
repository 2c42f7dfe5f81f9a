// Decorator counting each call's kind, calls and bytes (see counting_comm.hpp).
#include "parallel/counting_comm.hpp"

#include "parallel/comm_decorator.hpp"

#include <algorithm>
#include <array>
#include <cstddef>

namespace meshtrain {

const char* collective_name(Collective kind) {
  // In the order of the enumeration.
  static constexpr std::array<const char*, collective_kinds> names = {
      "allreduce", "reduce_scatter", "allgather", "broadcast", "send", "recv", "barrier", "alltoall"};
  return names[static_cast<std::size_t>(kind)];
}

void GroupTraffic::add(Collective kind, std::int64_t calls, std::int64_t bytes) {
  TrafficCount& c = (*this)[kind];
  c.calls += calls;
  c.bytes += bytes;
}

bool GroupTraffic::empty() const {
  return std::all_of(by_kind.begin(), by_kind.end(), [](const TrafficCount& c) { return c.calls == 0; });
}

namespace {

// Counted when the call is made (a non-blocking one when it starts): what the call moves does not
// depend on when it completes.
class CountingComm final : public CommDecorator {
 public:
  CountingComm(std::unique_ptr<Comm> inner, GroupTraffic& counts) : CommDecorator(std::move(inner)), counts_(counts) {}

 private:
  void around(const CallShape& shape, CallRef<void> call) override {
    counts_.add(shape.kind, 1, shape.bytes);
    call();
  }
  Request started(const CallShape& shape, CallRef<Request> call) override {
    counts_.add(shape.kind, 1, shape.bytes);
    return call();
  }

  GroupTraffic& counts_;
};

}  // namespace

std::unique_ptr<Comm> make_counting_comm(std::unique_ptr<Comm> inner, GroupTraffic& counts) {
  return std::make_unique<CountingComm>(std::move(inner), counts);
}

}  // namespace meshtrain
