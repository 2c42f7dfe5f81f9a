// What a decoder stage holds for LoRA (model/lora_adapters.hpp) and the adapted products its family's
// listings call beside their frozen linear layers. Internal to model/.
//
// The adapters' layout is the one with gradients: backward's progress reports name its offsets, and a
// ParameterStore's layout() is it. Each block keeps, per slot, every adapted module's down product h (N, r),
// which its backward reads; backward's dh (N, r) is one scratch per rank. Under lora.dropout
// (kernels/lora_dropout.hpp) drop(x) is not kept: its mask is drawn again into one scratch (N, widest
// in) per rank wherever forward's down product, backward's dx and dA need it. The frozen base has no
// gradients: its matrices' are empty views (linear_backward skips them), its 1-D tensors' (norms, biases,
// whose kernels compute an input gradient and a column sum in one sweep) land in one discarded buffer.
#pragma once

#include "core/lora_targets.hpp"
#include "core/model_sizes.hpp"
#include "kernels/lora.hpp"
#include "kernels/lora_dropout.hpp"
#include "model/impl/deferred_weight_gradients.hpp"
#include "model/impl/span_of.hpp"
#include "model/language_model.hpp"
#include "model/lora_adapters.hpp"
#include "model/parameter_store.hpp"
#include "parallel/tensor_parallel_mappings.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <optional>
#include <vector>

