// Counter-based initialisation with Random123's Philox.
#include "model/init.hpp"

#include <algorithm>

#include <Random123/boxmuller.hpp>
#include <Random123/philox.h>
#include <xxhash.h>

#include <cmath>

namespace meshtrain {
namespace {

std::uint64_t name_hash(const std::string& name) { return XXH64(name.data(), name.size(), 0); }

// A standard normal draw for (seed, name hash, index): counter = (index, hash), key = seed.
double standard_normal(std::uint64_t seed, std::uint64_t hash, std::uint64_t index) {
  using Philox = r123::Philox4x32;
  Philox generator;
  const Philox::ctr_type counter = {{std::uint32_t(index), std::uint32_t(index >> 32), std::uint32_t(hash),
                                     std::uint32_t(hash >> 32)}};
  const Philox::key_type key = {{std::uint32_t(seed), std::uint32_t(seed >> 32)}};
  const Philox::ctr_type bits = generator(counter, key);
  const std::uint64_t u0 = (std::uint64_t(bits[0]) << 32) | bits[1];
  const std::uint64_t u1 = (std::uint64_t(bits[2]) << 32) | bits[3];
  return r123::boxmuller(u0, u1).x;
}

double init_std(const TensorInfo& tensor, int layers) {
  return tensor.init == InitKind::normal_residual ? 0.02 / std::sqrt(2.0 * layers) : 0.02;
}

// The value of element `index` of `tensor`, with the tensor's name hash computed once by the caller.
double element_value(std::uint64_t seed, std::uint64_t hash, const TensorInfo& tensor, std::uint64_t index,
                     int layers) {
  switch (tensor.init) {
    case InitKind::zeros:
      return 0.0;
    case InitKind::ones:
      return 1.0;
    case InitKind::normal:
    case InitKind::normal_residual:
      return init_std(tensor, layers) * standard_normal(seed, hash, index);
  }
  return 0.0;
}

}  // namespace

double initial_value(std::uint64_t seed, const TensorInfo& tensor, std::uint64_t index, int layers) {
  return element_value(seed, name_hash(tensor.name), tensor, index, layers);
}

void initialize_parameters(Vec<float> weights, const ParameterLayout& layout, std::uint64_t seed) {
  initialize_range(weights, layout, seed, 0);
}

void initialize_range(Vec<float> out, const ParameterLayout& layout, std::uint64_t seed, std::size_t begin) {
  auto host = Kokkos::create_mirror_view(out);
  Kokkos::deep_copy(host, 0.0f);
  const std::size_t end = begin + out.extent(0);
  const int layers = layout.model().layers;
  for (const TensorInfo& t : layout.tensors()) {
    const std::size_t first = std::max(begin, t.offset), last = std::min(end, t.offset + t.numel);
    if (first >= last) continue;
    const std::uint64_t hash = name_hash(t.name);
    for (std::size_t flat = first; flat < last; ++flat) {
      // The value depends on the element's global index, so every layout draws the same tensor;
      // padding (vocabulary rows past V) starts at zero and, unseen by data and loss, stays there.
      const std::int64_t g = t.global_index(flat - t.offset);
      host(flat - begin) = g < 0 ? 0.0f : float(element_value(seed, hash, t, std::uint64_t(g), layers));
    }
  }
  Kokkos::deep_copy(out, host);
}

}  // namespace meshtrain
