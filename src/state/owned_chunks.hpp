// Runs of a rank's owned slices (state/shard_map.hpp) as one device list, so that a kernel over
// all of them (AdamW, the gradient norm, rounding the master weights into 16 bits) is one launch
// for every tensor of the rank, whatever the ZeRO stage: the states a step touches are held
// whole (the owned slice at its layout offset, with the other ranks' slices between two units) or
// as a shard (the owned slices end to end), so each chunk says where it starts in both.
//
// Runs are cut into chunks of at most kOwnedChunk elements from each run's start, and a chunk
// never straddles two runs: per-chunk sums then add in the order the per-tensor reduction used
// (kernels/cross_entropy.hpp: chunked_sum, kReduceChunk elements from the start of each tensor's
// run), and a team of any size covers one chunk.
#pragma once

#include "core/exec.hpp"
#include "kernels/convert.hpp"
#include "kernels/cross_entropy.hpp"
#include "state/placed_state.hpp"

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

namespace meshtrain {

inline constexpr std::size_t kOwnedChunk = std::size_t(kReduceChunk);

struct OwnedChunk {
  std::size_t whole = 0;  // first element in a state held whole (its layout offset)
  std::size_t shard = 0;  // first element in a state's shard buffer
  std::uint32_t count = 0;
  std::uint8_t flag = 0;  // what the list's builder marks (AdamW: the tensor decays)
};

// One run of unit u's owned slice: elements [first, first + count) of it.
struct OwnedRun {
  std::size_t unit = 0, first = 0, count = 0;
  std::uint8_t flag = 0;
};

// Where a state's elements of a chunk are: a kernel reads element i of chunk c at `at(c, i)`.
template <class T>
struct ChunkAddress {
  T* base = nullptr;
  bool whole = false;
  KOKKOS_INLINE_FUNCTION T& at(const OwnedChunk& c, std::size_t i) const {
    return base[(whole ? c.whole : c.shard) + i];
  }
};

template <class T>
ChunkAddress<T> chunk_address(const StatePlace<T>& s) {
  if (s.held == Held::working) throw std::logic_error("working units keep no owned slices");
  if (s.held == Held::whole) return {s.place, true};
  return {s.shard, false};
}

class OwnedChunks {
 public:
  OwnedChunks() = default;
  // `runs` in the order their chunks are to be listed (for sums: the order they add in).
  OwnedChunks(const std::string& label, const ShardMap& map, const std::vector<OwnedRun>& runs) : runs_(runs.size()) {
    std::vector<OwnedChunk> chunks;
    std::vector<std::size_t> run_begin;
    for (const OwnedRun& r : runs) {
      run_begin.push_back(chunks.size());
      for (std::size_t k = 0; k < r.count; k += kOwnedChunk) {
        const std::size_t n = r.count - k < kOwnedChunk ? r.count - k : kOwnedChunk;
        chunks.push_back(
            {map.owned_begin(r.unit) + r.first + k, map.shard_offset(r.unit) + r.first + k, std::uint32_t(n), r.flag});
      }
    }
    run_begin.push_back(chunks.size());
    chunks_ = Kokkos::View<OwnedChunk*, MemSpace>(label + "::chunks", chunks.size());
    run_begin_ = Kokkos::View<std::size_t*, MemSpace>(label + "::run_begin", run_begin.size());
    Kokkos::deep_copy(chunks_, Kokkos::View<const OwnedChunk*, HostSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>(
                                   chunks.data(), chunks.size()));
    Kokkos::deep_copy(run_begin_, Kokkos::View<const std::size_t*, HostSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>(
                                      run_begin.data(), run_begin.size()));
  }

  std::size_t size() const { return chunks_.extent(0); }
  std::size_t runs() const { return runs_; }
  // The chunks, and for run r its chunks [run_begin(r), run_begin(r + 1)).
  const Kokkos::View<OwnedChunk*, MemSpace>& chunks() const { return chunks_; }
  const Kokkos::View<std::size_t*, MemSpace>& run_begin() const { return run_begin_; }

 private:
  std::size_t runs_ = 0;
  Kokkos::View<OwnedChunk*, MemSpace> chunks_;
  Kokkos::View<std::size_t*, MemSpace> run_begin_;
};

// f(chunk, i) for element i of every chunk: one launch, one team per chunk.
template <class F>
void for_each_owned(const ExecSpace& space, const std::string& label, const OwnedChunks& list, F f) {
  if (list.size() == 0) return;
  using Team = typename Kokkos::TeamPolicy<ExecSpace>::member_type;
  const Kokkos::View<OwnedChunk*, MemSpace> chunks = list.chunks();
  Kokkos::parallel_for(
      label, team_policy(space, int(list.size())), KOKKOS_LAMBDA(const Team& team) {
        const OwnedChunk c = chunks(team.league_rank());
        Kokkos::parallel_for(Kokkos::TeamThreadRange(team, std::size_t(c.count)), [&](std::size_t i) { f(c, i); });
      });
}

// out = in, converted (kernels/convert.hpp), over every chunk: one launch.
template <class To, class From>
void convert_owned(const ExecSpace& space, const OwnedChunks& list, ChunkAddress<To> out, ChunkAddress<From> in) {
  for_each_owned(
      space, "meshtrain::convert", list,
      KOKKOS_LAMBDA(const OwnedChunk& c, std::size_t i) { out.at(c, i) = converted<To, From>(in.at(c, i)); });
}

// Σ x² over the chunks' elements, in double, left in `result` on the device: each chunk's elements
// in order, each run's chunks in order, the runs in order, so the sum is bitwise the same for any
// team size, thread count and backend. Two launches, the first one thread per chunk, the second one
// team (a thread per run, then one thread over the runs). `partials` holds size() + runs() doubles.
template <class T>
void owned_squared_norm(const ExecSpace& space, const OwnedChunks& list, ChunkAddress<T> x,
                        Kokkos::View<double*, MemSpace> partials, Kokkos::View<double, MemSpace> result) {
  if (partials.extent(0) < list.size() + list.runs()) throw std::logic_error("owned_squared_norm: partials too small");
  using Team = typename Kokkos::TeamPolicy<ExecSpace>::member_type;
  const Kokkos::View<OwnedChunk*, MemSpace> chunks = list.chunks();
  const Kokkos::View<std::size_t*, MemSpace> run_begin = list.run_begin();
  const std::size_t n_chunks = list.size(), n_runs = list.runs();
  Kokkos::parallel_for(
      "meshtrain::owned::squared_norm::chunks", Kokkos::RangePolicy<ExecSpace>(space, 0, n_chunks),
      KOKKOS_LAMBDA(std::size_t k) {
        const OwnedChunk c = chunks(k);
        double s = 0;
        for (std::size_t i = 0; i < c.count; ++i) {
          const double v = static_cast<double>(x.at(c, i));
          s += v * v;
        }
        partials(k) = s;
      });
  Kokkos::parallel_for(
      "meshtrain::owned::squared_norm::runs", team_policy(space, 1), KOKKOS_LAMBDA(const Team& team) {
        Kokkos::parallel_for(Kokkos::TeamThreadRange(team, n_runs), [&](std::size_t r) {
          double s = 0;
          for (std::size_t k = run_begin(r); k < run_begin(r + 1); ++k) s += partials(k);
          partials(n_chunks + r) = s;
        });
        team.team_barrier();
        Kokkos::single(Kokkos::PerTeam(team), [&]() {
          double s = 0;
          for (std::size_t r = 0; r < n_runs; ++r) s += partials(n_chunks + r);
          result() = s;
        });
      });
}

}  // namespace meshtrain
