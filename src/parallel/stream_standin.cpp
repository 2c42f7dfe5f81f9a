// The device-stream stand-in (parallel/stream_standin.hpp).
#include "parallel/stream_standin.hpp"

#include "core/host_waits.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace meshtrain {
namespace {

constexpr std::byte kNaN{0xff};  // every byte: a NaN in f32, f64, bf16 and fp16

std::atomic<long> started_count{0}, completed_count{0}, dropped_count{0};

std::byte* bytes_of(void* p) { return static_cast<std::byte*>(p); }
const std::byte* bytes_of(const void* p) { return static_cast<const std::byte*>(p); }

// One non-blocking operation in flight: the inner operation runs on `input` (a copy of what the
// caller's buffer held at the start) and `result`; the caller's output holds NaNs until the wait.
class InFlight final : public Request::Impl {
 public:
  InFlight(std::string what, const void* in, std::size_t in_bytes, void* out, std::size_t out_bytes,
           std::size_t result_bytes)
      : what_(std::move(what)),
        in_(bytes_of(in)),
        out_(bytes_of(out)),
        out_bytes_(out_bytes),
        input_(bytes_of(in), bytes_of(in) + in_bytes),
        result_(result_bytes) {
    if (out_ != nullptr) std::fill(out_, out_ + out_bytes_, kNaN);
    ++started_count;
  }
  ~InFlight() override {
    if (waited_) return;
    ++dropped_count;
    try {
      const UnreportedHostWaits device_side;
      inner_.wait();  // the inner operation ends; its result never lands
    } catch (const std::exception&) {
      // Unwinding already, or the job is on its way out: the inner Request reports its own failure.
    }
  }

  void* input() { return input_.data(); }
  void* result() { return result_.data(); }
  void start(Request inner) { inner_ = std::move(inner); }
  // An in-place all-reduce: the inner operation starts from the input and reduces into the result.
  void result_from_input() { result_ = input_; }

  void wait() override {
    waited_ = true;
    {
      const UnreportedHostWaits device_side;
      inner_.wait();
    }
    check_untouched();
    if (out_ != nullptr) std::memcpy(out_, result_.data(), out_bytes_);
    ++completed_count;
  }

 private:
  bool in_output(const std::byte* p) const { return out_ != nullptr && p >= out_ && p < out_ + out_bytes_; }

  void check_untouched() const {
    std::size_t input_changed = 0, output_written = 0;
    for (std::size_t i = 0; i < input_.size(); ++i) {
      if (!in_output(in_ + i) && in_[i] != input_[i]) ++input_changed;
    }
    for (std::size_t i = 0; i < out_bytes_; ++i) {
      if (out_[i] != kNaN) ++output_written;
    }
    if (input_changed + output_written == 0) return;
    throw std::logic_error(fmt::format(
        "stream stand-in: {}: while it was in flight the compute changed {} bytes of its input and wrote {} bytes of "
        "its output (on a device: a race, an event missing between the compute and the communication stream)",
        what_, input_changed, output_written));
  }

  std::string what_;
  const std::byte* in_;
  std::byte* out_;
  std::size_t out_bytes_;
  std::vector<std::byte> input_;
  std::vector<std::byte> result_;
  Request inner_;
  bool waited_ = false;
};

class StreamStandInComm final : public Comm {
 public:
  explicit StreamStandInComm(std::unique_ptr<Comm> inner)
      : Comm(inner->rank(), inner->size(), inner->backend()), inner_(std::move(inner)) {}

