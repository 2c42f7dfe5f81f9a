// The shard map of one rank.
#include "state/shard_map.hpp"

#include <algorithm>
#include <stdexcept>

namespace meshtrain {

ShardMap::ShardMap(const ParameterLayout& padded, const UnitGroups& groups)
    : layout_(padded), groups_(groups), block_units_(std::size_t(padded.stage_layers())) {
  if (padded.unit_align() % groups.dense_size != 0 || padded.unit_align() % groups.expert_size != 0) {
    throw std::logic_error("ShardMap needs units padded to a multiple of each group size");
  }
  for (std::size_t u = 0; u < units(); ++u) {
    const ShardUnit& here = unit(u);
    shard_offset_.push_back(shard_total_);
    shard_total_ += shard(u);
    largest_shard_ = std::max(largest_shard_, shard(u));
    if (here.block < 0) {
      place_offset_.push_back(resident_);
      resident_ += here.size();
      continue;
    }
    // A block's units lie end to end in its room; a room holds the largest block.
    std::vector<std::size_t>& of_block = block_units_[std::size_t(here.block - padded.first_layer())];
    const std::size_t in_room = of_block.empty() ? 0 : place_offset_[of_block.back()] + unit(of_block.back()).size();
    if (of_block.empty()) block_rooms_ = std::min(block_rooms_ + 1, max_block_rooms);
    place_offset_.push_back(in_room);
    of_block.push_back(u);
    block_ = std::max(block_, in_room + here.size());
  }
}

std::size_t ShardMap::working_offset(std::size_t u) const {
  if (!is_block(u)) return place_offset_[u];
  return resident_ + std::size_t(unit(u).block % block_rooms_) * block_ + place_offset_[u];
}

const std::vector<std::size_t>& ShardMap::block_units(int block) const {
  const int k = block - layout_.first_layer();
  if (k < 0 || k >= int(block_units_.size())) throw std::out_of_range("this pipeline stage holds no such block");
  return block_units_[std::size_t(k)];
}

io::ElementRange ShardMap::owned_run(const TensorInfo& t) const {
  const std::size_t u = layout_.unit_at(t.offset);
  const std::size_t own = owned_begin(u), own_end = own + shard(u);
  const std::size_t first = std::max(own, t.offset), last = std::min(own_end, t.offset + t.piece.elements());
  return first < last ? io::ElementRange{first - t.offset, last - first} : io::ElementRange{};
}

}  // namespace meshtrain
