// The alpha-beta step-time model of `meshtrain plan`.
//
// What one step of one pipeline stage costs, per rank of that stage:
//
//   compute  = m · b·T · F_stage · r / t / cp / R
//              F_stage: the stage's model FLOPs per token (6·N + 6·L·Q·T split by stage, N the
//              family's product matrices: stage_flops_per_token; under LoRA 4·N + 6·L·Q·T + 6 per
//              adapter parameter a token passes, lora_stage_flops), r the recomputation factor (full: the
//              forward runs twice, 8/6 dense; selective: the attention scores' forward again,
//              + 2·L·Q·T, Q = NH·hs the query heads' width (C unless model.head_dim); the same under
//              model.attention = fused, whose backward recomputes them, in every mode), R the rank's
//              FLOP/s = peak · efficiency, divided
//              by the node's ranks on a host-only cluster (they share its cores), and slower by
//              1 + serial_fraction · (cores/ranks − 1) when fewer ranks than cores leave some idle.
//   comm     = the step's traffic as the trainer makes it (plan/traffic.hpp: calls and bytes per
//              group and kind, exact), each call priced by the alpha-beta functions below. They
//              are affine in the bytes, so a kind's c calls of B bytes in all cost
//              f(B) + (c − 1) · f(0): every call pays its latency, the bytes their bandwidth.
//              tp comm: the tensor-parallel all-reduces over t ranks. pp comm: the stage's sends
//              (a receive is the neighbour's send, counted there), the loss sum over p ranks and
//              a tied embedding's gradient over 2 (gpt2's wte; llama's with model.tie_embeddings). dp comm: the loss
//              sum, the gradient buckets or ZeRO's reduce-scatters, and ZeRO's all-gathers, over d ranks; under expert
//              parallelism the routed experts' share of them over d / ep ranks (their group lies inside a dp group: its
//              link is taken as the dp groups'). ep comm: the MoE blocks' all-to-alls over the ep ranks (their token
//              rows as plan/traffic.hpp plans them: an even load, every expert at its capacity when there is one).
//              Under context parallelism (cp > 1) each rank computes 1/cp of every sequence (its b·T/cp rows, and
//              their attention over keys the whole sequence long: 1/cp of the causal total, the chunks balanced),
//              d is the replicas (dp × cp) and their link the dp × cp groups'; cp comm: the ring's sends (a
//              receive is the neighbour's send), priced one by one and taken as exposed (the ring posts each
//              block's transfer before the kernel that folds the previous one; that overlap is not modelled),
//              and the MoE blocks' all-reduces of their routed counts over the cp ranks.
//   bubble   = (p − 1)/m · (compute + tp comm + ep comm + the stage's sends): (p − 1) micro-batch slots of
//              fill and drain, i.e. (p − 1)/(m + p − 1) of the pipelined time (GPipe and 1F1B alike).
//              ZB-H1 fills the cool-down with the deferred weight gradients: (p − 1)(F + B − W) for a
//              micro-batch's forward F, input gradient B and weight gradient W (parallel/pipeline_schedule.hpp,
//              exact for W ≤ F), so its bubble takes 2W off each of 1F1B's slots, W the weight-gradient
//              products' share of the compute (TokenFlops::weight).
//
// Activations and ZeRO's weight gathers travel in the compute type (4 bytes under fp32, 2 under
// bf16/fp16); gradients are reduced in fp32 under every precision. A group's traffic crosses the
// slowest link any group of its kind spans (ranks are placed tp fastest, then dp, then pp, in
// blocks of ranks_per_node); on a host-only node with more ranks than cores every message waits
// about a scheduler tick (Cluster::intra_link).
//
//   hidden   = what a device overlaps (GPU clusters only; on CPU ranks sharing cores communication
//              cannot hide behind compute, and the total is the sum). Per micro-batch the stage's
//              compute splits into forward F1 and backward B1 (recomputation's forward counted in B1).
//              Gradient reduction (dp's bucket all-reduces or ZeRO reduce-scatters, edp's alike; not the
//              loss sum), R in n calls: it runs while the backward that finishes it goes on — every
//              micro-batch's under ZeRO 2–3 (w = m windows), the step's last one under ZeRO 0–1
//              (w = 1), none in a pipeline run under ZeRO 0–1 (its schedule never arms the reduction:
//              it all starts after the last backward). Each window leaves its last call exposed (it
//              starts when the backward ends): hidden_R = min(R − w·R/n, w·B1), at least 0.
//              ZeRO-3's block gathers (the dp and edp all-gathers less the units gathered after the
//              update, which the next forward waits for), G in g calls, are prefetched one block ahead:
//              all but the first hide behind whatever compute the reduction left,
//              hidden_G = min(G − G/g, compute − hidden_R), at least 0.
//              The pipeline's sends are left in flight (train/pipeline_executor.cpp): each hides behind
//              the stage's next action, at most a forward's worth: hidden_S = Σ min(send, F1); the
//              bubble still holds them (fill and drain wait for them).
//              tp's all-reduces and ep's all-to-alls are on the critical path (the next kernel reads
//              their result), and the loss sums end the step: none of them hides.
//
// Not modelled: the optimizer update, the gradient-norm all-reduce (over the world's MPI
// communicator, not a group), data loading, checkpoints; two groups' traffic sharing one link.
#include "plan/step_time.hpp"

