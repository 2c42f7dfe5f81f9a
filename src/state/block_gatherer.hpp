// ZeRO-3's gather-on-demand: a block's weights are gathered from the group's slices into its
// working room just before the block computes, forward or backward, unless the room still holds
// it. Blocks alternate between two rooms (state/shard_map.hpp), so while one block computes the
// next one in the pass is gathered into the other room by a non-blocking all-gather (DeepSpeed's
// and FSDP's prefetch). The direction of the pass is read from the order of the requests: forward
// walks the blocks up, backward down, and the block at either end is asked for twice in a row.
#pragma once

#include "state/placed_state.hpp"

#include <array>

namespace meshtrain {

template <class T>
class BlockGatherer {
 public:
  // `weights` held as working units and a shard; `group` the shard group. Without both, whole
  // weights are always in place and need() does nothing.
  BlockGatherer(const ExecSpace& space, const PlacedState<T>& weights, Comm* group)
      : space_(space), weights_(weights), group_(weights.held() == Held::working_and_shard ? group : nullptr) {
    const ParameterLayout& layout = weights.map().layout();
    first_ = layout.first_layer();
    last_ = layout.first_layer() + layout.stage_layers() - 1;
  }

  // Block `block` (global index) is about to compute: its weights are in its room on return.
  void need(int block) {
    if (group_ == nullptr) return;
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
      pending_[r].wait();
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
    pending_[r].wait();
    weights_.gather(space_, weights_.map().block_unit(block), group_);
    holds_[r] = block;
  }
  void prefetch(int block) {
    const std::size_t r = room(block);
    if (holds_[r] == block) return;
    pending_[r].wait();
    pending_[r] = weights_.start_gather(space_, weights_.map().block_unit(block), group_);
    holds_[r] = block;
  }
  void wait(std::size_t r) { pending_[r].wait(); }

  ExecSpace space_;
  const PlacedState<T>& weights_;
  Comm* group_;
  int first_ = 0, last_ = -1;
  int previous_ = -1, direction_ = 1;
  std::array<int, rooms> holds_{-1, -1};  // the block each room holds (or is receiving), -1: none
  std::array<Request, rooms> pending_;    // the room's prefetch in flight
};

}  // namespace meshtrain
