// ZeRO-3's gather-on-demand: a block's weights are gathered from the group's slices into its
// working room just before the block computes, forward or backward, unless the room still holds
// it. Blocks alternate between two rooms (state/shard_map.hpp), so while one block computes the
// next one in the pass is gathered into the other room by a non-blocking all-gather (DeepSpeed's
// and FSDP's prefetch). The direction of the pass is read from the order of the requests: forward
// walks the blocks up, backward down, and the block at either end is asked for twice in a row.
// A block's units (an MoE block's own and its experts') are each gathered over their own group.
#pragma once

#include "state/placed_state.hpp"

#include <array>
#include <vector>

namespace meshtrain {

template <class T>
class BlockGatherer {
 public:
  // `weights` held as working units and a shard; `groups` the shard groups. Without both, whole
  // weights are always in place and need() does nothing.
  BlockGatherer(const ExecSpace& space, const PlacedState<T>& weights, const UnitComms& groups)
      : space_(space),
        weights_(weights),
        groups_(weights.held() == Held::working_and_shard ? groups : UnitComms{}),
        on_demand_(groups_.dense != nullptr) {
    const ParameterLayout& layout = weights.map().layout();
    first_ = layout.first_layer();
    last_ = layout.first_layer() + layout.stage_layers() - 1;
  }

  // Block `block` (global index) is about to compute: its weights are in its room on return.
  void need(int block) {
    if (!on_demand_) return;
    if (block == previous_) {
      direction_ = -direction_;  // the end of a pass: the next one walks back
    } else {
      direction_ = block > previous_ ? 1 : -1;
    }
    previous_ = block;
    place(block);
    wait(room(block));
    const int next = block + direction_;
    if (next >= first_ && next <= last_) prefetch(next);
  }

  // The weights changed (an update, a load): no room holds what the slices say any more.
  void invalidate() {
    for (std::size_t r = 0; r < holds_.size(); ++r) {
      wait(r);
      holds_[r] = -1;
    }
    previous_ = -1;
    direction_ = 1;
  }

 private:
  static constexpr int rooms = ShardMap::max_block_rooms;
  std::size_t room(int block) const { return std::size_t(block % weights_.map().block_rooms()); }

  // A blocking gather of `block` unless its room holds it or is receiving it.
  void place(int block) {
    const std::size_t r = room(block);
    if (holds_[r] == block) return;
    wait(r);
    for (const std::size_t u : weights_.map().block_units(block)) {
      weights_.gather(u, groups_.of(weights_.map().unit(u)));
    }
    holds_[r] = block;
  }
  void prefetch(int block) {
    const std::size_t r = room(block);
    if (holds_[r] == block) return;
    wait(r);
    for (const std::size_t u : weights_.map().block_units(block)) {
      pending_[r].push_back(weights_.start_gather(u, groups_.of(weights_.map().unit(u))));
    }
    holds_[r] = block;
  }
  void wait(std::size_t r) {
    for (Request& request : pending_[r]) request.wait();
    pending_[r].clear();
  }

  ExecSpace space_;
  const PlacedState<T>& weights_;
  UnitComms groups_;
  bool on_demand_;
  int first_ = 0, last_ = -1;
  int previous_ = -1, direction_ = 1;
  std::array<int, rooms> holds_{-1, -1};             // the block each room holds (or is receiving), -1: none
  std::array<std::vector<Request>, rooms> pending_;  // the room's prefetch in flight, one per unit
};

}  // namespace meshtrain