#include "core/accumulation.hpp"
#include "model/parameters.hpp"
#include "plan/lora_plan.hpp"
#include "plan/traffic.hpp"
#include "state/zero_stage.hpp"

#include <algorithm>
#include <cmath>

namespace meshtrain {
namespace {

using CollectiveTime = double (*)(double bytes, int ranks, const Link& link);

// c calls of B bytes in all: f(B) + (c − 1) · f(0), each call's latency and the bytes' bandwidth.
double priced(CollectiveTime f, const TrafficCount& c, int ranks, const Link& link) {
  if (c.calls == 0) return 0;
  return f(double(c.bytes), ranks, link) + double(c.calls - 1) * f(0, ranks, link);
}

// A group's collectives over `ranks` (a broadcast as a ring of scatter and gather, a barrier as an
// empty all-reduce); its point-to-point messages are priced by sends_s.
double collectives_s(const GroupTraffic& g, int ranks, const Link& link) {
  return priced(ring_allreduce_s, g[Collective::allreduce], ranks, link) +
         priced(ring_reduce_scatter_s, g[Collective::reduce_scatter], ranks, link) +
         priced(ring_allgather_s, g[Collective::allgather], ranks, link) +
         priced(ring_allgather_s, g[Collective::broadcast], ranks, link) +
         priced(ring_allreduce_s, g[Collective::barrier], ranks, link);
}

double sends_s(const GroupTraffic& g, const Link& link) {
  return priced([](double bytes, int, const Link& l) { return point_to_point_s(bytes, l); }, g[Collective::send], 2,
                link);
}

const GroupTraffic& group(const RankTraffic& traffic, const std::string& name) {
  static const GroupTraffic none;
  const auto it = traffic.find(name);
  return it == traffic.end() ? none : it->second;
}

// Some calls of one kind: their time and how many.
struct PricedCalls {
  double seconds = 0;
  std::int64_t calls = 0;
  void add(CollectiveTime f, const TrafficCount& c, int ranks, const Link& link) {
    seconds += priced(f, c, ranks, link);
    calls += c.calls;
  }
  // Every call but one of each of `windows`: the calls that can start before their window ends.
  double all_but_last(std::int64_t windows) const {
    return calls == 0 ? 0 : std::max(0.0, seconds - double(windows) * seconds / double(calls));
  }
};

// What a device hides of a stage's step (the model in the header comment above).
struct StageOverlap {
  const Config& cfg;
  const Layout& layout;
  const GridPosition& position;
  const RankTraffic& traffic;
  Link dp_link;
  double pipeline_sends_s;  // the pipeline's sends, priced (stage_step_times' pipeline_transfers_s)
  int m;                    // micro-batches
  double forward_s;         // F1: one micro-batch's forward
  double backward_s;        // B1: its backward (with recomputation)
  double compute_s;         // the step's

