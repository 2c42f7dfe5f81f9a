// The MPI backend of Comm (share/docs/design.md, Parallelism): host memory, every CPU run and test.
//
// MPI counts are int and a model's gradient buffer can hold more than 2^31 floats, so every
// operation moves its buffer in chunks of at most max_chunk elements per rank, one MPI call per
// chunk, in the same order on every rank:
//   allreduce, iallreduce, broadcast, send/recv, isend/irecv: consecutive pieces of the buffer;
//   allgather: piece [o, o+n) of every rank's block in one call, through a datatype whose extent
//              is a whole block, so each rank's piece lands at its place in the receive buffer;
//   reduce_scatter: predefined reductions are only defined on predefined datatypes, so blocks
//              longer than max_chunk go through a staging buffer of at most max(max_chunk, size)
//              elements: rounds of max_chunk / size elements of every rank's block (the
//              non-blocking one stages every round at once, a copy of the send buffer that its
//              request keeps until it completes);
//   iallgather, ireduce_scatter: the same pieces and rounds, all in flight, one Request over them;
//   16-bit allreduce_sum: consecutive pieces, each reduced as below;
//   alltoallv, alltoall: each block a message of consecutive pieces (below).
// A message is received in the same chunks as it was sent (both sides use the same max_chunk), and
// chunks with the same peer and tag cannot overtake each other, so the pieces arrive in order.
//
// The Comm owns a duplicate of the caller's communicator (its messages never match the caller's)
// whose error handler returns errors, so every failing call throws mpi::Error with a HINT.
//
// All-to-all: MPI_Alltoallv takes int counts and int displacements, and a token buffer's
// displacements can pass INT_MAX before any count does. So each block travels as a message
// (MPI_Isend / MPI_Irecv, in chunks as above) on a second duplicate, made by the Comm's first
// all-to-all (collective, as that call is), whose messages cannot match send/recv's whatever their
// tags; the rank's own block is copied. Every receive is posted before any send, and rank r sends
// to r + 1, r + 2, … so that the ranks do not all start with the same peer.
//
// bf16 and fp16 travel as MPI_UINT16_T (their bits). Their allreduce_sum accumulates in fp32 and
// rounds once, which no reduction operator on a 16-bit datatype can do: MPI combines partial
// results pairwise, and each partial would be rounded back to 16 bits (P − 1 roundings; 1 plus
// three quarter-ulps from three ranks would stay 1). Instead each piece of n elements is cut into
// `size` blocks; MPI_Alltoallv brings every rank's copy of block r to rank r, which sums them in
// float in group-rank order and rounds once; MPI_Allgatherv (in place) hands the rounded blocks to
// everyone. The wire carries 16-bit values only, 2 (P − 1)/P · n of them per rank, as a ring
// allreduce would, and every rank ends with the same bits.
#include "core/mpi_check.hpp"
#include "parallel/comm.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <exception>
#include <limits>
#include <stdexcept>
#include <type_traits>
#include <utility>
#include <vector>

