// Decorator counting each call's kind, calls and bytes (see counting_comm.hpp).
#include "parallel/counting_comm.hpp"

#include "parallel/comm_decorator.hpp"

#include <algorithm>

namespace meshtrain {

const char* collective_name(Collective kind) {
  switch (kind) {
    case Collective::allreduce:
      return "allreduce";
    case Collective::reduce_scatter:
      return "reduce_scatter";
    case Collective::allgather:
      return "allgather";
    case Collective::broadcast:
      return "broadcast";
    case Collective::send:
      return "send";
    case Collective::recv:
      return "recv";
    case Collective::barrier:
      return "barrier";
  }
  return "unknown";
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
  void around(Collective kind, std::int64_t bytes, CallRef<void> call) override {
    counts_.add(kind, 1, bytes);
    call();
  }
  Request started(Collective kind, std::int64_t bytes, CallRef<Request> call) override {
    counts_.add(kind, 1, bytes);
    return call();
  }

  GroupTraffic& counts_;
};

}  // namespace

std::unique_ptr<Comm> make_counting_comm(std::unique_ptr<Comm> inner, GroupTraffic& counts) {
  return std::make_unique<CountingComm>(std::move(inner), counts);
}

}  // namespace meshtrain
