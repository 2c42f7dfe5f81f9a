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
  TimedComm(std::unique_ptr<Comm> inner, double& seconds) : CommDecorator(std::move(inner)), seconds_(seconds) {}

 private:
  void around(const CallShape&, CallRef<void> call) override {
    Stopwatch watch(seconds_);
    call();
  }
  // Starting counts too (an MPI library may move data then), and so does the wait.
  Request started(const CallShape&, CallRef<Request> call) override {
    Request inner;
    {
      Stopwatch watch(seconds_);
      inner = call();
    }
    return Request(std::make_unique<TimedRequest>(std::move(inner), seconds_));
  }

  double& seconds_;
};

}  // namespace

std::unique_ptr<Comm> make_timed_comm(std::unique_ptr<Comm> inner, double& seconds) {
  return std::make_unique<TimedComm>(std::move(inner), seconds);
}

}  // namespace meshtrain