namespace meshtrain {
namespace {

constexpr const char* collective_hint =
    "every rank of the group must call the same collectives in the same order, with the same counts and "
    "roots, on Comms made with the same max_chunk";
constexpr const char* p2p_hint =
    "sender and receiver must agree on count, peer and tag (peers are ranks of the group, not of the world); "
    "an MPI correctness checker such as MUST finds mismatched pairs";

template <class T>
MPI_Datatype mpi_type();
template <>
MPI_Datatype mpi_type<float>() {
  return MPI_FLOAT;
}
template <>
MPI_Datatype mpi_type<double>() {
  return MPI_DOUBLE;
}
template <>
MPI_Datatype mpi_type<bf16>() {
  return MPI_UINT16_T;
}
template <>
MPI_Datatype mpi_type<fp16>() {
  return MPI_UINT16_T;
}
template <>
MPI_Datatype mpi_type<std::int64_t>() {
  return MPI_INT64_T;
}

// The elements' name in messages: "floats", "bf16 values".
template <class T>
constexpr const char* elements() {
  if constexpr (std::is_same_v<T, float>)
    return "floats";
  else if constexpr (std::is_same_v<T, double>)
    return "doubles";
  else if constexpr (std::is_same_v<T, std::int64_t>)
    return "int64 values";
  else
    return std::is_same_v<T, bf16> ? "bf16 values" : "fp16 values";
}

// Calls fn(offset, n) for consecutive pieces [offset, offset + n) of [0, count), n ≤ max_chunk.
template <class Fn>
void for_each_chunk(std::size_t count, std::size_t max_chunk, Fn&& fn) {
  for (std::size_t offset = 0; offset < count; offset += max_chunk) {
    fn(offset, static_cast<int>(std::min(max_chunk, count - offset)));
  }
}

// An MPI datatype, freed when it goes.
class OwnedType {
 public:
  OwnedType() = default;
  ~OwnedType() {
    if (type_ != MPI_DATATYPE_NULL) MPI_Type_free(&type_);
  }
  OwnedType(const OwnedType&) = delete;
  OwnedType& operator=(const OwnedType&) = delete;
  MPI_Datatype* out() { return &type_; }
  MPI_Datatype get() const { return type_; }

 private:
  MPI_Datatype type_ = MPI_DATATYPE_NULL;
};

// The MPI requests of one operation (one per chunk). wait() completes them in chunk order; for a
// receive it checks that every chunk brought as many elements as it expected. Dropped without
// wait(), it completes them in its destructor, so that no buffer outlives its operation; while an
// exception unwinds the stack it leaves them instead (the job is on its way to MPI_Abort, and
// waiting could hang on a peer that never comes).
class MpiRequest final : public Request::Impl {
 public:
  MpiRequest(std::vector<MPI_Request> requests, std::vector<int> expected, MPI_Datatype type, std::string what,
             std::vector<float> staging)
      : requests_(std::move(requests)),
        expected_(std::move(expected)),
        staging_(std::move(staging)),
        type_(type),
        what_(std::move(what)),
        unwinding_at_start_(std::uncaught_exceptions()) {}

  ~MpiRequest() override {
    if (waited_ || std::uncaught_exceptions() > unwinding_at_start_) return;
    try {
      wait();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "meshtrain: %s, dropped without wait(), failed: %s\n", what_.c_str(), e.what());
    }
  }

  void wait() override {
    waited_ = true;
    for (std::size_t i = 0; i < requests_.size(); ++i) {
      MPI_Status status;
      const int code = MPI_Wait(&requests_[i], &status);
      if (code != MPI_SUCCESS) {
        cancel_receives_from(i + 1);
        mpi::fail(code, __FILE__, __LINE__, "MPI_Wait(&requests_[i], &status)",
                  expected_.empty() ? collective_hint : p2p_hint);
      }
      if (!expected_.empty()) check_received(status, i);
    }
  }

 private:
  void check_received(const MPI_Status& status, std::size_t chunk) {
    int got = 0;
    MPI_Get_count(&status, type_, &got);
    if (got == expected_[chunk]) return;
    cancel_receives_from(chunk + 1);
    throw mpi::Error(
        fmt::format("{}:{}: {}: chunk {} brought {} elements where {} were expected\nHINT: the sender sent a shorter "
                    "message: send and recv must name the same count (and be made with the same max_chunk)",
                    __FILE__, __LINE__, what_, chunk, got, expected_[chunk]));
  }
  // After a failed chunk the later ones of a receive may never be matched: cancel them.
  void cancel_receives_from(std::size_t first) {
    if (expected_.empty()) return;
    for (std::size_t i = first; i < requests_.size(); ++i) {
      MPI_Cancel(&requests_[i]);
      MPI_Wait(&requests_[i], MPI_STATUS_IGNORE);
    }
  }

