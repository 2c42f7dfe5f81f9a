// Counter-based initialisation with Random123's Philox: one kernel over the rank's range.
//
// The host cuts the range into chunks of consecutive global elements of one tensor (name hash,
// standard deviation, first global index); the kernel draws each element from (seed, hash, global
// index), so no element depends on any other or on the layout.
#include "model/init.hpp"

#include "model/impl/fast_normal.hpp"

#include <Random123/boxmuller.hpp>
#include <Random123/philox.h>
#include <xxhash.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <vector>

namespace meshtrain {
namespace {

std::uint64_t name_hash(const std::string& name) { return XXH64(name.data(), name.size(), 0); }

// The normal draws' standard deviation, or lora_uniform's bound: kaiming_uniform_ with a = sqrt(5) on a
// [r, fan_in] matrix, gain sqrt(2 / (1 + a²)) times sqrt(3 / fan_in) = 1 / sqrt(fan_in).
double init_std(const TensorInfo& tensor, int layers) {
  if (tensor.init == InitKind::lora_uniform) return 1.0 / std::sqrt(double(tensor.shape.at(1)));
  return tensor.init == InitKind::normal_residual ? 0.02 / std::sqrt(2.0 * layers) : 0.02;
}

// The 128 bits of the counter (index, hash) under the key seed, as two 64-bit words.
struct PhiloxPair {
  std::uint64_t u0, u1;
};
KOKKOS_INLINE_FUNCTION PhiloxPair philox_pair(std::uint64_t seed, std::uint64_t hash, std::uint64_t index) {
  using Philox = r123::Philox4x32;
  Philox generator;
  const Philox::ctr_type counter = {
      {std::uint32_t(index), std::uint32_t(index >> 32), std::uint32_t(hash), std::uint32_t(hash >> 32)}};
  const Philox::key_type key = {{std::uint32_t(seed), std::uint32_t(seed >> 32)}};
  const Philox::ctr_type bits = generator(counter, key);
  return {(std::uint64_t(bits[0]) << 32) | bits[1], (std::uint64_t(bits[2]) << 32) | bits[3]};
}

// A standard normal draw for (seed, name hash, index): the first of Random123's Box–Muller pair.
//
// Random123's double boxmuller is sin(π·a)·sqrt(−2·log b), a = uneg11(u0), b = u01(u1). On the
// host its sincospi is glibc's sincos(fl(π·a)) and its log glibc's, so every host backend (Serial,
// OpenMP, Threads) draws bitwise the values of the serial host loop the kernel replaced. In CUDA
// device code (CUDART ≥ 5) sincospi is CUDA's own (π·a not rounded first) and log CUDA's: each can
// differ from glibc in the last bit or two of the double, so where that double lies next to a
// float rounding boundary a GPU's weight can differ from the host's by one float ulp. The kernel
// takes this path only where the fast draw cannot vouch for its float (model/impl/fast_normal.hpp),
// which is where such boundaries are; so on a GPU rare elements (of the order of one in 10^8) may
// differ in their last bit, and all others are bitwise the host's.
KOKKOS_INLINE_FUNCTION double standard_normal(std::uint64_t seed, std::uint64_t hash, std::uint64_t index) {
  const PhiloxPair u = philox_pair(seed, hash, index);
  return r123::boxmuller(u.u0, u.u1).x;
}

// The value of the element with global index `index` of a tensor initialised as `init`.
double element_value(std::uint64_t seed, std::uint64_t hash, InitKind init, double scale, std::uint64_t index) {
  switch (init) {
    case InitKind::zeros: return 0.0;
    case InitKind::ones: return 1.0;
    case InitKind::normal:
    case InitKind::normal_residual: return scale * standard_normal(seed, hash, index);
    case InitKind::lora_uniform: return scale * r123::uneg11<double>(philox_pair(seed, hash, index).u0);
  }
  return 0.0;
}

// A run of the output whose elements come from consecutive global indices of one tensor (or are
// all zero or all one): the kernel computes no index, and its inner loop is straight-line code.
struct InitChunk {
  std::size_t at = 0;               // first element, as an index of the output
  std::size_t length = 0;           // elements
  std::uint64_t global = 0;         // the global index of the first element in its tensor
  InitKind init = InitKind::zeros;  // zeros also for padding: vocabulary rows past V, shard-unit tails
  std::uint64_t hash = 0;           // of the tensor's name
  double scale = 0;                 // standard deviation of a normal tensor
};

// Elements per chunk at most: small enough that a GPU has many teams (GPT-2 124M: ~30k), large
// enough that the table stays a few MiB for a billion parameters.
constexpr std::size_t chunk_elements = 4096;

using ChunkTable = Kokkos::View<InitChunk*, MemSpace>;

bool constant(InitKind init) { return init == InitKind::zeros || init == InitKind::ones; }

// The chunks that tile out = flat elements [begin, end) of the layout, in order.
std::vector<InitChunk> chunks_of(const ParameterLayout& layout, std::size_t begin, std::size_t end) {
  // Maximal runs first: a run extends the previous one where the two are contiguous in the output
  // and either the same constant or consecutive elements of the same tensor.
  std::vector<InitChunk> runs;
  std::size_t covered = begin;
  const auto add = [&](std::size_t flat, std::size_t length, InitChunk run) {
    const std::size_t first = std::max(flat, begin), last = std::min(flat + length, end);
    if (first >= last) return;
    run.at = first - begin;
    run.length = last - first;
    run.global += first - flat;
    InitChunk* previous = runs.empty() ? nullptr : &runs.back();
    if (previous != nullptr && previous->at + previous->length == run.at && previous->init == run.init &&
        (constant(run.init) || (previous->hash == run.hash && previous->global + previous->length == run.global))) {
      previous->length += run.length;
    } else {
      runs.push_back(run);
    }
    covered = last;
  };
  const auto pad = [&](std::size_t flat, std::size_t length) { add(flat, length, InitChunk{}); };
  for (const TensorInfo& t : layout.tensors()) {
    if (t.offset >= end || t.offset + t.numel <= begin) continue;
    if (t.offset > covered) pad(covered, t.offset - covered);  // a shard unit's padding before it
    const InitChunk draw{0, 0, 0, t.init, name_hash(t.name), init_std(t, layout.model().layers)};
    // Each row of the innermost dimension, in the piece's blocks: a block holds consecutive global
    // elements, or padding (a row past the piece's blocks, as vocabulary rows past V are).
    const PieceIndex index = t.piece_index();
    const std::size_t width = t.local_shape.empty() ? 1 : t.local_shape.back();
    const std::size_t block = t.local_shape.empty() || t.piece.block.back() == 0 ? width : t.piece.block.back();
    const std::size_t first_row = (std::max(begin, t.offset) - t.offset) / width;
    const std::size_t end_row = (std::min(end, t.offset + t.numel) - t.offset + width - 1) / width;
    for (std::size_t row = first_row; row < end_row; ++row) {
      for (std::size_t column = 0; column < width; column += block) {
        const std::size_t local = row * width + column, length = std::min(block, width - column);
        const std::int64_t global = index.global_index(local);
        if (global < 0) {
          pad(t.offset + local, length);
        } else {
          InitChunk run = draw;
          run.global = std::uint64_t(global);
          add(t.offset + local, length, run);
        }
      }
    }
  }
  if (end > covered) pad(covered, end - covered);  // past the last tensor
  // Then cut into chunks.
  std::vector<InitChunk> chunks;
  std::size_t tiled = 0;
  for (const InitChunk& run : runs) {
    if (run.at != tiled) throw std::logic_error("initialisation runs leave a gap or overlap");
    for (std::size_t k = 0; k < run.length; k += chunk_elements) {
      InitChunk c = run;
      c.at += k;
      c.length = std::min(chunk_elements, run.length - k);
      c.global += constant(run.init) ? 0 : k;
      chunks.push_back(c);
      tiled += c.length;
    }
  }
  if (tiled != end - begin) throw std::logic_error("initialisation runs do not reach the end of their range");
  return chunks;
}

// The chunk table in the execution space's memory.
ChunkTable chunk_table(const ExecSpace& space, const std::vector<InitChunk>& chunks) {
  ChunkTable table("meshtrain::init::chunks", chunks.size());
  const auto host = Kokkos::create_mirror_view(table);
  for (std::size_t k = 0; k < chunks.size(); ++k) host(k) = chunks[k];
  Kokkos::deep_copy(space, table, host);
  host_fence(space, "initialisation: the chunk table copied before its host buffer goes");
  return table;
}

}  // namespace

double initial_value(std::uint64_t seed, const TensorInfo& tensor, std::uint64_t index, int layers) {
  return element_value(seed, name_hash(tensor.name), tensor.init, init_std(tensor, layers), index);
}

void initialize_parameters(const ExecSpace& space, Vec<float> weights, const ParameterLayout& layout,
                           std::uint64_t seed) {
  initialize_range(space, weights, layout, seed, 0);
}

void initialize_range(const ExecSpace& space, Vec<float> out, const ParameterLayout& layout, std::uint64_t seed,
                      std::size_t begin) {
  static_assert(reachable_v<Vec<float>>);
  const std::size_t n = out.extent(0);
  if (n == 0) return;
  const ChunkTable chunks = chunk_table(space, chunks_of(layout, begin, begin + n));
  using Team = Kokkos::TeamPolicy<ExecSpace>::member_type;
  Kokkos::parallel_for(
      "meshtrain::init::parameters", Kokkos::TeamPolicy<ExecSpace>(space, int(chunks.extent(0)), Kokkos::AUTO),
      KOKKOS_LAMBDA(const Team& team) {
        const InitChunk c = chunks(team.league_rank());
        float* const o = out.data() + c.at;
        if (c.init == InitKind::zeros || c.init == InitKind::ones) {
          const float value = c.init == InitKind::ones ? 1.0f : 0.0f;
          Kokkos::parallel_for(Kokkos::TeamThreadRange(team, c.length), [&](std::size_t j) { o[j] = value; });
          return;
        }
        if (c.init == InitKind::lora_uniform) {
          Kokkos::parallel_for(Kokkos::TeamThreadRange(team, c.length), [&](std::size_t j) {
            o[j] = float(c.scale * r123::uneg11<double>(philox_pair(seed, c.hash, c.global + j).u0));
          });
          return;
        }
        // The fast draw where it is certain to be the library functions' (nearly all elements; a
        // loop without calls, which host compilers vectorise), then the library path for the rest.
        Kokkos::parallel_for(Kokkos::TeamThreadRange(team, c.length), [&](std::size_t j) {
          const PhiloxPair u = philox_pair(seed, c.hash, c.global + j);
          o[j] = fast_normal::scaled_normal_or_nan(c.scale, r123::uneg11<double>(u.u0), r123::u01<double>(u.u1));
        });
        team.team_barrier();
        Kokkos::parallel_for(Kokkos::TeamThreadRange(team, c.length), [&](std::size_t j) {
          if (o[j] != o[j]) o[j] = float(c.scale * standard_normal(seed, c.hash, c.global + j));
        });
      });
  host_fence(space, "initialisation: the weights drawn");
}

}  // namespace meshtrain