namespace meshtrain {

// Whether a stage's output head is adapted (`last`: the stage holds it).
inline bool lora_adapts_head(const ModelConfig& model, bool last) {
  return last && lora_targets_module(lora_target_names(model), lora_head_name);
}

// The widest input an adapted module has on a rank of tp (a row-parallel module's is split; the output
// head's is d_model): lora.dropout's scratch holds lora_dropout_rows of it. 0 without dropout.
inline std::size_t lora_dropout_width(const ModelConfig& model, int tp) {
  if (!model.lora.enabled() || model.lora.dropout <= 0) return 0;
  std::size_t widest = lora_adapts_head(model, true) ? std::size_t(model.d_model) : 0;
  const auto widen = [&](const LoraModule& m) {
    if (lora_adapts(model, m)) widest = std::max(widest, m.row_parallel ? m.in / std::uint64_t(tp) : m.in);
  };
  for (int block = 0; block < model.layers; ++block) {
    for (const LoraModule& m : lora_block_modules(model, block)) widen(m);
  }
  if (model.experts > 0) {
    for (const LoraModule& m : lora_expert_modules(model, 0)) widen(m);
  }
  return widest;
}
// Its rows: a micro-batch's N, or the experts' received rows Rr where those are dropped out too.
inline std::size_t lora_dropout_rows(const ModelConfig& model, std::size_t N, std::size_t Rr) {
  return lora_drops_expert_inputs(model) ? std::max(N, Rr) : N;
}

// The rows of a block's kept h, in units of r, module by module in the order of lora_block_modules and then
// of the routed experts' modules (each N rows; an expert module's, over all the experts this rank holds, the
// received rows Rr): LoraParts' and lora_activation_elements' one count.
struct LoraHRows {
  std::vector<std::size_t> module_begin;  // per lora_block_modules entry (adapted or not)
  std::size_t expert_begin[3] = {0, 0, 0};
  std::size_t total = 0;
};
inline LoraHRows lora_h_rows(const ModelConfig& model, int block, std::size_t N, std::size_t Rr) {
  LoraHRows rows;
  for (const LoraModule& m : lora_block_modules(model, block)) {
    rows.module_begin.push_back(rows.total);
    if (lora_adapts(model, m)) rows.total += N;
  }
  if (!model.is_moe_block(block)) return rows;
  const std::vector<LoraModule> experts = lora_expert_modules(model, 0);
  for (std::size_t j = 0; j < experts.size(); ++j) {
    rows.expert_begin[j] = rows.total;
    if (lora_adapts(model, experts[j])) rows.total += Rr;
  }
  return rows;
}

// Elements of Real a stage's LoRA activations take: h of every slot's blocks' adapted modules and of its
// output head (`last`: the stage holds it) kept, then dh (the widest of N and the experts' received rows,
// times r) and lora.dropout's drop(x) (scratch). `ep` the expert-parallel ranks.
inline ActivationSizes lora_activation_elements(const ModelConfig& model, int batch, int first_layer, int layers,
                                                int slots, bool last, int tp = 1, int ep = 1) {
  if (!model.lora.enabled()) return {};
  const std::size_t N = std::size_t(batch) * local_positions(model), r = std::size_t(model.lora.rank);
  const std::size_t Rr = model.experts > 0 ? expert_rows_received(model, N, ep) : 0;
  std::size_t per_slot = lora_adapts_head(model, last) ? N : 0;
  for (int l = first_layer; l < first_layer + layers; ++l) per_slot += lora_h_rows(model, l, N, Rr).total;
  return {std::size_t(slots) * per_slot * r,
          std::max(N, Rr) * r + lora_dropout_rows(model, N, Rr) * lora_dropout_width(model, tp)};
}

// What one deferred backward (model/impl/deferred_weight_gradients.hpp) holds of the adapters of a stage of
// `layers` blocks from first_layer, `last` with the head: per adapted block module its output gradient (N rows
// of its columns on this rank, which the scratch holds), its dh (N × r), and under full recomputation its input
// (the block's shared set); the head's dh (its output gradient and input live in the slot).
inline HeldElements lora_held_elements(const ModelConfig& model, int batch, int first_layer, int layers, bool last,
                                       int tp, Recompute recompute) {
  const std::size_t N = std::size_t(batch) * local_positions(model), r = std::size_t(model.lora.rank);
  HeldElements held;
  for (int block = first_layer; block < first_layer + layers; ++block) {
    for (const LoraModule& m : lora_block_modules(model, block)) {
      if (!lora_adapts(model, m)) continue;
      const std::size_t in = m.row_parallel ? m.in / std::uint64_t(tp) : m.in;
      const std::size_t out = m.row_parallel ? m.out : m.out / std::uint64_t(tp);
      held.values += N * out + N * r + (recompute == Recompute::full ? N * in : 0);
    }
  }
  if (lora_adapts_head(model, last)) held.values += N * r;
  return held;
}

template <class Real>
struct LoraParts {
  std::optional<ParameterLayout> layout;               // the adapters of this rank's piece; none without LoRA
  Buffer<Real> weights, grads;                         // the adapters', when no ParameterStore holds them
  std::vector<std::vector<LoraAdapter<Real>>> blocks;  // [block][module of lora_block_modules]
  // An MoE block's routed experts' adapters: [block][LoraExpertIndex][expert this rank holds].
  std::vector<std::vector<std::vector<LoraAdapter<Real>>>> experts;
  LoraAdapter<Real> head;                         // the output head's (inactive unless targeted)
  Buffer<Real> activations;                       // every slot's h, then dh
  Buffer<Real> discard;                           // the frozen 1-D tensors' gradients, never read
  std::map<std::size_t, std::size_t> discard_at;  // a 1-D tensor's flat offset → its place in discard
  int rank = 0, N = 0, layers = 0;
  std::size_t Rr = 0;  // the rows an MoE block's experts may receive (LlamaFamily::Dims::Rr)
  double scale = 0;
  // lora.dropout: its probability, what the mask is keyed by (kernels/lora_dropout.hpp), and per slot the
  // micro-batch it holds (none: evaluation, no dropout).
  double dropout = 0;
  int seq_len = 0, first_layer = 0, model_layers = 0, tp_rank = 0;
  ContextChunks chunks;           // context parallelism: this rank's rows of each sequence (the masks' token indices)
  std::size_t kept = 0;           // elements of activations before dh
  std::vector<LoraHRows> h_rows;  // each block's h, rows within the block's
  std::vector<std::size_t> block_row;  // each block's first h row within a slot's, in units of r
  std::size_t slot_rows = 0;           // a slot's h rows, blocks and head
  std::vector<std::optional<MicroBatchDraw>> draws;

