// Per-dataset checksums that ranks compute on their own pieces and add up; share/docs/usage.md,
// Checkpoints (Checksums) states the algorithm exactly, for readers of the files.
//
// A checkpoint's tensor is written by many ranks, each its own piece, and read back under another
// layout by ranks holding other pieces; no rank sees it whole, and byte order in the file depends on
// who wrote what. A stream hash (xxhash, CRC) needs the whole tensor in order. So the checksum is
// a sum over elements of a hash of (global row-major index, float32 bits), modulo 2^64:
//
//   checksum = Σ_i fmix64(i · 0x9E3779B97F4A7C15 XOR bits(x_i))   (mod 2^64)
//
// bits(x) is the float32's 32-bit pattern as an integer, zero-extended (every checkpoint tensor is
// float32, the 16-bit runs' included: they store fp32 master weights). fmix64 is MurmurHash3's 64-bit
// finalizer (below, with its two multipliers), a bijection: changing any one element always changes
// the sum, and the value is independent of the layout that computes it. Ranks add their partial
// sums (over disjoint pieces) with one MPI_SUM of uint64 (wrapping, hence exact).
#pragma once

#include "io/checkpoint/slab_range.hpp"

#include <cstdint>

namespace meshtrain::io {

inline constexpr const char* checksum_algorithm = "meshtrain-sum64";

constexpr std::uint64_t fmix64(std::uint64_t k) {
  k ^= k >> 33;
  k *= 0xff51afd7ed558ccdull;
  k ^= k >> 33;
  k *= 0xc4ceb93fe53ec4e3ull;
  k ^= k >> 33;
  return k;
}

// The term of one element.
std::uint64_t element_hash(std::uint64_t global_index, float value);

// Σ element_hash over the range's elements of the slab's piece; data holds range.count floats.
std::uint64_t partial_checksum(const TensorSlab& slab, ElementRange range, const float* data);

// The checksum of a whole tensor given in row-major order.
std::uint64_t tensor_checksum(const float* data, std::uint64_t count);

}  // namespace meshtrain::io
