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
//   16-bit allreduce: consecutive pieces, each reduced as below; 16-bit reduce_scatter: the rounds
//              above, each reduced as below;
//   alltoallv, alltoall: each block a message of consecutive pieces (comm_mpi_messages.cpp).
// A message is received in the same chunks as it was sent (both sides use the same max_chunk), and
// chunks with the same peer and tag cannot overtake each other, so the pieces arrive in order.
//
// The Comm owns a duplicate of the caller's communicator (its messages never match the caller's)
// whose error handler returns errors, so every failing call throws mpi::Error with a HINT.
//
// The element types map to MPI datatypes in one table (impl/mpi_elements.cpp). bf16 and fp16 travel
// as MPI_UINT16_T (their bits). Their reductions accumulate in fp32 and round once, which no
// reduction operator on a 16-bit datatype can do: MPI combines partial results pairwise, and each
// partial would be rounded back to 16 bits (P − 1 roundings; 1 plus three quarter-ulps from three
// ranks would stay 1). Instead each piece of n elements of an allreduce is cut into `size` blocks;
// MPI_Alltoallv brings every rank's copy of block r to rank r, which sums them in float in
// group-rank order and rounds once; MPI_Allgatherv (in place) hands the rounded blocks to everyone.
// The wire carries 16-bit values only, 2 (P − 1)/P · n of them per rank, as a ring allreduce would,
// and every rank ends with the same bits. A reduce-scatter round is the first half: MPI_Alltoall
// brings every rank's piece of block r to rank r, which reduces them alike. Their non-blocking
// forms complete before they return (the host sums between the two halves).
#include "core/mpi_check.hpp"
#include "parallel/impl/mpi_comm.hpp"
#include "parallel/impl/mpi_request.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <climits>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <utility>

namespace meshtrain {
namespace mpi_backend {

OwnComm duplicate(MPI_Comm parent, std::size_t max_chunk) {
  if (parent == MPI_COMM_NULL) {
    throw std::invalid_argument("make_mpi_comm: MPI_COMM_NULL (is this rank a member of the group?)");
  }
  if (max_chunk == 0 || max_chunk > std::size_t(INT_MAX)) {
    throw std::invalid_argument(fmt::format("make_mpi_comm: max_chunk {} outside 1..{}", max_chunk, INT_MAX));
  }
  OwnComm own;
  MESHTRAIN_MPI_CHECK(MPI_Comm_dup(parent, own.comm.out()),
                      "make_mpi_comm is collective: every rank of the communicator must call it, in the same "
                      "order as its other collectives");
  MESHTRAIN_MPI_CHECK(MPI_Comm_set_errhandler(own.comm.get(), MPI_ERRORS_RETURN), "is MPI initialised?");
  MESHTRAIN_MPI_CHECK(MPI_Comm_rank(own.comm.get(), &own.rank), "is MPI initialised?");
  MESHTRAIN_MPI_CHECK(MPI_Comm_size(own.comm.get(), &own.size), "is MPI initialised?");
  int* tag_ub = nullptr;
  int found = 0;
  MESHTRAIN_MPI_CHECK(MPI_Comm_get_attr(own.comm.get(), MPI_TAG_UB, &tag_ub, &found), "is MPI initialised?");
  if (found) own.tag_ub = *tag_ub;
  return own;
}

MpiComm::MpiComm(OwnComm own, std::size_t max_chunk)
    : Comm(own.rank, own.size, "mpi"), comm_(std::move(own.comm)), max_chunk_(max_chunk), tag_ub_(own.tag_ub) {}

void MpiComm::allreduce(void* data, std::size_t count, ElementType type, ReduceOp op) {
  const MpiElement e = mpi_element(type);
  if (e.widened) return widened_allreduce(data, count, type, e, op);
  for_each_chunk(count, max_chunk_, [&](std::size_t offset, int n) {
    MESHTRAIN_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, element_at(data, offset, type), n, e.type, mpi_op(op), comm_.get()),
                        collective_hint);
  });
}

Request MpiComm::iallreduce(void* data, std::size_t count, ElementType type, ReduceOp op) {
  const MpiElement e = mpi_element(type);
  if (e.widened) {
    widened_allreduce(data, count, type, e, op);
    return Request();
  }
  std::vector<MPI_Request> requests;
  for_each_chunk(count, max_chunk_, [&](std::size_t offset, int n) {
    requests.push_back(MPI_REQUEST_NULL);
    MESHTRAIN_MPI_CHECK(MPI_Iallreduce(MPI_IN_PLACE, element_at(data, offset, type), n, e.type, mpi_op(op), comm_.get(),
                                       &requests.back()),
                        collective_hint);
  });
  return pending(std::move(requests), {}, e.type, fmt::format("iallreduce of {} {}", count, element_name(type)));
}

