// The base of Comm decorators (timing, traffic counting, the watchdog's waits, the pointer audit):
// every call of the Comm interface is forwarded to the inner Comm through one of two hooks, which
// see the call's shape (its kind, the bytes of its whole buffer as parallel/counting_comm.hpp
// defines them, its element count, a message's peer, and the buffers it reads and writes):
//   around(shape, call)        a blocking call: the hook runs call() once;
//   started(shape, call)       a non-blocking one: the hook runs call() once and returns its
//                              Request, or one that wraps it.
// So the forwarding table is written once, and a decorator states only what it adds.
#pragma once

#include "parallel/comm.hpp"
#include "parallel/counting_comm.hpp"

#include <algorithm>
#include <cstdint>
#include <memory>
#include <type_traits>
#include <utility>

namespace meshtrain {

// [data, data + bytes): a buffer a call reads or writes, in the backend's memory space (device memory
// for NCCL) as the Comm's contract has every buffer; bytes 0 where it has none.
struct CallBuffer {
  const void* data = nullptr;
  std::size_t bytes = 0;
};

struct CallShape {
  Collective kind;
  std::int64_t bytes;    // the whole buffer's (parallel/counting_comm.hpp)
  std::size_t count;     // the call's count argument, in elements (all-to-all: the elements it sends to other ranks)
  int peer = -1;         // a message's peer (a group rank); -1 for a collective
  CallBuffer read{};     // what the call reads (in place: the same as written)
  CallBuffer written{};  // what it writes
};

// A non-owning reference to a callable, valid for the duration of the call it is passed to.
template <class Result>
class CallRef {
 public:
  template <class Fn>
  requires(!std::is_same_v<std::remove_cv_t<Fn>, CallRef>)
      CallRef(Fn& fn)  // NOLINT(google-explicit-constructor): built from the lambdas of the table below
      : target_(&fn), invoke_([](void* f) -> Result { return (*static_cast<Fn*>(f))(); }) {}
  Result operator()() const { return invoke_(target_); }

 private:
  void* target_;
  Result (*invoke_)(void*);
};

class CommDecorator : public Comm {
 public:
  explicit CommDecorator(std::unique_ptr<Comm> inner)
      : Comm(inner->rank(), inner->size(), inner->backend()), inner_(std::move(inner)) {}

  void allreduce(void* data, std::size_t count, ElementType type, ReduceOp op) final {
    blocking(in_place(Collective::allreduce, data, count, type), [&] { inner_->allreduce(data, count, type, op); });
  }
  Request iallreduce(void* data, std::size_t count, ElementType type, ReduceOp op) final {
    return nonblocking(in_place(Collective::allreduce, data, count, type),
                       [&] { return inner_->iallreduce(data, count, type, op); });
  }
  void reduce_scatter(const void* send, void* recv, std::size_t recv_count, ElementType type, ReduceOp op) final {
    blocking(scatter_shape(send, recv, recv_count, type),
             [&] { inner_->reduce_scatter(send, recv, recv_count, type, op); });
  }
  Request ireduce_scatter(const void* send, void* recv, std::size_t recv_count, ElementType type, ReduceOp op) final {
    return nonblocking(scatter_shape(send, recv, recv_count, type),
                       [&] { return inner_->ireduce_scatter(send, recv, recv_count, type, op); });
  }
  void allgather(const void* send, void* recv, std::size_t send_count, ElementType type) final {
    blocking(gather_shape(send, recv, send_count, type), [&] { inner_->allgather(send, recv, send_count, type); });
  }
  Request iallgather(const void* send, void* recv, std::size_t send_count, ElementType type) final {
    return nonblocking(gather_shape(send, recv, send_count, type),
                       [&] { return inner_->iallgather(send, recv, send_count, type); });
  }
  void broadcast(void* data, std::size_t count, ElementType type, int root) final {
    blocking(in_place(Collective::broadcast, data, count, type), [&] { inner_->broadcast(data, count, type, root); });
  }
  void send(const void* data, std::size_t count, ElementType type, int peer, int tag) final {
    blocking(message(Collective::send, data, nullptr, count, type, peer),
             [&] { inner_->send(data, count, type, peer, tag); });
  }
  void recv(void* data, std::size_t count, ElementType type, int peer, int tag) final {
    blocking(message(Collective::recv, nullptr, data, count, type, peer),
             [&] { inner_->recv(data, count, type, peer, tag); });
  }
  Request isend(const void* data, std::size_t count, ElementType type, int peer, int tag) final {
    return nonblocking(message(Collective::send, data, nullptr, count, type, peer),
                       [&] { return inner_->isend(data, count, type, peer, tag); });
  }
  Request irecv(void* data, std::size_t count, ElementType type, int peer, int tag) final {
    return nonblocking(message(Collective::recv, nullptr, data, count, type, peer),
                       [&] { return inner_->irecv(data, count, type, peer, tag); });
  }
  void barrier() final {
    blocking({Collective::barrier, 0, 0}, [&] { inner_->barrier(); });
  }
  // The elements of an all-to-all that leave this rank: every block but its own.
  void alltoallv(const void* send, const std::size_t* send_counts, const std::size_t* send_displs, void* recv,
                 const std::size_t* recv_counts, const std::size_t* recv_displs, ElementType type) final {
    std::size_t to_others = 0;
    for (int p = 0; p < size(); ++p) {
      if (p != rank()) to_others += send_counts[p];
    }
    blocking({Collective::alltoall, bytes(to_others, type), to_others, -1, blocks(send, send_counts, send_displs, type),
              blocks(recv, recv_counts, recv_displs, type)},
             [&] { inner_->alltoallv(send, send_counts, send_displs, recv, recv_counts, recv_displs, type); });
  }
  // count_per_peer elements to each of the other size − 1 ranks.
  void alltoall(const void* send, void* recv, std::size_t count_per_peer, ElementType type) final {
    const std::size_t to_others = count_per_peer * static_cast<std::size_t>(size() - 1);
    const std::size_t all = count_per_peer * static_cast<std::size_t>(size());
    CallShape shape{Collective::alltoall, bytes(to_others, type), to_others};
    shape.read = {send, all * element_bytes(type)};
    shape.written = {recv, all * element_bytes(type)};
    blocking(shape, [&] { inner_->alltoall(send, recv, count_per_peer, type); });
  }
  void settle() final {
    auto call = [&] { inner_->settle(); };
    settling(CallRef<void>(call));
  }

