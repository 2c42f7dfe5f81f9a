// The MPI backend's messages (parallel/comm_mpi.cpp): send and receive, blocking or not, and the
// all-to-alls, in chunks of at most max_chunk elements.
//
// All-to-all: MPI_Alltoallv takes int counts and int displacements, and a token buffer's
// displacements can pass INT_MAX before any count does. So each block travels as a message
// (MPI_Isend / MPI_Irecv, in chunks) on a second duplicate, made by the Comm's first all-to-all
// (collective, as that call is), whose messages cannot match send/recv's whatever their tags; the
// rank's own block is copied. Every receive is posted before any send, and rank r sends to r + 1,
// r + 2, … so that the ranks do not all start with the same peer. alltoall is alltoallv with equal
// blocks: the same messages.
#include "core/mpi_check.hpp"
#include "parallel/impl/mpi_comm.hpp"
#include "parallel/impl/mpi_request.hpp"

#include <fmt/format.h>

#include <cstring>
#include <stdexcept>
#include <utility>
#include <vector>

namespace meshtrain::mpi_backend {

void MpiComm::send(const void* data, std::size_t count, ElementType type, int peer, int tag) {
  check_peer(peer, tag, "send");
  const MPI_Datatype t = mpi_element(type).type;
  for_each_chunk(count, max_chunk_, [&](std::size_t offset, int n) {
    MESHTRAIN_MPI_CHECK(MPI_Send(element_at(data, offset, type), n, t, peer, tag, comm_.get()), p2p_hint);
  });
}

void MpiComm::recv(void* data, std::size_t count, ElementType type, int peer, int tag) {
  check_peer(peer, tag, "recv");
  const MPI_Datatype t = mpi_element(type).type;
  std::size_t chunk = 0;
  for_each_chunk(count, max_chunk_, [&](std::size_t offset, int n) {
    MPI_Status status;
    MESHTRAIN_MPI_CHECK(MPI_Recv(element_at(data, offset, type), n, t, peer, tag, comm_.get(), &status), p2p_hint);
    int got = 0;
    MPI_Get_count(&status, t, &got);
    if (got != n) {
      throw mpi::Error(fmt::format(
          "{}:{}: recv of {} {} from peer {} tag {}: chunk {} brought {} elements where {} were expected\n"
          "HINT: the sender sent a shorter message: send and recv must name the same count (and be made with "
          "the same max_chunk)",
          __FILE__, __LINE__, count, element_name(type), peer, tag, chunk, got, n));
    }
    ++chunk;
  });
}

Request MpiComm::isend(const void* data, std::size_t count, ElementType type, int peer, int tag) {
  check_peer(peer, tag, "isend");
  return start_send(comm_.get(), data, count, type, peer, tag,
                    fmt::format("isend of {} {} to peer {} tag {}", count, element_name(type), peer, tag));
}

Request MpiComm::irecv(void* data, std::size_t count, ElementType type, int peer, int tag) {
  check_peer(peer, tag, "irecv");
  return start_recv(comm_.get(), data, count, type, peer, tag,
                    fmt::format("irecv of {} {} from peer {} tag {}", count, element_name(type), peer, tag));
}

// A message in chunks on `comm` (this Comm's own, or the all-to-all's), one MPI_Isend or MPI_Irecv
// per chunk; a receive's request checks that every chunk brought what it expected.
Request MpiComm::start_send(MPI_Comm comm, const void* data, std::size_t count, ElementType type, int peer, int tag,
                            std::string what) const {
  const MPI_Datatype t = mpi_element(type).type;
  std::vector<MPI_Request> requests;
  for_each_chunk(count, max_chunk_, [&](std::size_t offset, int n) {
    requests.push_back(MPI_REQUEST_NULL);
    MESHTRAIN_MPI_CHECK(MPI_Isend(element_at(data, offset, type), n, t, peer, tag, comm, &requests.back()), p2p_hint);
  });
  return pending(std::move(requests), {}, t, std::move(what));
}

Request MpiComm::start_recv(MPI_Comm comm, void* data, std::size_t count, ElementType type, int peer, int tag,
                            std::string what) const {
  const MPI_Datatype t = mpi_element(type).type;
  std::vector<MPI_Request> requests;
  std::vector<int> expected;
  for_each_chunk(count, max_chunk_, [&](std::size_t offset, int n) {
    requests.push_back(MPI_REQUEST_NULL);
    expected.push_back(n);
    MESHTRAIN_MPI_CHECK(MPI_Irecv(element_at(data, offset, type), n, t, peer, tag, comm, &requests.back()), p2p_hint);
  });
  return pending(std::move(requests), std::move(expected), t, std::move(what));
}

void MpiComm::alltoallv(const void* send, const std::size_t* send_counts, const std::size_t* send_displs, void* recv,
                        const std::size_t* recv_counts, const std::size_t* recv_displs, ElementType type) {
  const int me = rank(), p = size();
  const char* elements = element_name(type);
  if (send_counts[me] != recv_counts[me]) {
    throw std::invalid_argument(
        fmt::format("alltoallv: group rank {} sends itself {} {} but expects {} (send_counts[{}] must equal "
                    "recv_counts[{}])",
                    me, send_counts[me], elements, recv_counts[me], me, me));
  }
  const MPI_Comm comm = exchange_comm();
  std::vector<Request> messages;
  for (int k = 1; k < p; ++k) {
    const int from = (me + p - k) % p;
    messages.push_back(
        start_recv(comm, element_at(recv, recv_displs[from], type), recv_counts[from], type, from, 0,
                   fmt::format("alltoallv: the {} {} from group rank {}", recv_counts[from], elements, from)));
  }
  for (int k = 1; k < p; ++k) {
    const int to = (me + k) % p;
    messages.push_back(start_send(comm, element_at(send, send_displs[to], type), send_counts[to], type, to, 0,
                                  fmt::format("alltoallv: the {} {} to group rank {}", send_counts[to], elements, to)));
  }
  if (send_counts[me] > 0) {
    std::memcpy(element_at(recv, recv_displs[me], type), element_at(send, send_displs[me], type),
                send_counts[me] * element_bytes(type));
  }
  for (Request& message : messages) message.wait();
}

void MpiComm::alltoall(const void* send, void* recv, std::size_t count_per_peer, ElementType type) {
  const std::vector<std::size_t> counts(static_cast<std::size_t>(size()), count_per_peer);
  std::vector<std::size_t> displs(counts.size());
  for (std::size_t p = 0; p < displs.size(); ++p) displs[p] = p * count_per_peer;
  alltoallv(send, counts.data(), displs.data(), recv, counts.data(), displs.data(), type);
}

// The all-to-all's communicator, made by the first all-to-all (every rank of the group makes it
// there, since every rank makes that call).
MPI_Comm MpiComm::exchange_comm() {
  if (exchange_.get() != MPI_COMM_NULL) return exchange_.get();
  MESHTRAIN_MPI_CHECK(MPI_Comm_dup(comm_.get(), exchange_.out()), collective_hint);
  MESHTRAIN_MPI_CHECK(MPI_Comm_set_errhandler(exchange_.get(), MPI_ERRORS_RETURN), "is MPI initialised?");
  return exchange_.get();
}

void MpiComm::check_peer(int peer, int tag, const char* op) const {
  require_group_rank(peer, size(), op, "peer");
  if (tag < 0 || tag > tag_ub_) {
    throw std::invalid_argument(fmt::format("{}: tag {} outside 0..{} (MPI_TAG_UB)", op, tag, tag_ub_));
  }
}

}  // namespace meshtrain::mpi_backend