  LoraParts() = default;
  // `base` the model's layout (its 1-D tensors size the discard buffer); `store` where the adapters live, or none.
  LoraParts(const ModelConfig& model, const ParameterLayout& base, int batch, int slots, ParameterStore<Real>* store)
      : rank(model.lora.rank),
        N(batch * int(local_positions(model))),
        layers(base.stage_layers()),
        Rr(model.experts > 0 ? expert_rows_received(model, std::size_t(N), base.ep()) : 0),
        scale(model.lora.enabled() ? model.lora.scaling() : 0.0),
        dropout(model.lora.dropout),
        seq_len(model.seq_len),
        first_layer(base.first_layer()),
        model_layers(model.layers),
        tp_rank(base.tp_rank()),
        draws(std::size_t(slots)) {
    if (!model.lora.enabled()) return;
    if (store != nullptr) {
      layout.emplace(store->layout());
    } else {
      layout.emplace(
          ParameterLayout::adapters(model, base.tp(), base.tp_rank(), base.place(), 1, base.ep(), base.ep_rank()));
      weights = Buffer<Real>("meshtrain::lora::weights", layout->total());
      grads = Buffer<Real>("meshtrain::lora::grads", layout->total());
    }
    const Vec<Real> w = slice(weights, 0, weights.extent(0)), g = slice(grads, 0, grads.extent(0));
    const auto weight = [&](const TensorInfo& t) { return store ? store->weight(t) : w.data() + t.offset; };
    const auto grad = [&](const TensorInfo& t) { return store ? store->grad(t) : g.data() + t.offset; };
    blocks = bind_lora_adapters<Real>(*layout, weight, grad);
    experts = bind_lora_experts<Real>(*layout, weight, grad);
    head = bind_lora_head<Real>(*layout, weight, grad);
    for (int l = 0; l < layers; ++l) {
      h_rows.push_back(lora_h_rows(model, first_layer + l, std::size_t(N), Rr));
      block_row.push_back(slot_rows);
      slot_rows += h_rows.back().total;
    }
    slot_rows += head.active() ? std::size_t(N) : 0;
    const ActivationSizes sizes =
        lora_activation_elements(model, batch, first_layer, layers, slots, base.place().last(), base.tp(), base.ep());
    activations = Buffer<Real>("meshtrain::lora::activations", sizes.total());
    kept = sizes.kept;
    // Each 1-D tensor its own place, in layout order: views the family joins (q|k|v's biases) stay joined.
    std::size_t discarded = 0;
    for (const TensorInfo& t : base.tensors()) {
      if (t.local_shape.size() != 1) continue;
      discard_at.emplace(t.offset, discarded);
      discarded += t.numel;
    }
    discard = Buffer<Real>("meshtrain::lora::frozen_discard", discarded);
  }

