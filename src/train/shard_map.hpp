// Where ZeRO keeps each shard unit on one rank of the data-parallel group (architecture keystone
// 2 applied to the flat buffers): rank r owns slice [begin + r·s, begin + (r+1)·s) of every unit
// (s = unit size / dp, the layout pads units to a multiple of dp), its slices of all units lie end
// to end in a shard buffer, and the units a rank needs whole are either resident (wte, wpe, ln_f,
// end to end) or, for blocks, one working unit that each block in turn occupies.
// The fp32 states (train/zero_state.hpp) and the 16-bit copy (train/low_precision_copy.hpp) share it.
#pragma once

#include "io/slab_range.hpp"
#include "model/parameters.hpp"

#include <cstddef>
#include <vector>

namespace meshtrain {

class ShardMap {
 public:
  ShardMap(const ParameterLayout& padded, int dp, int rank);

  const ParameterLayout& layout() const { return layout_; }
  std::size_t units() const { return layout_.units().size(); }
  const ShardUnit& unit(std::size_t u) const { return layout_.units()[u]; }
  bool is_block(std::size_t u) const { return unit(u).block >= 0; }
  int dp() const { return dp_; }
  int rank() const { return rank_; }

  std::size_t shard(std::size_t u) const { return unit(u).shard(dp_); }
  std::size_t owned_begin(std::size_t u) const { return unit(u).begin + std::size_t(rank_) * shard(u); }
  std::size_t shard_offset(std::size_t u) const { return shard_offset_[u]; }
  // The elements of tensor t (of the t.piece.elements() that hold global elements) in this rank's
  // slice of t's unit: what the rank saves of every state under ZeRO.
  io::ElementRange owned_elements(const TensorInfo& t) const;
  std::size_t shard_total() const { return shard_total_; }
  std::size_t largest_shard() const { return largest_shard_; }
  std::size_t largest_unit() const { return largest_unit_; }

  // Working buffer of whole units: the resident ones end to end, then one block's room.
  std::size_t working_offset(std::size_t u) const { return working_offset_[u]; }
  std::size_t working_total() const { return resident_ + block_; }
  // The unit holding block `block` (global index).
  std::size_t block_unit(int block) const;

 private:
  ParameterLayout layout_;
  int dp_, rank_;
  std::vector<std::size_t> shard_offset_, working_offset_;
  std::size_t shard_total_ = 0, largest_shard_ = 0, largest_unit_ = 0, resident_ = 0, block_ = 0;
};

}  // namespace meshtrain
