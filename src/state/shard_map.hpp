// Where ZeRO keeps each shard unit on one rank of its shard group (share/docs/design.md, Model states):
// rank r owns slice [begin + r·s, begin + (r+1)·s) of every unit (s = unit size / group size; the
// layout pads units to a multiple of it), its slices of all units lie end to end in a shard
// buffer, and the units a rank needs whole are either resident (wte, wpe, ln_f, end to end) or,
// for blocks, in one of two working rooms (one when the stage holds a single block): block b
// always in room b mod rooms, so that the next block can be gathered into the other room while
// this one computes.
//
// Stage 0 is the degenerate case: a group of one rank, which owns every unit whole.
#pragma once

#include "io/slab_range.hpp"
#include "model/parameters.hpp"

#include <cstddef>
#include <vector>

namespace meshtrain {

class ShardMap {
 public:
  // Working rooms for blocks: two, so that the next block's gather overlaps this block's compute.
  static constexpr int max_block_rooms = 2;

  ShardMap(const ParameterLayout& padded, int group_size, int rank);

  const ParameterLayout& layout() const { return layout_; }
  std::size_t units() const { return layout_.units().size(); }
  const ShardUnit& unit(std::size_t u) const { return layout_.units()[u]; }
  bool is_block(std::size_t u) const { return unit(u).block >= 0; }
  int group_size() const { return group_size_; }
  int rank() const { return rank_; }

  std::size_t shard(std::size_t u) const { return unit(u).shard(group_size_); }
  std::size_t owned_begin(std::size_t u) const { return unit(u).begin + std::size_t(rank_) * shard(u); }
  std::size_t shard_offset(std::size_t u) const { return shard_offset_[u]; }
  // The run of tensor t's stored elements (the t.piece.elements() that hold global elements) that
  // lies in this rank's slice of t's unit: what the rank updates, counts in the norm and saves.
  io::ElementRange owned_run(const TensorInfo& t) const;
  std::size_t shard_total() const { return shard_total_; }
  std::size_t largest_shard() const { return largest_shard_; }

  // Working buffer of whole units: the resident ones end to end, then the block rooms.
  std::size_t working_offset(std::size_t u) const;
  std::size_t working_total() const { return resident_ + std::size_t(block_rooms_) * block_; }
  int block_rooms() const { return block_rooms_; }
  // The unit holding block `block` (global index).
  std::size_t block_unit(int block) const;

 private:
  ParameterLayout layout_;
  int group_size_, rank_;
  int block_rooms_ = 0;
  std::vector<std::size_t> shard_offset_, resident_offset_;
  std::size_t shard_total_ = 0, largest_shard_ = 0, resident_ = 0, block_ = 0;
};

}  // namespace meshtrain
