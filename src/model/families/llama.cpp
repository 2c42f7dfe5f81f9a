// The LLaMA family's tensors, their views, its state and its activations' layout in the flat
// buffers (the carving runs once to count and once over the allocation, model/impl/carver.hpp);
// the stage's instantiation. Its listings: llama_forward.cpp, llama_backward.cpp, llama_moe.cpp.
#include "model/families/llama.hpp"

#include "core/lora_targets.hpp"
#include "kernels/column_sum.hpp"
#include "kernels/encoder.hpp"
#include "kernels/fused_attention.hpp"
#include "model/gemm_workspace.hpp"
#include "model/impl/decoder_stage_impl.hpp"
#include "model/rotary_frequencies.hpp"

#include <fmt/format.h>

namespace meshtrain {

LlamaFamily::Dims LlamaFamily::dims(const ModelConfig& m, int batch, const ParameterLayout& layout, int ep) {
  const std::size_t t = std::size_t(layout.tp()), padded = std::size_t(padded_vocab(m, layout.tp()).value());
  const std::size_t T = local_positions(m), N = std::size_t(batch) * T, E = std::size_t(m.experts);
  const std::size_t k = E > 0 ? std::size_t(m.experts_per_token) : 0;
  const int capacity = m.expert_capacity(int(N));
  const std::size_t R = expert_rows(m, N);
  const std::size_t P = std::size_t(ep), El = E / P;
  return {std::size_t(batch),
          T,
          std::size_t(m.d_model),
          N,
          std::size_t(m.heads) / t,
          std::size_t(m.kv_head_count()) / t,
          std::size_t(m.head_size()),
          std::size_t(m.mlp_hidden()) / t,
          padded / t,
          layout.stage_layers(),
          layout.first_layer(),
          m.moe_every,
          E,
          k,
          E > 0 ? std::size_t(m.expert_hidden_size()) / t : 0,
          E > 0 ? std::size_t(m.shared_hidden()) / t : 0,
          R,
          capacity,
          m.pad_to_capacity,
          P,
          El,
          expert_rows_received(m, N, ep),
          m.attention == AttentionKernel::fused,
          m.context_parallel > 1,
          std::size_t(m.context_parallel),
          m.has_qkv_bias(),
          lora_drops_expert_inputs(m),
          residual_rows(m, N, int(t))};
}

namespace {

// One SwiGLU's gate_proj, up_proj (column-parallel) and down_proj (row-parallel), names under
// `prefix`; `expert`: the routed expert whose weights they are.
void add_swiglu(ParameterLayout& layout, const std::string& prefix, std::uint64_t hidden, int expert = -1) {
  const std::uint64_t C = layout.model().d_model;
  layout.add_split(prefix + "gate_proj.weight", {hidden, C}, 0, 1, InitKind::normal, expert);
  layout.add_split(prefix + "up_proj.weight", {hidden, C}, 0, 1, InitKind::normal, expert);
  layout.add_split(prefix + "down_proj.weight", {C, hidden}, 1, 1, InitKind::normal_residual, expert);
}

// An MoE block's MLP: the router (replicated over tp: every tp rank routes the same tokens alike)
// and the shared experts' SwiGLU in the block's unit; then, in a unit of their own (reduced over
// the expert-data-parallel group), this ep rank's routed experts, each SwiGLU split as the dense
// one. An expert's three tensors are consecutive, so its gate|up is one [2H, C] matrix (one GEMM
// per expert). Names and TensorInfo::expert keep the global expert index.
void add_expert_tensors(ParameterLayout& layout, int l) {
  const ModelConfig& m = layout.model();
  const std::string block = fmt::format("layers.{}.", l);
  const std::uint64_t C = m.d_model, E = m.experts;
  layout.add_replicated(block + "mlp.gate.weight", {E, C}, InitKind::normal);
  if (m.shared_experts > 0) add_swiglu(layout, block + "mlp.shared_experts.", m.shared_hidden());
  layout.start_unit(block + "mlp.experts", l, true);
  for (int e = layout.first_expert(); e < layout.first_expert() + layout.local_experts(); ++e) {
    add_swiglu(layout, fmt::format("{}mlp.experts.{}.", block, e), m.expert_hidden_size(), e);
  }
}

}  // namespace

// torch Linear layout [out, in]: a column-parallel product splits dimension 0 (its output rows), a
// row-parallel one dimension 1. q, k and v of a block are consecutive, and so are gate and up, so
// each trio or pair is one [Σ out, C] matrix in the flat buffer (one GEMM).
// Every product of llama_forward.cpp, llama_backward.cpp and llama_moe.cpp. The dense SwiGLU's
// only when some block is dense; an MoE block's shared experts over every row, and its routed
// experts' grouped products (each group's own shape, kernels/gemm.hpp) over at most
// min(N, capacity) rows: a group is one expert's rows from one sender, and a token goes to an
// expert at most once. The router's product runs in fp32 without the workspace
// (kernels/router_linear.hpp). Dropless, the experts' rows are an upper bound.
std::vector<GemmShape> LlamaFamily::gemm_products(const ModelConfig& m, int batch, int tp) {
  const int T = int(local_positions(m)), N = batch * T, C = m.d_model, hs = m.head_size();
  const int Vl = int(padded_vocab(m, tp).value() / tp);
  const int Q = m.heads / tp * hs, QKV = (m.heads + 2 * m.kv_head_count()) / tp * hs;
  std::vector<GemmShape> products = {
      {N, Vl, C},  {N, C, Vl},  {Vl, C, N},   // lm_head: logits, dnorm, dlm_head
      {N, QKV, C}, {N, C, QKV}, {QKV, C, N},  // q|k|v: forward, input and weight gradients
      {N, C, Q},   {N, Q, C},   {C, Q, N},    // o_proj
  };
  // Materialized attention's products, per sequence and head (fused attention's tiles widen their
  // operands into its own workspace).
  if (m.attention == AttentionKernel::materialized) products.insert(products.end(), {{T, T, hs}, {T, hs, T}});
  if (m.moe_blocks() < m.layers) add_swiglu_products(products, N, C, m.mlp_hidden() / tp);
  if (m.experts > 0) {
    if (m.shared_experts > 0) add_swiglu_products(products, N, C, m.shared_hidden() / tp);
    const int capacity = m.expert_capacity(N);
    add_swiglu_products(products, capacity > 0 ? std::min(N, capacity) : N, C, m.expert_hidden_size() / tp);
  }
  return products;
}

void LlamaFamily::list_tensors(ParameterLayout& layout) {
  const ModelConfig& m = layout.model();
  const std::uint64_t C = m.d_model, hs = m.head_size(), H = m.mlp_hidden();
  const std::uint64_t q_rows = std::uint64_t(m.heads) * hs, kv_rows = std::uint64_t(m.kv_head_count()) * hs;
  // Tied, the first stage embeds and the last stage's head reuses embed_tokens: both hold it, as gpt2's wte.
  const bool tied = m.ties_output_head();
  if (layout.place().first() || (tied && layout.place().last())) {
    layout.start_unit("embed_tokens", -1);
    layout.add_vocabulary_table("embed_tokens.weight", tied ? TableRole::tied : TableRole::lookup);
  }
  for (int l = layout.first_layer(); l < layout.first_layer() + layout.stage_layers(); ++l) {
    const std::string h = fmt::format("layers.{}.", l);
    layout.start_unit(fmt::format("layers.{}", l), l);
    layout.add_replicated(h + "input_layernorm.weight", {C}, InitKind::ones);
    layout.add_split(h + "self_attn.q_proj.weight", {q_rows, C}, 0, 1, InitKind::normal);  // column-parallel, by heads
    layout.add_split(h + "self_attn.k_proj.weight", {kv_rows, C}, 0, 1, InitKind::normal);
    layout.add_split(h + "self_attn.v_proj.weight", {kv_rows, C}, 0, 1, InitKind::normal);
    if (m.has_qkv_bias()) {  // after the three matrices, so that they stay one [Σ out, C] matrix
      layout.add_split(h + "self_attn.q_proj.bias", {q_rows}, 0, 1, InitKind::zeros);
      layout.add_split(h + "self_attn.k_proj.bias", {kv_rows}, 0, 1, InitKind::zeros);
      layout.add_split(h + "self_attn.v_proj.bias", {kv_rows}, 0, 1, InitKind::zeros);
    }
    layout.add_split(h + "self_attn.o_proj.weight", {C, q_rows}, 1, 1, InitKind::normal_residual);  // row-parallel
    layout.add_replicated(h + "post_attention_layernorm.weight", {C}, InitKind::ones);
    if (m.is_moe_block(l)) {
      add_expert_tensors(layout, l);
    } else {
      add_swiglu(layout, h + "mlp.", H);
    }
  }
  if (layout.place().last()) {
    layout.start_unit("norm", -1);
    layout.add_replicated("norm.weight", {C}, InitKind::ones);
    if (!tied) {
      layout.start_unit("lm_head", -1);
      layout.add_vocabulary_table("lm_head.weight", TableRole::output);
    }
  }
}

template <class Real>
LlamaFamily::Weights<Real> LlamaFamily::bind(const TensorViews<Real>& v) {
  const ParameterLayout& layout = v.layout();
  const ModelConfig& m = layout.model();
  Weights<Real> p;
  p.embed = v.lookup_table();
  for (int l = layout.first_layer(); l < layout.first_layer() + layout.stage_layers(); ++l) {
    const std::string h = fmt::format("layers.{}.", l);
    BlockWeights<Real> b;
    b.attn_norm = v.view(h + "input_layernorm.weight");
    b.qkv = v.joined(h, {"self_attn.q_proj.weight", "self_attn.k_proj.weight", "self_attn.v_proj.weight"});
    if (m.has_qkv_bias()) {
      b.qkv_bias = v.joined(h, {"self_attn.q_proj.bias", "self_attn.k_proj.bias", "self_attn.v_proj.bias"});
    }
    b.o = v.view(h + "self_attn.o_proj.weight");
    b.mlp_norm = v.view(h + "post_attention_layernorm.weight");
    if (!m.is_moe_block(l)) {
      b.gate_up = v.joined(h, {"mlp.gate_proj.weight", "mlp.up_proj.weight"});
      b.down = v.view(h + "mlp.down_proj.weight");
    } else {
      if (m.shared_experts > 0) {
        b.gate_up = v.joined(h, {"mlp.shared_experts.gate_proj.weight", "mlp.shared_experts.up_proj.weight"});
        b.down = v.view(h + "mlp.shared_experts.down_proj.weight");
      }
      b.router = v.view(h + "mlp.gate.weight");
      // The experts this rank holds (all of them, or its expert-parallel share), in order.
      std::vector<std::string> names;
      for (int e = 0; e < m.experts; ++e) {
        if (layout.find_if_held(fmt::format("{}mlp.experts.{}.gate_proj.weight", h, e)) == nullptr) continue;
        for (const char* part : {"gate_proj", "up_proj", "down_proj"}) {
          names.push_back(fmt::format("mlp.experts.{}.{}.weight", e, part));
        }
      }
      b.experts = v.joined(h, names);
    }
    p.blocks.push_back(b);
  }
  p.norm = v.view("norm.weight");
  p.output = v.output_table();
  return p;
}

namespace {

// Padded to the capacity, expert e's rows are [e · capacity, (e+1) · capacity) on every rank, whatever
// the routing: the offsets, the row groups and the exchange (capacity rows per expert from each sender)
// are known before it, planned once here; moe_forward reads nothing back.
void plan_padded_routing(const ExpertExchange& exchange, HostRouting& host, const LlamaFamily::Dims& d) {
  const int E = int(d.E), capacity = d.capacity;
  for (int e = 0; e <= E; ++e) host.counts[std::size_t(E + e)] = e * capacity;
  host.exchange.received_counts.assign(std::size_t(E), capacity);
  exchange.plan_exchange(host.exchange, host.offsets(), d.C);
}

}  // namespace

template <class Real>
LlamaFamily::State<Real>::State(const ParameterLayout& layout, const Dims& d, Comm* ep, int slots,
                                RouterStatistics& statistics)
    : exchange(ep, int(d.E)),
      rotary(make_rotary_table<accum_t<Real>>(layout.model().seq_len, rotary_frequencies(layout.model()))) {
  host_routing.assign(std::size_t(slots), std::vector<HostRouting>(std::size_t(d.layers)));
  for (int l = 0; l < d.layers; ++l) {
    if (!d.moe(l)) continue;
    for (auto& per_slot : host_routing) {
      HostRouting& host = per_slot[std::size_t(l)];
      host.counts.assign(2 * d.E + 1, 0);
      host.exchange.reserve(exchange.size(), int(d.E));
      if (d.padded) plan_padded_routing(exchange, host, d);
    }
    statistics.blocks.push_back(layout.first_layer() + l);
  }
  statistics.experts = int(d.E);
}

namespace {

template <class Real>
MoeActivations<Real> carve_moe(carving::Carver<Real>& c, const LlamaFamily::Dims& d) {
  using A = accum_t<Real>;
  const std::size_t N = d.N, C = d.C, R = d.R;
  MoeActivations<Real> m;
  m.probs = c.template take_as<A>(N * d.E);
  m.lse = c.template take_as<A>(N);
  m.gate = c.template take_as<A>(N * d.k);
  m.expert = c.template take_as<int>(N * d.k);
  m.slot = c.template take_as<int>(N * d.k);
  m.row_token = c.template take_as<int>(R);
  m.counts = c.template take_as<int>(2 * d.E + 1);
  if (d.cp > 1) m.batch_routed = c.template take_as<int>(d.E);
  m.xs = c.take(R * C);
  m.received = d.ep > 1 ? c.take(d.Rr * C) : m.xs;
  m.gate_up = c.take(d.Rr * 2 * d.Hel);
  m.act = c.take(d.Rr * d.Hel);
  m.ys = c.take(R * C);
  if (d.expert_dropout) {
    m.routed_ids = c.template take_as<std::int64_t>(2 * R);
    m.received_ids = d.ep > 1 ? c.template take_as<std::int64_t>(2 * d.Rr) : m.routed_ids;
  }
  return m;
}

}  // namespace

template <class Real>
LlamaFamily::Block<Real> LlamaFamily::carve_block(carving::Carver<Real>& c, const Dims& d, carving::BlockFields take,
                                                  int l, const Block<Real>& other) {
  const std::size_t N = d.N, C = d.C;
  const std::size_t dense_cols = l < 0 ? d.widest_dense_cols() : d.dense_cols(l);
  const bool moe = l < 0 ? d.any_moe() : d.moe(l);
  Block<Real> b;
  b.ln1 = c.take_if(take.rest, N * C, other.ln1);
  b.ln1_rstd = c.take_as_if(take.rest, d.Nl, other.ln1_rstd);
  b.qkv = c.take_if(take.rest, N * d.qkv_cols(), other.qkv);
  b.atty = c.take_if(take.rest, N * d.q_cols(), other.atty);
  if (d.fused_attention) {
    b.lse = c.take_as_if(take.rest, d.B * d.NHl * d.T, other.lse);
  } else {
    b.att = c.take_if(take.att, d.B * d.NHl * d.T * d.T, other.att);
  }
  b.residual2 = c.take_if(take.rest, d.Nl * C, other.residual2);
  b.ln2 = c.take_if(take.rest, N * C, other.ln2);
  b.ln2_rstd = c.take_as_if(take.rest, d.Nl, other.ln2_rstd);
  b.gate_up = c.take_if(take.rest, N * 2 * dense_cols, other.gate_up);
  b.swiglu = c.take_if(take.rest, N * dense_cols, other.swiglu);
  if (moe) b.moe = take.rest ? carve_moe(c, d) : other.moe;
  b.residual3 = c.take_if(take.output, d.Nl * C, other.residual3);
  return b;
}

template <class Real>
LlamaFamily::Scratch<Real> LlamaFamily::carve_scratch(carving::Carver<Real>& c, const Dims& d,
                                                      const carving::CarveFn<Real>& beside_mlp) {
  const std::size_t N = d.N, C = d.C;
  Scratch<Real> s;
  s.dresidual = c.take(d.Nl * C);
  s.dln = c.take(N * C);
  s.datty = c.take(N * d.q_cols());
  s.dqkv = c.take(N * d.qkv_cols());
  if (d.fused_attention) {
    // The ring (context parallelism) works in buffers of its own (beside_mlp).
    const std::size_t workspace =
        d.ring_attention ? 0 : fused_attention_workspace<Real>(int(d.B), int(d.T), int(d.NHl), int(d.hs));
    s.attention_workspace = c.template take_as<accum_t<Real>>(workspace);
  } else {
    s.datt = c.take(d.B * d.NHl * d.T * d.T);
  }
  c.overlay(
      [&](carving::Carver<Real>& over) {
        s.dswiglu = over.take(N * d.widest_dense_cols());
        s.dgate_up = over.take(N * 2 * d.widest_dense_cols());
      },
      beside_mlp);
  s.column_partials =
      c.template take_as<accum_t<Real>>(column_sum_workspace(N, d.qkv_bias ? std::max(C, d.qkv_cols()) : C));
  s.token_order = c.template take_as<int>(token_order_workspace(N));
  if (d.any_moe()) {
    s.router_logits = c.template take_as<accum_t<Real>>(N * d.E);
    s.dgate = c.template take_as<accum_t<Real>>(N * d.k);
    s.drows = c.take(d.R * C);
    s.dreceived = d.ep > 1 ? c.take(d.Rr * C) : s.drows;
    s.dexpert_act = c.take(d.Rr * d.Hel);
    s.dexpert_gate_up = c.take(d.Rr * 2 * d.Hel);
    if (d.ep > 1) s.expert_counts = c.template take_as<std::int64_t>(2 * d.E);
  }
  return s;
}

MESHTRAIN_DECODER_STAGE(LlamaFamily)

}  // namespace meshtrain
