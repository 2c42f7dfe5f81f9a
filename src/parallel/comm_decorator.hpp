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

// Where a call's buffer lives, as the Comm's contract says: the backend's memory space (device
// memory for NCCL), or host memory whatever the backend (the all-to-all's token counts only).
enum class BufferMemory { backend, host };

// [data, data + bytes): a buffer a call reads or writes; bytes 0 where it has none.
struct CallBuffer {
  const void* data = nullptr;
  std::size_t bytes = 0;
  BufferMemory memory = BufferMemory::backend;
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
  explicit CommDecorator(std::unique_ptr<Comm> inner) : inner_(std::move(inner)) {}

  int size() const final { return inner_->size(); }
  int rank() const final { return inner_->rank(); }
  std::string backend() const final { return inner_->backend(); }

  void allreduce_sum(float* data, std::size_t count) final {
    blocking(in_place(Collective::allreduce, data, count), [&] { inner_->allreduce_sum(data, count); });
  }
  Request iallreduce_sum(float* data, std::size_t count) final {
    return nonblocking(in_place(Collective::allreduce, data, count),
                       [&] { return inner_->iallreduce_sum(data, count); });
  }
  void allreduce_max(float* data, std::size_t count) final {
    blocking(in_place(Collective::allreduce, data, count), [&] { inner_->allreduce_max(data, count); });
  }
  void allreduce_max(double* data, std::size_t count) final {
    blocking(in_place(Collective::allreduce, data, count), [&] { inner_->allreduce_max(data, count); });
  }
  void allreduce_sum(double* data, std::size_t count) final {
    blocking(in_place(Collective::allreduce, data, count), [&] { inner_->allreduce_sum(data, count); });
  }
  void reduce_scatter_sum(const float* send, float* recv, std::size_t recv_count) final {
    blocking(scatter_shape(send, recv, recv_count), [&] { inner_->reduce_scatter_sum(send, recv, recv_count); });
  }
  Request ireduce_scatter_sum(const float* send, float* recv, std::size_t recv_count) final {
    return nonblocking(scatter_shape(send, recv, recv_count),
                       [&] { return inner_->ireduce_scatter_sum(send, recv, recv_count); });
  }
  void allgather(const float* send, float* recv, std::size_t send_count) final { gather(send, recv, send_count); }
  Request iallgather(const float* send, float* recv, std::size_t send_count) final {
    return igather(send, recv, send_count);
  }
  void broadcast(float* data, std::size_t count, int root) final {
    blocking(in_place(Collective::broadcast, data, count), [&] { inner_->broadcast(data, count, root); });
  }
  void send(const float* data, std::size_t count, int peer, int tag) final { send_to(data, count, peer, tag); }
  void recv(float* data, std::size_t count, int peer, int tag) final { recv_from(data, count, peer, tag); }
  Request isend(const float* data, std::size_t count, int peer, int tag) final {
    return isend_to(data, count, peer, tag);
  }
  Request irecv(float* data, std::size_t count, int peer, int tag) final { return irecv_from(data, count, peer, tag); }
  void barrier() final {
    blocking({Collective::barrier, 0, 0}, [&] { inner_->barrier(); });
  }

  void allreduce_sum(bf16* data, std::size_t count) final {
    blocking(in_place(Collective::allreduce, data, count), [&] { inner_->allreduce_sum(data, count); });
  }
  void allreduce_sum(fp16* data, std::size_t count) final {
    blocking(in_place(Collective::allreduce, data, count), [&] { inner_->allreduce_sum(data, count); });
  }
  void allgather(const bf16* send, bf16* recv, std::size_t send_count) final { gather(send, recv, send_count); }
  void allgather(const fp16* send, fp16* recv, std::size_t send_count) final { gather(send, recv, send_count); }
  Request iallgather(const bf16* send, bf16* recv, std::size_t send_count) final {
    return igather(send, recv, send_count);
  }
  Request iallgather(const fp16* send, fp16* recv, std::size_t send_count) final {
    return igather(send, recv, send_count);
  }
  void send(const bf16* data, std::size_t count, int peer, int tag) final { send_to(data, count, peer, tag); }
  void send(const fp16* data, std::size_t count, int peer, int tag) final { send_to(data, count, peer, tag); }
  void recv(bf16* data, std::size_t count, int peer, int tag) final { recv_from(data, count, peer, tag); }
  void recv(fp16* data, std::size_t count, int peer, int tag) final { recv_from(data, count, peer, tag); }
  Request isend(const bf16* data, std::size_t count, int peer, int tag) final {
    return isend_to(data, count, peer, tag);
  }
  Request isend(const fp16* data, std::size_t count, int peer, int tag) final {
    return isend_to(data, count, peer, tag);
  }
  Request irecv(bf16* data, std::size_t count, int peer, int tag) final { return irecv_from(data, count, peer, tag); }
  Request irecv(fp16* data, std::size_t count, int peer, int tag) final { return irecv_from(data, count, peer, tag); }