void MpiComm::reduce_scatter(const void* send, void* recv, std::size_t recv_count, ElementType type, ReduceOp op) {
  const MpiElement e = mpi_element(type);
  std::vector<std::byte> staging;
  for_each_scatter_round(
      send, recv_count, type, staging, false, [&](const std::byte* staged, std::size_t offset, int n) {
        if (e.widened) return widened_reduce_scatter(staged, element_at(recv, offset, type), n, type, e, op);
        MESHTRAIN_MPI_CHECK(
            MPI_Reduce_scatter_block(staged, element_at(recv, offset, type), n, e.type, mpi_op(op), comm_.get()),
            collective_hint);
      });
}

// Every round in flight at once, each staged in its own part of a buffer the request keeps.
Request MpiComm::ireduce_scatter(const void* send, void* recv, std::size_t recv_count, ElementType type, ReduceOp op) {
  const MpiElement e = mpi_element(type);
  if (e.widened) {
    reduce_scatter(send, recv, recv_count, type, op);
    return Request();
  }
  std::vector<MPI_Request> requests;
  std::vector<std::byte> staging;
  for_each_scatter_round(
      send, recv_count, type, staging, true, [&](const std::byte* staged, std::size_t offset, int n) {
        requests.push_back(MPI_REQUEST_NULL);
        MESHTRAIN_MPI_CHECK(MPI_Ireduce_scatter_block(staged, element_at(recv, offset, type), n, e.type, mpi_op(op),
                                                      comm_.get(), &requests.back()),
                            collective_hint);
      });
  return pending(std::move(requests), {}, e.type,
                 fmt::format("ireduce_scatter of {} {}", recv_count, element_name(type)), std::move(staging));
}

void MpiComm::allgather(const void* send, void* recv, std::size_t send_count, ElementType type) {
  const MPI_Datatype t = mpi_element(type).type;
  for_each_gather_piece(
      send, recv, send_count, type, [&](const void* from, int n, void* to, int to_count, MPI_Datatype to_type) {
        MESHTRAIN_MPI_CHECK(MPI_Allgather(from, n, t, to, to_count, to_type, comm_.get()), collective_hint);
      });
}

Request MpiComm::iallgather(const void* send, void* recv, std::size_t send_count, ElementType type) {
  const MPI_Datatype t = mpi_element(type).type;
  std::vector<MPI_Request> requests;
  for_each_gather_piece(
      send, recv, send_count, type, [&](const void* from, int n, void* to, int to_count, MPI_Datatype to_type) {
        requests.push_back(MPI_REQUEST_NULL);
        MESHTRAIN_MPI_CHECK(MPI_Iallgather(from, n, t, to, to_count, to_type, comm_.get(), &requests.back()),
                            collective_hint);
      });
  return pending(std::move(requests), {}, t, fmt::format("iallgather of {} {}", send_count, element_name(type)));
}

void MpiComm::broadcast(void* data, std::size_t count, ElementType type, int root) {
  require_group_rank(root, size(), "broadcast", "root");
  const MPI_Datatype t = mpi_element(type).type;
  for_each_chunk(count, max_chunk_, [&](std::size_t offset, int n) {
    MESHTRAIN_MPI_CHECK(MPI_Bcast(element_at(data, offset, type), n, t, root, comm_.get()), collective_hint);
  });
}

void MpiComm::barrier() { MESHTRAIN_MPI_CHECK(MPI_Barrier(comm_.get()), collective_hint); }

// fp32 accumulation, one rounding, 16-bit traffic (see the file comment). Piece [offset, offset + n)
// is cut into blocks of n / size elements, the first n mod size of them one longer.
void MpiComm::widened_allreduce(void* data, std::size_t count, ElementType type, const MpiElement& e, ReduceOp op) {
  const int p = size(), me = rank();
  const std::size_t bytes = element_bytes(type);
  std::vector<int>& lengths = scratch_.lengths;
  std::vector<int>& starts = scratch_.starts;
  std::vector<int>& gathered_lengths = scratch_.gathered_lengths;
  std::vector<int>& gathered_starts = scratch_.gathered_starts;
  for (auto* v : {&lengths, &starts, &gathered_lengths, &gathered_starts}) v->resize(static_cast<std::size_t>(p));
  std::vector<std::byte>& gathered = scratch_.gathered;  // block `me` of every rank, in group-rank order
  for_each_chunk(count, max_chunk_, [&](std::size_t offset, int n) {
    const int base = n / p, longer = n % p;
    for (int r = 0; r < p; ++r) {
      lengths[r] = base + (r < longer ? 1 : 0);
      starts[r] = r * base + std::min(r, longer);
    }
    const int mine = lengths[me];
    for (int r = 0; r < p; ++r) {
      gathered_lengths[r] = mine;
      gathered_starts[r] = r * mine;
    }
    gathered.resize(static_cast<std::size_t>(p) * static_cast<std::size_t>(mine) * bytes);
    std::byte* piece = element_at(data, offset, type);
    MESHTRAIN_MPI_CHECK(MPI_Alltoallv(piece, lengths.data(), starts.data(), e.type, gathered.data(),
                                      gathered_lengths.data(), gathered_starts.data(), e.type, comm_.get()),
                        collective_hint);
    e.widened(gathered.data(), p, static_cast<std::size_t>(mine), element_at(piece, starts[me], type), op);
    MESHTRAIN_MPI_CHECK(
        MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, piece, lengths.data(), starts.data(), e.type, comm_.get()),
        collective_hint);
  });
}