 protected:
  virtual void around(const CallShape& shape, CallRef<void> call) = 0;
  virtual Request started(const CallShape& shape, CallRef<Request> call) = 0;
  // settle(): passed on as it is unless a decorator has something to add (the watchdog's bracket).
  virtual void settling(CallRef<void> call) { call(); }

 private:
  static std::int64_t bytes(std::size_t count, ElementType type) {
    return static_cast<std::int64_t>(count * element_bytes(type));
  }
  static CallBuffer buffer(const void* data, std::size_t count, ElementType type) {
    return {data, count * element_bytes(type)};
  }
  // Every rank's block of a reduce-scatter or all-gather.
  std::size_t group_count(std::size_t block) const { return block * static_cast<std::size_t>(size()); }
  // An all-reduce or broadcast: one buffer, read and written.
  static CallShape in_place(Collective kind, const void* data, std::size_t count, ElementType type) {
    return {kind, bytes(count, type), count, -1, buffer(data, count, type), buffer(data, count, type)};
  }
  CallShape scatter_shape(const void* send, const void* recv, std::size_t recv_count, ElementType type) const {
    return {Collective::reduce_scatter,
            bytes(group_count(recv_count), type),
            recv_count,
            -1,
            buffer(send, group_count(recv_count), type),
            buffer(recv, recv_count, type)};
  }
  CallShape gather_shape(const void* send, const void* recv, std::size_t send_count, ElementType type) const {
    return {Collective::allgather,          bytes(group_count(send_count), type),       send_count, -1,
            buffer(send, send_count, type), buffer(recv, group_count(send_count), type)};
  }
  // A message: what a send reads, or what a receive writes.
  static CallShape message(Collective kind, const void* read, const void* written, std::size_t count, ElementType type,
                           int peer) {
    return {kind,
            bytes(count, type),
            count,
            peer,
            read ? buffer(read, count, type) : CallBuffer{},
            written ? buffer(written, count, type) : CallBuffer{}};
  }
  // The span of an all-to-all buffer: up to its farthest block's end.
  CallBuffer blocks(const void* data, const std::size_t* counts, const std::size_t* displs, ElementType type) const {
    std::size_t end = 0;
    for (int p = 0; p < size(); ++p) end = std::max(end, counts[p] > 0 ? displs[p] + counts[p] : 0);
    return buffer(data, end, type);
  }

  template <class Fn>
  void blocking(const CallShape& shape, Fn&& fn) {
    around(shape, CallRef<void>(fn));
  }
  template <class Fn>
  Request nonblocking(const CallShape& shape, Fn&& fn) {
    return started(shape, CallRef<Request>(fn));
  }

  std::unique_ptr<Comm> inner_;
};

}  // namespace meshtrain
