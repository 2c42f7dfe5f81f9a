// GPT-2's loss: the cross-entropy of the last stage's logits over the tied wte's vocabulary
// (model/impl/output_loss.hpp).
#include "model/gpt2.hpp"

#include "model/impl/output_loss.hpp"

namespace meshtrain {

template <class Real>
void Gpt2<Real>::stage_loss(int slot, CVec<int> targets, Accum grad_scale, const LossSum& sum) {
  const auto& a = slots_[slot];
  const output_loss::HeadBuffers<Real> head{a.logits, a.losses, a.row_max, a.partials};
  output_loss::mean_cross_entropy(space_, tp_.active(), vocab_statistics_, head, targets, batch_ * model().seq_len,
                                  layout_, layout_.find("wte.weight"), grad_scale, sum);
}

// Each member is instantiated in the file that defines it (the class's own in gpt2.cpp).
template void Gpt2<float>::stage_loss(int, CVec<int>, Accum, const LossSum&);
template void Gpt2<double>::stage_loss(int, CVec<int>, Accum, const LossSum&);
template void Gpt2<bf16>::stage_loss(int, CVec<int>, Accum, const LossSum&);
template void Gpt2<fp16>::stage_loss(int, CVec<int>, Accum, const LossSum&);

}  // namespace meshtrain
