// GPT-2's loss: the cross-entropy of the last stage's logits over the tied wte's vocabulary
// (model/impl/output_loss.hpp).
#include "model/gpt2.hpp"

#include "model/impl/output_loss.hpp"

namespace meshtrain {

template <class Real>
typename Gpt2<Real>::Accum Gpt2<Real>::stage_loss(int slot, CVec<int> targets, Accum grad_scale) {
  const auto& a = slots_[slot];
  const output_loss::HeadBuffers<Real> head{a.logits, a.losses, a.row_max, a.partials};
  return output_loss::mean_cross_entropy(space_, tp_.active(), vocab_statistics_, head, targets,
                                         batch_ * model().seq_len, layout_, layout_.find("wte.weight"), grad_scale);
}

// Each member is instantiated in the file that defines it (the class's own in gpt2.cpp).
template Gpt2<float>::Accum Gpt2<float>::stage_loss(int, CVec<int>, Accum);
template Gpt2<double>::Accum Gpt2<double>::stage_loss(int, CVec<int>, Accum);
template Gpt2<bf16>::Accum Gpt2<bf16>::stage_loss(int, CVec<int>, Accum);
template Gpt2<fp16>::Accum Gpt2<fp16>::stage_loss(int, CVec<int>, Accum);

}  // namespace meshtrain
