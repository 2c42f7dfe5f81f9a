// GPT-2 forward and backward, composed of the kernels in kernels/.
#include "model/gpt2.hpp"

#include "kernels/attention.hpp"
#include "kernels/cross_entropy.hpp"
#include "kernels/encoder.hpp"
#include "kernels/gelu.hpp"
#include "kernels/layernorm.hpp"
#include "kernels/matmul.hpp"
#include "kernels/residual.hpp"
#include "kernels/vocab_parallel_cross_entropy.hpp"

#include "core/errors.hpp"

#include <fmt/format.h>

#include <unistd.h>

#include <algorithm>
#include <limits>
#include <type_traits>

namespace meshtrain {
namespace {

// Hands out consecutive views of one flat buffer. Run once without a base to count the elements,
// then again over the allocated buffer: both passes make the same calls, so the offsets agree.
template <class Real>
class Carver {
 public:
  explicit Carver(Real* base) : base_(base) {}
  Vec<Real> take(std::size_t count) {
    Vec<Real> view(base_ == nullptr ? nullptr : base_ + used_, base_ == nullptr ? 0 : count);
    used_ += count;
    return view;
  }
  // A view of another element type T (per-row statistics in accum_t<Real>), aligned for T.
  template <class T>
  Vec<T> take_as(std::size_t count) {
    static_assert(sizeof(T) % sizeof(Real) == 0);
    constexpr std::size_t ratio = sizeof(T) / sizeof(Real);
    used_ = (used_ + ratio - 1) / ratio * ratio;
    Vec<Real> raw = take(count * ratio);
    return Vec<T>(reinterpret_cast<T*>(raw.data()), raw.extent(0) / ratio);
  }
  std::size_t used() const { return used_; }

