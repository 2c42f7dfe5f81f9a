// One flat training state (the weights, or an AdamW moment) as a checkpoint sees it: the rank's
// local tensors, however they are stored — a whole flat buffer replicated over the data-parallel
// group, or ZeRO shards (train/zero_state.hpp).
//
// Saving needs no communication: across the data-parallel group the ranks' save ranges are
// disjoint and together cover every tensor, so each element is written once and the group writes
// in parallel (replicas split each tensor; ZeRO owners write exactly the slices they own).
#pragma once

#include "core/exec.hpp"
#include "io/slab_range.hpp"
#include "model/parameters.hpp"

#include <cstddef>

namespace meshtrain {

class StateSource {
 public:
  virtual ~StateSource() = default;
  // The run of tensor t's local elements that this rank saves: of the t.piece.elements() that hold
  // global elements (row-major; wte's padding rows past the vocabulary follow them and are not saved).
  virtual io::ElementRange save_range(const TensorInfo& t) const = 0;
  // Host pointer to those elements, valid until the next call on this source.
  virtual const float* saved_data(const TensorInfo& t) = 0;
  // The run this rank loads; it contains save_range(t), so a load can check what it saves.
  virtual io::ElementRange load_range(const TensorInfo& t) const = 0;
  // Host memory for load_range(t).count elements, to be filled and handed to commit_tensor(t).
  virtual float* load_target(const TensorInfo& t) = 0;
  virtual void commit_tensor(const TensorInfo& t) = 0;
  // Bytes of staging the source allocated.
  virtual std::size_t staging_bytes() const = 0;
};

// A whole flat buffer of the layout's tensors, replicated over `replicas` data-parallel ranks: rank
// r saves the r-th of `replicas` near-equal runs of each tensor and loads whole tensors. Tensors are
// read and written in place when the buffer is host memory, through a staging buffer of the largest
// tensor otherwise.
class FlatSource final : public StateSource {
 public:
  FlatSource(Vec<float> flat, const ParameterLayout& layout, int replica = 0, int replicas = 1);
  io::ElementRange save_range(const TensorInfo& t) const override { return replica_range(t, replica_, replicas_); }
  // The r-th of `replicas` near-equal runs of t's stored elements.
  static io::ElementRange replica_range(const TensorInfo& t, int r, int replicas);
  const float* saved_data(const TensorInfo& t) override;
  io::ElementRange load_range(const TensorInfo& t) const override { return {0, t.piece.elements()}; }
  float* load_target(const TensorInfo& t) override;
  void commit_tensor(const TensorInfo& t) override;
  std::size_t staging_bytes() const override { return staging_.extent(0) * sizeof(float); }
  // What staging_bytes() will be for a layout.
  static std::size_t staging_bytes_for(const ParameterLayout& layout);

 private:
  Vec<float> flat_;
  int replica_, replicas_;
  Kokkos::View<float*, HostSpace> staging_;  // empty when flat_ is host memory
};

}  // namespace meshtrain
