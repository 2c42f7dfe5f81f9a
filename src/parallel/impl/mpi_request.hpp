// What the MPI backend's files share (parallel/comm_mpi.cpp): the hints of its checks, the chunk
// loop, owned datatypes and the Request of an operation in flight. Internal to the backend.
#pragma once

#include "parallel/comm.hpp"

#include <mpi.h>

#include <algorithm>
#include <cstddef>
#include <string>
#include <vector>

namespace meshtrain::mpi_backend {

inline constexpr const char* collective_hint =
    "every rank of the group must call the same collectives in the same order, with the same counts and "
    "roots, on Comms made with the same max_chunk";
inline constexpr const char* p2p_hint =
    "sender and receiver must agree on count, peer and tag (peers are ranks of the group, not of the world); "
    "an MPI correctness checker such as MUST finds mismatched pairs";

// Calls fn(offset, n) for consecutive pieces [offset, offset + n) of [0, count), n ≤ max_chunk.
template <class Fn>
void for_each_chunk(std::size_t count, std::size_t max_chunk, Fn&& fn) {
  for (std::size_t offset = 0; offset < count; offset += max_chunk) {
    fn(offset, static_cast<int>(std::min(max_chunk, count - offset)));
  }
}

// Element `offset` of a buffer of `type`.
inline const std::byte* element_at(const void* data, std::size_t offset, ElementType type) {
  return static_cast<const std::byte*>(data) + offset * element_bytes(type);
}
inline std::byte* element_at(void* data, std::size_t offset, ElementType type) {
  return static_cast<std::byte*>(data) + offset * element_bytes(type);
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

// A Request over the MPI requests of one operation (one per chunk), or a completed one when there
// are none. `expected`: for a receive, the count each chunk must bring (empty otherwise), of
// `type`; `staging`: what the operation reads from until it completes; `what` names it in errors.
Request pending(std::vector<MPI_Request> requests, std::vector<int> expected, MPI_Datatype type, std::string what,
                std::vector<std::byte> staging = {});

}  // namespace meshtrain::mpi_backend
