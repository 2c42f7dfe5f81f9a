// What the routers of a rank's MoE blocks saw (share/docs/usage.md, Mixture of experts): the
// numbers behind the metrics file's `moe` object and the log's MoE line, summed over the forward
// passes since the model last cleared them.
#pragma once

#include <cstdint>
#include <vector>

namespace meshtrain {

struct RouterStatistics {
  std::vector<int> blocks;       // global indices of the stage's MoE blocks, in order
  int experts = 0;               // E
  std::vector<double> routed;    // blocks × E: assignments routed to each expert, before capacity
  std::vector<double> kept;      // blocks × E: assignments each expert computed (routed less dropped)
  std::vector<double> aux_loss;  // per block: Σ over forward passes of the pass's load-balancing loss
  std::vector<double> z_loss;    // per block: Σ over forward passes of the pass's router z-loss
  std::int64_t passes = 0;       // forward passes (micro-batches) summed

  bool empty() const { return blocks.empty(); }
  double routed_at(std::size_t b, int e) const { return routed[b * std::size_t(experts) + std::size_t(e)]; }
  double kept_at(std::size_t b, int e) const { return kept[b * std::size_t(experts) + std::size_t(e)]; }
};

}  // namespace meshtrain
