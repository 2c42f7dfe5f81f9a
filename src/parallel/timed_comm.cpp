// Decorator adding the time of each blocking communication call to a counter.
#include "parallel/timed_comm.hpp"

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

class TimedComm final : public Comm {
 public:
  TimedComm(std::unique_ptr<Comm> inner, double& seconds) : inner_(std::move(inner)), seconds_(seconds) {}

  int size() const override { return inner_->size(); }
  int rank() const override { return inner_->rank(); }
  std::string backend() const override { return inner_->backend(); }

  void allreduce_sum(float* data, std::size_t count) override { timed([&] { inner_->allreduce_sum(data, count); }); }
  void allreduce_max(float* data, std::size_t count) override { timed([&] { inner_->allreduce_max(data, count); }); }
  void allreduce_max(double* data, std::size_t count) override { timed([&] { inner_->allreduce_max(data, count); }); }
  void allreduce_sum(double* data, std::size_t count) override { timed([&] { inner_->allreduce_sum(data, count); }); }
  Request iallreduce_sum(float* data, std::size_t count) override {
    return wrap(timed([&] { return inner_->iallreduce_sum(data, count); }));
  }
  void reduce_scatter_sum(const float* send, float* recv, std::size_t recv_count) override {
    timed([&] { inner_->reduce_scatter_sum(send, recv, recv_count); });
  }
  void allgather(const float* send, float* recv, std::size_t send_count) override {
    timed([&] { inner_->allgather(send, recv, send_count); });
  }
  void broadcast(float* data, std::size_t count, int root) override {
    timed([&] { inner_->broadcast(data, count, root); });
  }
  void send(const float* data, std::size_t count, int peer, int tag) override {
    timed([&] { inner_->send(data, count, peer, tag); });
  }
  void recv(float* data, std::size_t count, int peer, int tag) override {
    timed([&] { inner_->recv(data, count, peer, tag); });
  }
  Request isend(const float* data, std::size_t count, int peer, int tag) override {
    return wrap(timed([&] { return inner_->isend(data, count, peer, tag); }));
  }
  Request irecv(float* data, std::size_t count, int peer, int tag) override {
    return wrap(timed([&] { return inner_->irecv(data, count, peer, tag); }));
  }
  void barrier() override { timed([&] { inner_->barrier(); }); }

  void allreduce_sum(bf16* data, std::size_t count) override { timed([&] { inner_->allreduce_sum(data, count); }); }
  void allreduce_sum(fp16* data, std::size_t count) override { timed([&] { inner_->allreduce_sum(data, count); }); }
  void allgather(const bf16* send, bf16* recv, std::size_t send_count) override {
    timed([&] { inner_->allgather(send, recv, send_count); });
  }
  void allgather(const fp16* send, fp16* recv, std::size_t send_count) override {
    timed([&] { inner_->allgather(send, recv, send_count); });
  }
  void send(const bf16* data, std::size_t count, int peer, int tag) override {
    timed([&] { inner_->send(data, count, peer, tag); });
  }
  void send(const fp16* data, std::size_t count, int peer, int tag) override {
    timed([&] { inner_->send(data, count, peer, tag); });
  }
  void recv(bf16* data, std::size_t count, int peer, int tag) override {
    timed([&] { inner_->recv(data, count, peer, tag); });
  }
  void recv(fp16* data, std::size_t count, int peer, int tag) override {
    timed([&] { inner_->recv(data, count, peer, tag); });
  }
  Request isend(const bf16* data, std::size_t count, int peer, int tag) override {
    return wrap(timed([&] { return inner_->isend(data, count, peer, tag); }));
  }
  Request isend(const fp16* data, std::size_t count, int peer, int tag) override {
    return wrap(timed([&] { return inner_->isend(data, count, peer, tag); }));
  }
  Request irecv(bf16* data, std::size_t count, int peer, int tag) override {
    return wrap(timed([&] { return inner_->irecv(data, count, peer, tag); }));
  }
  Request irecv(fp16* data, std::size_t count, int peer, int tag) override {
    return wrap(timed([&] { return inner_->irecv(data, count, peer, tag); }));
  }

 private:
  template <class Fn>
  auto timed(Fn&& fn) -> decltype(fn()) {
    Stopwatch watch(seconds_);
    return fn();
  }
  Request wrap(Request inner) { return Request(std::make_unique<TimedRequest>(std::move(inner), seconds_)); }

  std::unique_ptr<Comm> inner_;
  double& seconds_;
};

}  // namespace

std::unique_ptr<Comm> make_timed_comm(std::unique_ptr<Comm> inner, double& seconds) {
  return std::make_unique<TimedComm>(std::move(inner), seconds);
}

}  // namespace meshtrain