  bool active() const { return layout.has_value(); }
  // Whether module k of block l (lora_block_modules' numbering) carries an adapter.
  bool adapts(int l, int k) const {
    return active() && std::size_t(k) < blocks[std::size_t(l)].size() &&
           blocks[std::size_t(l)][std::size_t(k)].active();
  }
  // The routed experts' adapters of module j (LoraExpertIndex) of block l, one per expert this rank holds;
  // empty where not adapted.
  const std::vector<LoraAdapter<Real>>& expert_adapters(int l, int j) const {
    static const std::vector<LoraAdapter<Real>> none;
    if (!active() || experts[std::size_t(l)].empty()) return none;
    return experts[std::size_t(l)][std::size_t(j)];
  }
  // Where the frozen base's gradient of t goes: nowhere for a matrix, the discard buffer for a 1-D tensor.
  Real* frozen_grad(const TensorInfo& t) const {
    return t.local_shape.size() == 1 ? discard.data() + discard_at.at(t.offset) : nullptr;
  }
  // h of module k of block l in `slot` (N, r).
  Vec<Real> h(int slot, int l, int k) const {
    return rows_at(slot, block_row[std::size_t(l)] + h_rows[std::size_t(l)].module_begin[std::size_t(k)], N);
  }
  // h of the routed experts' module j of block l in `slot` (Rr, r): each received row's, in their order.
  Vec<Real> expert_h(int slot, int l, int j) const {
    return rows_at(slot, block_row[std::size_t(l)] + h_rows[std::size_t(l)].expert_begin[j], Rr);
  }
  // The output head's h in `slot`, after the blocks'.
  Vec<Real> head_h(int slot) const { return rows_at(slot, slot_rows - std::size_t(N), N); }
  // dh of `rows` rows (N; an expert module's received rows).
  Vec<Real> dh(std::size_t rows) const { return slice(activations, kept, rows * std::size_t(rank)); }
  Vec<Real> dh() const { return dh(std::size_t(N)); }
  // lora.dropout's scratch as (rows, in) (N rows; an expert module's received rows): drop(x) for a down product
  // or dA, or dh·A before its mask.
  Vec<Real> dropped(std::size_t rows, int in) const {
    return slice(activations, kept + std::max(std::size_t(N), Rr) * std::size_t(rank), rows * std::size_t(in));
  }
  Vec<Real> dropped(int in) const { return dropped(std::size_t(N), in); }
  // The mask of module k of block l for the micro-batch in `slot`, its input's column 0 global column
  // `first_column`; none where no dropout applies (lora.dropout 0, or evaluation).
  std::optional<LoraDropoutMask> mask(int slot, int l, int k, std::uint64_t first_column) const {
    return global_mask(slot, first_layer + l, k, first_column);
  }
  // The output head's mask: the head counts as module 0 of block model.layers, after every block.
  std::optional<LoraDropoutMask> head_mask(int slot) const { return global_mask(slot, model_layers, 0, 0); }
  // Whether the micro-batch in `slot` drops out (lora.dropout > 0 and a draw: not evaluation).
  bool drops(int slot) const { return dropout > 0 && draws[std::size_t(slot)].has_value(); }
  // The global token indices of the micro-batch in `slot`'s rows (LoraDropoutMask::token), whose mask is drawn
  // (drops(slot)).
  LoraDropoutMask tokens(int slot) const { return *global_mask(slot, 0, 0, 0); }