  std::vector<MPI_Request> requests_;
  std::vector<int> expected_;   // receives: the count each chunk must bring; empty otherwise
  std::vector<float> staging_;  // what the operation reads from until it completes (reduce-scatter rounds)
  MPI_Datatype type_;           // of the elements counted
  std::string what_;
  int unwinding_at_start_;
  bool waited_ = false;
};

class MpiComm final : public Comm {
 public:
  MpiComm(MPI_Comm parent, std::size_t max_chunk) : max_chunk_(max_chunk) {
    if (parent == MPI_COMM_NULL) {
      throw std::invalid_argument("make_mpi_comm: MPI_COMM_NULL (is this rank a member of the group?)");
    }
    if (max_chunk == 0 || max_chunk > std::size_t(INT_MAX)) {
      throw std::invalid_argument(fmt::format("make_mpi_comm: max_chunk {} outside 1..{}", max_chunk, INT_MAX));
    }
    MESHTRAIN_MPI_CHECK(MPI_Comm_dup(parent, comm_.out()),
                        "make_mpi_comm is collective: every rank of the communicator must call it, in the same "
                        "order as its other collectives");
    MESHTRAIN_MPI_CHECK(MPI_Comm_set_errhandler(comm_.get(), MPI_ERRORS_RETURN), "is MPI initialised?");
    MESHTRAIN_MPI_CHECK(MPI_Comm_rank(comm_.get(), &rank_), "is MPI initialised?");
    MESHTRAIN_MPI_CHECK(MPI_Comm_size(comm_.get(), &size_), "is MPI initialised?");
    int* tag_ub = nullptr;
    int found = 0;
    MESHTRAIN_MPI_CHECK(MPI_Comm_get_attr(comm_.get(), MPI_TAG_UB, &tag_ub, &found), "is MPI initialised?");
    tag_ub_ = found ? *tag_ub : 32767;  // the least upper bound the standard allows
  }

  int size() const override { return size_; }
  int rank() const override { return rank_; }
  std::string backend() const override { return "mpi"; }

  void allreduce_sum(float* data, std::size_t count) override { allreduce(data, count, MPI_SUM); }
  void allreduce_max(float* data, std::size_t count) override { allreduce(data, count, MPI_MAX); }
  void allreduce_max(double* data, std::size_t count) override { allreduce(data, count, MPI_MAX); }
  void allreduce_sum(double* data, std::size_t count) override { allreduce(data, count, MPI_SUM); }

  Request iallreduce_sum(float* data, std::size_t count) override {
    std::vector<MPI_Request> requests;
    for_each_chunk(count, max_chunk_, [&](std::size_t offset, int n) {
      requests.push_back(MPI_REQUEST_NULL);
      MESHTRAIN_MPI_CHECK(
          MPI_Iallreduce(MPI_IN_PLACE, data + offset, n, MPI_FLOAT, MPI_SUM, comm_.get(), &requests.back()),
          collective_hint);
    });
    return pending(std::move(requests), {}, MPI_FLOAT, fmt::format("iallreduce_sum of {} floats", count));
  }

  void reduce_scatter_sum(const float* send, float* recv, std::size_t recv_count) override {
    std::vector<float> staging;
    for_each_scatter_round(send, recv_count, staging, false, [&](const float* staged, std::size_t offset, int n) {
      MESHTRAIN_MPI_CHECK(MPI_Reduce_scatter_block(staged, recv + offset, n, MPI_FLOAT, MPI_SUM, comm_.get()),
                          collective_hint);
    });
  }

