// Llama's MoE blocks (share/docs/usage.md, Mixture of experts): the router, the experts' grouped
// products over the tokens in expert order, the shared experts, and their backward; the router
// statistics' counts. The rest of a block is llama_forward.cpp's and llama_backward.cpp's.
//
// Forward of one MoE block, for the normed input ln2 (N, C):
//   logits = ln2 · W_rᵀ → probabilities, top-k experts and gate weights (router_forward)
//   assignments → rows in expert order under the capacity (moe_assign; under ep the kept counts
//   exchanged on the device; then the counts read by the host once, read_routing — except padded to
//   the capacity, whose row groups and exchange the State plans once, before any routing)
//   xs = ln2 in row order → to the ranks of their experts (expert parallelism: all-to-all,
//   model/impl/expert_exchange.hpp) → each expert's SwiGLU over its rows (grouped products) →
//   back to the rows' own rank as ys
//   proj = shared experts' SwiGLU(ln2) + Σ_j gate_j · ys[row of (n, j)]
// Tensor parallelism splits every expert's SwiGLU as the dense one: ys and proj are this rank's
// partial sums, which the block's ReduceFromRegion adds. The gate weights' gradient is a dot
// product with ys, so backward sums it over the group before the router's backward; the router's
// own input gradient, the same on every rank, joins after the CopyToRegion's sum.
//
// Context parallelism (parallel.cp) gives each rank N of a micro-batch's N · cp tokens: each routes its own,
// under its own capacity, and the router losses take the micro-batch's routed counts, summed over the cp
// group once per forward pass, so that the ranks' terms add up to the micro-batch's losses and gradients.
//
// LoRA (share/docs/design.md, LoRA): the router's adapter (replicated, as the router) adds to its fp32
// logits; the shared experts' as the dense SwiGLU's; each routed expert's adapters run on the rows its
// expert receives, beside the grouped products (kernels/lora_grouped.hpp): gate and up column-parallel
// (their h's gradient summed over tp), down row-parallel (its h summed over tp before the up product,
// which tp rank 0 adds into the expert's output before the rows travel back).
#include "model/families/llama.hpp"

#include "kernels/lora_grouped.hpp"
#include "kernels/lora_router.hpp"
#include "kernels/matmul.hpp"
#include "kernels/moe_dispatch.hpp"
#include "kernels/moe_router.hpp"
#include "kernels/residual.hpp"
#include "kernels/router_linear.hpp"
#include "kernels/swiglu.hpp"

