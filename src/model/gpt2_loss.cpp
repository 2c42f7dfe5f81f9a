// GPT-2's loss: the cross-entropy of the last stage's logits, vocabulary-parallel under tensor
// parallelism (each rank holds its vocabulary columns of every row), which also leaves the
// gradient of the logits for backward.
#include "model/gpt2.hpp"

#include "kernels/cross_entropy.hpp"
#include "kernels/vocab_parallel_cross_entropy.hpp"

namespace meshtrain {

template <class Real>
void Gpt2<Real>::cross_entropy(ActivationTensors<Real>& a, CVec<int> targets, Accum grad_scale) {
  const int N = batch_ * model().seq_len;
  if (!tp_.active()) {
    softmax_cross_entropy(space_, a.losses, a.logits, a.logits, targets, N, model().vocab, grad_scale);
    return;
  }
  const TensorInfo& wte = layout_.find("wte.weight");
  const VocabColumns cols{layout_.padded_vocab() / layout_.tp(), int(wte.piece.block[0]), int(wte.piece.offset[0])};
  vocab_parallel_row_max(space_, a.row_max, a.logits, N, cols);
  vocab_statistics_.max_over_vocabulary(span_of(a.row_max));
  vocab_parallel_row_partials(space_, a.partials, a.logits, a.row_max, targets, N, cols);
  vocab_statistics_.sum_over_vocabulary(span_of(a.partials));
  vocab_parallel_finish(space_, a.losses, a.logits, a.logits, a.row_max, a.partials, targets, N, cols, grad_scale);
}

template <class Real>
typename Gpt2<Real>::Accum Gpt2<Real>::stage_loss(int slot, CVec<int> targets, Accum grad_scale) {
  const int N = batch_ * model().seq_len;
  cross_entropy(slots_[slot], targets, grad_scale);
  return sum_reduce(space_, slots_[slot].losses, N) / Accum(N);
}

// Each member is instantiated in the file that defines it (the class's own in gpt2.cpp).
#define MESHTRAIN_GPT2_LOSS(Real)                                                      \
  template void Gpt2<Real>::cross_entropy(ActivationTensors<Real>&, CVec<int>, Accum); \
  template Gpt2<Real>::Accum Gpt2<Real>::stage_loss(int, CVec<int>, Accum);
MESHTRAIN_GPT2_LOSS(float)
MESHTRAIN_GPT2_LOSS(double)
MESHTRAIN_GPT2_LOSS(bf16)
MESHTRAIN_GPT2_LOSS(fp16)
#undef MESHTRAIN_GPT2_LOSS

}  // namespace meshtrain