  // Every round in flight at once, each staged in its own part of a buffer the request keeps.
  Request ireduce_scatter_sum(const float* send, float* recv, std::size_t recv_count) override {
    std::vector<MPI_Request> requests;
    std::vector<float> staging;
    for_each_scatter_round(send, recv_count, staging, true, [&](const float* staged, std::size_t offset, int n) {
      requests.push_back(MPI_REQUEST_NULL);
      MESHTRAIN_MPI_CHECK(
          MPI_Ireduce_scatter_block(staged, recv + offset, n, MPI_FLOAT, MPI_SUM, comm_.get(), &requests.back()),
          collective_hint);
    });
    return pending(std::move(requests), {}, MPI_FLOAT, fmt::format("ireduce_scatter_sum of {} floats", recv_count),
                   std::move(staging));
  }

  void allgather(const float* send, float* recv, std::size_t send_count) override {
    gather_all(send, recv, send_count);
  }
  Request iallgather(const float* send, float* recv, std::size_t send_count) override {
    return igather_all(send, recv, send_count);
  }

  void broadcast(float* data, std::size_t count, int root) override {
    check_rank(root, "broadcast", "root");
    for_each_chunk(count, max_chunk_, [&](std::size_t offset, int n) {
      MESHTRAIN_MPI_CHECK(MPI_Bcast(data + offset, n, MPI_FLOAT, root, comm_.get()), collective_hint);
    });
  }

  void send(const float* data, std::size_t count, int peer, int tag) override { send_to(data, count, peer, tag); }
  void recv(float* data, std::size_t count, int peer, int tag) override { recv_from(data, count, peer, tag); }
  Request isend(const float* data, std::size_t count, int peer, int tag) override {
    return isend_to(data, count, peer, tag);
  }
  Request irecv(float* data, std::size_t count, int peer, int tag) override {
    return irecv_from(data, count, peer, tag);
  }

  void barrier() override { MESHTRAIN_MPI_CHECK(MPI_Barrier(comm_.get()), collective_hint); }

  void allreduce_sum(bf16* data, std::size_t count) override { allreduce_sum_16(data, count); }
  void allreduce_sum(fp16* data, std::size_t count) override { allreduce_sum_16(data, count); }
  void allgather(const bf16* send, bf16* recv, std::size_t send_count) override { gather_all(send, recv, send_count); }
  void allgather(const fp16* send, fp16* recv, std::size_t send_count) override { gather_all(send, recv, send_count); }
  Request iallgather(const bf16* send, bf16* recv, std::size_t send_count) override {
    return igather_all(send, recv, send_count);
  }
  Request iallgather(const fp16* send, fp16* recv, std::size_t send_count) override {
    return igather_all(send, recv, send_count);
  }
  void send(const bf16* data, std::size_t count, int peer, int tag) override { send_to(data, count, peer, tag); }
  void send(const fp16* data, std::size_t count, int peer, int tag) override { send_to(data, count, peer, tag); }
  void recv(bf16* data, std::size_t count, int peer, int tag) override { recv_from(data, count, peer, tag); }
  void recv(fp16* data, std::size_t count, int peer, int tag) override { recv_from(data, count, peer, tag); }
  Request isend(const bf16* data, std::size_t count, int peer, int tag) override {
    return isend_to(data, count, peer, tag);
  }
  Request isend(const fp16* data, std::size_t count, int peer, int tag) override {
    return isend_to(data, count, peer, tag);
  }
  Request irecv(bf16* data, std::size_t count, int peer, int tag) override {
    return irecv_from(data, count, peer, tag);
  }
  Request irecv(fp16* data, std::size_t count, int peer, int tag) override {
    return irecv_from(data, count, peer, tag);
  }