// One round of a 16-bit reduce-scatter: `send` holds n elements of every rank's block, in rank order.
void MpiComm::widened_reduce_scatter(const std::byte* send, std::byte* recv, int n, ElementType type,
                                     const MpiElement& e, ReduceOp op) {
  std::vector<std::byte>& gathered = scratch_.gathered;  // this rank's block from every rank, in group-rank order
  gathered.resize(static_cast<std::size_t>(size()) * static_cast<std::size_t>(n) * element_bytes(type));
  MESHTRAIN_MPI_CHECK(MPI_Alltoall(send, n, e.type, gathered.data(), n, e.type, comm_.get()), collective_hint);
  e.widened(gathered.data(), size(), static_cast<std::size_t>(n), recv, op);
}

// Calls gather(from, n, to, to_count, to_type) once per piece of the allgather: the whole block
// (n elements from every rank) when it fits in a chunk; else piece [offset, offset + n) of every
// block, received as one element of a type n elements long and a whole block wide. (A committed
// type may be freed while an operation using it is in flight: MPI keeps it until then.)
template <class Gather>
void MpiComm::for_each_gather_piece(const void* send, void* recv, std::size_t send_count, ElementType type,
                                    Gather&& gather) {
  check_total(send_count, type, "allgather");
  if (send_count == 0) return;
  const MPI_Datatype t = mpi_element(type).type;
  // In place when this rank's block already sits at its place in recv (MPI forbids the aliasing otherwise).
  const bool in_place = send == element_at(recv, static_cast<std::size_t>(rank()) * send_count, type);
  auto from = [&](std::size_t offset) -> const void* {
    return in_place ? MPI_IN_PLACE : element_at(send, offset, type);
  };
  if (send_count <= max_chunk_) {
    const int n = static_cast<int>(send_count);
    gather(from(0), n, recv, n, t);
    return;
  }
  for_each_chunk(send_count, max_chunk_, [&](std::size_t offset, int n) {
    OwnedType piece, strided;
    MESHTRAIN_MPI_CHECK(MPI_Type_contiguous(n, t, piece.out()), "is MPI initialised?");
    MESHTRAIN_MPI_CHECK(
        MPI_Type_create_resized(piece.get(), 0, static_cast<MPI_Aint>(send_count * element_bytes(type)), strided.out()),
        "is MPI initialised?");
    MESHTRAIN_MPI_CHECK(MPI_Type_commit(strided.out()), "is MPI initialised?");
    gather(from(offset), n, element_at(recv, offset, type), 1, strided.get());
  });
}

// Calls reduce(staged, offset, n) for the rounds of a reduce-scatter: one round of the whole send
// buffer when a block fits in a chunk; else rounds of max_chunk / size elements of every rank's
// block, copied contiguously into `staging` (predefined reductions need predefined datatypes).
// keep_rounds gives every round its own part of staging (size · recv_count elements), so all may
// be in flight; otherwise one part is reused.
template <class Reduce>
void MpiComm::for_each_scatter_round(const void* send, std::size_t recv_count, ElementType type,
                                     std::vector<std::byte>& staging, bool keep_rounds, Reduce&& reduce) {
  check_total(recv_count, type, "reduce_scatter");
  if (recv_count == 0) return;
  if (recv_count <= max_chunk_) {
    reduce(static_cast<const std::byte*>(send), 0, static_cast<int>(recv_count));
    return;
  }
  const std::size_t p = static_cast<std::size_t>(size()), bytes = element_bytes(type);
  const std::size_t round = std::max<std::size_t>(1, max_chunk_ / p);
  staging.resize((keep_rounds ? recv_count * p : round * p) * bytes);
  for (std::size_t offset = 0; offset < recv_count; offset += round) {
    const std::size_t n = std::min(round, recv_count - offset);
    std::byte* staged = staging.data() + (keep_rounds ? offset * p * bytes : 0);
    for (std::size_t block = 0; block < p; ++block) {
      std::memcpy(staged + block * n * bytes, element_at(send, block * recv_count + offset, type), n * bytes);
    }
    reduce(staged, offset, static_cast<int>(n));
  }
}

// size × count elements must be addressable.
void MpiComm::check_total(std::size_t count, ElementType type, const char* op) const {
  if (count > std::numeric_limits<std::size_t>::max() / element_bytes(type) / static_cast<std::size_t>(size())) {
    throw std::length_error(
        fmt::format("{}: {} ranks × {} {} do not fit in memory", op, size(), count, element_name(type)));
  }
}

}  // namespace mpi_backend

std::unique_ptr<Comm> make_mpi_comm(MPI_Comm comm) { return make_mpi_comm(comm, mpi_default_max_chunk); }

std::unique_ptr<Comm> make_mpi_comm(MPI_Comm comm, std::size_t max_chunk) {
  return std::make_unique<mpi_backend::MpiComm>(mpi_backend::duplicate(comm, max_chunk), max_chunk);
}

}  // namespace meshtrain
