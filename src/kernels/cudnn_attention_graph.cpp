#include "kernels/cudnn_attention_graph.hpp"

#include "core/build_once_cache.hpp"
#include "kernels/cudnn_support.hpp"

#include <fmt/format.h>

#include <cmath>
#include <utility>
#include <vector>

namespace meshtrain::cudnn::detail {
namespace {

namespace fe = cudnn_frontend;
using Tensor = std::shared_ptr<fe::graph::Tensor_attributes>;

fe::DataType_t io_type(DType dtype) { return dtype == DType::bf16 ? fe::DataType_t::BFLOAT16 : fe::DataType_t::HALF; }

// [B,H,T,hs] over rows of `row` elements, head h at column h·hs: cuDNN's dims with meshtrain's strides.
// The tensor's first element (the q, k or v column group) is the pointer the variant pack gives.
std::vector<std::int64_t> head_dims(const AttentionShape& s, int heads) { return {s.B, heads, s.T, s.hs}; }
std::vector<std::int64_t> head_strides(const AttentionShape& s, std::int64_t row) {
  return {std::int64_t(s.T) * row, s.hs, row, 1};
}

// Elements per token of qkv and of out.
std::int64_t qkv_row(const AttentionShape& s) { return std::int64_t(s.NH + 2 * s.KVH) * s.hs; }
std::int64_t out_row(const AttentionShape& s) { return std::int64_t(s.NH) * s.hs; }

Tensor input(fe::graph::Graph& graph, const char* name, std::int64_t id, std::vector<std::int64_t> dims,
             std::vector<std::int64_t> strides) {
  return graph.tensor(fe::graph::Tensor_attributes()
                          .set_name(name)
                          .set_uid(id)
                          .set_dim(std::move(dims))
                          .set_stride(std::move(strides)));
}

// The softmax statistics, lse's [B,NH,T] as cuDNN's [B,NH,T,1] float.
std::vector<std::int64_t> stats_dims(const AttentionShape& s) { return {s.B, s.NH, s.T, 1}; }
std::vector<std::int64_t> stats_strides(const AttentionShape& s) { return {std::int64_t(s.NH) * s.T, s.T, 1, 1}; }

// The Kokkos kernel's scale, rounded to float the same way.
float attention_scale(int hs) { return float(1.0 / std::sqrt(double(hs))); }

std::shared_ptr<fe::graph::Graph> new_graph(DType dtype) {
  auto graph = std::make_shared<fe::graph::Graph>();
  graph->set_io_data_type(io_type(dtype))
      .set_intermediate_data_type(fe::DataType_t::FLOAT)
      .set_compute_data_type(fe::DataType_t::FLOAT);
  return graph;
}

// out, lse = SDPA(q, k, v), causal (query i sees keys j ≤ i: the band's right bound 0 from the top-left
// diagonal).
std::shared_ptr<fe::graph::Graph> forward_graph(const GraphKey& key) {
  const AttentionShape& s = key.shape;
  auto graph = new_graph(key.dtype);
  const auto row = qkv_row(s);
  auto q = input(*graph, "q", uid::q, head_dims(s, s.NH), head_strides(s, row));
  auto k = input(*graph, "k", uid::k, head_dims(s, s.KVH), head_strides(s, row));
  auto v = input(*graph, "v", uid::v, head_dims(s, s.KVH), head_strides(s, row));
  auto options = fe::graph::SDPA_attributes()
                     .set_name("meshtrain::attention::forward")
                     .set_generate_stats(true)
                     .set_attn_scale(attention_scale(s.hs))
                     .set_diagonal_alignment(fe::DiagonalAlignment_t::TOP_LEFT)
                     .set_diagonal_band_right_bound(0);
  auto [o, stats] = graph->sdpa(q, k, v, options);
  o->set_output(true).set_uid(uid::o).set_dim(head_dims(s, s.NH)).set_stride(head_strides(s, out_row(s)));
  stats->set_output(true)
      .set_uid(uid::stats)
      .set_data_type(fe::DataType_t::FLOAT)
      .set_dim(stats_dims(s))
      .set_stride(stats_strides(s));
  return graph;
}

// dq, dk, dv = SDPA backward, written in qkv's layout; dk and dv of a kv head summed over its query heads.
std::shared_ptr<fe::graph::Graph> backward_graph(const GraphKey& key) {
  const AttentionShape& s = key.shape;
  auto graph = new_graph(key.dtype);
  const auto row = qkv_row(s);
  auto q = input(*graph, "q", uid::q, head_dims(s, s.NH), head_strides(s, row));
  auto k = input(*graph, "k", uid::k, head_dims(s, s.KVH), head_strides(s, row));
  auto v = input(*graph, "v", uid::v, head_dims(s, s.KVH), head_strides(s, row));
  auto o = input(*graph, "o", uid::o, head_dims(s, s.NH), head_strides(s, out_row(s)));
  auto d_o = input(*graph, "dO", uid::d_o, head_dims(s, s.NH), head_strides(s, out_row(s)));
  auto stats = graph->tensor(fe::graph::Tensor_attributes()
                                 .set_name("stats")
                                 .set_uid(uid::stats)
                                 .set_data_type(fe::DataType_t::FLOAT)
                                 .set_dim(stats_dims(s))
                                 .set_stride(stats_strides(s)));
  auto options = fe::graph::SDPA_backward_attributes()
                     .set_name("meshtrain::attention::backward")
                     .set_attn_scale(attention_scale(s.hs))
                     .set_diagonal_alignment(fe::DiagonalAlignment_t::TOP_LEFT)
                     .set_diagonal_band_right_bound(0)
                     .set_deterministic_algorithm(key.deterministic);
  auto [d_q, d_k, d_v] = graph->sdpa_backward(q, k, v, o, d_o, stats, options);
  d_q->set_output(true).set_uid(uid::d_q).set_dim(head_dims(s, s.NH)).set_stride(head_strides(s, row));
  d_k->set_output(true).set_uid(uid::d_k).set_dim(head_dims(s, s.KVH)).set_stride(head_strides(s, row));
  d_v->set_output(true).set_uid(uid::d_v).set_dim(head_dims(s, s.KVH)).set_stride(head_strides(s, row));
  return graph;
}

BuiltGraph build(const GraphKey& key, cudnnHandle_t handle, const std::string& what) {
  BuiltGraph built;
  built.graph = key.direction == Direction::forward ? forward_graph(key) : backward_graph(key);
  fe::graph::Graph& graph = *built.graph;
  check_frontend(graph.validate(), "cudnn_frontend::graph::Graph::validate", what);
  check_frontend(graph.build_operation_graph(handle), "cudnn_frontend::graph::Graph::build_operation_graph", what);
  check_frontend(graph.create_execution_plans({fe::HeurMode_t::A}),
                 "cudnn_frontend::graph::Graph::create_execution_plans", what);
  check_frontend(graph.check_support(), "cudnn_frontend::graph::Graph::check_support", what);
  check_frontend(graph.build_plans(fe::BuildPlanPolicy_t::HEURISTICS_CHOICE),
                 "cudnn_frontend::graph::Graph::build_plans", what);
  check_frontend(graph.get_workspace_size(built.workspace_bytes), "cudnn_frontend::graph::Graph::get_workspace_size",
                 what);
  return built;
}

}  // namespace

// Graphs live until the process ends; a run uses a handful of shapes (one per micro-batch shape and
// direction), so nothing is ever evicted. A key whose graph did not build is kept as such: never rebuilt.
const BuiltGraph* graph_for(const GraphKey& key, cudnnHandle_t handle, const std::string& what) {
  static BuildOnceCache<GraphKey, BuiltGraph> graphs;
  return graphs.get(
      key, [&] { return build(key, handle, what); },
      [](const std::string& why) {
        fmt::print(stderr,
                   "meshtrain: warning: {}\nmeshtrain: warning: attention calls whose cuDNN graph does not build run "
                   "on the Kokkos kernel instead (the same results to rounding; slower)\n",
                   why);
      });
}

}  // namespace meshtrain::cudnn::detail