  void alltoallv(const float* send, const std::size_t* send_counts, const std::size_t* send_displs, float* recv,
                 const std::size_t* recv_counts, const std::size_t* recv_displs) override {
    exchange(send, send_counts, send_displs, recv, recv_counts, recv_displs);
  }
  void alltoallv(const double* send, const std::size_t* send_counts, const std::size_t* send_displs, double* recv,
                 const std::size_t* recv_counts, const std::size_t* recv_displs) override {
    exchange(send, send_counts, send_displs, recv, recv_counts, recv_displs);
  }
  void alltoallv(const bf16* send, const std::size_t* send_counts, const std::size_t* send_displs, bf16* recv,
                 const std::size_t* recv_counts, const std::size_t* recv_displs) override {
    exchange(send, send_counts, send_displs, recv, recv_counts, recv_displs);
  }
  void alltoallv(const fp16* send, const std::size_t* send_counts, const std::size_t* send_displs, fp16* recv,
                 const std::size_t* recv_counts, const std::size_t* recv_displs) override {
    exchange(send, send_counts, send_displs, recv, recv_counts, recv_displs);
  }
  // Equal blocks: the same messages as alltoallv's.
  void alltoall(const std::int64_t* send, std::int64_t* recv, std::size_t count_per_peer) override {
    const std::vector<std::size_t> counts(static_cast<std::size_t>(size_), count_per_peer);
    std::vector<std::size_t> displs(static_cast<std::size_t>(size_));
    for (std::size_t p = 0; p < displs.size(); ++p) displs[p] = p * count_per_peer;
    exchange(send, counts.data(), displs.data(), recv, counts.data(), displs.data());
  }

