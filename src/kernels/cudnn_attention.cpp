#include "kernels/cudnn_attention.hpp"

#include "kernels/cudnn_attention_graph.hpp"
#include "kernels/cudnn_support.hpp"

#include <fmt/format.h>

#include <atomic>
#include <cstdint>
#include <initializer_list>
#include <mutex>
#include <optional>
#include <string>
#include <type_traits>
#include <unordered_map>

namespace meshtrain::cudnn {
namespace {

std::atomic<bool> deterministic{false};

template <class Real>
constexpr detail::DType dtype_of() {
  static_assert(attention_type_v<Real>, "cuDNN's fused attention takes bf16 and fp16 only");
  return std::is_same_v<Real, bf16> ? detail::DType::bf16 : detail::DType::fp16;
}

// "forward bf16 B=2 T=1024 NH=12 KVH=12 hs=64", for error messages.
std::string describe(detail::Direction direction, detail::DType dtype, const AttentionShape& s) {
  return fmt::format("{} {} B={} T={} NH={} KVH={} hs={}",
                     direction == detail::Direction::forward ? "forward" : "backward",
                     dtype == detail::DType::bf16 ? "bf16" : "fp16", s.B, s.T, s.NH, s.KVH, s.hs);
}

// One call at a time: the handle of a device is shared and bound to each call's stream, and the graph
// and workspace caches are plain maps. The lock covers only host work (lookups, enqueueing).
std::mutex& call_mutex() {
  static std::mutex mutex;
  return mutex;
}

// The graph of this call (built on first use), its handle bound to `stream`, and its workspace; nothing
// where cuDNN cannot build the graph.
struct Prepared {
  cudnnHandle_t handle;
  const detail::BuiltGraph* built;
  void* workspace;
};

std::optional<Prepared> prepare(detail::Direction direction, detail::DType dtype, const AttentionShape& shape,
                                void* stream, const std::string& what) {
  if (!attention_shape_supported(shape, 0)) {
    detail::fail(what, "attention_shape_supported",
                 "cuDNN does not take this shape (KVH must divide NH, hs be a multiple of 8 up to 128): the dispatch "
                 "asks attention_supported first and sends such calls to the Kokkos kernel");
  }
  int device = 0;
  detail::check(cudaGetDevice(&device), "cudaGetDevice", what);
  cudnnHandle_t handle = detail::handle_for(device, stream, what);
  const detail::GraphKey key{device, direction, dtype, shape,
                             direction == detail::Direction::backward && deterministic.load(std::memory_order_relaxed)};
  const detail::BuiltGraph* built = detail::graph_for(key, handle, what);
  if (built == nullptr) return std::nullopt;
  void* workspace = detail::workspace_for(device, stream, std::size_t(built->workspace_bytes), what);
  return Prepared{handle, built, workspace};
}

// The variant pack holds void*; cuDNN only reads the inputs.
void* in(const void* p) { return const_cast<void*>(p); }

// cuDNN's plans assume 16-byte aligned tensors (the frontend's default alignment).
void check_aligned(std::initializer_list<const void*> pointers, const std::string& what) {
  for (const void* p : pointers) {
    if (reinterpret_cast<std::uintptr_t>(p) % 16 != 0) {
      detail::fail(what, "the alignment check", fmt::format("pointer {} is not 16-byte aligned", fmt::ptr(p)));
    }
  }
}

}  // namespace

bool attention_shape_supported(AttentionShape s, int docs) {
  return s.B >= 1 && s.T >= 1 && s.NH >= 1 && s.KVH >= 1 && s.NH % s.KVH == 0 && s.hs >= 8 && s.hs <= 128 &&
         s.hs % 8 == 0 && docs == 0;
}

void set_deterministic(bool on) { deterministic.store(on, std::memory_order_relaxed); }

template <class Real>
bool attention_forward(void* stream, Real* out, float* lse, const Real* qkv, AttentionShape shape) {
  constexpr detail::DType dtype = dtype_of<Real>();
  const std::string what = describe(detail::Direction::forward, dtype, shape);
  std::lock_guard lock(call_mutex());
  check_aligned({out, lse, qkv}, what);
  const std::optional<Prepared> p = prepare(detail::Direction::forward, dtype, shape, stream, what);
  if (!p) return false;
  const std::int64_t kv = std::int64_t(shape.NH) * shape.hs, v = kv + std::int64_t(shape.KVH) * shape.hs;
  std::unordered_map<std::int64_t, void*> pack{{detail::uid::q, in(qkv)},
                                               {detail::uid::k, in(qkv + kv)},
                                               {detail::uid::v, in(qkv + v)},
                                               {detail::uid::o, out},
                                               {detail::uid::stats, lse}};
  detail::check_frontend(p->built->graph->execute(p->handle, pack, p->workspace),
                         "cudnn_frontend::graph::Graph::execute", what);
  return true;
}

template <class Real>
bool attention_backward(void* stream, Real* dqkv, const Real* dout, const Real* qkv, const Real* out, const float* lse,
                        AttentionShape shape) {
  constexpr detail::DType dtype = dtype_of<Real>();
  const std::string what = describe(detail::Direction::backward, dtype, shape);
  std::lock_guard lock(call_mutex());
  check_aligned({dqkv, dout, qkv, out, lse}, what);
  const std::optional<Prepared> p = prepare(detail::Direction::backward, dtype, shape, stream, what);
  if (!p) return false;
  const std::int64_t kv = std::int64_t(shape.NH) * shape.hs, v = kv + std::int64_t(shape.KVH) * shape.hs;
  std::unordered_map<std::int64_t, void*> pack{
      {detail::uid::q, in(qkv)}, {detail::uid::k, in(qkv + kv)}, {detail::uid::v, in(qkv + v)},
      {detail::uid::o, in(out)}, {detail::uid::d_o, in(dout)},   {detail::uid::stats, in(lse)},
      {detail::uid::d_q, dqkv},  {detail::uid::d_k, dqkv + kv},  {detail::uid::d_v, dqkv + v}};
  detail::check_frontend(p->built->graph->execute(p->handle, pack, p->workspace),
                         "cudnn_frontend::graph::Graph::execute", what);
  return true;
}

template bool attention_forward<bf16>(void*, bf16*, float*, const bf16*, AttentionShape);
template bool attention_forward<fp16>(void*, fp16*, float*, const fp16*, AttentionShape);
template bool attention_backward<bf16>(void*, bf16*, const bf16*, const bf16*, const bf16*, const float*,
                                       AttentionShape);
template bool attention_backward<fp16>(void*, fp16*, const fp16*, const fp16*, const fp16*, const float*,
                                       AttentionShape);

}  // namespace meshtrain::cudnn
