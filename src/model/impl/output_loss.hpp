// The loss of a model's output head, shared by the families: the cross-entropy of the last stage's
// logits against the targets, vocabulary-parallel under tensor parallelism (each rank holds its
// vocabulary columns of every row: the rows of `table` its piece holds), which also leaves the
// gradient of the logits, scaled by grad_scale, in place for backward. The micro-batch's term is added to a LossSum
// in device memory (kernels/loss_sum.hpp), never read to the host here. Internal to model/.
#pragma once

#include "kernels/cross_entropy.hpp"
#include "kernels/loss_sum.hpp"
#include "kernels/vocab_parallel_cross_entropy.hpp"
#include "model/impl/span_of.hpp"
#include "model/parameters.hpp"
#include "parallel/tensor_parallel_mappings.hpp"

namespace meshtrain::output_loss {

// The last stage's activations the loss reads and writes.
template <class Real>
struct HeadBuffers {
  Vec<Real> logits;             // (N, Vl); becomes dlogits · grad_scale
  Vec<accum_t<Real>> losses;    // (N)
  Vec<accum_t<Real>> row_max;   // (N)  vocabulary-parallel: row maxima
  Vec<accum_t<Real>> partials;  // (2N) … and Σ exp, target logit
};

// sum += the cross-entropy term of the N rows (LossSum: their mean, or their sum; rows whose target is
// kNoLossTarget add 0). `table`: the vocabulary-parallel tensor whose rows are
// the logits' columns (gpt2's tied wte, llama's lm_head).
template <class Real>
void mean_cross_entropy(const ExecSpace& space, bool tp_active, const VocabParallelStatistics& statistics,
                        const HeadBuffers<Real>& a, CVec<int> targets, int N, const ParameterLayout& layout,
                        const TensorInfo& table, accum_t<Real> grad_scale, const LossSum& sum) {
  using Accum = accum_t<Real>;
  if (!tp_active) {
    softmax_cross_entropy(space, a.losses, a.logits, a.logits, targets, N, layout.model().vocab, grad_scale,
                          layout.padded_vocab());
  } else {
    const VocabColumns cols{layout.padded_vocab() / layout.tp(), int(table.piece.block[0]), int(table.piece.offset[0])};
    vocab_parallel_row_max(space, a.row_max, a.logits, N, cols);
    statistics.max_over_vocabulary(span_of(a.row_max));
    vocab_parallel_row_partials(space, a.partials, a.logits, a.row_max, targets, N, cols);
    statistics.sum_over_vocabulary(span_of(a.partials));
    vocab_parallel_finish(space, a.losses, a.logits, a.logits, a.row_max, a.partials, targets, N, cols, grad_scale);
  }
  sum.add_micro_batch<Accum>(space, a.losses, N);
}

}  // namespace meshtrain::output_loss
