// The family registry: model.arch → its family (model/gpt2.hpp, model/llama.hpp), for the stage,
// its activation sizes and its tensor list. A new family adds one line to each switch.
#include "model/language_model.hpp"

#include "model/gpt2.hpp"
#include "model/llama.hpp"

#include <stdexcept>

namespace meshtrain {

void list_family_tensors(ParameterLayout& layout) {
  switch (layout.model().arch) {
    case Arch::gpt2: return Gpt2Family::list_tensors(layout);
    case Arch::llama: return LlamaFamily::list_tensors(layout);
  }
}

template <class Real>
std::unique_ptr<LanguageModel<Real>> make_language_model(const ExecSpace& space, const ModelConfig& model, int batch,
                                                         Comm* tp, StagePlace place, int slots, Recompute recompute,
                                                         ParameterStore<Real>* store, Comm* ep) {
  switch (model.arch) {
    case Arch::gpt2: return std::make_unique<Gpt2<Real>>(space, model, batch, tp, place, slots, recompute, store, ep);
    case Arch::llama: return std::make_unique<Llama<Real>>(space, model, batch, tp, place, slots, recompute, store, ep);
  }
  throw std::logic_error("unknown model.arch");
}

template <class Real>
ActivationSizes activation_elements(const ModelConfig& model, int batch, int tp, StagePlace place, int slots,
                                    Recompute recompute, int ep) {
  const auto carved = [&](int k) {
    switch (model.arch) {
      case Arch::gpt2: return decoder_activation_elements<Real, Gpt2Family>(model, batch, tp, place, k, recompute, ep);
      case Arch::llama:
        return decoder_activation_elements<Real, LlamaFamily>(model, batch, tp, place, k, recompute, ep);
    }
    throw std::logic_error("unknown model.arch");
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
