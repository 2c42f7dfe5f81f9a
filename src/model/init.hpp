// Fresh initialisation (share/docs/usage.md, Model and optimizer): every element depends only on (seed, tensor name,
// element index), never on the layout, so a rank holding any slice of a tensor draws exactly the
// values a single rank would.
#pragma once

#include "model/parameters.hpp"

#include <cstdint>
#include <string>

namespace meshtrain {

// One element of tensor `name` (normal draws via Philox4x32-10, keyed by the seed, counted by the
// tensor-name hash and the element index), computed on the host one element at a time: the
// reference the kernels below are tested against.
double initial_value(std::uint64_t seed, const TensorInfo& tensor, std::uint64_t index, int layers);

// Fills all parameters of `layout` in `weights` (in the execution space's memory).
void initialize_parameters(const ExecSpace& space, Vec<float> weights, const ParameterLayout& layout,
                           std::uint64_t seed);
// Fills out(i) with flat element begin + i of the layout's initial weights (0 for padding): a ZeRO
// shard initialises its own slice without the whole model in memory. One kernel over `out`.
void initialize_range(const ExecSpace& space, Vec<float> out, const ParameterLayout& layout, std::uint64_t seed,
                      std::size_t begin);

}  // namespace meshtrain
