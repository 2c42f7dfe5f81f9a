// The order of a pipeline stage's backward pass, the same for every family, with backward's
// progress reports (LanguageModel::ReadyFrom, handed to `ready_from`): the output head on the last stage, the blocks
// from the last down, the embedding on the first stage. Each report says that every gradient at a flat offset at or
// past it is final. Internal to model/.
#pragma once

#include "model/language_model.hpp"

namespace meshtrain {

template <class ReportFn, class HeadFn, class BlockFn, class EmbeddingFn>
void backward_sweep(const ParameterLayout& layout, ReportFn ready_from, HeadFn head, BlockFn block,
                    EmbeddingFn embedding) {
  // Each offset once: a stage whose first unit is a block (llama's stages after the first, gpt2's
  // middle ones) reaches 0 at its block 0 already, and a second report would start the
  // data-parallel reduction of every unit again (ZeRO 2/3 reduce-scatter as they hear).
  std::size_t reported = layout.total() + 1;
  auto report = [&](std::size_t offset) {
    if (offset != reported) ready_from(offset);
    reported = offset;
  };
  if (layout.place().last()) {
    head();
    report(layout.head_begin());
  }  // else the stage's output gradient holds the next stage's, received by the caller
  for (int l = layout.stage_layers() - 1; l >= 0; --l) {
    block(l);
    report(layout.block_begin(l));
  }
  // The embedding's gradient is final only now (gpt2's tied wte has the head's part too).
  if (layout.place().first()) embedding();
  report(0);
}

}  // namespace meshtrain