 private:
  Vec<Real> rows_at(int slot, std::size_t row, std::size_t rows) const {
    const std::size_t r = std::size_t(rank);
    return slice(activations, (std::size_t(slot) * slot_rows + row) * r, rows * r);
  }
  std::optional<LoraDropoutMask> global_mask(int slot, int block, int k, std::uint64_t first_column) const {
    const std::optional<MicroBatchDraw>& draw = draws[std::size_t(slot)];
    if (dropout <= 0 || !draw) return std::nullopt;
    return lora_dropout_mask(dropout, draw->seed, draw->step, draw->first_sample, seq_len, block, k, first_column,
                             chunks);
  }
};

// The down product of drop(x): h (N, r) = drop(x) Aᵀ, x (N, in); drop(x) drawn into the scratch first, or x
// itself without a mask.
template <class Real>
void lora_dropped_down_forward(const ExecSpace& space, const LoraParts<Real>& lora, Vec<Real> h,
                               const LoraAdapter<Real>& a, const std::optional<LoraDropoutMask>& mask, CVec<Real> x,
                               int in) {
  if (!mask) return lora_down_forward<Real>(space, h, x.data(), in, a.A, lora.N, in, lora.rank);
  const Vec<Real> dropped = lora.dropped(in);
  lora_dropout_forward<Real>(space, dropped, x.data(), in, *mask, lora.N, in);
  lora_down_forward<Real>(space, h, dropped.data(), in, a.A, lora.N, in, lora.rank);
}

// dx (N, in) += drop'(dh A): through the mask, which the scratch's dh A passes to dx.
template <class Real>
void lora_dropped_input_backward(const ExecSpace& space, const LoraParts<Real>& lora, Real* dx, CVec<Real> dh,
                                 const LoraAdapter<Real>& a, const std::optional<LoraDropoutMask>& mask, int in) {
  if (!mask) return lora_input_backward<Real>(space, dx, in, dh, a.A, lora.N, in, lora.rank);
  const Vec<Real> g = lora.dropped(in);
  lora_input_product<Real>(space, g, dh, a.A, lora.N, in, lora.rank);
  lora_dropout_backward<Real>(space, dx, in, g, *mask, lora.N, in);
}

// dA (r, in) += dhᵀ drop(x), drop(x) drawn again as forward drew it.
template <class Real>
void lora_dropped_weight_backward(const ExecSpace& space, const LoraParts<Real>& lora, CVec<Real> dh,
                                  const LoraAdapter<Real>& a, const std::optional<LoraDropoutMask>& mask, CVec<Real> x,
                                  int in) {
  if (!mask) return lora_weight_backward<Real>(space, a.dA, dh, x.data(), in, lora.N, in, lora.rank);
  const Vec<Real> dropped = lora.dropped(in);
  lora_dropout_forward<Real>(space, dropped, x.data(), in, *mask, lora.N, in);
  lora_weight_backward<Real>(space, a.dA, dh, dropped.data(), in, lora.N, in, lora.rank);
}

// A column-parallel module k of block l (input x (N, in) the same on every tp rank, output columns y
// (N, out), row stride ldy): y += s · (drop(x) Aᵀ) Bᵀ, h kept; `mask` lora.dropout's (none: x itself).
template <class Real>
void lora_column_forward(const ExecSpace& space, const LoraParts<Real>& lora, const LoraAdapter<Real>& a, Vec<Real> h,
                         CVec<Real> x, int in, Real* y, int ldy, int out,
                         const std::optional<LoraDropoutMask>& mask = std::nullopt) {
  if (!a.active()) return;
  lora_dropped_down_forward<Real>(space, lora, h, a, mask, x, in);
  lora_up_forward<Real>(space, y, ldy, h, a.B, lora.scale, lora.N, out, lora.rank);
}
template <class Real>
void lora_column_forward(const ExecSpace& space, const LoraParts<Real>& lora, int slot, int l, int k, CVec<Real> x,
                         int in, Real* y, int ldy, int out) {
  if (!lora.adapts(l, k)) return;
  lora_column_forward<Real>(space, lora, lora.blocks[std::size_t(l)][std::size_t(k)], lora.h(slot, l, k), x, in, y, ldy,
                            out, lora.mask(slot, l, k, 0));
}

// A row-parallel module (input x (N, in) this rank's columns, output y (N, out) summed over tp after):
// h's partial products summed over tp, then the up product added once (tp rank 0) into the sum's terms.
// `up`: false where the caller skips the output (recomputation), h is still made for backward.
template <class Real>
void lora_row_forward(const ExecSpace& space, const TensorParallelGroup& tp, const LoraParts<Real>& lora, int slot,
                      int l, int k, CVec<Real> x, int in, Real* y, int out, bool up = true) {
  if (!lora.adapts(l, k)) return;
  const LoraAdapter<Real>& a = lora.blocks[std::size_t(l)][std::size_t(k)];
  const Vec<Real> h = lora.h(slot, l, k);
  lora_dropped_down_forward<Real>(space, lora, h, a, lora.mask(slot, l, k, std::uint64_t(lora.tp_rank) * in), x, in);
  tp.sum(span_of(h));
  if (up && tp.rank() == 0) lora_up_forward<Real>(space, y, out, h, a.B, lora.scale, lora.N, out, lora.rank);
}

// A column-parallel module's backward from dy (N, out; row stride lddy): dB, then dh; dx (N, in) += dh A
// as this rank's part (the copy-to region's backward sums dx over tp after); dh summed over tp, then dA. While
// `later` defers a backward, dh and dx now, and dB, dh's sum and dA queued, over held copies of dy, dh and x
// where the scratch holds them (model/impl/deferred_weight_gradients.hpp).
template <class Real>
void lora_column_backward(DeferredWeightGradients<Real>& later, const ExecSpace& space, const TensorParallelGroup& tp,
                          const LoraParts<Real>& lora, const LoraAdapter<Real>& a, Vec<Real> h, CVec<Real> x, int in,
                          const Real* dy, int lddy, int out, Real* dx,
                          const std::optional<LoraDropoutMask>& mask = std::nullopt) {
  if (!a.active()) return;
  const Vec<Real> dh = lora.dh();
  if (!later.deferring()) {
    lora_up_backward<Real>(space, dh, a.dB, dy, lddy, h, a.B, lora.scale, lora.N, out, lora.rank);
    lora_dropped_input_backward<Real>(space, lora, dx, dh, a, mask, in);
    tp.sum(span_of(dh));
    lora_dropped_weight_backward<Real>(space, lora, dh, a, mask, x, in);
    return;
  }
  lora_up_input_backward<Real>(space, dh, dy, lddy, a.B, lora.scale, lora.N, out, lora.rank);
  lora_dropped_input_backward<Real>(space, lora, dx, dh, a, mask, in);
  const auto held_dy = later.hold_columns(space, dy, lddy, lora.N, out);
  later.add([=, &lora, &tp, held_dh = later.hold_copy(space, dh), x = later.hold(space, x)] {
    lora_up_weight_backward<Real>(space, a.dB, held_dy.data, held_dy.ld, h, lora.scale, lora.N, out, lora.rank);
    tp.sum(span_of(held_dh));
    lora_dropped_weight_backward<Real>(space, lora, held_dh, a, mask, x, in);
  });
}
template <class Real>
void lora_column_backward(DeferredWeightGradients<Real>& later, const ExecSpace& space, const TensorParallelGroup& tp,
                          const LoraParts<Real>& lora, int slot, int l, int k, CVec<Real> x, int in, const Real* dy,
                          int lddy, int out, Real* dx) {
  if (!lora.adapts(l, k)) return;
  lora_column_backward<Real>(later, space, tp, lora, lora.blocks[std::size_t(l)][std::size_t(k)], lora.h(slot, l, k), x,
                             in, dy, lddy, out, dx, lora.mask(slot, l, k, 0));
}

// A row-parallel module's backward from dy (N, out), the same on every tp rank: dB and dh alike on
// every rank, dA and dx (N, in) += dh A this rank's columns; no collective. Deferred as the column's.
template <class Real>
void lora_row_backward(DeferredWeightGradients<Real>& later, const ExecSpace& space, const LoraParts<Real>& lora,
                       int slot, int l, int k, CVec<Real> x, int in, const Real* dy, int out, Real* dx) {
  if (!lora.adapts(l, k)) return;
  const LoraAdapter<Real>& a = lora.blocks[std::size_t(l)][std::size_t(k)];
  const Vec<Real> h = lora.h(slot, l, k), dh = lora.dh();
  const std::optional<LoraDropoutMask> mask = lora.mask(slot, l, k, std::uint64_t(lora.tp_rank) * in);
  if (!later.deferring()) {
    lora_up_backward<Real>(space, dh, a.dB, dy, out, h, a.B, lora.scale, lora.N, out, lora.rank);
    lora_dropped_weight_backward<Real>(space, lora, dh, a, mask, x, in);
    lora_dropped_input_backward<Real>(space, lora, dx, dh, a, mask, in);
    return;
  }
  lora_up_input_backward<Real>(space, dh, dy, out, a.B, lora.scale, lora.N, out, lora.rank);
  lora_dropped_input_backward<Real>(space, lora, dx, dh, a, mask, in);
  const auto held_dy = later.hold_columns(space, dy, out, lora.N, out);
  later.add([=, &lora, held_dh = later.hold(space, dh), x = later.hold(space, x)] {
    lora_up_weight_backward<Real>(space, a.dB, held_dy.data, held_dy.ld, h, lora.scale, lora.N, out, lora.rank);
    lora_dropped_weight_backward<Real>(space, lora, held_dh, a, mask, x, in);
  });
}

}  // namespace meshtrain
