// The tensor-parallel group's collectives behind the mappings (parallel/tensor_parallel_mappings.hpp).
#include "parallel/tensor_parallel_mappings.hpp"

#include <fmt/format.h>

#include <stdexcept>

namespace meshtrain {
namespace {

// The Comm has no allgather of doubles; a gather only moves bits, so a double travels as the two
// floats of its bytes (in rank order, each rank's part is still one contiguous block).
void gather_bits(Comm& group, double* whole, std::size_t part) {
  static_assert(sizeof(double) == 2 * sizeof(float));
  float* as_floats = reinterpret_cast<float*>(whole);
  const std::size_t n = 2 * part;
  group.allgather(as_floats + group.rank() * n, as_floats, n);
}
template <class T>
void gather_bits(Comm& group, T* whole, std::size_t part) {
  group.allgather(whole + group.rank() * part, whole, part);
}

}  // namespace

TensorParallelGroup::TensorParallelGroup(Comm* group, Fence fence)
    : group_(group != nullptr && group->size() > 1 ? group : nullptr), fence_(std::move(fence)) {}

template <class T>
void TensorParallelGroup::sum(std::span<T> x) const {
  if (group_ == nullptr) return;
  fence_();
  group_->allreduce_sum(x.data(), x.size());
}

template <class T>
void TensorParallelGroup::max(std::span<T> x) const {
  if (group_ == nullptr) return;
  fence_();
  group_->allreduce_max(x.data(), x.size());
}

template <class T>
void TensorParallelGroup::gather(std::span<T> whole) const {
  const std::size_t n = part(whole).size();
  if (group_ == nullptr) return;
  fence_();
  gather_bits(*group_, whole.data(), n);
}

template <class T>
std::span<T> TensorParallelGroup::part(std::span<T> whole) const {
  const std::size_t p = std::size_t(size());
  if (whole.size() % p != 0) {
    throw std::invalid_argument(
        fmt::format("tensor-parallel split of {} elements over {} ranks: the group's size "
                    "must divide the tensor's (pad it)",
                    whole.size(), p));
  }
  const std::size_t n = whole.size() / p;
  return whole.subspan(std::size_t(rank()) * n, n);
}

template <class T>
std::span<T> TensorParallelGroup::apply(RegionStep step, std::span<T> x) const {
  switch (step) {
    case RegionStep::identity: return x;
    case RegionStep::sum: sum(x); return x;
    case RegionStep::gather: gather(x); return x;
    case RegionStep::keep_part: return part(x);
  }
  throw std::logic_error("unknown RegionStep");
}

template void TensorParallelGroup::sum(std::span<float>) const;
template void TensorParallelGroup::sum(std::span<double>) const;
template void TensorParallelGroup::sum(std::span<bf16>) const;
template void TensorParallelGroup::sum(std::span<fp16>) const;
template void TensorParallelGroup::max(std::span<float>) const;
template void TensorParallelGroup::max(std::span<double>) const;
template void TensorParallelGroup::gather(std::span<float>) const;
template void TensorParallelGroup::gather(std::span<double>) const;
template void TensorParallelGroup::gather(std::span<bf16>) const;
template void TensorParallelGroup::gather(std::span<fp16>) const;
template std::span<float> TensorParallelGroup::part(std::span<float>) const;
template std::span<double> TensorParallelGroup::part(std::span<double>) const;
template std::span<bf16> TensorParallelGroup::part(std::span<bf16>) const;
template std::span<fp16> TensorParallelGroup::part(std::span<fp16>) const;
template std::span<float> TensorParallelGroup::apply(RegionStep, std::span<float>) const;
template std::span<double> TensorParallelGroup::apply(RegionStep, std::span<double>) const;
template std::span<bf16> TensorParallelGroup::apply(RegionStep, std::span<bf16>) const;
template std::span<fp16> TensorParallelGroup::apply(RegionStep, std::span<fp16>) const;

}  // namespace meshtrain
