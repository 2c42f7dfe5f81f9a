// One flat training state (the weights, or an AdamW moment) as a checkpoint sees it: the rank's
// local tensors, however they are stored — a whole flat buffer, or ZeRO shards that must be
// gathered over the data-parallel group (train/zero_state.hpp).
#pragma once

#include "core/exec.hpp"
#include "model/parameters.hpp"

#include <cstddef>

namespace meshtrain {

class StateSource {
 public:
  virtual ~StateSource() = default;
  // Host pointer to tensor t's local elements (t.numel of them), valid until the next call.
  // Sharded sources gather over the data-parallel group: every rank of the group asks for the same
  // tensors in the same order.
  virtual const float* read_tensor(const TensorInfo& t) = 0;
  // Host memory for t.numel elements of tensor t, to be filled and then handed to commit_tensor(t),
  // which stores the rank's part of them. Independent on every rank.
  virtual float* tensor_target(const TensorInfo& t) = 0;
  virtual void commit_tensor(const TensorInfo& t) = 0;
  // Bytes of staging the source allocated.
  virtual std::size_t staging_bytes() const = 0;
};

// A whole flat buffer of the layout's tensors (no ZeRO): tensors are read and written in place when
// the buffer is host memory, through a staging buffer of the largest tensor otherwise.
class FlatSource final : public StateSource {
 public:
  FlatSource(Vec<float> flat, const ParameterLayout& layout);
  const float* read_tensor(const TensorInfo& t) override;
  float* tensor_target(const TensorInfo& t) override;
  void commit_tensor(const TensorInfo& t) override;
  std::size_t staging_bytes() const override { return staging_.extent(0) * sizeof(float); }
  // What staging_bytes() will be for a layout.
  static std::size_t staging_bytes_for(const ParameterLayout& layout);

 private:
  Vec<float> flat_;
  Kokkos::View<float*, HostSpace> staging_;  // empty when flat_ is host memory
};

}  // namespace meshtrain
