// The family factory, the activation sizes of either family, and the check that a model fits.
#include "model/language_model.hpp"

#include "core/errors.hpp"
#include "core/model_sizes.hpp"
#include "model/gpt2.hpp"
#include "model/llama.hpp"

#include <unistd.h>

#include <type_traits>

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

void require_model_fits(const ModelConfig& m, int batch, int state_buffers, const std::string& origin,
                        Recompute recompute) {
  // Every tensor fits the kernels' int sizes (validate, core/model_sizes); the sums below are exact.
  require_sizes_fit(m, batch, 1);
  const ActivationSizes activations = activation_elements(m, batch, 1, {}, 1, recompute);
  const double parameters = double(parameter_count(m).value());
  const double bytes = sizeof(float) * (parameters * (1 + state_buffers) + double(activations.total()));
  if constexpr (std::is_same_v<MemSpace, HostSpace>) {
    const double physical = double(sysconf(_SC_PHYS_PAGES)) * double(sysconf(_SC_PAGE_SIZE));
    if (bytes > physical) {
      input_error(
          "{}: the model ({:.3g} parameters) with micro_batch {} needs {:.1f} GiB for weights, gradients, "
          "optimizer state and activations, more than this machine's {:.1f} GiB: reduce model.* or "
          "train.micro_batch",
          origin, parameters, batch, bytes / (1 << 30), physical / (1 << 30));
    }
  }
}

}  // namespace meshtrain
