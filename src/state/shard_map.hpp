// Where ZeRO keeps each shard unit on one rank of its shard group (share/docs/design.md, Model states).
// A unit's group is the data-parallel group, or for an MoE block's routed experts (ShardUnit::experts)
// the expert-data-parallel group: the dp / ep ranks that hold the same experts. Rank r of a unit's
// group owns slice [begin + r·s, begin + (r+1)·s) of it (s = unit size / group size; the layout
// pads units to a multiple of both), its slices of all units lie end to end in a shard buffer,
// and the units a rank needs whole are either resident (wte, wpe, ln_f, end to end) or, for
// blocks, in one of two working rooms (one when the stage holds a single block): block b always in
// room b mod rooms, its units (the block's own, then its experts) one after the other, so that
// the next block can be gathered into the other room while this one computes.
//
// Stage 0 is the degenerate case: groups of one rank, which owns every unit whole.
#pragma once

#include "io/checkpoint/slab_range.hpp"
#include "model/parameters.hpp"
#include "state/unit_groups.hpp"

#include <cstddef>
#include <vector>

namespace meshtrain {

class ShardMap {
 public:
  // Working rooms for blocks: two, so that the next block's gather overlaps this block's compute.
  static constexpr int max_block_rooms = 2;

  // `groups`: the dense units' shard group (its size and this rank's place in it), and the expert units'.
  ShardMap(const ParameterLayout& padded, const UnitGroups& groups);
  // One group for every unit.
  ShardMap(const ParameterLayout& padded, int group_size, int rank)
      : ShardMap(padded, UnitGroups::one(group_size, rank)) {}

  const ParameterLayout& layout() const { return layout_; }
  std::size_t units() const { return layout_.units().size(); }
  const ShardUnit& unit(std::size_t u) const { return layout_.units()[u]; }
  bool is_block(std::size_t u) const { return unit(u).block >= 0; }
  // Unit u's shard group and this rank's place in it.
  const UnitGroups& groups() const { return groups_; }
  int group_size(std::size_t u) const { return groups_.size(unit(u).experts); }
  int rank(std::size_t u) const { return groups_.rank(unit(u).experts); }

  std::size_t shard(std::size_t u) const { return unit(u).shard(group_size(u)); }
  std::size_t owned_begin(std::size_t u) const { return unit(u).begin + std::size_t(rank(u)) * shard(u); }
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
  // The units of block `block` (global index) in layout order: the block's own, then its experts'.
  const std::vector<std::size_t>& block_units(int block) const;

 private:
  ParameterLayout layout_;
  UnitGroups groups_;
  int block_rooms_ = 0;
  std::vector<std::size_t> shard_offset_;
  std::vector<std::size_t> place_offset_;              // in the resident run; a block's unit: in the block's room
  std::vector<std::vector<std::size_t>> block_units_;  // by block − the stage's first block
  std::size_t shard_total_ = 0, largest_shard_ = 0, resident_ = 0, block_ = 0;
};

}  // namespace meshtrain