  // ---- Non-blocking: started now, landing at the wait.
  Request iallreduce(void* data, std::size_t count, ElementType type, ReduceOp op) override {
    const std::size_t n = count * element_bytes(type);
    auto f = std::make_unique<InFlight>(what("iallreduce", count, type), data, n, data, n, 0);
    f->result_from_input();
    f->start(inner_->iallreduce(f->result(), count, type, op));
    return Request(std::move(f));
  }
  Request ireduce_scatter(const void* send, void* recv, std::size_t recv_count, ElementType type,
                          ReduceOp op) override {
    const std::size_t n = recv_count * element_bytes(type);
    auto f = std::make_unique<InFlight>(what("ireduce_scatter", recv_count, type), send, n * std::size_t(size()), recv,
                                        n, n);
    f->start(inner_->ireduce_scatter(f->input(), f->result(), recv_count, type, op));
    return Request(std::move(f));
  }
  Request iallgather(const void* send, void* recv, std::size_t send_count, ElementType type) override {
    const std::size_t n = send_count * element_bytes(type);
    auto f = std::make_unique<InFlight>(what("iallgather", send_count, type), send, n, recv, n * std::size_t(size()),
                                        n * std::size_t(size()));
    f->start(inner_->iallgather(f->input(), f->result(), send_count, type));
    return Request(std::move(f));
  }
  Request isend(const void* data, std::size_t count, ElementType type, int peer, int tag) override {
    auto f = std::make_unique<InFlight>(fmt::format("{} to peer {}", what("isend", count, type), peer), data,
                                        count * element_bytes(type), nullptr, 0, 0);
    f->start(inner_->isend(f->input(), count, type, peer, tag));
    return Request(std::move(f));
  }
  Request irecv(void* data, std::size_t count, ElementType type, int peer, int tag) override {
    const std::size_t n = count * element_bytes(type);
    auto f = std::make_unique<InFlight>(fmt::format("{} from peer {}", what("irecv", count, type), peer), nullptr, 0,
                                        data, n, n);
    f->start(inner_->irecv(f->result(), count, type, peer, tag));
    return Request(std::move(f));
  }

  // ---- Blocking: the compute waits on them where they are called.
  void allreduce(void* data, std::size_t count, ElementType type, ReduceOp op) override {
    const UnreportedHostWaits device_side;
    inner_->allreduce(data, count, type, op);
  }
  void reduce_scatter(const void* send, void* recv, std::size_t recv_count, ElementType type, ReduceOp op) override {
    const UnreportedHostWaits device_side;
    inner_->reduce_scatter(send, recv, recv_count, type, op);
  }
  void allgather(const void* send, void* recv, std::size_t send_count, ElementType type) override {
    const UnreportedHostWaits device_side;
    inner_->allgather(send, recv, send_count, type);
  }
  void broadcast(void* data, std::size_t count, ElementType type, int root) override {
    const UnreportedHostWaits device_side;
    inner_->broadcast(data, count, type, root);
  }
  void send(const void* data, std::size_t count, ElementType type, int peer, int tag) override {
    const UnreportedHostWaits device_side;
    inner_->send(data, count, type, peer, tag);
  }
  void recv(void* data, std::size_t count, ElementType type, int peer, int tag) override {
    const UnreportedHostWaits device_side;
    inner_->recv(data, count, type, peer, tag);
  }
  void barrier() override {
    const UnreportedHostWaits device_side;
    inner_->barrier();
  }
  void alltoallv(const void* send, const std::size_t* send_counts, const std::size_t* send_displs, void* recv,
                 const std::size_t* recv_counts, const std::size_t* recv_displs, ElementType type) override {
    const UnreportedHostWaits device_side;
    inner_->alltoallv(send, send_counts, send_displs, recv, recv_counts, recv_displs, type);
  }
  void alltoall(const void* send, void* recv, std::size_t count_per_peer, ElementType type) override {
    const UnreportedHostWaits device_side;
    inner_->alltoall(send, recv, count_per_peer, type);
  }

 private:
  static std::string what(const char* op, std::size_t count, ElementType type) {
    return fmt::format("{} of {} {}", op, count, element_name(type));
  }

  std::unique_ptr<Comm> inner_;
};

}  // namespace

StreamStandInCounts stream_standin_counts() {
  return {started_count.load(), completed_count.load(), dropped_count.load()};
}

bool stream_standin_requested() {
  const char* v = std::getenv("MESHTRAIN_STREAM_STANDIN");
  return v != nullptr && std::string(v) == "1";
}

std::unique_ptr<Comm> make_stream_standin_comm(std::unique_ptr<Comm> inner) {
  return std::make_unique<StreamStandInComm>(std::move(inner));
}

}  // namespace meshtrain