namespace meshtrain {

namespace {

using Family = LlamaFamily;

// What the router losses average over (kernels/moe_router.hpp): the micro-batch's routed counts and tokens, of
// which context parallelism gives each of its ranks N of N · cp.
template <class Real>
Vec<int> batch_routed(const Family::Dims& d, const MoeActivations<Real>& m) {
  return d.cp > 1 ? m.batch_routed : slice(m.counts, 0, d.E);
}
inline long batch_tokens(const Family::Dims& d) { return long(d.N) * long(d.cp); }

// The expert exchange's counts in the scratch (ep > 1): this rank's kept rows per expert, then the rows
// each source sends this rank's experts (expert_exchange.hpp).
template <class Real>
Vec<std::int64_t> kept_counts(const Family::Parts<Real>& p) {
  return slice(p.scratch.expert_counts, 0, p.dims.E);
}
template <class Real>
Vec<std::int64_t> received_counts(const Family::Parts<Real>& p) {
  return slice(p.scratch.expert_counts, p.dims.E, p.dims.E);
}

// Whether the micro-batch in `slot` drops out the routed experts' inputs: then each row's assignment (token,
// expert) is made beside the row (before the rows' fence) and travels with it to the rank of its expert.
template <class Real>
bool expert_inputs_dropped(const Family::Parts<Real>& p, int slot) {
  return p.dims.expert_dropout && p.lora.drops(slot);
}

// lora.dropout on the routed experts' module j (LoraExpertIndex) of block l: its mask keyed as module
// lora_router + 1 + j of the block, its rows the received assignments (kernels/lora_dropout.hpp); none
// without dropout there (lora.dropout 0, the experts not targeted, evaluation).
template <class Real>
std::optional<AssignmentRows> expert_dropout_rows(const Family::Parts<Real>& p, int slot, int l, int j,
                                                  const MoeActivations<Real>& m) {
  if (!expert_inputs_dropped(p, slot)) return std::nullopt;
  const std::uint64_t first_column = j == lora_expert_down ? std::uint64_t(p.lora.tp_rank) * p.dims.Hel : 0;
  const std::optional<LoraDropoutMask> mask = p.lora.mask(slot, l, Family::lora_router + 1 + j, first_column);
  if (!mask) return std::nullopt;
  return AssignmentRows{*mask, m.received_ids};
}

// The input of expert module j's down product or dA: x (rows, in) itself, or drop(x) drawn into the scratch.
template <class Real>
const Real* expert_lora_input(Family::Parts<Real>& p, const std::optional<AssignmentRows>& rows, const Real* x,
                              std::size_t received, int in) {
  if (!rows) return x;
  const Vec<Real> dropped = p.lora.dropped(received, in);
  lora_dropout_forward<Real>(p.space, dropped, x, in, *rows, int(received), in,
                             "meshtrain::lora_dropout::expert_forward");
  return dropped.data();
}

// dx (rows, in) += drop'(dh · A_e) of expert module j: through the mask, or straight in without one.
template <class Real>
void expert_lora_input_backward(Family::Parts<Real>& p, const std::vector<LoraAdapter<Real>>& adapters,
                                const ExchangePlan& plan, const std::optional<AssignmentRows>& rows, CVec<Real> dh,
                                Real* dx, int in) {
  const int r = p.lora.rank;
  if (!rows) return lora_grouped_input_backward<Real>(p.space, adapters, plan.groups, dh, dx, in, in, r);
  const Vec<Real> g = p.lora.dropped(plan.received, in);
  lora_grouped_input_backward<Real>(p.space, adapters, plan.groups, dh, g.data(), in, in, r, 0.0);
  lora_dropout_backward<Real>(p.space, dx, in, g, *rows, int(plan.received), in,
                              "meshtrain::lora_dropout::expert_backward");
}

// The routed experts' LoRA products over the received rows, after their frozen products: gate and up
// into gate_up (Rr, 2Hel); down's h summed over tp, its up product into `outputs` (Rr, C) on tp rank 0.
template <class Real>
void expert_lora_gate_up_forward(Family::Parts<Real>& p, int slot, int l, const ExchangePlan& plan,
                                 const MoeActivations<Real>& m) {
  const LoraParts<Real>& lora = p.lora;
  const int C = int(p.dims.C), Hel = int(p.dims.Hel), r = lora.rank;
  for (const int j : {int(lora_expert_gate), int(lora_expert_up)}) {
    const std::vector<LoraAdapter<Real>>& adapters = lora.expert_adapters(l, j);
    if (adapters.empty()) continue;
    const Vec<Real> h = lora.expert_h(slot, l, j);
    const Real* x = expert_lora_input(p, expert_dropout_rows(p, slot, l, j, m), m.received.data(), plan.received, C);
    lora_grouped_down_forward<Real>(p.space, adapters, plan.groups, h, x, C, C, r);
    lora_grouped_up_forward<Real>(p.space, adapters, plan.groups, m.gate_up.data() + (j == lora_expert_up ? Hel : 0),
                                  2 * Hel, h, lora.scale, Hel, r);
  }
}

template <class Real>
void expert_lora_down_forward(Family::Parts<Real>& p, int slot, int l, const ExchangePlan& plan,
                              const MoeActivations<Real>& m, Vec<Real> outputs) {
  const LoraParts<Real>& lora = p.lora;
  const std::vector<LoraAdapter<Real>>& adapters = lora.expert_adapters(l, lora_expert_down);
  if (adapters.empty()) return;
  const int C = int(p.dims.C), Hel = int(p.dims.Hel), r = lora.rank;
  const Vec<Real> h = lora.expert_h(slot, l, lora_expert_down);
  const Real* x =
      expert_lora_input(p, expert_dropout_rows(p, slot, l, lora_expert_down, m), m.act.data(), plan.received, Hel);
  lora_grouped_down_forward<Real>(p.space, adapters, plan.groups, h, x, Hel, Hel, r);
  p.tp.sum(span_of(slice(h, 0, plan.received * std::size_t(r))));
  if (p.tp.rank() == 0) {
    lora_grouped_up_forward<Real>(p.space, adapters, plan.groups, outputs.data(), C, h, lora.scale, C, r);
  }
}

// The backward of expert_lora_down_forward from dy = the received rows' output gradient (Rr, C), the same on
// every tp rank: dB and dh alike everywhere, dA and d act (Rr, Hel) += dh A this rank's columns.
template <class Real>
void expert_lora_down_backward(Family::Parts<Real>& p, int slot, int l, const ExchangePlan& plan,
                               const MoeActivations<Real>& m) {
  const LoraParts<Real>& lora = p.lora;
  const std::vector<LoraAdapter<Real>>& adapters = lora.expert_adapters(l, lora_expert_down);
  if (adapters.empty()) return;
  const int C = int(p.dims.C), Hel = int(p.dims.Hel), r = lora.rank;
  const Vec<Real> dh = lora.dh(plan.received);
  lora_grouped_up_backward<Real>(p.space, adapters, plan.groups, dh, p.scratch.dreceived.data(), C,
                                 lora.expert_h(slot, l, lora_expert_down), lora.scale, C, r);
  const std::optional<AssignmentRows> rows = expert_dropout_rows(p, slot, l, lora_expert_down, m);
  expert_lora_input_backward<Real>(p, adapters, plan, rows, dh, p.scratch.dexpert_act.data(), Hel);
  const Real* x = expert_lora_input(p, rows, m.act.data(), plan.received, Hel);
  lora_grouped_weight_backward<Real>(p.space, adapters, plan.groups, dh, x, Hel, Hel, r);
}

// gate's and up's backward from d gate_up (Rr, 2Hel): dB; dh, whose d received (Rr, C) += dh A is this
// rank's part (summed over tp with the block's dln); dh summed over tp, then dA.
template <class Real>
void expert_lora_gate_up_backward(Family::Parts<Real>& p, int slot, int l, const ExchangePlan& plan,
                                  const MoeActivations<Real>& m) {
  const LoraParts<Real>& lora = p.lora;
  const int C = int(p.dims.C), Hel = int(p.dims.Hel), r = lora.rank;
  for (const int j : {int(lora_expert_gate), int(lora_expert_up)}) {
    const std::vector<LoraAdapter<Real>>& adapters = lora.expert_adapters(l, j);
    if (adapters.empty()) continue;
    const Vec<Real> dh = lora.dh(plan.received);
    const Real* dy = p.scratch.dexpert_gate_up.data() + (j == lora_expert_up ? Hel : 0);
    lora_grouped_up_backward<Real>(p.space, adapters, plan.groups, dh, dy, 2 * Hel, lora.expert_h(slot, l, j),
                                   lora.scale, Hel, r);
    // dA's product reads dh summed over tp, d received's this rank's part: the input gradient first.
    const std::optional<AssignmentRows> rows = expert_dropout_rows(p, slot, l, j, m);
    expert_lora_input_backward<Real>(p, adapters, plan, rows, dh, p.scratch.dreceived.data(), C);
    p.tp.sum(span_of(dh));
    const Real* x = expert_lora_input(p, rows, m.received.data(), plan.received, C);
    lora_grouped_weight_backward<Real>(p.space, adapters, plan.groups, dh, x, C, C, r);
  }
}

}  // namespace

template <class Real>
void LlamaFamily::read_routing(Parts<Real>& m, int slot, int l) {
  using HostInts = Kokkos::View<int*, Kokkos::HostSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>;
  using HostCounts = Kokkos::View<std::int64_t*, Kokkos::HostSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>;
  HostRouting& host = m.state.host_routing[std::size_t(slot)][std::size_t(l)];
  const Vec<int> counts = m.slots[std::size_t(slot)].blocks[std::size_t(l)].moe.counts;
  Kokkos::deep_copy(m.space, HostInts(host.counts.data(), host.counts.size()), slice(counts, 0, host.counts.size()));
  const ExpertExchange& exchange = m.state.exchange;
  if (exchange.moves()) {
    const Vec<std::int64_t> received = received_counts(m);
    exchange.exchange_counts(kept_counts(m).data(), received.data());
    std::vector<std::int64_t>& into = host.exchange.received_counts;
    Kokkos::deep_copy(m.space, HostCounts(into.data(), into.size()), received);
  }
  host_fence(m.space, "MoE: routing counts read to size the grouped products and the exchange");
  m.state.exchange.plan_exchange(host.exchange, host.offsets(), m.dims.C);
}

template <class Real>
void LlamaFamily::moe_forward(Parts<Real>& p, int slot, int l, const Block<Real>& s, Vec<Real> proj, bool to_output) {
  using Accum = accum_t<Real>;
  const Dims& d = p.dims;
  const int N = int(d.N), C = int(d.C), E = int(d.E), k = int(d.k), Hel = int(d.Hel), Hsl = int(d.Hsl);
  const auto& w = p.params.blocks[std::size_t(l)];
  const MoeActivations<Real>& m = s.moe;
  const ExpertExchange& exchange = p.state.exchange;
  const ExecSpace& space = p.space;
  const Vec<Accum> logits = p.scratch.router_logits;
  router_logits_forward<Real>(space, logits, s.ln2, w.router, N, C, E);
  if (p.lora.adapts(l, lora_router)) {
    const LoraAdapter<Real>& a = p.lora.blocks[std::size_t(l)][lora_router];
    const Vec<Real> h = p.lora.h(slot, l, lora_router);
    lora_dropped_down_forward<Real>(space, p.lora, h, a, p.lora.mask(slot, l, lora_router, 0), s.ln2, C);
    lora_router_up_forward<Real>(space, logits, h, a.B, p.lora.scale, N, E, p.lora.rank);
  }
  router_forward<Accum>(space, m.probs, m.expert, m.gate, m.lse, logits, N, E, k, p.model().normalize_gates);
  const Vec<int> routed = slice(m.counts, 0, d.E), offsets = slice(m.counts, d.E, d.E + 1);
  // Padded, every size is fixed before the routing: no counts travel and none is read.
  const bool counts_travel = exchange.moves() && !d.padded;
  const Vec<std::int64_t> kept = counts_travel ? kept_counts(p) : Vec<std::int64_t>();
  moe_assign(space, m.slot, m.row_token, routed, offsets, m.expert, N, E, k, d.capacity, d.padded, kept);
  // The losses read the micro-batch's routed counts (kernels/moe_router.hpp): under context parallelism the
  // group's sum, one all-reduce of E ints per pass. The capacity stays this rank's (model.capacity_factor).
  if (d.cp > 1) {
    Kokkos::deep_copy(space, m.batch_routed, routed);
    p.cp->allreduce_sum(m.batch_routed.data(), d.E);
  }
  if (!d.padded) read_routing(p, slot, l);
  const HostRouting& host = p.state.host_routing[std::size_t(slot)][std::size_t(l)];
  const ExchangePlan& plan = host.exchange;
  const int R = host.rows(), Rr = int(plan.received);
  moe_permute(space, m.xs, CVec<Real>(s.ln2), CVec<int>(m.row_token), R, C);
  const bool dropped = expert_inputs_dropped(p, slot);
  if (dropped) lora_assignment_ids(space, m.routed_ids, m.slot, m.expert, p.lora.tokens(slot), N, k);
  exchange.dispatch(plan, m.xs.data(), m.received.data());
  if (dropped) exchange.dispatch_ids(plan, m.routed_ids.data(), m.received_ids.data());
  // This rank's experts over the rows they received; expert e's [gate | up | down] at e · stride:
  // gate|up is one [2Hel, C] matrix, down follows it. At ep 1 the outputs are ys in place.
  const long stride = 3L * Hel * C;
  const Vec<Real> outputs = exchange.moves() ? p.scratch.dreceived : m.ys;
  grouped_linear_forward<Real>(space, m.gate_up, m.received, w.experts.data(), stride, plan.groups, C, 2 * Hel);
  expert_lora_gate_up_forward(p, slot, l, plan, m);
  swiglu_forward(space, m.act, m.gate_up, Rr, Hel);
  grouped_linear_forward<Real>(space, outputs, m.act, w.experts.data() + 2L * Hel * C, stride, plan.groups, Hel, C);
  expert_lora_down_forward(p, slot, l, plan, m, outputs);
  exchange.give_back(plan, outputs.data(), m.ys.data());
  if (Hsl > 0) {
    linear_forward<Real>(space, s.gate_up, s.ln2, w.gate_up, N, C, 2 * Hsl);
    lora_column_forward<Real>(space, p.lora, slot, l, lora_gate, s.ln2, C, s.gate_up.data(), 2 * Hsl, Hsl);
    lora_column_forward<Real>(space, p.lora, slot, l, lora_up, s.ln2, C, s.gate_up.data() + Hsl, 2 * Hsl, Hsl);
    swiglu_forward(space, s.swiglu, s.gate_up, N, Hsl);
    if (to_output) linear_forward<Real>(space, proj, s.swiglu, w.down, N, Hsl, C);
    // h also under recomputation, which skips the output: backward reads it.
    lora_row_forward<Real>(space, p.tp, p.lora, slot, l, lora_down, s.swiglu, Hsl, proj.data(), C, to_output);
  }
  if (!to_output) return;  // recomputation: backward has what it reads
  moe_combine(space, proj, CVec<Real>(m.ys), CVec<int>(m.slot), CVec<Accum>(m.gate), N, k, C, Hsl > 0);
  add_router_statistics<Accum>(space, CVec<Accum>(m.probs), CVec<Accum>(m.lse), CVec<int>(m.counts),
                               CVec<int>(batch_routed(d, m)), N, batch_tokens(d), E, k, p.router_sums,
                               router_block(p, l));
}

template <class Real>
int LlamaFamily::router_block(const Parts<Real>& m, int l) {
  const std::vector<int>& blocks = m.router_statistics.blocks;
  return int(std::find(blocks.begin(), blocks.end(), m.layout.first_layer() + l) - blocks.begin());
}

// From dL/d proj in `dproj`: leaves this rank's part of dL/d ln2 in the scratch's dln and the router
// logits' gradient in its router_logits (router_input_backward's input).
template <class Real>
void LlamaFamily::moe_backward(Parts<Real>& p, int slot, int l, CVec<Real> dproj) {
  using Accum = accum_t<Real>;
  const Dims& dm = p.dims;
  const int N = int(dm.N), C = int(dm.C), E = int(dm.E), k = int(dm.k), Hel = int(dm.Hel), Hsl = int(dm.Hsl);
  const auto& s = p.slots[std::size_t(slot)].blocks[std::size_t(l)];
  const MoeActivations<Real>& m = s.moe;
  const auto& w = p.params.blocks[std::size_t(l)];
  const auto& dw = p.dparams.blocks[std::size_t(l)];
  const auto& d = p.scratch;
  const ExpertExchange& exchange = p.state.exchange;
  const ExecSpace& space = p.space;
  const ExchangePlan& plan = p.state.host_routing[std::size_t(slot)][std::size_t(l)].exchange;
  const int Rr = int(plan.received);
  const long stride = 3L * Hel * C, down = 2L * Hel * C;
  // The combine: each row's gradient, and the gate weights' (summed over the tensor-parallel parts of ys).
  moe_combine_backward(space, d.drows, d.dgate, dproj, CVec<Real>(m.ys), CVec<int>(m.slot), CVec<Accum>(m.gate), N, k,
                       C);
  if (dm.padded) moe_zero_padding(space, d.drows, CVec<int>(m.row_token), int(dm.R), C);
  p.tp.sum(span_of(d.dgate));
  // The experts, down then gate|up, on the ranks that hold them; dreceived then holds the received
  // rows' input gradient, which travels back into drows.
  exchange.dispatch(plan, d.drows.data(), d.dreceived.data());
  // LoRA's frozen experts have no weight gradients (null: grouped_linear_backward skips them).
  Real* const dexperts = dw.experts.extent(0) > 0 ? dw.experts.data() : nullptr;
  grouped_linear_backward<Real>(space, d.dexpert_act, dexperts ? dexperts + down : nullptr, stride, d.dreceived, m.act,
                                w.experts.data() + down, plan.groups, Hel, C);
  expert_lora_down_backward(p, slot, l, plan, m);
  swiglu_backward(space, d.dexpert_gate_up, d.dexpert_act, m.gate_up, Rr, Hel);
  grouped_linear_backward<Real>(space, d.dreceived, dexperts, stride, d.dexpert_gate_up, m.received, w.experts.data(),
                                plan.groups, C, 2 * Hel);
  expert_lora_gate_up_backward(p, slot, l, plan, m);
  exchange.give_back(plan, d.dreceived.data(), d.drows.data());
  if (Hsl > 0) {
    linear_backward<Real>(space, d.dswiglu, dw.down, dproj, s.swiglu, w.down, N, Hsl, C);
    lora_row_backward<Real>(p.later, space, p.lora, slot, l, lora_down, s.swiglu, Hsl, dproj.data(), C,
                            d.dswiglu.data());
    swiglu_backward(space, d.dgate_up, d.dswiglu, s.gate_up, N, Hsl);
    linear_backward<Real>(space, d.dln, dw.gate_up, d.dgate_up, s.ln2, w.gate_up, N, C, 2 * Hsl);
    const Real* dgate_up = d.dgate_up.data();
    lora_column_backward<Real>(p.later, space, p.tp, p.lora, slot, l, lora_gate, s.ln2, C, dgate_up, 2 * Hsl, Hsl,
                               d.dln.data());
    lora_column_backward<Real>(p.later, space, p.tp, p.lora, slot, l, lora_up, s.ln2, C, dgate_up + Hsl, 2 * Hsl, Hsl,
                               d.dln.data());
  }
  moe_permute_backward(space, d.dln, CVec<Real>(d.drows), CVec<int>(m.slot), N, k, C, Hsl > 0);
  // The router: the gate weights' gradient, the load-balancing loss and the z-loss, each weighted
  // as the micro-batch's mean cross-entropy (LanguageModel::aux_weight).
  const Accum per_pass = p.aux_weight;
  router_backward<Accum>(space, d.router_logits, CVec<Accum>(d.dgate), CVec<Accum>(m.probs), CVec<int>(m.expert),
                         CVec<Accum>(m.lse), CVec<int>(batch_routed(dm, m)), Accum(p.model().aux_loss_coef) * per_pass,
                         Accum(p.model().z_loss_coef) * per_pass, N, batch_tokens(dm), E, k, p.model().normalize_gates);
}

// dW_r += dlogitsᵀ · ln2 and `dln` += dlogits · W_r, after the tensor-parallel sum of dln: the router
// is replicated, so every rank makes the same whole contribution (and so does its LoRA adapter) and
// adds it once. Under sequence parallelism dln is this rank's rows: the contribution is made in the
// scratch's dln, free after the scatter, and this rank's block of it added.
template <class Real>
void LlamaFamily::router_input_backward(Parts<Real>& m, int slot, int l, Vec<Real> dln) {
  const int N = int(m.dims.N), C = int(m.dims.C), E = int(m.dims.E);
  const auto& s = m.slots[std::size_t(slot)].blocks[std::size_t(l)];
  const auto& d = m.scratch;
  const bool sequence_parallel = m.sequence_parallel();
  const Vec<Real> whole = sequence_parallel ? d.dln : dln;
  if (sequence_parallel) Kokkos::deep_copy(m.space, whole, Real(0));
  router_logits_backward<Real>(m.space, whole, m.dparams.blocks[std::size_t(l)].router, d.router_logits, s.ln2,
                               m.params.blocks[std::size_t(l)].router, N, C, E);
  if (m.lora.adapts(l, lora_router)) {
    const LoraParts<Real>& lora = m.lora;
    const LoraAdapter<Real>& a = lora.blocks[std::size_t(l)][lora_router];
    const std::optional<LoraDropoutMask> mask = lora.mask(slot, l, lora_router, 0);
    const Vec<Real> dh = lora.dh();
    lora_router_up_backward<Real>(m.space, dh, a.dB, d.router_logits, lora.h(slot, l, lora_router), a.B, lora.scale, N,
                                  E, lora.rank);
    lora_dropped_input_backward<Real>(m.space, lora, whole.data(), dh, a, mask, C);
    lora_dropped_weight_backward<Real>(m.space, lora, dh, a, mask, s.ln2, C);
  }
  if (!sequence_parallel) return;
  const std::size_t rows = m.dims.Nl * std::size_t(C);
  residual_forward<Real>(m.space, dln, dln, slice(whole, std::size_t(m.tp.rank()) * rows, rows), long(rows));
}

#define MESHTRAIN_LLAMA_MOE(Real)                                                                                    \
  template void LlamaFamily::read_routing<Real>(LlamaFamily::Parts<Real>&, int, int);                                \
  template void LlamaFamily::moe_forward<Real>(LlamaFamily::Parts<Real>&, int, int, const LlamaFamily::Block<Real>&, \
                                               Vec<Real>, bool);                                                     \
  template int LlamaFamily::router_block<Real>(const LlamaFamily::Parts<Real>&, int);                                \
  template void LlamaFamily::moe_backward<Real>(LlamaFamily::Parts<Real>&, int, int, CVec<Real>);                    \
  template void LlamaFamily::router_input_backward<Real>(LlamaFamily::Parts<Real>&, int, int, Vec<Real>);
MESHTRAIN_LLAMA_MOE(float)
MESHTRAIN_LLAMA_MOE(double)
MESHTRAIN_LLAMA_MOE(bf16)
MESHTRAIN_LLAMA_MOE(fp16)
#undef MESHTRAIN_LLAMA_MOE

}  // namespace meshtrain
