// Llama's construction: the parameters bound to their buffers, the activations carved; the
// activation sizes. Forward, loss and backward are in llama_forward.cpp and llama_backward.cpp.
#include "model/llama.hpp"

#include "model/impl/llama_carving.hpp"

#include <fmt/format.h>

#include <stdexcept>

namespace meshtrain {

using carving::allocate_and_carve;
using carving::carve_llama_rank_scratch;
using carving::carve_llama_slots;
using carving::Carver;
using carving::LlamaRankScratch;

template <class Real>
LlamaTensors<Real> LlamaTensors<Real>::bind(const ParameterLayout& layout, const Where& where) {
  auto view = [&](const std::string& name) {
    const TensorInfo* t = layout.find_if_held(name);
    return t == nullptr ? Vec<Real>() : Vec<Real>(where(*t), t->numel);
  };
  // The tensors `names` as one view: they must follow one another in memory.
  auto joined = [&](const std::string& prefix, const std::vector<std::string>& names) {
    Real* first = nullptr;
    std::size_t numel = 0;
    for (const std::string& name : names) {
      const TensorInfo& t = layout.find(prefix + name);
      if (first != nullptr && where(t) != first + numel) {
        throw std::logic_error(fmt::format("llama tensor {}{} does not follow the one before it", prefix, name));
      }
      if (first == nullptr) first = where(t);
      numel += t.numel;
    }
    return Vec<Real>(first, numel);
  };
  LlamaTensors p;
  p.embed = view("embed_tokens.weight");
  for (int l = layout.first_layer(); l < layout.first_layer() + layout.stage_layers(); ++l) {
    const std::string h = fmt::format("layers.{}.", l);
    LlamaBlockTensors<Real> b;
    b.attn_norm = view(h + "input_layernorm.weight");
    b.qkv = joined(h, {"self_attn.q_proj.weight", "self_attn.k_proj.weight", "self_attn.v_proj.weight"});
    b.o = view(h + "self_attn.o_proj.weight");
    b.mlp_norm = view(h + "post_attention_layernorm.weight");
    if (!layout.model().is_moe_block(l)) {
      b.gate_up = joined(h, {"mlp.gate_proj.weight", "mlp.up_proj.weight"});
      b.down = view(h + "mlp.down_proj.weight");
    } else {
      if (layout.model().shared_experts > 0) {
        b.gate_up = joined(h, {"mlp.shared_experts.gate_proj.weight", "mlp.shared_experts.up_proj.weight"});
        b.down = view(h + "mlp.shared_experts.down_proj.weight");
      }
      b.router = view(h + "mlp.gate.weight");
      // The experts this rank holds (all of them, or its expert-parallel share), in order.
      std::vector<std::string> names;
      for (int e = 0; e < layout.model().experts; ++e) {
        if (layout.find_if_held(fmt::format("{}mlp.experts.{}.gate_proj.weight", h, e)) == nullptr) continue;
        for (const char* part : {"gate_proj", "up_proj", "down_proj"}) {
          names.push_back(fmt::format("mlp.experts.{}.{}.weight", e, part));
        }
      }
      b.experts = joined(h, names);
    }
    p.blocks.push_back(b);
  }
  p.norm = view("norm.weight");
  p.lm_head = view("lm_head.weight");
  return p;
}

template <class Real>
ActivationSizes llama_activation_elements(const ModelConfig& model, int batch, int tp, StagePlace place, int slots,
                                          Recompute recompute, int ep) {
  const ParameterLayout layout(model, tp, 0, place);
  const LlamaDims dims = llama_dims(model, batch, tp, layout.first_layer(), layout.stage_layers(), place.last(), ep);
  Carver<Real> kept(nullptr), scratch(nullptr);
  const LlamaBlockActivations<Real> shared = carve_llama_rank_scratch(scratch, dims, recompute).shared;
  carve_llama_slots(kept, dims, slots, recompute, shared);
  return {kept.used(), scratch.used()};
}

template <class Real>
Llama<Real>::Llama(const ExecSpace& space, const ModelConfig& model, int batch, Comm* tp, StagePlace place, int slots,
                   Recompute recompute, ParameterStore<Real>* store, Comm* ep)
    : space_(space),
      // The kernels that wrote a buffer finish before a collective reads it.
      tp_(tp, [space] { space.fence(); }),
      copy_to_(tp_),
      reduce_from_(tp_),
      vocab_statistics_(tp_),
      store_(store),
      exchange_(ep, model.experts),
      layout_(store ? store->layout()
                    : ParameterLayout(model, tp_.size(), tp_.rank(), place, 1, exchange_.size(), exchange_.rank())),
      dims_(llama_dims(model, batch, layout_.tp(), layout_.first_layer(), layout_.stage_layers(), place.last(),
                       exchange_.size())),
      batch_(batch),
      recompute_(recompute),
      rotary_(make_rotary_table<Accum>(model.seq_len, model.head_size(), model.rope_theta)),
      weights_("meshtrain::llama::weights", store ? 0 : layout_.total()),
      grads_("meshtrain::llama::grads", store ? 0 : layout_.total()) {
  if (model.arch != Arch::llama) throw std::logic_error("Llama built for a model whose arch is not llama");
  if (layout_.ep() != exchange_.size() || layout_.ep_rank() != exchange_.rank()) {
    throw std::logic_error("Llama's expert-parallel group is not the one its parameter layout was made for");
  }
  const Vec<Real> w = weights(), g = grads();
  params_ = LlamaTensors<Real>::bind(
      layout_, [&](const TensorInfo& t) { return store ? store->weight(t) : w.data() + t.offset; });
  dparams_ = LlamaTensors<Real>::bind(
      layout_, [&](const TensorInfo& t) { return store ? store->grad(t) : g.data() + t.offset; });
  const LlamaRankScratch<Real> rank = allocate_and_carve<Real, LlamaRankScratch<Real>>(
      scratch_buffer_, "meshtrain::llama::backward_scratch",
      [&](Carver<Real>& c) { return carve_llama_rank_scratch(c, dims_, recompute); });
  scratch_ = rank.backward;
  slots_ = allocate_and_carve<Real, std::vector<LlamaActivations<Real>>>(
      activation_buffer_, "meshtrain::llama::activations",
      [&](Carver<Real>& c) { return carve_llama_slots(c, dims_, slots, recompute, rank.shared); });
  host_routing_.assign(std::size_t(slots), std::vector<HostRouting>(std::size_t(dims_.layers)));
  for (int l = 0; l < dims_.layers; ++l) {
    if (!dims_.moe(l)) continue;
    for (auto& per_slot : host_routing_) {
      per_slot[l].counts.assign(2 * dims_.E + 1, 0);
      per_slot[l].exchange.reserve(exchange_.size(), int(dims_.E));
    }
    router_statistics_.blocks.push_back(layout_.first_layer() + l);
  }
  router_statistics_.experts = int(dims_.E);
  router_loss_sums_ = Buffer<double>("meshtrain::moe_router::loss_sums", 2 * router_statistics_.blocks.size());
  clear_router_statistics();
}

template <class Real>
void Llama<Real>::clear_router_statistics() {
  RouterStatistics& r = router_statistics_;
  r.routed.assign(r.blocks.size() * std::size_t(r.experts), 0.0);
  r.kept.assign(r.routed.size(), 0.0);
  r.passes = 0;
  // A kernel, not a deep_copy fill: the step's count of copies stays at its reads.
  const Buffer<double> sums = router_loss_sums_;
  if (sums.extent(0) == 0) return;
  Kokkos::parallel_for(
      "meshtrain::moe_router::clear_losses", Kokkos::RangePolicy<ExecSpace>(space_, 0, long(sums.extent(0))),
      KOKKOS_LAMBDA(long i) { sums(i) = 0; });
}

// The routers' counts as recorded, with the losses read from the device: one copy per call.
template <class Real>
RouterStatistics Llama<Real>::router_statistics() const {
  RouterStatistics r = router_statistics_;
  r.aux_loss.assign(r.blocks.size(), 0.0);
  r.z_loss.assign(r.blocks.size(), 0.0);
  if (r.blocks.empty()) return r;
  const auto sums = Kokkos::create_mirror_view(Kokkos::HostSpace{}, router_loss_sums_);
  Kokkos::deep_copy(space_, sums, router_loss_sums_);
  space_.fence();
  for (std::size_t b = 0; b < r.blocks.size(); ++b) {
    r.aux_loss[b] = sums(2 * b);
    r.z_loss[b] = sums(2 * b + 1);
  }
  return r;
}

template <class Real>
void Llama<Real>::zero_grads() {
  Kokkos::deep_copy(space_, grads_, Real(0));
}

#define MESHTRAIN_LLAMA(Real)                                                                                        \
  template struct LlamaTensors<Real>;                                                                                \
  template ActivationSizes llama_activation_elements<Real>(const ModelConfig&, int, int, StagePlace, int, Recompute, \
                                                           int);                                                     \
  template class Llama<Real>;
MESHTRAIN_LLAMA(float)
MESHTRAIN_LLAMA(double)
MESHTRAIN_LLAMA(bf16)
MESHTRAIN_LLAMA(fp16)
#undef MESHTRAIN_LLAMA

}  // namespace meshtrain