 private:
  template <class T>
  void allreduce(T* data, std::size_t count, MPI_Op op) {
    for_each_chunk(count, max_chunk_, [&](std::size_t offset, int n) {
      MESHTRAIN_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, data + offset, n, mpi_type<T>(), op, comm_.get()),
                          collective_hint);
    });
  }

  // fp32 accumulation, one rounding, 16-bit traffic (see the file comment). Piece [offset, offset + n)
  // is cut into blocks of n / size elements, the first n mod size of them one longer.
  template <class T>
  void allreduce_sum_16(T* data, std::size_t count) {
    const std::size_t p = static_cast<std::size_t>(size_), me = static_cast<std::size_t>(rank_);
    // Grow-only scratch kept by the Comm: tensor-parallel sums call this every layer of every step.
    std::vector<int>& lengths = scratch16_.lengths;
    std::vector<int>& starts = scratch16_.starts;
    std::vector<int>& gathered_lengths = scratch16_.gathered_lengths;
    std::vector<int>& gathered_starts = scratch16_.gathered_starts;
    for (auto* v : {&lengths, &starts, &gathered_lengths, &gathered_starts}) v->resize(p);
    std::vector<T>& gathered = scratch16_.gathered<T>();  // block `me` of every rank, in group-rank order
    for_each_chunk(count, max_chunk_, [&](std::size_t offset, int n) {
      const int base = n / size_, longer = n % size_;
      for (int r = 0; r < size_; ++r) {
        lengths[r] = base + (r < longer ? 1 : 0);
        starts[r] = r * base + std::min(r, longer);
      }
      const int mine = lengths[me];
      for (int r = 0; r < size_; ++r) {
        gathered_lengths[r] = mine;
        gathered_starts[r] = r * mine;
      }
      gathered.resize(p * static_cast<std::size_t>(mine));
      T* piece = data + offset;
      MESHTRAIN_MPI_CHECK(MPI_Alltoallv(piece, lengths.data(), starts.data(), mpi_type<T>(), gathered.data(),
                                        gathered_lengths.data(), gathered_starts.data(), mpi_type<T>(), comm_.get()),
                          collective_hint);
      T* block = piece + starts[me];
      for (int i = 0; i < mine; ++i) {
        float sum = gathered[i];
        for (int r = 1; r < size_; ++r) sum += gathered[static_cast<std::size_t>(r) * mine + i];
        block[i] = T(sum);
      }
      MESHTRAIN_MPI_CHECK(MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, piece, lengths.data(), starts.data(),
                                         mpi_type<T>(), comm_.get()),
                          collective_hint);
    });
  }

  template <class T>
  void gather_all(const T* send, T* recv, std::size_t send_count) {
    for_each_gather_piece(send, recv, send_count, [&](const T* from, int n, T* to, int to_count, MPI_Datatype to_type) {
      MESHTRAIN_MPI_CHECK(MPI_Allgather(from, n, mpi_type<T>(), to, to_count, to_type, comm_.get()), collective_hint);
    });
  }

  template <class T>
  Request igather_all(const T* send, T* recv, std::size_t send_count) {
    std::vector<MPI_Request> requests;
    for_each_gather_piece(send, recv, send_count, [&](const T* from, int n, T* to, int to_count, MPI_Datatype to_type) {
      requests.push_back(MPI_REQUEST_NULL);
      MESHTRAIN_MPI_CHECK(MPI_Iallgather(from, n, mpi_type<T>(), to, to_count, to_type, comm_.get(), &requests.back()),
                          collective_hint);
    });
    return pending(std::move(requests), {}, mpi_type<T>(),
                   fmt::format("iallgather of {} {}", send_count, elements<T>()));
  }

  // Calls gather(from, n, to, to_count, to_type) once per piece of the allgather: the whole block
  // (n elements of T from every rank) when it fits in a chunk; else piece [offset, offset + n) of
  // every block, received as one element of a type n elements long and a whole block wide. (A
  // committed type may be freed while an operation using it is in flight: MPI keeps it until then.)
  template <class T, class Gather>
  void for_each_gather_piece(const T* send, T* recv, std::size_t send_count, Gather&& gather) {
    check_total(send_count, "allgather");
    if (send_count == 0) return;
    const MPI_Datatype type = mpi_type<T>();
    // In place when this rank's block already sits at its place in recv (MPI forbids the aliasing otherwise).
    const bool in_place = send == recv + static_cast<std::size_t>(rank()) * send_count;
    auto from = [&](std::size_t offset) { return in_place ? static_cast<const T*>(MPI_IN_PLACE) : send + offset; };
    if (send_count <= max_chunk_) {
      const int n = static_cast<int>(send_count);
      gather(from(0), n, recv, n, type);
      return;
    }
    for_each_chunk(send_count, max_chunk_, [&](std::size_t offset, int n) {
      OwnedType piece, strided;
      MESHTRAIN_MPI_CHECK(MPI_Type_contiguous(n, type, piece.out()), "is MPI initialised?");
      MESHTRAIN_MPI_CHECK(
          MPI_Type_create_resized(piece.get(), 0, static_cast<MPI_Aint>(send_count * sizeof(T)), strided.out()),
          "is MPI initialised?");
      MESHTRAIN_MPI_CHECK(MPI_Type_commit(strided.out()), "is MPI initialised?");
      gather(from(offset), n, recv + offset, 1, strided.get());
    });
  }

  // Calls reduce(staged, offset, n) for the rounds of a reduce-scatter: one round of the whole send
  // buffer when a block fits in a chunk; else rounds of max_chunk / size elements of every rank's
  // block, copied contiguously into `staging` (predefined reductions need predefined datatypes).
  // keep_rounds gives every round its own part of staging (size · recv_count elements), so all may
  // be in flight; otherwise one part is reused.
  template <class Reduce>
  void for_each_scatter_round(const float* send, std::size_t recv_count, std::vector<float>& staging, bool keep_rounds,
                              Reduce&& reduce) {
    check_total(recv_count, "reduce_scatter_sum");
    if (recv_count == 0) return;
    if (recv_count <= max_chunk_) {
      reduce(send, 0, static_cast<int>(recv_count));
      return;
    }
    const std::size_t p = static_cast<std::size_t>(size_);
    const std::size_t round = std::max<std::size_t>(1, max_chunk_ / p);
    staging.resize(keep_rounds ? recv_count * p : round * p);
    for (std::size_t offset = 0; offset < recv_count; offset += round) {
      const std::size_t n = std::min(round, recv_count - offset);
      float* staged = staging.data() + (keep_rounds ? offset * p : 0);
      for (std::size_t block = 0; block < p; ++block) {
        std::memcpy(staged + block * n, send + block * recv_count + offset, n * sizeof(float));
      }
      reduce(staged, offset, static_cast<int>(n));
    }
  }

  template <class T>
  void send_to(const T* data, std::size_t count, int peer, int tag) {
    check_peer(peer, tag, "send");
    for_each_chunk(count, max_chunk_, [&](std::size_t offset, int n) {
      MESHTRAIN_MPI_CHECK(MPI_Send(data + offset, n, mpi_type<T>(), peer, tag, comm_.get()), p2p_hint);
    });
  }

  template <class T>
  void recv_from(T* data, std::size_t count, int peer, int tag) {
    check_peer(peer, tag, "recv");
    std::size_t chunk = 0;
    for_each_chunk(count, max_chunk_, [&](std::size_t offset, int n) {
      MPI_Status status;
      MESHTRAIN_MPI_CHECK(MPI_Recv(data + offset, n, mpi_type<T>(), peer, tag, comm_.get(), &status), p2p_hint);
      int got = 0;
      MPI_Get_count(&status, mpi_type<T>(), &got);
      if (got != n) {
        throw mpi::Error(fmt::format(
            "{}:{}: recv of {} {} from peer {} tag {}: chunk {} brought {} elements where {} were expected\n"
            "HINT: the sender sent a shorter message: send and recv must name the same count (and be made with "
            "the same max_chunk)",
            __FILE__, __LINE__, count, elements<T>(), peer, tag, chunk, got, n));
      }
      ++chunk;
    });
  }

  template <class T>
  Request isend_to(const T* data, std::size_t count, int peer, int tag) {
    check_peer(peer, tag, "isend");
    return start_send(comm_.get(), data, count, peer, tag,
                      fmt::format("isend of {} {} to peer {} tag {}", count, elements<T>(), peer, tag));
  }

  template <class T>
  Request irecv_from(T* data, std::size_t count, int peer, int tag) {
    check_peer(peer, tag, "irecv");
    return start_recv(comm_.get(), data, count, peer, tag,
                      fmt::format("irecv of {} {} from peer {} tag {}", count, elements<T>(), peer, tag));
  }

  // A message in chunks on `comm` (this Comm's own, or the all-to-all's), one MPI_Isend or
  // MPI_Irecv per chunk; a receive's request checks that every chunk brought what it expected.
  template <class T>
  Request start_send(MPI_Comm comm, const T* data, std::size_t count, int peer, int tag, std::string what) const {
    std::vector<MPI_Request> requests;
    for_each_chunk(count, max_chunk_, [&](std::size_t offset, int n) {
      requests.push_back(MPI_REQUEST_NULL);
      MESHTRAIN_MPI_CHECK(MPI_Isend(data + offset, n, mpi_type<T>(), peer, tag, comm, &requests.back()), p2p_hint);
    });
    return pending(std::move(requests), {}, mpi_type<T>(), std::move(what));
  }
  template <class T>
  Request start_recv(MPI_Comm comm, T* data, std::size_t count, int peer, int tag, std::string what) const {
    std::vector<MPI_Request> requests;
    std::vector<int> expected;
    for_each_chunk(count, max_chunk_, [&](std::size_t offset, int n) {
      requests.push_back(MPI_REQUEST_NULL);
      expected.push_back(n);
      MESHTRAIN_MPI_CHECK(MPI_Irecv(data + offset, n, mpi_type<T>(), peer, tag, comm, &requests.back()), p2p_hint);
    });
    return pending(std::move(requests), std::move(expected), mpi_type<T>(), std::move(what));
  }

  // All-to-all as messages (see the file comment).
  template <class T>
  void exchange(const T* send, const std::size_t* send_counts, const std::size_t* send_displs, T* recv,
                const std::size_t* recv_counts, const std::size_t* recv_displs) {
    const int me = rank_;
    if (send_counts[me] != recv_counts[me]) {
      throw std::invalid_argument(
          fmt::format("alltoallv: group rank {} sends itself {} {} but expects {} (send_counts[{}] must equal "
                      "recv_counts[{}])",
                      me, send_counts[me], elements<T>(), recv_counts[me], me, me));
    }
    const MPI_Comm comm = exchange_comm();
    std::vector<Request> messages;
    for (int k = 1; k < size_; ++k) {
      const int from = (me + size_ - k) % size_;
      messages.push_back(
          start_recv(comm, recv + recv_displs[from], recv_counts[from], from, 0,
                     fmt::format("alltoallv: the {} {} from group rank {}", recv_counts[from], elements<T>(), from)));
    }
    for (int k = 1; k < size_; ++k) {
      const int to = (me + k) % size_;
      messages.push_back(
          start_send(comm, send + send_displs[to], send_counts[to], to, 0,
                     fmt::format("alltoallv: the {} {} to group rank {}", send_counts[to], elements<T>(), to)));
    }
    std::copy_n(send + send_displs[me], send_counts[me], recv + recv_displs[me]);
    for (Request& message : messages) message.wait();
  }

  // The all-to-all's communicator, made by the first all-to-all (every rank of the group makes it
  // there, since every rank makes that call).
  MPI_Comm exchange_comm() {
    if (exchange_.get() != MPI_COMM_NULL) return exchange_.get();
    MESHTRAIN_MPI_CHECK(MPI_Comm_dup(comm_.get(), exchange_.out()), collective_hint);
    MESHTRAIN_MPI_CHECK(MPI_Comm_set_errhandler(exchange_.get(), MPI_ERRORS_RETURN), "is MPI initialised?");
    return exchange_.get();
  }

  static Request pending(std::vector<MPI_Request> requests, std::vector<int> expected, MPI_Datatype type,
                         std::string what, std::vector<float> staging = {}) {
    if (requests.empty()) return Request();
    return Request(std::make_unique<MpiRequest>(std::move(requests), std::move(expected), type, std::move(what),
                                                std::move(staging)));
  }

  // size × count elements must be addressable.
  void check_total(std::size_t count, const char* op) const {
    if (count > std::numeric_limits<std::size_t>::max() / sizeof(float) / static_cast<std::size_t>(size_)) {
      throw std::length_error(fmt::format("{}: {} ranks × {} floats do not fit in memory", op, size_, count));
    }
  }
  void check_rank(int rank, const char* op, const char* role) const { require_group_rank(rank, size_, op, role); }
  void check_peer(int peer, int tag, const char* op) const {
    check_rank(peer, op, "peer");
    if (tag < 0 || tag > tag_ub_) {
      throw std::invalid_argument(fmt::format("{}: tag {} outside 0..{} (MPI_TAG_UB)", op, tag, tag_ub_));
    }
  }

  mpi::OwnedComm comm_;
  mpi::OwnedComm exchange_;  // the all-to-all's, once one has run
  std::size_t max_chunk_;
  int rank_ = 0, size_ = 1, tag_ub_ = 32767;
  struct Scratch16 {
    std::vector<int> lengths, starts, gathered_lengths, gathered_starts;
    std::vector<bf16> gathered_bf16;
    std::vector<fp16> gathered_fp16;
    template <class T>
    std::vector<T>& gathered() {
      if constexpr (std::is_same_v<T, bf16>) {
        return gathered_bf16;
      } else {
        return gathered_fp16;
      }
    }
  } scratch16_;
};

}  // namespace

std::unique_ptr<Comm> make_mpi_comm(MPI_Comm comm) { return make_mpi_comm(comm, mpi_default_max_chunk); }

std::unique_ptr<Comm> make_mpi_comm(MPI_Comm comm, std::size_t max_chunk) {
  return std::make_unique<MpiComm>(comm, max_chunk);
}

}  // namespace meshtrain