  void alltoallv(const float* send, const std::size_t* send_counts, const std::size_t* send_displs, float* recv,
                 const std::size_t* recv_counts, const std::size_t* recv_displs) final {
    exchange(send, send_counts, send_displs, recv, recv_counts, recv_displs);
  }
  void alltoallv(const double* send, const std::size_t* send_counts, const std::size_t* send_displs, double* recv,
                 const std::size_t* recv_counts, const std::size_t* recv_displs) final {
    exchange(send, send_counts, send_displs, recv, recv_counts, recv_displs);
  }
  void alltoallv(const bf16* send, const std::size_t* send_counts, const std::size_t* send_displs, bf16* recv,
                 const std::size_t* recv_counts, const std::size_t* recv_displs) final {
    exchange(send, send_counts, send_displs, recv, recv_counts, recv_displs);
  }
  void alltoallv(const fp16* send, const std::size_t* send_counts, const std::size_t* send_displs, fp16* recv,
                 const std::size_t* recv_counts, const std::size_t* recv_displs) final {
    exchange(send, send_counts, send_displs, recv, recv_counts, recv_displs);
  }
  // count_per_peer elements to each of the other size − 1 ranks.
  void alltoall(const std::int64_t* send, std::int64_t* recv, std::size_t count_per_peer) final {
    const std::size_t to_others = count_per_peer * static_cast<std::size_t>(inner_->size() - 1);
    // Host memory on every backend, by the Comm's contract (parallel/comm.hpp).
    const std::size_t all = count_per_peer * static_cast<std::size_t>(inner_->size());
    CallShape shape{Collective::alltoall, bytes<std::int64_t>(to_others), to_others};
    shape.read = {send, all * sizeof(std::int64_t), BufferMemory::host};
    shape.written = {recv, all * sizeof(std::int64_t), BufferMemory::host};
    blocking(shape, [&] { inner_->alltoall(send, recv, count_per_peer); });
  }

 protected:
  virtual void around(const CallShape& shape, CallRef<void> call) = 0;
  virtual Request started(const CallShape& shape, CallRef<Request> call) = 0;

 private:
  template <class T>
  static std::int64_t bytes(std::size_t count) {
    return static_cast<std::int64_t>(count * sizeof(T));
  }
  // The whole buffer of a reduce-scatter or all-gather: every rank's block.
  template <class T>
  std::int64_t group_bytes(std::size_t block) const {
    return bytes<T>(block * static_cast<std::size_t>(inner_->size()));
  }
  template <class T>
  static CallBuffer buffer(const T* data, std::size_t count) {
    return {data, count * sizeof(T)};
  }
  // An all-reduce or broadcast: one buffer, read and written.
  template <class T>
  static CallShape in_place(Collective kind, T* data, std::size_t count) {
    return {kind, bytes<T>(count), count, -1, buffer(data, count), buffer(data, count)};
  }
  CallShape scatter_shape(const float* send, float* recv, std::size_t recv_count) const {
    return {Collective::reduce_scatter,
            group_bytes<float>(recv_count),
            recv_count,
            -1,
            buffer(send, recv_count * static_cast<std::size_t>(inner_->size())),
            buffer(recv, recv_count)};
  }
  template <class T>
  CallShape gather_shape(const T* send, T* recv, std::size_t send_count) const {
    return {Collective::allgather,
            group_bytes<T>(send_count),
            send_count,
            -1,
            buffer(send, send_count),
            buffer(recv, send_count * static_cast<std::size_t>(inner_->size()))};
  }
  // The span of an all-to-all buffer: up to its farthest block's end.
  template <class T>
  CallBuffer blocks(const T* data, const std::size_t* counts, const std::size_t* displs) const {
    std::size_t end = 0;
    for (int p = 0; p < inner_->size(); ++p) end = std::max(end, counts[p] > 0 ? displs[p] + counts[p] : 0);
    return buffer(data, end);
  }

  template <class Fn>
  void blocking(const CallShape& shape, Fn&& fn) {
    around(shape, CallRef<void>(fn));
  }
  template <class Fn>
  Request nonblocking(const CallShape& shape, Fn&& fn) {
    return started(shape, CallRef<Request>(fn));
  }

  template <class T>
  void gather(const T* send, T* recv, std::size_t send_count) {
    blocking(gather_shape(send, recv, send_count), [&] { inner_->allgather(send, recv, send_count); });
  }
  template <class T>
  Request igather(const T* send, T* recv, std::size_t send_count) {
    return nonblocking(gather_shape(send, recv, send_count),
                       [&] { return inner_->iallgather(send, recv, send_count); });
  }
  template <class T>
  void send_to(const T* data, std::size_t count, int peer, int tag) {
    blocking({Collective::send, bytes<T>(count), count, peer, buffer(data, count)},
             [&] { inner_->send(data, count, peer, tag); });
  }
  template <class T>
  void recv_from(T* data, std::size_t count, int peer, int tag) {
    blocking({Collective::recv, bytes<T>(count), count, peer, {}, buffer(data, count)},
             [&] { inner_->recv(data, count, peer, tag); });
  }
  template <class T>
  Request isend_to(const T* data, std::size_t count, int peer, int tag) {
    return nonblocking({Collective::send, bytes<T>(count), count, peer, buffer(data, count)},
                       [&] { return inner_->isend(data, count, peer, tag); });
  }
  template <class T>
  Request irecv_from(T* data, std::size_t count, int peer, int tag) {
    return nonblocking({Collective::recv, bytes<T>(count), count, peer, {}, buffer(data, count)},
                       [&] { return inner_->irecv(data, count, peer, tag); });
  }

  // The elements of an all-to-all that leave this rank: every block but its own.
  template <class T>
  void exchange(const T* send, const std::size_t* send_counts, const std::size_t* send_displs, T* recv,
                const std::size_t* recv_counts, const std::size_t* recv_displs) {
    std::size_t to_others = 0;
    for (int p = 0; p < inner_->size(); ++p) {
      if (p != inner_->rank()) to_others += send_counts[p];
    }
    blocking({Collective::alltoall, bytes<T>(to_others), to_others, -1, blocks(send, send_counts, send_displs),
              blocks(recv, recv_counts, recv_displs)},
             [&] { inner_->alltoallv(send, send_counts, send_displs, recv, recv_counts, recv_displs); });
  }

  std::unique_ptr<Comm> inner_;
};

}  // namespace meshtrain
