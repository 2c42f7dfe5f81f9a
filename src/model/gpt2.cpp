// Gpt2's construction: the parameters bound to their buffers, the activations carved; the
// activation sizes and the checks that a model fits. Forward, loss and backward are in
// gpt2_forward.cpp, gpt2_loss.cpp and gpt2_backward.cpp.
#include "model/gpt2.hpp"

#include "model/impl/activation_carving.hpp"

#include "core/errors.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <type_traits>

namespace meshtrain {

// The activation layout (model/impl/activation_carving.hpp).
using carving::allocate_and_carve;
using carving::carve_rank_scratch;
using carving::carve_slots;
using carving::Carver;
using carving::local_dims;
using carving::LocalDims;
using carving::RankScratch;

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

template <class Real>
Gpt2<Real>::Gpt2(const ExecSpace& space, const ModelConfig& model, int batch, Comm* tp, StagePlace place, int slots,
                 Recompute recompute, ParameterStore<Real>* store)
    : space_(space),
      // The kernels that wrote a buffer finish before a collective reads it.
      tp_(tp, [space] { space.fence(); }),
      copy_to_(tp_),
      reduce_from_(tp_),
      vocab_statistics_(tp_),
      store_(store),
      layout_(store ? store->layout() : ParameterLayout(model, tp_.size(), tp_.rank(), place)),
      batch_(batch),
      recompute_(recompute),
      weights_("meshtrain::gpt2::weights", store ? 0 : layout_.total()),
      grads_("meshtrain::gpt2::grads", store ? 0 : layout_.total()) {
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
void Gpt2<Real>::zero_grads() {
  Kokkos::deep_copy(space_, grads_, Real(0));
}

template class Gpt2<float>;
template class Gpt2<double>;
template class Gpt2<bf16>;
template class Gpt2<fp16>;

}  // namespace meshtrain