  double hidden_s() const {
    const int d = layout.replicas(), e = layout.expert_replicas();
    // The gradient reduction: dp's all-reduces less the loss sum, its and edp's reduce-scatters.
    PricedCalls reduction;
    TrafficCount buckets = group(traffic, "dp")[Collective::allreduce];
    buckets.calls -= 1;
    buckets.bytes -= loss_sum_bytes;
    reduction.add(ring_allreduce_s, buckets, d, dp_link);
    reduction.add(ring_reduce_scatter_s, group(traffic, "dp")[Collective::reduce_scatter], d, dp_link);
    reduction.add(ring_allreduce_s, group(traffic, "edp")[Collective::allreduce], e, dp_link);
    reduction.add(ring_reduce_scatter_s, group(traffic, "edp")[Collective::reduce_scatter], e, dp_link);
    const ZeroStage zero{cfg.parallel.zero};
    const int windows = zero.reduces_every_pass() ? m : layout.pp == 1 ? 1 : 0;
    const double hidden_reduction =
        windows == 0 ? 0 : std::min(reduction.all_but_last(windows), double(windows) * backward_s);

    // ZeRO-3's block gathers: every all-gather but those after the update.
    double hidden_gathers = 0;
    if (zero.compute_weights() == Held::working_and_shard) {
      const RankTraffic after_update = post_update_gathers(cfg, layout, position);
      PricedCalls blocks;
      for (const auto& [name, ranks] : {std::pair{"dp", d}, std::pair{"edp", e}}) {
        TrafficCount g = group(traffic, name)[Collective::allgather];
        const TrafficCount& before = group(after_update, name)[Collective::allgather];
        g.calls -= before.calls;
        g.bytes -= before.bytes;
        blocks.add(ring_allgather_s, g, ranks, dp_link);
      }
      hidden_gathers = std::max(0.0, std::min(blocks.all_but_last(1), compute_s - hidden_reduction));
    }

    // The pipeline's sends, each behind at most one forward.
    const TrafficCount& sends = group(traffic, "pp")[Collective::send];
    const double hidden_sends =
        sends.calls == 0 ? 0 : double(sends.calls) * std::min(pipeline_sends_s / double(sends.calls), forward_s);
    return hidden_reduction + hidden_gathers + hidden_sends;
  }
};

}  // namespace

double ring_allreduce_s(double bytes, int ranks, const Link& link) {
  if (ranks <= 1) return 0;
  const double p = ranks;
  return 2 * (p - 1) / p * bytes / link.bandwidth_Bps + 2 * (p - 1) * link.latency_s;
}

double ring_reduce_scatter_s(double bytes, int ranks, const Link& link) {
  if (ranks <= 1) return 0;
  const double p = ranks;
  return (p - 1) / p * bytes / link.bandwidth_Bps + (p - 1) * link.latency_s;
}

double ring_allgather_s(double bytes, int ranks, const Link& link) { return ring_reduce_scatter_s(bytes, ranks, link); }

double alltoall_s(double bytes, int ranks, const Link& link) {
  if (ranks <= 1) return 0;
  return bytes / link.bandwidth_Bps + (ranks - 1) * link.latency_s;
}

double point_to_point_s(double bytes, const Link& link) { return link.latency_s + bytes / link.bandwidth_Bps; }

Link group_link(const std::vector<std::vector<int>>& groups, const Cluster& cluster, int world) {
  int crowded = 1;  // the most ranks on a node any group uses
  for (const auto& group : groups) {
    for (int r : group) {
      if (cluster.node_of(r) != cluster.node_of(group.front())) return cluster.inter;
    }
    crowded = std::max(crowded, cluster.ranks_on_node(group.front(), world));
  }
  return cluster.intra_link(crowded);
}

double stage_flops_per_token(const ModelConfig& model, int stage, int stages) {
  return stage_flops_per_token(ParameterLayout(model, 1, 0, StagePlace{stage, stages}));
}

std::vector<StepTime> stage_step_times(const Config& cfg, const Layout& layout, const Cluster& cluster) {
  const ModelConfig& model = cfg.model;
  const int m = accumulation_steps(cfg, layout.dp);
  const int p = layout.pp, t = layout.tp, d = layout.replicas(), c = layout.cp;
  const double b = cfg.train.micro_batch, T = model.seq_len, Q = model.query_width();
  const int world = layout.world();
  const Link tp_link = group_link(tp_groups(layout), cluster, world);
  const Link pp_link = group_link(pp_groups(layout), cluster, world);
  const Link dp_link = group_link(dp_cp_groups(layout), cluster, world);
  const Link cp_link = group_link(cp_groups(layout), cluster, world);
  const Link ep_link = group_link(ep_groups(layout), cluster, world);

  std::vector<StepTime> stages;
  for (int s = 0; s < p; ++s) {
    const int L = ParameterLayout(model, t, 0, StagePlace{s, p}).stage_layers();
    StepTime st;
    st.stage = s;

    // Full recomputation runs the forward twice (dense: 8/6 of the count; LoRA: plan/lora_plan.hpp).
    const TokenFlops token_flops = training_stage_flops(model, s, p);
    double flops = token_flops.total;
    if (cfg.train.recompute == Recompute::full) flops += token_flops.forward;
    // Fused attention's backward recomputes the scores tile by tile: the extra of selective
    // recomputation, which it makes a no-op (the probabilities are never kept to be dropped).
    const bool rescores = model.attention == AttentionKernel::fused || cfg.train.recompute == Recompute::selective;
    if (rescores) flops += 2.0 * L * Q * T;
    const GridPosition position{0, 0, s};
    const int rank = Topology::global_rank(layout, position);
    const double rate = cluster.rank_flops(cfg.train.precision, cluster.ranks_on_node(rank, world));
    st.compute_s = m * b * T * flops / t / c / rate;

    const RankTraffic traffic = predicted_traffic(cfg, layout, position);
    st.tp_comm_s = collectives_s(group(traffic, "tp"), t, tp_link);
    const double pipeline_transfers_s = sends_s(group(traffic, "pp"), pp_link);
    st.pp_comm_s = pipeline_transfers_s + collectives_s(group(traffic, "pp"), p, pp_link) +
                   collectives_s(group(traffic, "tied"), 2, pp_link);
    st.ep_comm_s = priced(alltoall_s, group(traffic, "ep")[Collective::alltoall], layout.ep, ep_link);
    st.cp_comm_s = sends_s(group(traffic, "cp"), cp_link) + collectives_s(group(traffic, "cp"), c, cp_link);
    const double deferred_s =
        cfg.parallel.schedule == PipelineSchedule::zero_bubble_h1 ? 2 * st.compute_s * token_flops.weight / flops : 0.0;
    st.bubble_s = double(p - 1) / m *
                  (st.compute_s - deferred_s + st.tp_comm_s + st.ep_comm_s + st.cp_comm_s + pipeline_transfers_s);
    st.dp_comm_s = collectives_s(group(traffic, "dp"), d, dp_link) +
                   collectives_s(group(traffic, "edp"), layout.expert_replicas(), dp_link);
    if (!cluster.host_only) {
      const double per_micro = st.compute_s / m;
      const double forward_s = per_micro * token_flops.forward / flops;
      const StageOverlap overlap{
          cfg,         layout, position, traffic, dp_link, pipeline_transfers_s, m, forward_s, per_micro - forward_s,
          st.compute_s};
      st.hidden_s = overlap.hidden_s();
    }
    stages.push_back(st);
  }
  return stages;
}

StepTime predict_step_time(const Config& cfg, const Layout& layout, const Cluster& cluster) {
  const std::vector<StepTime> stages = stage_step_times(cfg, layout, cluster);
  return *std::max_element(stages.begin(), stages.end(),
                           [](const StepTime& a, const StepTime& b) { return a.total_s() < b.total_s(); });
}

}  // namespace meshtrain
