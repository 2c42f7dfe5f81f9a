// The family factory and the activation sizes of either family.
#include "model/language_model.hpp"

#include "model/gpt2.hpp"
#include "model/llama.hpp"

namespace meshtrain {

template <class Real>
std::unique_ptr<LanguageModel<Real>> make_language_model(const ExecSpace& space, const ModelConfig& model, int batch,
                                                         Comm* tp, StagePlace place, int slots, Recompute recompute,
                                                         ParameterStore<Real>* store, Comm* ep) {
  if (model.arch == Arch::llama) {
    return std::make_unique<Llama<Real>>(space, model, batch, tp, place, slots, recompute, store, ep);
  }
  return std::make_unique<Gpt2<Real>>(space, model, batch, tp, place, slots, recompute, store);
}

template <class Real>
ActivationSizes activation_elements(const ModelConfig& model, int batch, int tp, StagePlace place, int slots,
                                    Recompute recompute, int ep) {
  const auto carved = [&](int k) {
    if (model.arch == Arch::llama) return llama_activation_elements<Real>(model, batch, tp, place, k, recompute, ep);
    return gpt2_activation_elements<Real>(model, batch, tp, place, k, recompute);
  };
  if (slots <= 2) return carved(slots);
  // Every slot carves the same tensors, so the kept elements are affine in the slots: carve two and
  // extrapolate, rather than walk the carving once per slot (a GPipe stage holds every micro-batch
  // of the step: `plan` at 10^9 accumulation steps).
  const ActivationSizes one = carved(1), two = carved(2);
  return {one.kept + std::size_t(slots - 1) * (two.kept - one.kept), one.scratch};
}

#define MESHTRAIN_LANGUAGE_MODEL(Real)                                                                             \
  template std::unique_ptr<LanguageModel<Real>> make_language_model<Real>(                                         \
      const ExecSpace&, const ModelConfig&, int, Comm*, StagePlace, int, Recompute, ParameterStore<Real>*, Comm*); \
  template ActivationSizes activation_elements<Real>(const ModelConfig&, int, int, StagePlace, int, Recompute, int);
MESHTRAIN_LANGUAGE_MODEL(float)
MESHTRAIN_LANGUAGE_MODEL(double)
MESHTRAIN_LANGUAGE_MODEL(bf16)
MESHTRAIN_LANGUAGE_MODEL(fp16)
#undef MESHTRAIN_LANGUAGE_MODEL

}  // namespace meshtrain
