// One flat state of a rank's model (weights, gradients, a moment) in element type T, held as a
// ZeRO stage says (state/zero_stage.hpp) over a shard map: whole, as owned slices, or with units
// in working places while they are needed. The only code that knows where a unit or a rank's slice
// of it lives, and the only gather from slices to whole units.
#pragma once

#include "core/exec.hpp"
#include "parallel/comm.hpp"
#include "state/shard_map.hpp"
#include "state/zero_stage.hpp"

#include <cstddef>
#include <stdexcept>
#include <string>

namespace meshtrain {

// The communicators of a rank's unit groups (state/unit_groups.hpp): the dense units' and the
// expert units' (one Comm without expert parallelism). Null: no group, as stage 0 shards over none.
struct UnitComms {
  Comm* dense = nullptr;
  Comm* experts = nullptr;
  Comm* of(const ShardUnit& u) const { return u.experts ? experts : dense; }
  // Their sizes and this rank's places (both groups given).
  UnitGroups places() const { return {dense->size(), dense->rank(), experts->size(), experts->rank()}; }
};

// Where the elements of a state held so are, over memory someone owns.
template <class T>
struct StatePlace {
  const ShardMap* map = nullptr;
  Held held = Held::whole;
  T* place = nullptr;  // whole units: all of them, or the resident ones and the block rooms
  T* shard = nullptr;  // the owned slices end to end

  // Where unit u is whole (its working place, or its layout offset), and tensor t inside it.
  T* unit_at(std::size_t u) const {
    if (held == Held::shard) throw std::logic_error("StatePlace: a sharded state holds no whole units");
    return place + (held == Held::whole ? map->unit(u).begin : map->working_offset(u));
  }
  T* at(const TensorInfo& t) const {
    const std::size_t u = map->layout().unit_at(t.offset);
    return unit_at(u) + (t.offset - map->unit(u).begin);
  }
  // This rank's slice of unit u (map->shard(u) elements).
  T* owned(std::size_t u) const {
    if (held == Held::working) throw std::logic_error("StatePlace: working units keep no owned slice");
    if (held == Held::whole) return place + map->owned_begin(u);
    return shard + map->shard_offset(u);
  }
  // Element `first` of tensor t, which this rank holds: whole, or in its owned run.
  T* element(const TensorInfo& t, std::size_t first) const {
    if (held == Held::whole) return at(t) + first;
    const std::size_t u = map->layout().unit_at(t.offset);
    return owned(u) + (t.offset + first - map->owned_begin(u));
  }
};

template <class T>
class PlacedState {
 public:
  // Elements the two buffers of a state held so take: the place of whole units, and the shard.
  static std::size_t place_elements(const ShardMap& map, Held held) {
    switch (held) {
      case Held::whole: return map.layout().total();
      case Held::working_and_shard:
      case Held::working: return map.working_total();
      case Held::shard: return 0;
    }
    return 0;
  }
  static std::size_t shard_elements(const ShardMap& map, Held held) {
    return held == Held::working_and_shard || held == Held::shard ? map.shard_total() : 0;
  }
  static std::size_t bytes_for(const ShardMap& map, Held held) {
    return (place_elements(map, held) + shard_elements(map, held)) * sizeof(T);
  }

  PlacedState(const std::string& label, const ShardMap& map, Held held)
      : place_(label, place_elements(map, held)), shard_(label + "_shard", shard_elements(map, held)) {
    where_ = StatePlace<T>{&map, held, place_.data(), shard_.data()};
  }
  PlacedState(const PlacedState&) = delete;
  PlacedState& operator=(const PlacedState&) = delete;

  const StatePlace<T>& where() const { return where_; }
  Held held() const { return where_.held; }
  const ShardMap& map() const { return *where_.map; }
  std::size_t bytes() const { return (place_.extent(0) + shard_.extent(0)) * sizeof(T); }

  T* unit_at(std::size_t u) const { return where_.unit_at(u); }
  T* at(const TensorInfo& t) const { return where_.at(t); }
  T* owned(std::size_t u) const { return where_.owned(u); }
  T* element(const TensorInfo& t, std::size_t first) const { return where_.element(t, first); }
  Vec<T> owned_view(std::size_t u) const { return Vec<T>(owned(u), map().shard(u)); }
  Vec<T> unit_view(std::size_t u) const { return Vec<T>(unit_at(u), map().unit(u).size()); }
  // The buffer that accumulates: the whole place, or the shard (working units are zeroed as they
  // are reduced).
  Vec<T> accumulated() const {
    if (held() == Held::whole) return slice(place_, 0, place_.extent(0));
    return slice(shard_, 0, shard_.extent(0));
  }

  // Collective over the shard group (none: a group of one, nothing to gather): every rank's slice
  // of unit u into u's whole place, in place when that is where the slice lives. The Comm orders it
  // after the compute that wrote the slice (parallel/comm.hpp).
  void gather(std::size_t u, Comm* group) const {
    if (group == nullptr) return;
    group->allgather(owned(u), unit_at(u), map().shard(u));
  }
  // The same, non-blocking: wait on the request before the unit is read.
  Request start_gather(std::size_t u, Comm* group) const {
    if (group == nullptr) return Request();
    return group->iallgather(owned(u), unit_at(u), map().shard(u));
  }

 private:
  Buffer<T> place_;
  Buffer<T> shard_;
  StatePlace<T> where_;
};

}  // namespace meshtrain
