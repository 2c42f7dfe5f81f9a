// Decorator adding the time of each blocking communication call, and of each wait, to a counter.
#include "parallel/timed_comm.hpp"

#include "parallel/comm_decorator.hpp"

#include <chrono>

namespace meshtrain {
namespace {

class Stopwatch {
 public:
  explicit Stopwatch(double& total) : total_(total), start_(std::chrono::steady_clock::now()) {}
  ~Stopwatch() { total_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count(); }
  Stopwatch(const Stopwatch&) = delete;
  Stopwatch& operator=(const Stopwatch&) = delete;

 private:
  double& total_;
  std::chrono::steady_clock::time_point start_;
};

class TimedRequest final : public Request::Impl {
 public:
  TimedRequest(Request inner, double& seconds) : inner_(std::move(inner)), seconds_(seconds) {}
  void wait() override {
    Stopwatch watch(seconds_);
    inner_.wait();
  }

 private:
  Request inner_;
  double& seconds_;
};

class TimedComm final : public CommDecorator {
 public:
  TimedComm(std::unique_ptr<Comm> inner, double& seconds, double& all_to_all_seconds)
      : CommDecorator(std::move(inner)), seconds_(seconds), all_to_all_seconds_(all_to_all_seconds) {}

 private:
  void around(const CallShape& shape, CallRef<void> call) override {
    Stopwatch watch(counter(shape));
    call();
  }
  // Starting counts too (an MPI library may move data then), and so does the wait.
  Request started(const CallShape& shape, CallRef<Request> call) override {
    Request inner;
    {
      Stopwatch watch(counter(shape));
      inner = call();
    }
    return Request(std::make_unique<TimedRequest>(std::move(inner), counter(shape)));
  }

  double& counter(const CallShape& shape) const {
    return shape.kind == Collective::alltoall ? all_to_all_seconds_ : seconds_;
  }

  double& seconds_;
  double& all_to_all_seconds_;
};

}  // namespace

std::unique_ptr<Comm> make_timed_comm(std::unique_ptr<Comm> inner, double& seconds) {
  return make_timed_comm(std::move(inner), seconds, seconds);
}

std::unique_ptr<Comm> make_timed_comm(std::unique_ptr<Comm> inner, double& seconds, double& all_to_all_seconds) {
  return std::make_unique<TimedComm>(std::move(inner), seconds, all_to_all_seconds);
}

}  // namespace meshtrain
