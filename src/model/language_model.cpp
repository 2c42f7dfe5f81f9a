// The family registry: model.arch → its family type (model/families/gpt2.hpp, llama.hpp), for the
// stage, its activation sizes, its GEMM workspace and its tensor list. A new family adds one line to
// with_family (and its row to core/families.hpp).
#include "model/language_model.hpp"

#include "model/families/gpt2.hpp"
#include "model/families/llama.hpp"
#include "model/gemm_workspace.hpp"

#include <stdexcept>
#include <type_traits>

namespace meshtrain {

namespace {

// visit(std::type_identity<Family>{}) for the family `arch` names.
template <class Visit>
decltype(auto) with_family(Arch arch, Visit&& visit) {
  switch (arch) {
    case Arch::gpt2: return visit(std::type_identity<Gpt2Family>{});
    case Arch::llama: return visit(std::type_identity<LlamaFamily>{});
  }
  throw std::logic_error("unknown model.arch");
}

}  // namespace

void list_family_tensors(ParameterLayout& layout) {
  with_family(layout.model().arch, [&]<class Family>(std::type_identity<Family>) { Family::list_tensors(layout); });
}

template <class Real>
std::unique_ptr<LanguageModel<Real>> make_language_model(const ExecSpace& space, const ModelConfig& model, int batch,
                                                         Comm* tp, StagePlace place, ActivationSlots slots,
                                                         Recompute recompute, ParameterStore<Real>* store, Comm* ep,
                                                         Comm* cp) {
  return with_family(model.arch, [&]<class Family>(std::type_identity<Family>) -> std::unique_ptr<LanguageModel<Real>> {
    return std::make_unique<DecoderStage<Real, Family>>(space, model, batch, tp, place, slots, recompute, store, ep,
                                                        cp);
  });
}

template <class Real>
ActivationSizes activation_elements(const ModelConfig& model, int batch, int tp, StagePlace place,
                                    ActivationSlots slots, Recompute recompute, int ep) {
  const auto carved = [&](int kept) {
    return with_family(model.arch, [&]<class Family>(std::type_identity<Family>) {
      return decoder_activation_elements<Real, Family>(model, batch, tp, place, {kept, slots.held}, recompute, ep);
    });
  };
  if (slots.kept <= 2) return carved(slots.kept);
  // Every slot carves the same tensors, so the kept elements are affine in the slots: carve two and
  // extrapolate, rather than walk the carving once per slot (a GPipe stage holds every micro-batch
  // of the step: `plan` at 10^9 accumulation steps).
  const ActivationSizes one = carved(1), two = carved(2);
  return {one.kept + std::size_t(slots.kept - 1) * (two.kept - one.kept), one.scratch};
}

template <class Real>
std::size_t model_gemm_workspace_bytes(const ModelConfig& model, int batch, int tp) {
  return with_family(model.arch, [&]<class Family>(std::type_identity<Family>) {
    return family_gemm_workspace_bytes<Real, Family>(model, batch, tp);
  });
}

#define MESHTRAIN_LANGUAGE_MODEL(Real)                                                                                 \
  template std::unique_ptr<LanguageModel<Real>> make_language_model<Real>(                                             \
      const ExecSpace&, const ModelConfig&, int, Comm*, StagePlace, ActivationSlots, Recompute, ParameterStore<Real>*, \
      Comm*, Comm*);                                                                                                   \
  template ActivationSizes activation_elements<Real>(const ModelConfig&, int, int, StagePlace, ActivationSlots,        \
                                                     Recompute, int);                                                  \
  template std::size_t model_gemm_workspace_bytes<Real>(const ModelConfig&, int, int);
MESHTRAIN_LANGUAGE_MODEL(float)
MESHTRAIN_LANGUAGE_MODEL(double)
MESHTRAIN_LANGUAGE_MODEL(bf16)
MESHTRAIN_LANGUAGE_MODEL(fp16)
#undef MESHTRAIN_LANGUAGE_MODEL

}  // namespace meshtrain
