// The cudnn-frontend graphs of the attention wrapper: one SDPA forward or backward node over strided views
// of meshtrain's qkv / out / dqkv layouts (kernels/cudnn_attention.hpp), built once per key and kept.
// Internal to the wrapper.
#pragma once

#include "kernels/cudnn_attention.hpp"

#include <cudnn_frontend.h>

#include <cstdint>
#include <memory>
#include <string>
#include <tuple>

namespace meshtrain::cudnn::detail {

enum class Direction { forward, backward };
enum class DType { bf16, fp16 };

// The tensors' ids in a graph's variant pack.
namespace uid {
inline constexpr std::int64_t q = 1, k = 2, v = 3, o = 4, stats = 5, d_o = 6, d_q = 7, d_k = 8, d_v = 9;
}  // namespace uid

// What a graph is built for: plans are made for one device, shape and storage type.
struct GraphKey {
  int device = 0;
  Direction direction = Direction::forward;
  DType dtype = DType::bf16;
  AttentionShape shape;
  bool deterministic = false;

  auto tie() const {
    return std::tuple(device, direction, dtype, shape.B, shape.T, shape.NH, shape.KVH, shape.hs, deterministic);
  }
  bool operator<(const GraphKey& other) const { return tie() < other.tie(); }
};

struct BuiltGraph {
  std::shared_ptr<cudnn_frontend::graph::Graph> graph;
  std::int64_t workspace_bytes = 0;
};

// The graph of `key`, built on its first use with `handle` (validated, lowered, given heuristic mode A's
// plans, checked for support, the first plan that builds kept) and kept for the process; nullptr where
// cuDNN cannot build it (a shape or GPU its engines lack), which the first such key of the process says
// on stderr with cuDNN's reason and `what`, the call. The caller runs the Kokkos kernel then.
const BuiltGraph* graph_for(const GraphKey& key, cudnnHandle_t handle, const std::string& what);

}  // namespace meshtrain::cudnn::detail
