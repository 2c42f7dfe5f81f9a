// One flat training state (the weights, or an AdamW moment) as a checkpoint sees it: the rank's
// local tensors, wherever the state holds them (state/placed_state.hpp).
//
// Saving needs no communication: across the data-parallel group the ranks' save ranges are
// disjoint and together cover every tensor, so each element is written once and the group writes
// in parallel (ZeRO owners write exactly the slices they own; replicas of a whole state split each
// tensor in near-equal runs). Each unit has its group (state/unit_groups.hpp): a routed expert's
// tensors are split among the expert-data-parallel ranks that hold that expert.
#pragma once

#include "core/exec.hpp"
#include "io/checkpoint/slab_range.hpp"
#include "model/parameters.hpp"
#include "state/placed_state.hpp"

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
};

// The flat states a checkpoint holds, as sources that know how each is stored.
struct TrainingTensors {
  StateSource& weights;
  StateSource& exp_avg;
  StateSource& exp_avg_sq;
};

// Host memory a state's tensors pass through where device memory is not host memory: the largest
// tensor, shared by the sources of one rank (they are read and written one tensor at a time).
class CheckpointStaging {
 public:
  explicit CheckpointStaging(const ParameterLayout& layout);
  static std::size_t bytes_for(const ParameterLayout& layout);
  std::size_t bytes() const { return host_.extent(0) * sizeof(float); }
  float* data() const { return host_.data(); }

 private:
  Kokkos::View<float*, HostSpace> host_;
};

// The state at `where`, saved by this rank's share: its owned run of each tensor, split among the
// ranks that hold the same copy of the tensor's unit, `replicas` (replica r of n saves the r-th of
// n near-equal runs). It loads whole tensors when it holds them whole, else its owned runs.
class StateSlices final : public StateSource {
 public:
  StateSlices(const StatePlace<float>& where, CheckpointStaging& staging, const UnitGroups& replicas = {})
      : where_(where), staging_(staging), replicas_(replicas) {}

  io::ElementRange save_range(const TensorInfo& t) const override { return saved_run(*where_.map, t, replicas_); }
  const float* saved_data(const TensorInfo& t) override;
  io::ElementRange load_range(const TensorInfo& t) const override;
  float* load_target(const TensorInfo& t) override;
  void commit_tensor(const TensorInfo& t) override;

  // What this rank, of the `replicas` of tensor t's unit, saves of t under `map`.
  static io::ElementRange saved_run(const ShardMap& map, const TensorInfo& t, const UnitGroups& replicas);

 private:
  StatePlace<float> where_;
  CheckpointStaging& staging_;
  UnitGroups replicas_;
};

}  // namespace meshtrain
