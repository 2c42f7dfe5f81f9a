// The shard map of one rank.
#include "state/shard_map.hpp"

#include <algorithm>
#include <stdexcept>

namespace meshtrain {

ShardMap::ShardMap(const ParameterLayout& padded, int group_size, int rank)
    : layout_(padded), group_size_(group_size), rank_(rank) {
  if (padded.unit_align() % group_size != 0) {
    throw std::logic_error("ShardMap needs units padded to a multiple of the group size");
  }
  for (const ShardUnit& u : padded.units()) {
    shard_offset_.push_back(shard_total_);
    shard_total_ += u.shard(group_size);
    largest_shard_ = std::max(largest_shard_, u.shard(group_size));
    resident_offset_.push_back(resident_);
    if (u.block >= 0) {
      block_ = std::max(block_, u.size());
      block_rooms_ = std::min(block_rooms_ + 1, max_block_rooms);
    } else {
      resident_ += u.size();
    }
  }
}

std::size_t ShardMap::working_offset(std::size_t u) const {
  if (!is_block(u)) return resident_offset_[u];
  return resident_ + std::size_t(unit(u).block % block_rooms_) * block_;
}

std::size_t ShardMap::block_unit(int block) const {
  for (std::size_t u = 0; u < units(); ++u) {
    if (unit(u).block == block) return u;
  }
  throw std::out_of_range("this pipeline stage holds no such block");
}

io::ElementRange ShardMap::owned_run(const TensorInfo& t) const {
  const std::size_t u = layout_.unit_at(t.offset);
  const std::size_t own = owned_begin(u), own_end = own + shard(u);
  const std::size_t first = std::max(own, t.offset), last = std::min(own_end, t.offset + t.piece.elements());
  return first < last ? io::ElementRange{first - t.offset, last - first} : io::ElementRange{};
}

}  // namespace meshtrain
