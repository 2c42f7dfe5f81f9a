// The tensor-parallel group's collectives behind the mappings (parallel/tensor_parallel_mappings.hpp).
#include "parallel/tensor_parallel_mappings.hpp"

#include <stdexcept>
#include <string>

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

namespace {

// Without a group the shard is the whole: one buffer, nothing to move.
void expect_one_buffer(const void* shard, const void* whole, std::size_t shard_size, std::size_t whole_size,
                       const char* what) {
  if (shard != whole || shard_size != whole_size) {
    throw std::logic_error(std::string(what) +
                           " without a tensor-parallel group: the shard and the whole must be one buffer");
  }
}

void expect_blocks(std::size_t shard_size, std::size_t whole_size, int ranks, const char* what) {
  if (whole_size != shard_size * std::size_t(ranks)) {
    throw std::logic_error(std::string(what) + ": the whole must be the group's size times the shard");
  }
}

}  // namespace

template <class T>
void TensorParallelGroup::all_gather(std::span<const T> shard, std::span<T> whole) const {
  if (group_ == nullptr) return expect_one_buffer(shard.data(), whole.data(), shard.size(), whole.size(), "all_gather");
  expect_blocks(shard.size(), whole.size(), size(), "all_gather");
  group_->allgather(shard.data(), whole.data(), shard.size());
}

template <class T>
void TensorParallelGroup::reduce_scatter(std::span<const T> whole, std::span<T> shard) const {
  if (group_ == nullptr) {
    return expect_one_buffer(shard.data(), whole.data(), shard.size(), whole.size(), "reduce_scatter");
  }
  expect_blocks(shard.size(), whole.size(), size(), "reduce_scatter");
  group_->reduce_scatter_sum(whole.data(), shard.data(), shard.size());
}

template <class T>
void TensorParallelGroup::apply(SequenceStep step, std::span<const T> in, std::span<T> out) const {
  switch (step) {
    case SequenceStep::gather: return all_gather(in, out);
    case SequenceStep::scatter: return reduce_scatter(in, out);
  }
  throw std::logic_error("unknown SequenceStep");
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
#define MESHTRAIN_SEQUENCE_BLOCKS(T)                                                         \
  template void TensorParallelGroup::all_gather(std::span<const T>, std::span<T>) const;     \
  template void TensorParallelGroup::reduce_scatter(std::span<const T>, std::span<T>) const; \
  template void TensorParallelGroup::apply(SequenceStep, std::span<const T>, std::span<T>) const;
MESHTRAIN_SEQUENCE_BLOCKS(float)
MESHTRAIN_SEQUENCE_BLOCKS(double)
MESHTRAIN_SEQUENCE_BLOCKS(bf16)
MESHTRAIN_SEQUENCE_BLOCKS(fp16)
#undef MESHTRAIN_SEQUENCE_BLOCKS
template std::span<float> TensorParallelGroup::apply(RegionStep, std::span<float>) const;
template std::span<double> TensorParallelGroup::apply(RegionStep, std::span<double>) const;
template std::span<bf16> TensorParallelGroup::apply(RegionStep, std::span<bf16>) const;
template std::span<fp16> TensorParallelGroup::apply(RegionStep, std::span<fp16>) const;

}  // namespace meshtrain
