// The ZeRO shard map of one rank.
#include "train/shard_map.hpp"

#include <algorithm>
#include <stdexcept>

namespace meshtrain {

ShardMap::ShardMap(const ParameterLayout& padded, int dp, int rank) : layout_(padded), dp_(dp), rank_(rank) {
  if (padded.unit_align() % dp != 0) throw std::logic_error("ShardMap needs units padded to a multiple of dp");
  for (const ShardUnit& u : padded.units()) {
    const bool block = u.block >= 0;
    if (!block) resident_ += u.size();
    if (block) block_ = std::max(block_, u.size());
  }
  std::size_t resident = 0;
  for (const ShardUnit& u : padded.units()) {
    shard_offset_.push_back(shard_total_);
    shard_total_ += u.shard(dp);
    largest_shard_ = std::max(largest_shard_, u.shard(dp));
    largest_unit_ = std::max(largest_unit_, u.size());
    working_offset_.push_back(u.block >= 0 ? resident_ : resident);
    if (u.block < 0) resident += u.size();
  }
}

std::size_t ShardMap::block_unit(int block) const {
  for (std::size_t u = 0; u < units(); ++u) {
    if (unit(u).block == block) return u;
  }
  throw std::out_of_range("this pipeline stage holds no such block");
}

io::ElementRange ShardMap::owned_elements(const TensorInfo& t) const {
  const std::size_t u = layout_.unit_at(t.offset);
  const std::size_t own = owned_begin(u), own_end = own + shard(u);
  const std::size_t first = std::max(own, t.offset), last = std::min(own_end, t.offset + t.piece.elements());
  return first < last ? io::ElementRange{first - t.offset, last - first} : io::ElementRange{};
}

}  // namespace meshtrain
