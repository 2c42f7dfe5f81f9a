// Predicted time of one optimizer step (`meshtrain plan`): compute from the model's FLOPs and the
// cluster's rate, communication from an alpha-beta model of each collective, and the pipeline's
// bubble. Every assumption is stated where it is made (step_time.cpp) and in share/docs/usage.md.
//
// Size letters: b micro-batch, T seq_len, C d_model, m micro-batches per step (accum), p stages,
// t tensor-parallel degree, d data-parallel degree, α latency, β bandwidth.
#pragma once

#include "core/config.hpp"
#include "parallel/topology.hpp"
#include "plan/cluster.hpp"

#include <vector>

namespace meshtrain {

struct StepTime {
  int stage = 0;         // the pipeline stage these figures are for
  double compute_s = 0;  // forward and backward (and recomputation) FLOPs of m micro-batches
  double tp_comm_s = 0;  // tensor-parallel all-reduces
  double pp_comm_s = 0;  // activations and gradients between stages, the loss sum, gpt2's tied wte gradient
  double dp_comm_s = 0;  // the loss sum, gradient reduction over dp (experts': dp / ep), ZeRO's gathers
  double ep_comm_s = 0;  // expert parallelism's all-to-alls: the MoE blocks' token rows and their counts
  double cp_comm_s = 0;  // context parallelism's ring: K/V blocks and their dK/dV sums, rank to rank
  double bubble_s = 0;   // pipeline fill and drain
  // The part of the communication above that a device hides behind the compute (GPU clusters, whose
  // groups communicate on streams of their own; 0 on host-only clusters): the gradient reduction
  // behind the backward that finishes it, ZeRO-3's prefetched block gathers, the pipeline's sends in
  // flight (step_time.cpp). The total subtracts it: exposed communication is what is left.
  double hidden_s = 0;
  double total_s() const {
    return compute_s + tp_comm_s + pp_comm_s + dp_comm_s + ep_comm_s + cp_comm_s + bubble_s - hidden_s;
  }
};

// Ring collectives over `ranks` ranks on `link`, for a buffer of `bytes` (the whole buffer, not a
// rank's share): all-reduce 2(p−1)/p · bytes/β + 2(p−1)·α; reduce-scatter and all-gather
// (p−1)/p · bytes/β + (p−1)·α; point-to-point α + bytes/β. 0 for one rank.
double ring_allreduce_s(double bytes, int ranks, const Link& link);
double ring_reduce_scatter_s(double bytes, int ranks, const Link& link);
double ring_allgather_s(double bytes, int ranks, const Link& link);
// An all-to-all in which a rank sends `bytes` in all to the other ranks (what the counting Comm
// counts; each rank receives as much meanwhile): p − 1 pairwise exchanges, each paying α, the bytes
// β once: bytes/β + (p−1)·α. 0 for one rank.
double alltoall_s(double bytes, int ranks, const Link& link);
double point_to_point_s(double bytes, const Link& link);

// The link a group's traffic crosses in a world of `world` ranks: the inter-node link when any
// group of the kind has ranks on two nodes, else the intra-node one (Cluster::intra_link).
Link group_link(const std::vector<std::vector<int>>& groups, const Cluster& cluster, int world);

// Model FLOPs per token of pipeline stage `stage` (llm.c's count, 6·N + 6·L·C·T, split by stage:
// each stage's blocks; gpt2's wpe on the first stage and its tied wte — the output head's GEMM — on
// the last; llama's lm_head and norm on the last, its embed_tokens, a lookup, nowhere). N is every
// product's matrix of the family: gpt2's 3C-wide c_attn and 4C-wide MLP, llama's q, k, v (kv heads
// narrower under grouped-query attention) and SwiGLU's gate, up and down, an MoE block's routed
// experts counted k/E (active_share) (model/parameters.hpp, flops_per_token). The stages sum to flops_per_token().
// Without recomputation.
double stage_flops_per_token(const ModelConfig& model, int stage, int stages);

// The step time of every pipeline stage, and the slowest one (what the step takes).
std::vector<StepTime> stage_step_times(const Config& cfg, const Layout& layout, const Cluster& cluster);
StepTime predict_step_time(const Config& cfg, const Layout& layout, const Cluster& cluster);

}  // namespace meshtrain
