// The float workspace that the host's 16-bit GEMMs (kernels/gemm.hpp) need for one model rank, so
// that the trainer can reserve it before the first step and count it as memory category `workspace`:
//   reserve_gemm_workspace(model_gemm_workspace_bytes<bf16>(model, micro_batch, tp));
// (model/language_model.hpp: the family model.arch names). 0 for float and double, and on CUDA builds.
#pragma once

#include "core/model_sizes.hpp"
#include "kernels/gemm.hpp"
#include "model/parameters.hpp"

#include <algorithm>
#include <cstddef>
#include <iterator>
#include <vector>

namespace meshtrain {

// The three products each of a SwiGLU of `hidden` columns over `rows` rows runs, forward and
// backward (gate|up, then down), in the order: forward, input gradient, weight gradient.
inline void add_swiglu_products(std::vector<GemmShape>& products, int rows, int C, int hidden) {
  const GemmShape swiglu[] = {
      {rows, 2 * hidden, C}, {rows, C, 2 * hidden}, {2 * hidden, C, rows},  // gate|up
      {rows, C, hidden},     {rows, hidden, C},     {C, hidden, rows},      // down
  };
  products.insert(products.end(), std::begin(swiglu), std::end(swiglu));
}

// The largest workspace over every product a rank of `Family` runs (Family::gemm_products): exact
// for a model on one stage, an upper bound for a pipeline stage (the output head's products are
// counted whether or not the stage holds the head). tests/model/test_gpt2_low_precision.cpp and
// test_llama_gemm_workspace.cpp hold it to what a forward and backward really allocate.
template <class Real, class Family>
std::size_t family_gemm_workspace_bytes(const ModelConfig& m, int batch, int tp = 1) {
  std::size_t bytes = 0;
  for (const GemmShape& s : Family::gemm_products(m, batch, tp))
    bytes = std::max(bytes, gemm_workspace_bytes_for<Real>(s));
  return bytes;
}

}  // namespace meshtrain
