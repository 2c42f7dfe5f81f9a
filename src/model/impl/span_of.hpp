// A view as the span the collectives take (parallel/tensor_parallel_mappings.hpp): the one helper
// the stage, the families and the loss share. Internal to model/.
#pragma once

#include "core/exec.hpp"

#include <span>

namespace meshtrain {

template <class T>
std::span<T> span_of(Vec<T> x) {
  return {x.data(), x.extent(0)};
}

}  // namespace meshtrain
