// The MPI backend's table of element types, and the fp32 reduction of the 16-bit ones.
#include "parallel/impl/mpi_elements.hpp"

#include <stdexcept>

namespace meshtrain::mpi_backend {
namespace {

// fp32 accumulation, one rounding: in group-rank order, so every rank computes the same bits.
template <class T>
void reduce_in_float(const void* in, int ranks, std::size_t n, void* out, ReduceOp op) {
  const T* x = static_cast<const T*>(in);
  T* y = static_cast<T*>(out);
  if (op == ReduceOp::sum) {
    for (std::size_t i = 0; i < n; ++i) {
      float sum = x[i];
      for (int r = 1; r < ranks; ++r) sum += x[static_cast<std::size_t>(r) * n + i];
      y[i] = T(sum);
    }
  } else {
    for (std::size_t i = 0; i < n; ++i) {
      float max = x[i];
      for (int r = 1; r < ranks; ++r) {
        const float v = x[static_cast<std::size_t>(r) * n + i];
        max = v > max ? v : max;
      }
      y[i] = T(max);
    }
  }
}

}  // namespace

// One row per ElementType.
MpiElement mpi_element(ElementType type) {
  switch (type) {
    case ElementType::f32: return {MPI_FLOAT, nullptr};
    case ElementType::f64: return {MPI_DOUBLE, nullptr};
    case ElementType::bf16: return {MPI_UINT16_T, &reduce_in_float<bf16>};
    case ElementType::fp16: return {MPI_UINT16_T, &reduce_in_float<fp16>};
    case ElementType::i64: return {MPI_INT64_T, nullptr};
    case ElementType::i32: return {MPI_INT32_T, nullptr};
  }
  throw std::logic_error("mpi_element: an ElementType without a row");
}

MPI_Op mpi_op(ReduceOp op) { return op == ReduceOp::max ? MPI_MAX : MPI_SUM; }

}  // namespace meshtrain::mpi_backend
