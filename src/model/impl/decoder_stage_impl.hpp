// DecoderStage's members (model/decoder_stage.hpp), included by each family's source file, which
// instantiates the stage for its family and the four element types. Internal to model/.
#pragma once

#include "core/errors.hpp"
#include "kernels/encoder.hpp"
#include "kernels/fused_attention.hpp"
#include "kernels/matmul.hpp"
#include "kernels/moe_router.hpp"
#include "kernels/residual.hpp"
#include "model/decoder_stage.hpp"
#include "model/impl/backward_sweep.hpp"
#include "model/impl/carver.hpp"
#include "model/impl/deferrable_backward.hpp"
#include "model/impl/output_loss.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <stdexcept>
#include <string>
#include <vector>

namespace meshtrain {

namespace decoder_detail {

// The expert-parallel group's size and this rank's place in it (1 and 0 without one).
inline int expert_ranks(Comm* ep) { return ep != nullptr && ep->size() > 1 ? ep->size() : 1; }
inline int expert_rank(Comm* ep) { return expert_ranks(ep) > 1 ? ep->rank() : 0; }

// The context ring's shape for a stage of `batch` sequences under tp: whole sequences, this rank's heads.
inline ContextRingShape ring_shape(const ModelConfig& m, int batch, int tp) {
  return {batch, m.seq_len, m.heads / tp, m.kv_head_count() / tp, m.head_size()};
}

// The table's rows this rank holds, as the embedding kernels take them.
inline VocabRange rows_of(const TensorInfo& table, bool with_positions) {
  return {int(table.piece.offset[0]), int(table.piece.block[0]), with_positions};
}

// What a rank holds once, whatever its slots: backward's scratch and the block set shared under
// recomputation.
template <class Real, class Family>
struct RankScratch {
  typename Family::template Scratch<Real> backward;
  typename Family::template Block<Real> shared;  // empty under Recompute::none
  Vec<Real> norm_rows, proj_rows, norm_grads;    // sequence parallelism's (DecoderParts)
  typename ContextRing<Real>::Buffers ring;      // context parallelism's (empty without)
};

// The most norm parameters of C elements one backward pass sums at once: a block's two LayerNorms.
constexpr std::size_t norm_grads_at_once = 4;

template <class Real, class Family>
RankScratch<Real, Family> carve_rank_scratch(carving::Carver<Real>& c, const typename Family::Dims& d,
                                             Recompute recompute, const ModelConfig& m, int tp) {
  RankScratch<Real, Family> r;
  // The ring runs within attention, forward or backward, never within an MLP's backward: its buffers share
  // the elements of the MLP's hidden gradients.
  r.backward = Family::template carve_scratch<Real>(c, d, [&](carving::Carver<Real>& over) {
    if (m.context_parallel > 1) {
      r.ring = ContextRing<Real>::carve(over, ring_shape(m, int(d.B), tp), m.context_parallel);
    }
  });
  if (recompute != Recompute::none) r.shared = Family::carve_block(c, d, carving::shared_fields(recompute), -1);
  if (d.Nl != d.N) {
    r.norm_rows = c.take(d.Nl * d.C);
    r.proj_rows = c.take(d.Nl * d.C);
    r.norm_grads = c.take(norm_grads_at_once * d.C);
  }
  return r;
}

// One micro-batch's activations; its blocks keep what `recompute` says and share the rest.
template <class Real, class Family>
SlotActivations<Real, Family> carve_slot(carving::Carver<Real>& c, const typename Family::Dims& d, int layers,
                                         bool head, Recompute recompute,
                                         const typename Family::template Block<Real>& shared) {
  using A = accum_t<Real>;
  const std::size_t N = d.N, C = d.C, Nl = d.Nl;
  SlotActivations<Real, Family> a;
  a.encoded = c.take(Nl * C);
  for (int l = 0; l < layers; ++l) {
    a.blocks.push_back(Family::carve_block(c, d, carving::kept_fields(recompute), l, shared));
  }
  a.proj = c.take(N * C);
  if (!head) return a;
  a.norm.out = c.take(N * C);
  if (Family::norm_keeps_mean) a.norm.mean = c.template take_as<A>(Nl);
  a.norm.rstd = c.template take_as<A>(Nl);
  a.logits = c.take(N * d.Vl);
  a.losses = c.template take_as<A>(N);
  a.row_max = c.template take_as<A>(N);
  a.partials = c.template take_as<A>(2 * N);
  return a;
}

template <class Real, class Family>
std::vector<SlotActivations<Real, Family>> carve_slots(carving::Carver<Real>& c, const typename Family::Dims& d,
                                                       const ParameterLayout& layout, int slots, Recompute recompute,
                                                       const typename Family::template Block<Real>& shared) {
  std::vector<SlotActivations<Real, Family>> sets;
  for (int k = 0; k < slots; ++k) {
    sets.push_back(carve_slot<Real, Family>(c, d, layout.stage_layers(), layout.place().last(), recompute, shared));
  }
  return sets;
}

// What one deferred backward of the stage holds (DeferredWeightGradients): its blocks', the final norm's output
// gradient on the last stage, the embedding's on the first (when it trains).
// Under LoRA the adapters' alone: the base is frozen, its weight gradients skipped.
template <class Real, class Family>
HeldElements held_elements(const typename Family::Dims& d, const ParameterLayout& layout, Recompute recompute,
                           int batch) {
  const ModelConfig& model = layout.model();
  if (model.lora.enabled()) {
    return lora_held_elements(model, batch, layout.first_layer(), layout.stage_layers(), layout.place().last(),
                              layout.tp(), recompute);
  }
  HeldElements n;
  for (int l = 0; l < layout.stage_layers(); ++l) n += Family::held_per_block(d, l, recompute);
  if (layout.place().last()) n.values += d.Nl * d.C;
  if (layout.place().first()) n.values += d.N * d.C;
  return n;
}

}  // namespace decoder_detail

template <class Real, class Family>
ActivationSizes decoder_activation_elements(const ModelConfig& model, int batch, int tp, StagePlace place,
                                            ActivationSlots slots, Recompute recompute, int ep) {
  const ParameterLayout layout(model, tp, 0, place);
  const typename Family::Dims dims = Family::dims(model, batch, layout, ep);
  carving::Carver<Real> kept(nullptr), scratch(nullptr);
  const auto shared = decoder_detail::carve_rank_scratch<Real, Family>(scratch, dims, recompute, model, tp).shared;
  decoder_detail::carve_slots<Real, Family>(kept, dims, layout, slots.kept, recompute, shared);
  std::size_t held = 0;
  if (slots.held > 0) {
    const HeldElements each = decoder_detail::held_elements<Real, Family>(dims, layout, recompute, batch);
    held = std::size_t(slots.held) * (each.values + each.statistics * sizeof(accum_t<Real>) / sizeof(Real));
  }
  const ActivationSizes lora = lora_activation_elements(model, batch, layout.first_layer(), layout.stage_layers(),
                                                        slots.kept, place.last(), tp, ep);
  return {kept.used() + held + lora.kept, scratch.used() + lora.scratch};
}

template <class Real, class Family>
DecoderParts<Real, Family>::DecoderParts(const ExecSpace& exec, const ModelConfig& config, int batch_size,
                                         Comm* tp_comm, StagePlace place, ActivationSlots slot_count, Recompute mode,
                                         ParameterStore<Real>* parameter_store, Comm* ep_comm, Comm* cp_comm)
    : space(exec),
      tp(tp_comm),
      copy_to(tp),
      reduce_from(tp),
      gather_to(tp),
      scatter_from(tp),
      vocab_statistics(tp),
      store(parameter_store),
      layout(parameter_store
                 ? (parameter_store->frozen_layout() ? *parameter_store->frozen_layout() : parameter_store->layout())
                 : ParameterLayout(config, tp.size(), tp.rank(), place, 1, decoder_detail::expert_ranks(ep_comm),
                                   decoder_detail::expert_rank(ep_comm))),
      dims(Family::dims(config, batch_size, layout, decoder_detail::expert_ranks(ep_comm))),
      batch(batch_size),
      recompute(mode),
      weights(fmt::format("meshtrain::{}::weights", Family::name), parameter_store ? 0 : layout.total()),
      // LoRA's base is frozen: no gradients of its own.
      grads(fmt::format("meshtrain::{}::grads", Family::name),
            parameter_store || config.lora.enabled() ? 0 : layout.total()),
      lora(config, layout, batch_size, slot_count.kept, parameter_store),
      state(layout, dims, ep_comm, slot_count.kept, router_statistics) {
  if (config.lora.enabled() && parameter_store && !parameter_store->frozen_layout()) {
    throw std::logic_error("a LoRA stage's parameter store must hold the frozen base");
  }
  if (config.arch != Family::arch) {
    throw std::logic_error(
        fmt::format("a {} stage built for a model whose arch is {}", Family::name, name_of(config.arch)));
  }
  if ((cp_comm != nullptr ? cp_comm->size() : 1) != config.context_parallel) {
    throw std::logic_error(fmt::format("the {} stage's context-parallel group has {} ranks, its model {}", Family::name,
                                       cp_comm != nullptr ? cp_comm->size() : 1, config.context_parallel));
  }
  if (layout.ep() != decoder_detail::expert_ranks(ep_comm) ||
      layout.ep_rank() != decoder_detail::expert_rank(ep_comm)) {
    throw std::logic_error(fmt::format(
        "the {} stage's expert-parallel group is not the one its parameter layout was made for", Family::name));
  }
  const Vec<Real> w = slice(weights, 0, weights.extent(0)), g = slice(grads, 0, grads.extent(0));
  const bool frozen = lora.active();
  params = Family::template bind<Real>(TensorViews<Real>(layout, [&](const TensorInfo& t) {
    if (!store) return w.data() + t.offset;
    return frozen ? store->frozen_weight(t) : store->weight(t);
  }));
  dparams = Family::template bind<Real>(TensorViews<Real>(layout, [&](const TensorInfo& t) {
    if (frozen) return lora.frozen_grad(t);
    return store ? store->grad(t) : g.data() + t.offset;
  }));
  using carving::Carver;
  const auto rank = carving::allocate_and_carve<Real, decoder_detail::RankScratch<Real, Family>>(
      scratch_buffer, fmt::format("meshtrain::{}::backward_scratch", Family::name).c_str(), [&](Carver<Real>& c) {
        return decoder_detail::carve_rank_scratch<Real, Family>(c, dims, mode, config, tp.size());
      });
  scratch = rank.backward;
  norm_rows = rank.norm_rows;
  proj_rows = rank.proj_rows;
  norm_grads = rank.norm_grads;
  if (config.context_parallel > 1) {
    cp = cp_comm;
    ring.emplace(space, cp_comm, decoder_detail::ring_shape(config, batch_size, tp.size()), rank.ring);
    chunks = ring->chunks_of(cp_comm->rank());
    lora.chunks = chunks;
  }
  slots = carving::allocate_and_carve<Real, std::vector<SlotActivations<Real, Family>>>(
      activation_buffer, fmt::format("meshtrain::{}::activations", Family::name).c_str(), [&](Carver<Real>& c) {
        return decoder_detail::carve_slots<Real, Family>(c, dims, layout, slot_count.kept, mode, rank.shared);
      });
  if (slot_count.held > 0) {
    // What a backward overwrites before its deferred weight gradients run: the rank's scratch and the adapters'
    // dh and dropout scratch. What nobody reads: the frozen base's 1-D gradients (and under sequence
    // parallelism the norms' partial sums bound for them).
    std::vector<CVec<Real>> overwritten{slice(scratch_buffer, 0, scratch_buffer.extent(0))}, discarded;
    if (lora.active()) {
      overwritten.push_back(slice(lora.activations, lora.kept, lora.activations.extent(0) - lora.kept));
      discarded = {slice(lora.discard, 0, lora.discard.extent(0)), norm_grads};
    }
    later = DeferredWeightGradients<Real>(Family::name, slot_count.held,
                                          decoder_detail::held_elements<Real, Family>(dims, layout, mode, batch_size),
                                          slot_count.kept, std::move(overwritten), std::move(discarded));
  }
  router_sums = Buffer<double>("meshtrain::moe_router::sums",
                               router_sums_per_block(router_statistics.experts) * router_statistics.blocks.size());
  documents.assign(std::size_t(slot_count.kept), AttentionSegments{});
}

template <class Real, class Family>
void DecoderParts<Real, Family>::fused_attention(int slot, Vec<Real> out, Vec<Accum> lse, CVec<Real> qkv, int NH,
                                                 int KVH, int hs, Vec<Accum> workspace) {
  const AttentionSegments& docs = documents[std::size_t(slot)];
  if (ring) return ring->forward(out, lse, qkv, docs);
  fused_attention_forward(space, out, lse, qkv, batch, int(dims.T), NH, KVH, hs, docs, workspace);
}

template <class Real, class Family>
void DecoderParts<Real, Family>::fused_attention_backward(int slot, Vec<Real> dqkv, CVec<Real> dout, CVec<Real> qkv,
                                                          CVec<Real> out, CVec<Accum> lse, int NH, int KVH, int hs,
                                                          Vec<Accum> workspace) {
  const AttentionSegments& docs = documents[std::size_t(slot)];
  if (ring) return ring->backward(dqkv, dout, qkv, out, lse, docs);
  meshtrain::fused_attention_backward(space, dqkv, dout, qkv, out, lse, batch, int(dims.T), NH, KVH, hs, docs,
                                      workspace);
}

template <class Real, class Family>
void DecoderParts<Real, Family>::clear_norm_grads() const {
  Kokkos::deep_copy(space, norm_grads, Real(0));
}

template <class Real, class Family>
void DecoderParts<Real, Family>::add_norm_grads(std::initializer_list<Vec<Real>> into) const {
  const std::size_t C = dims.C;
  tp.sum(span_of(slice(norm_grads, 0, into.size() * C)));
  int i = 0;
  for (const Vec<Real>& g : into) {
    residual_forward<Real>(space, g, g, norm_grad(i++), long(C));
  }
}

template <class Real, class Family>
DecoderStage<Real, Family>::DecoderStage(const ExecSpace& space, const ModelConfig& model, int batch, Comm* tp,
                                         StagePlace place, ActivationSlots slots, Recompute recompute,
                                         ParameterStore<Real>* store, Comm* ep, Comm* cp)
    : m_(space, model, batch, tp, place, slots, recompute, store, ep, cp) {
  clear_router_statistics();
}

template <class Real, class Family>
void DecoderStage<Real, Family>::zero_grads() {
  Kokkos::deep_copy(m_.space, m_.grads, Real(0));
  if (m_.lora.grads.extent(0) > 0) Kokkos::deep_copy(m_.space, m_.lora.grads, Real(0));
}

template <class Real, class Family>
void DecoderStage<Real, Family>::set_documents(int slot, const AttentionSegments& documents) {
  if (documents.docs > 0 && !m_.dims.fused_attention) {
    throw std::invalid_argument(
        "packed sequences need the fused attention's document mask: model.attention = materialized has none");
  }
  m_.documents[std::size_t(slot)] = documents;
}

template <class Real, class Family>
void DecoderStage<Real, Family>::stage_forward(int slot, CVec<int> inputs) {
  const auto& d = m_.dims;
  const int N = int(d.N), C = int(d.C), Vl = int(d.Vl);
  auto& a = m_.slots[std::size_t(slot)];
  const auto& p = m_.params;
  if (m_.layout.place().first()) {
    // Vocabulary-parallel lookup: each rank its rows, zeros for the others, summed over the group;
    // a position table is added on tp rank 0 only, so that the sum adds it once.
    // Under sequence parallelism the lookup fills every row (in proj, free until the first block) and
    // this rank keeps its block of the sum.
    const bool positions = p.positions.extent(0) > 0 && m_.layout.tp_rank() == 0;
    const VocabRange rows = decoder_detail::rows_of(m_.layout.lookup_table(), positions);
    const Vec<Real> lookup = m_.sequence_parallel() ? a.proj : a.encoded;
    encoder_forward(m_.space, lookup, inputs, p.embed, p.positions, int(d.B), int(d.T), C, rows,
                    m_.documents[std::size_t(slot)], m_.chunks);
    m_.leave_region(lookup, a.encoded);
  }
  for (int l = 0; l < m_.layout.stage_layers(); ++l) {
    need_block(l);
    Family::block_forward(m_, slot, l, m_.block_input(slot, l), a.blocks[std::size_t(l)], a.proj, true);
  }
  resident_ = {slot, m_.layout.stage_layers() - 1};
  if (!m_.router_statistics.empty()) ++m_.router_statistics.passes;
  if (!m_.layout.place().last()) return;
  Family::final_norm_forward(m_, a.norm, stage_output(slot));
  // Output head, column-parallel by vocabulary rows: logits = norm · outputᵀ, this rank's columns.
  m_.enter_region(m_.final_norm_rows(a.norm), a.norm.out);
  linear_forward<Real>(m_.space, a.logits, a.norm.out, p.output, N, C, Vl);
  if (m_.lora.active()) {
    lora_column_forward<Real>(m_.space, m_.lora, m_.lora.head, m_.lora.head_h(slot), a.norm.out, C, a.logits.data(), Vl,
                              Vl, m_.lora.head_mask(slot));
  }
}

template <class Real, class Family>
void DecoderStage<Real, Family>::recompute_block(int slot, int l) {
  if (m_.recompute == Recompute::none || resident_ == std::pair{slot, l}) return;
  const auto& s = m_.slots[std::size_t(slot)].blocks[std::size_t(l)];
  if (m_.recompute == Recompute::selective) {
    // Fused attention keeps no probabilities: its backward recomputes them tile by tile anyway.
    if (!m_.dims.fused_attention) Family::recompute_attention(m_, s);
  } else {
    Family::block_forward(m_, slot, l, m_.block_input(slot, l), s, m_.slots[std::size_t(slot)].proj, false);
  }
  resident_ = {slot, l};
}

template <class Real, class Family>
CVec<Real> DecoderStage<Real, Family>::forward_logits(CVec<int> inputs) {
  m_.lora.draws.at(0) = std::nullopt;  // inference: no dropout
  stage_forward(0, inputs);
  host_fence(m_.space, "inference: the logits for the host");
  return m_.slots[0].logits;
}

template <class Real, class Family>
void DecoderStage<Real, Family>::stage_loss(int slot, CVec<int> targets, Accum grad_scale, const LossSum& sum) {
  const auto& a = m_.slots[std::size_t(slot)];
  const output_loss::HeadBuffers<Real> head{a.logits, a.losses, a.row_max, a.partials};
  output_loss::mean_cross_entropy(m_.space, m_.tp.active(), m_.vocab_statistics, head, targets, int(m_.dims.N),
                                  m_.layout, m_.layout.output_table(), grad_scale, sum);
}

template <class Real, class Family>
void DecoderStage<Real, Family>::stage_backward(int slot, CVec<int> inputs, const ReadyFrom& ready_from) {
  m_.aux_weight = this->aux_weight();
  tokens_ = inputs;
  backward_sweep(
      m_.trainable(), [&](std::size_t offset) { m_.later.report(offset, ready_from); }, [&] { head_backward(slot); },
      [&](int l) {
        need_block(l);
        recompute_block(slot, l);
        Family::block_backward(m_, slot, l, m_.block_input(slot, l));
      },
      [&] {
        const auto& d = m_.dims;
        const auto& s = m_.scratch;
        // Every rank adds the whole position gradient: dresidual is the same on every rank.
        const VocabRange rows = decoder_detail::rows_of(m_.layout.lookup_table(), m_.dparams.positions.extent(0) > 0);
        if (m_.dparams.embed.extent(0) == 0) return;  // frozen (LoRA): nothing to accumulate
        const Vec<Real> dlookup = m_.leave_region_backward(s.dresidual, s.dln);
        // The tokens are read when the work runs: a deferred one's are stage_backward_weight's.
        m_.later.add([this, slot, rows, s, B = int(d.B), T = int(d.T), C = int(d.C),
                      dlookup = m_.later.hold(m_.space, dlookup)] {
          encoder_backward(m_.space, m_.dparams.embed, m_.dparams.positions, s.column_partials, s.token_order, dlookup,
                           tokens_, B, T, C, m_.model().vocab, rows, m_.documents[std::size_t(slot)], m_.chunks);
        });
      });
}

template <class Real, class Family>
void DecoderStage<Real, Family>::stage_backward_input(int slot, CVec<int> inputs) {
  m_.later.begin(slot);
  stage_backward(slot, inputs);
  m_.later.end();
}

template <class Real, class Family>
void DecoderStage<Real, Family>::stage_backward_weight(int slot, CVec<int> inputs, const ReadyFrom& ready_from) {
  tokens_ = inputs;
  m_.later.replay(slot, ready_from);
}

// Output head: dnorm = dlogits · output (summed over the vocabulary shards), doutput += dlogitsᵀ ·
// norm; then the final norm, leaving dL/d(stage output) in the scratch's dresidual.
template <class Real, class Family>
void DecoderStage<Real, Family>::head_backward(int slot) {
  const auto& d = m_.dims;
  const int N = int(d.N), C = int(d.C), Vl = int(d.Vl);
  const auto& a = m_.slots[std::size_t(slot)];
  const auto& s = m_.scratch;
  deferrable::linear_backward<Real>(m_.later, m_.space, s.dln, m_.dparams.output, a.logits, a.norm.out,
                                    m_.params.output, N, C, Vl);
  if (m_.lora.active()) {
    lora_column_backward<Real>(m_.later, m_.space, m_.tp, m_.lora, m_.lora.head, m_.lora.head_h(slot), a.norm.out, C,
                               a.logits.data(), Vl, Vl, s.dln.data(), m_.lora.head_mask(slot));
  }
  m_.enter_region_backward(s.dln, m_.norm_rows);
  Kokkos::deep_copy(m_.space, s.dresidual, Real(0));
  Family::final_norm_backward(m_, a.norm, stage_output(slot));
}

template <class Real, class Family>
void DecoderStage<Real, Family>::clear_router_statistics() {
  m_.router_statistics.passes = 0;
  // A kernel, not a deep_copy fill: the step's count of copies stays at its reads.
  const Buffer<double> sums = m_.router_sums;
  if (sums.extent(0) == 0) return;
  Kokkos::parallel_for(
      "meshtrain::moe_router::clear_losses", Kokkos::RangePolicy<ExecSpace>(m_.space, 0, long(sums.extent(0))),
      KOKKOS_LAMBDA(long i) { sums(i) = 0; });
}

// The routers' sums read from the device: one copy per call.
template <class Real, class Family>
RouterStatistics DecoderStage<Real, Family>::router_statistics() const {
  RouterStatistics r = m_.router_statistics;
  const std::size_t blocks = r.blocks.size(), E = std::size_t(r.experts), per_block = router_sums_per_block(r.experts);
  r.aux_loss.assign(blocks, 0.0);
  r.z_loss.assign(blocks, 0.0);
  r.routed.assign(blocks * E, 0.0);
  r.kept.assign(blocks * E, 0.0);
  if (blocks == 0) return r;
  const auto sums = Kokkos::create_mirror_view(Kokkos::HostSpace{}, m_.router_sums);
  Kokkos::deep_copy(m_.space, sums, m_.router_sums);
  host_fence(m_.space, "MoE: the router statistics read for the metrics");
  for (std::size_t b = 0; b < blocks; ++b) {
    const std::size_t at = b * per_block;
    r.aux_loss[b] = sums(at);
    r.z_loss[b] = sums(at + 1);
    for (std::size_t e = 0; e < E; ++e) {
      r.routed[b * E + e] = sums(at + 2 + e);
      r.kept[b * E + e] = sums(at + 2 + E + e);
    }
  }
  return r;
}

// The stage, its parts and its sizes for a family, for the four element types (in the family's source file).
#define MESHTRAIN_DECODER_STAGE(Family)                                                                          \
  template struct DecoderParts<float, Family>;                                                                   \
  template struct DecoderParts<double, Family>;                                                                  \
  template struct DecoderParts<bf16, Family>;                                                                    \
  template struct DecoderParts<fp16, Family>;                                                                    \
  template class DecoderStage<float, Family>;                                                                    \
  template class DecoderStage<double, Family>;                                                                   \
  template class DecoderStage<bf16, Family>;                                                                     \
  template class DecoderStage<fp16, Family>;                                                                     \
  template ActivationSizes decoder_activation_elements<float, Family>(const ModelConfig&, int, int, StagePlace,  \
                                                                      ActivationSlots, Recompute, int);          \
  template ActivationSizes decoder_activation_elements<double, Family>(const ModelConfig&, int, int, StagePlace, \
                                                                       ActivationSlots, Recompute, int);         \
  template ActivationSizes decoder_activation_elements<bf16, Family>(const ModelConfig&, int, int, StagePlace,   \
                                                                     ActivationSlots, Recompute, int);           \
  template ActivationSizes decoder_activation_elements<fp16, Family>(const ModelConfig&, int, int, StagePlace,   \
                                                                     ActivationSlots, Recompute, int);

}  // namespace meshtrain
