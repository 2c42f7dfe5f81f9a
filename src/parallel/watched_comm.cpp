// Decorator bracketing each wait with a WatchedWait of the Comm's group (see watched_comm.hpp).
#include "parallel/watched_comm.hpp"

#include "parallel/comm_decorator.hpp"

#include <utility>

namespace meshtrain {
namespace {

class WatchedRequest final : public Request::Impl {
 public:
  WatchedRequest(Request inner, const WaitTicket& ticket) : inner_(std::move(inner)), ticket_(ticket) {}
  void wait() override {
    const WatchedWait watched(ticket_);
    inner_.wait();
  }

 private:
  Request inner_;
  WaitTicket ticket_;
};

class WatchedComm final : public CommDecorator {
 public:
  WatchedComm(std::unique_ptr<Comm> inner, WaitGroup& group) : CommDecorator(std::move(inner)), group_(group) {}

 private:
  void around(const CallShape& shape, CallRef<void> call) override {
    const WatchedWait watched(ticket(shape));
    call();
  }
  // The ticket is taken when the operation starts: that is its place in the group's order.
  Request started(const CallShape& shape, CallRef<Request> call) override {
    const WaitTicket t = ticket(shape);
    Request inner = call();
    if (!inner.pending()) return inner;
    return Request(std::make_unique<WatchedRequest>(std::move(inner), t));
  }

  // A device backend's operations complete after their calls and waits return: the host waits for
  // them here, under the last one's ticket, which no later one can overtake on the group's stream.
  void settling(CallRef<void> call) override {
    const WatchedWait watched(last_);
    call();
  }

  WaitTicket ticket(const CallShape& shape) {
    switch (shape.kind) {
      case Collective::send: last_ = group_.send(shape.peer, shape.count); break;
      case Collective::recv: last_ = group_.recv(shape.peer, shape.count); break;
      default: last_ = group_.collective(collective_name(shape.kind), shape.count);
    }
    return last_;
  }

  WaitGroup& group_;
  WaitTicket last_;  // of the latest call (unwatched before the first)
};

}  // namespace

std::unique_ptr<Comm> make_watched_comm(std::unique_ptr<Comm> inner, WaitGroup& group) {
  return std::make_unique<WatchedComm>(std::move(inner), group);
}

}  // namespace meshtrain
