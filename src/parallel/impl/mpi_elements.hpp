// The MPI backend's view of the element types (parallel/comm.hpp): each type's MPI datatype, and
// for the 16-bit floating types the fp32 reduction MPI cannot do for them. Internal to the backend.
#pragma once

#include "parallel/comm.hpp"

#include <mpi.h>

#include <cstddef>

namespace meshtrain::mpi_backend {

// out[i] ← op over the `ranks` blocks of `in` (block r at in + r · n elements) of element i,
// accumulated in fp32 in block order and rounded once.
using WidenedReduce = void (*)(const void* in, int ranks, std::size_t n, void* out, ReduceOp op);

struct MpiElement {
  MPI_Datatype type;
  // nullptr where MPI reduces the type itself; otherwise the type travels as its bits and this
  // reduces it (an MPI reduction operator would round every pairwise partial back to 16 bits).
  WidenedReduce widened;
};

MpiElement mpi_element(ElementType type);
MPI_Op mpi_op(ReduceOp op);

}  // namespace meshtrain::mpi_backend