 private:
  Real* base_;
  std::size_t used_ = 0;
};

// Sizes of this rank's activations: C, T and B whole; heads, MLP columns and vocabulary rows its share.
struct LocalDims {
  std::size_t B, T, C, NH, N, Vl;  // NH: local heads; Vl: local (padded) vocabulary rows
  std::size_t Cl() const { return C / tp; }  // channels of the local heads
  std::size_t tp;
  int layers;  // blocks of this pipeline stage
  bool head;   // the stage ends in ln_f, the output head and the loss (the last stage)
};

LocalDims local_dims(const ModelConfig& m, int batch, int tp, int layers, bool head) {
  const std::size_t padded = (std::size_t(m.vocab) + tp - 1) / tp * tp;
  return {std::size_t(batch), std::size_t(m.seq_len), std::size_t(m.d_model), std::size_t(m.heads / tp),
          std::size_t(batch) * m.seq_len, padded / tp, std::size_t(tp), layers, head};
}

// Which fields of a block's activations a carve takes from the buffer; the others are views of
// another set (or empty).
struct BlockFields {
  bool att;     // the attention probabilities
  bool rest;    // everything else backward reads
  bool output;  // residual3: the next block's input, or the stage's output
};

// What each micro-batch keeps of a block under `recompute`, and what the one shared set holds.
BlockFields kept_fields(Recompute r) { return {r == Recompute::none, r != Recompute::full, true}; }
BlockFields shared_fields(Recompute r) { return {r != Recompute::none, r == Recompute::full, false}; }

// One block's activations: the fields `take` names from `c`, the others the views of `other`.
template <class Real>
BlockActivations<Real> carve_block(Carver<Real>& c, const LocalDims& d, BlockFields take,
                                   const BlockActivations<Real>& other = {}) {
  const std::size_t B = d.B, T = d.T, C = d.C, Cl = d.Cl(), NH = d.NH, N = d.N;
  auto pick = [&](bool taken, std::size_t count, const Vec<Real>& view) { return taken ? c.take(count) : view; };
  // Per-row statistics are kept in the accumulation type (fp32 for 16-bit models).
  auto pick_stat = [&](bool taken, std::size_t count, const Vec<accum_t<Real>>& view) {
    return taken ? c.template take_as<accum_t<Real>>(count) : view;
  };
  BlockActivations<Real> b;
  b.ln1 = pick(take.rest, N * C, other.ln1);
  b.ln1_mean = pick_stat(take.rest, N, other.ln1_mean);
  b.ln1_rstd = pick_stat(take.rest, N, other.ln1_rstd);
  b.qkv = pick(take.rest, N * 3 * Cl, other.qkv);
  b.atty = pick(take.rest, N * Cl, other.atty);
  b.att = pick(take.att, B * NH * T * T, other.att);
  b.residual2 = pick(take.rest, N * C, other.residual2);
  b.ln2 = pick(take.rest, N * C, other.ln2);
  b.ln2_mean = pick_stat(take.rest, N, other.ln2_mean);
  b.ln2_rstd = pick_stat(take.rest, N, other.ln2_rstd);
  b.fch = pick(take.rest, N * 4 * Cl, other.fch);
  b.fch_gelu = pick(take.rest, N * 4 * Cl, other.fch_gelu);
  b.residual3 = pick(take.output, N * C, other.residual3);
  return b;
}

// One micro-batch's activations; its blocks keep what `recompute` says and share the rest.
template <class Real>
ActivationTensors<Real> carve_activations(Carver<Real>& c, const LocalDims& d, Recompute recompute,
                                          const BlockActivations<Real>& shared) {
  const std::size_t C = d.C, V = d.Vl, N = d.N;
  ActivationTensors<Real> a;
  a.encoded = c.take(N * C);
  for (int l = 0; l < d.layers; ++l) a.blocks.push_back(carve_block(c, d, kept_fields(recompute), shared));
  a.proj = c.take(N * C);
  if (!d.head) return a;
  a.lnf = c.take(N * C);
  a.lnf_mean = c.template take_as<accum_t<Real>>(N);
  a.lnf_rstd = c.template take_as<accum_t<Real>>(N);
  a.logits = c.take(N * V);
  a.losses = c.template take_as<accum_t<Real>>(N);
  a.row_max = c.template take_as<accum_t<Real>>(N);
  a.partials = c.template take_as<accum_t<Real>>(2 * N);
  return a;
}

template <class Real>
BackwardScratch<Real> carve_scratch(Carver<Real>& c, const LocalDims& d) {
  const std::size_t B = d.B, T = d.T, C = d.C, Cl = d.Cl(), NH = d.NH, N = d.N;
  BackwardScratch<Real> s;
  s.dresidual = c.take(N * C);
  s.dln = c.take(N * C);
  s.datty = c.take(N * Cl);
  s.dqkv = c.take(N * 3 * Cl);
  s.datt = c.take(B * NH * T * T);
  s.dfch = c.take(N * 4 * Cl);
  return s;
}

// What a rank holds once, whatever its slots: backward's scratch and the shared block set.
template <class Real>
struct RankScratch {
  BackwardScratch<Real> backward;
  BlockActivations<Real> shared;  // empty under Recompute::none
};

template <class Real>
RankScratch<Real> carve_rank_scratch(Carver<Real>& c, const LocalDims& d, Recompute recompute) {
  RankScratch<Real> s{carve_scratch(c, d), {}};
  if (recompute != Recompute::none) s.shared = carve_block(c, d, shared_fields(recompute));
  return s;
}

template <class Real>
std::vector<ActivationTensors<Real>> carve_slots(Carver<Real>& c, const LocalDims& d, int slots, Recompute recompute,
                                                 const BlockActivations<Real>& shared) {
  std::vector<ActivationTensors<Real>> sets;
  for (int k = 0; k < slots; ++k) sets.push_back(carve_activations(c, d, recompute, shared));
  return sets;
}

// Allocates a buffer exactly as large as `carve` needs and carves it.
template <class Real, class Tensors, class CarveFn>
Tensors allocate_and_carve(Buffer<Real>& buffer, const char* label, CarveFn carve) {
  Carver<Real> counter(nullptr);
  carve(counter);
  buffer = Buffer<Real>(std::string(label), counter.used());
  Carver<Real> carver(buffer.data());
  return carve(carver);
}

}  // namespace

template <class Real>
ActivationSizes gpt2_activation_elements(const ModelConfig& model, int batch, int tp, StagePlace place, int slots,
                                         Recompute recompute) {
  const int layers = ParameterLayout(model, tp, 0, place).stage_layers();
  const LocalDims dims = local_dims(model, batch, tp, layers, place.last());
  Carver<Real> kept(nullptr), scratch(nullptr);
  const BlockActivations<Real> shared = carve_rank_scratch(scratch, dims, recompute).shared;
  carve_slots(kept, dims, slots, recompute, shared);
  return {kept.used(), scratch.used()};
}
template ActivationSizes gpt2_activation_elements<float>(const ModelConfig&, int, int, StagePlace, int, Recompute);
template ActivationSizes gpt2_activation_elements<double>(const ModelConfig&, int, int, StagePlace, int, Recompute);
template ActivationSizes gpt2_activation_elements<bf16>(const ModelConfig&, int, int, StagePlace, int, Recompute);
template ActivationSizes gpt2_activation_elements<fp16>(const ModelConfig&, int, int, StagePlace, int, Recompute);

void require_model_fits(const ModelConfig& m, int batch, int state_buffers, const std::string& origin,
                        Recompute recompute) {
  const double B = batch, T = m.seq_len, C = m.d_model, V = m.vocab, NH = m.heads;
  // The largest single tensors the kernels index with int.
  const double largest = std::max({B * T * V, B * NH * T * T, B * T * 4 * C, V * C, 4 * C * C});
  if (largest >= double(std::numeric_limits<int>::max())) {
    input_error("{}: model of d_model {}, vocab {}, seq_len {}, heads {} with micro_batch {} has a tensor of {:.3g} "
                "elements, more than the 2^31 − 1 one tensor may hold: make it smaller",
                origin, m.d_model, m.vocab, m.seq_len, m.heads, batch, largest);
  }
  const ActivationSizes activations = gpt2_activation_elements(m, batch, 1, {}, 1, recompute);
  const double parameters = double(ParameterLayout(m).total());
  const double bytes = sizeof(float) * (parameters * (1 + state_buffers) + double(activations.total()));
  if constexpr (std::is_same_v<MemSpace, HostSpace>) {
    const double physical = double(sysconf(_SC_PHYS_PAGES)) * double(sysconf(_SC_PAGE_SIZE));
    if (bytes > physical) {
      input_error("{}: the model ({:.3g} parameters) with micro_batch {} needs {:.1f} GiB for weights, gradients, "
                  "optimizer state and activations, more than this machine's {:.1f} GiB: reduce model.* or "
                  "train.micro_batch",
                  origin, parameters, batch, bytes / (1 << 30), physical / (1 << 30));
    }
  }
}

template <class Real>
Gpt2<Real>::Gpt2(const ExecSpace& space, const ModelConfig& model, int batch, Comm* tp, StagePlace place, int slots,
                 Recompute recompute, ParameterStore<Real>* store)
    : space_(space),
      tp_(tp != nullptr && tp->size() > 1 ? tp : nullptr),
      store_(store),
      layout_(store ? store->layout() : ParameterLayout(model, tp_ ? tp_->size() : 1, tp_ ? tp_->rank() : 0, place)),
      batch_(batch),
      recompute_(recompute),
      weights_("meshtrain::gpt2::weights", store ? 0 : layout_.total()),
      grads_("meshtrain::gpt2::grads", store ? 0 : layout_.total()) {
  for (int l = 0; l < layout_.stage_layers(); ++l) {
    block_offsets_.push_back(layout_.find(fmt::format("h.{}.ln_1.weight", layout_.first_layer() + l)).offset);
  }
  if (place.last()) lnf_offset_ = layout_.find("ln_f.weight").offset;
  if (store) {
    params_ = ParameterTensors<Real>::bind(layout_, [&](const TensorInfo& t) { return store->weight(t); });
    dparams_ = ParameterTensors<Real>::bind(layout_, [&](const TensorInfo& t) { return store->grad(t); });
  } else {
    params_ = ParameterTensors<Real>::bind(weights(), layout_);
    dparams_ = ParameterTensors<Real>::bind(grads(), layout_);
  }
  const LocalDims dims = local_dims(model, batch, layout_.tp(), layout_.stage_layers(), place.last());
  const RankScratch<Real> rank = allocate_and_carve<Real, RankScratch<Real>>(
      scratch_buffer_, "meshtrain::gpt2::backward_scratch",
      [&](Carver<Real>& c) { return carve_rank_scratch(c, dims, recompute); });
  scratch_ = rank.backward;
  slots_ = allocate_and_carve<Real, std::vector<ActivationTensors<Real>>>(
      activation_buffer_, "meshtrain::gpt2::activations",
      [&](Carver<Real>& c) { return carve_slots(c, dims, slots, recompute, rank.shared); });
}

template <class Real>
template <class T>
void Gpt2<Real>::tp_sum(Vec<T> x) {
  if (tp_ == nullptr) return;
  space_.fence();  // the kernels that produced x must be done before the collective reads it
  // 16-bit activations and gradients are summed in fp32 and rounded once (MPI backend; NCCL rounds
  // its partials, see parallel/comm.hpp).
  tp_->allreduce_sum(x.data(), x.extent(0));
}

template <class Real>
CVec<Real> Gpt2<Real>::stage_output(int slot) const {
  const auto& a = slots_[slot];
  return a.blocks.empty() ? CVec<Real>(a.encoded) : CVec<Real>(a.blocks.back().residual3);
}

template <class Real>
void Gpt2<Real>::stage_forward(int slot, CVec<int> inputs) {
  const auto& m = model();
  const StagePlace& place = layout_.place();
  const int B = batch_, T = m.seq_len, C = m.d_model, N = B * T;
  const int Vl = layout_.padded_vocab() / layout_.tp();
  auto& a = slots_[slot];
  const auto& p = params_;
  if (place.first()) {
    const TensorInfo& wte = layout_.find("wte.weight");
    const VocabRange vocab{int(wte.piece.offset[0]), int(wte.piece.block[0]), layout_.tp_rank() == 0};
    encoder_forward(space_, a.encoded, inputs, p.wte, p.wpe, B, T, C, vocab);
    tp_sum(a.encoded);
  }
  CVec<Real> x = a.encoded;
  for (int l = 0; l < layout_.stage_layers(); ++l) {
    need_block(l);
    block_forward(l, x, a.blocks[l], a.proj, true);
    x = a.blocks[l].residual3;
  }
  resident_ = {slot, layout_.stage_layers() - 1};
  if (!place.last()) return;
  layernorm_forward(space_, a.lnf, a.lnf_mean, a.lnf_rstd, x, p.lnf_w, p.lnf_b, N, C);
  // Tied output head: logits = lnf · wteᵀ, this rank's vocabulary columns.
  gemm<Real>(space_, Trans::no, Trans::yes, {N, Vl, C}, Real(1), a.lnf.data(), C, p.wte.data(), C, Real(0),
             a.logits.data(), Vl);
}

template <class Real>
void Gpt2<Real>::block_forward(int l, CVec<Real> x, const BlockActivations<Real>& s, Vec<Real> proj, bool to_output) {
  const auto& m = model();
  const int B = batch_, T = m.seq_len, C = m.d_model, N = B * T;
  const int Cl = C / layout_.tp(), NH = m.heads / layout_.tp();
  const auto& w = params_.blocks[l];
  const CVec<Real> no_bias;
  layernorm_forward(space_, s.ln1, s.ln1_mean, s.ln1_rstd, x, w.ln1_w, w.ln1_b, N, C);
  matmul_forward<Real>(space_, s.qkv, s.ln1, w.qkv_w, w.qkv_b, N, C, 3 * Cl);
  attention_forward(space_, s.atty, s.att, s.qkv, B, T, Cl, NH);
  matmul_forward<Real>(space_, proj, s.atty, w.attproj_w, no_bias, N, Cl, C);
  tp_sum(proj);
  add_bias(space_, proj, w.attproj_b, N, C);
  residual_forward(space_, s.residual2, x, proj, N * C);
  layernorm_forward(space_, s.ln2, s.ln2_mean, s.ln2_rstd, s.residual2, w.ln2_w, w.ln2_b, N, C);
  matmul_forward<Real>(space_, s.fch, s.ln2, w.fc_w, w.fc_b, N, C, 4 * Cl);
  gelu_forward(space_, s.fch_gelu, s.fch, N * 4 * Cl);
  if (!to_output) return;
  matmul_forward<Real>(space_, proj, s.fch_gelu, w.fcproj_w, no_bias, N, 4 * Cl, C);
  tp_sum(proj);
  add_bias(space_, proj, w.fcproj_b, N, C);
  residual_forward(space_, s.residual3, s.residual2, proj, N * C);
}

template <class Real>
void Gpt2<Real>::recompute_block(int slot, int l) {
  if (recompute_ == Recompute::none || resident_ == std::pair{slot, l}) return;
  const auto& m = model();
  const auto& a = slots_[slot];
  const auto& s = a.blocks[l];
  if (recompute_ == Recompute::selective) {
    attention_probabilities(space_, s.att, s.qkv, batch_, m.seq_len, m.d_model / layout_.tp(), m.heads / layout_.tp());
  } else {
    block_forward(l, l == 0 ? a.encoded : a.blocks[l - 1].residual3, s, a.proj, false);
  }
  resident_ = {slot, l};
}

template <class Real>
void Gpt2<Real>::cross_entropy(ActivationTensors<Real>& a, CVec<int> targets, Accum grad_scale) {
  const int N = batch_ * model().seq_len;
  if (tp_ == nullptr) {
    softmax_cross_entropy(space_, a.losses, a.logits, a.logits, targets, N, model().vocab, grad_scale);
    return;
  }
  const TensorInfo& wte = layout_.find("wte.weight");
  const VocabColumns cols{layout_.padded_vocab() / layout_.tp(), int(wte.piece.block[0]), int(wte.piece.offset[0])};
  vocab_parallel_row_max(space_, a.row_max, a.logits, N, cols);
  space_.fence();
  tp_->allreduce_max(a.row_max.data(), N);
  vocab_parallel_row_partials(space_, a.partials, a.logits, a.row_max, targets, N, cols);
  tp_sum(a.partials);
  vocab_parallel_finish(space_, a.losses, a.logits, a.logits, a.row_max, a.partials, targets, N, cols, grad_scale);
}

template <class Real>
typename Gpt2<Real>::Accum Gpt2<Real>::stage_loss(int slot, CVec<int> targets, Accum grad_scale) {
  const int N = batch_ * model().seq_len;
  cross_entropy(slots_[slot], targets, grad_scale);
  return sum_reduce(space_, slots_[slot].losses, N) / Accum(N);
}

template <class Real>
typename Gpt2<Real>::Accum Gpt2<Real>::forward(CVec<int> inputs, CVec<int> targets, Accum grad_scale) {
  stage_forward(0, inputs);
  return stage_loss(0, targets, grad_scale);
}

template <class Real>
CVec<Real> Gpt2<Real>::forward_logits(CVec<int> inputs) {
  stage_forward(0, inputs);
  space_.fence();
  return slots_[0].logits;
}

template <class Real>
void Gpt2<Real>::backward(CVec<int> inputs, const ReadyFrom& ready_from) {
  stage_backward(0, inputs, ready_from);
}

template <class Real>
void Gpt2<Real>::stage_backward(int slot, CVec<int> inputs, const ReadyFrom& ready_from) {
  auto report = [&](std::size_t offset) {
    if (ready_from) ready_from(offset);
  };
  const auto& m = model();
  const int B = batch_, T = m.seq_len, C = m.d_model, V = m.vocab, N = B * T;
  const int tp = layout_.tp(), Cl = C / tp, NH = m.heads / tp, Vl = layout_.padded_vocab() / tp;
  const auto& a = slots_[slot];
  const auto& p = params_;
  const auto& g = dparams_;
  const auto& d = scratch_;
  const StagePlace& place = layout_.place();
  const Vec<Real> no_bias;

  if (place.last()) {
    // Output head (tied): dlnf = dlogits · wte (summed over the vocabulary shards), dwte += dlogitsᵀ · lnf.
    gemm<Real>(space_, Trans::no, Trans::no, {N, C, Vl}, Real(1), a.logits.data(), Vl, p.wte.data(), C, Real(0),
               d.dln.data(), C);
    tp_sum(d.dln);
    gemm<Real>(space_, Trans::yes, Trans::no, {Vl, C, N}, Real(1), a.logits.data(), Vl, a.lnf.data(), C, Real(1),
               g.wte.data(), C);
    Kokkos::deep_copy(space_, d.dresidual, Real(0));
    layernorm_backward(space_, d.dresidual, g.lnf_w, g.lnf_b, d.dln, stage_output(slot), p.lnf_w, a.lnf_mean,
                       a.lnf_rstd, N, C);
    report(lnf_offset_);
  }  // else d.dresidual holds the next stage's gradient, received by the caller

  for (int l = layout_.stage_layers() - 1; l >= 0; --l) {
    need_block(l);
    const auto& w = p.blocks[l];
    const auto& dw = g.blocks[l];
    const auto& s = a.blocks[l];
    CVec<Real> x = l == 0 ? a.encoded : a.blocks[l - 1].residual3;
    recompute_block(slot, l);
    // MLP branch; d.dresidual holds dL/d residual3 and becomes dL/d residual2.
    matmul_backward<Real>(space_, d.dfch, dw.fcproj_w, no_bias, d.dresidual, s.fch_gelu, w.fcproj_w, N, 4 * Cl, C);
    bias_backward(space_, dw.fcproj_b, d.dresidual, N, C);
    gelu_backward(space_, d.dfch, s.fch, d.dfch, N * 4 * Cl);
    matmul_backward<Real>(space_, d.dln, dw.fc_w, dw.fc_b, d.dfch, s.ln2, w.fc_w, N, C, 4 * Cl);
    tp_sum(d.dln);
    layernorm_backward(space_, d.dresidual, dw.ln2_w, dw.ln2_b, d.dln, s.residual2, w.ln2_w, s.ln2_mean, s.ln2_rstd,
                       N, C);
    // Attention branch; d.dresidual becomes dL/d x.
    matmul_backward<Real>(space_, d.datty, dw.attproj_w, no_bias, d.dresidual, s.atty, w.attproj_w, N, Cl, C);
    bias_backward(space_, dw.attproj_b, d.dresidual, N, C);
    attention_backward(space_, d.dqkv, d.datt, d.datty, s.qkv, s.att, B, T, Cl, NH);
    matmul_backward<Real>(space_, d.dln, dw.qkv_w, dw.qkv_b, d.dqkv, s.ln1, w.qkv_w, N, C, 3 * Cl);
    tp_sum(d.dln);
    layernorm_backward(space_, d.dresidual, dw.ln1_w, dw.ln1_b, d.dln, x, w.ln1_w, s.ln1_mean, s.ln1_rstd, N, C);
    report(block_offsets_[l]);
  }
  if (place.first()) {
    // wte has the head's gradient too, so the embeddings are final only now.
    const TensorInfo& wte = layout_.find("wte.weight");
    const VocabRange vocab{int(wte.piece.offset[0]), int(wte.piece.block[0]), true};
    encoder_backward(space_, g.wte, g.wpe, d.dresidual, inputs, B, T, C, V, vocab);
  }  // else d.dresidual is now the gradient of the stage's input, for the previous stage
  report(0);
}

template <class Real>
void Gpt2<Real>::zero_grads() {
  Kokkos::deep_copy(space_, grads_, Real(0));
}

template class Gpt2<float>;
template class Gpt2<double>;
template class Gpt2<bf16>;
template class Gpt2<fp16>;

}  // namespace meshtrain
