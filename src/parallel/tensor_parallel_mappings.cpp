// The tensor-parallel group's collectives behind the mappings (parallel/tensor_parallel_mappings.hpp).
#include "parallel/tensor_parallel_mappings.hpp"

#include <stdexcept>

namespace meshtrain {

TensorParallelGroup::TensorParallelGroup(Comm* group)
    : group_(group != nullptr && group->size() > 1 ? group : nullptr) {}

template <class T>
void TensorParallelGroup::sum(std::span<T> x) const {
  if (group_ == nullptr) return;
  group_->allreduce_sum(x.data(), x.size());
}

template <class T>
void TensorParallelGroup::max(std::span<T> x) const {
  if (group_ == nullptr) return;
  group_->allreduce_max(x.data(), x.size());
}

template <class T>
std::span<T> TensorParallelGroup::apply(RegionStep step, std::span<T> x) const {
  switch (step) {
    case RegionStep::identity: return x;
    case RegionStep::sum: sum(x); return x;
  }
  throw std::logic_error("unknown RegionStep");
}

template void TensorParallelGroup::sum(std::span<float>) const;
template void TensorParallelGroup::sum(std::span<double>) const;
template void TensorParallelGroup::sum(std::span<bf16>) const;
template void TensorParallelGroup::sum(std::span<fp16>) const;
template void TensorParallelGroup::max(std::span<float>) const;
template void TensorParallelGroup::max(std::span<double>) const;
template std::span<float> TensorParallelGroup::apply(RegionStep, std::span<float>) const;
template std::span<double> TensorParallelGroup::apply(RegionStep, std::span<double>) const;
template std::span<bf16> TensorParallelGroup::apply(RegionStep, std::span<bf16>) const;
template std::span<fp16> TensorParallelGroup::apply(RegionStep, std::span<fp16>) const;

}  // namespace meshtrain
