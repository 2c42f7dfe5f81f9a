// The alpha-beta step-time model of `meshtrain plan`.
//
// What one step of one pipeline stage costs, per rank of that stage:
//
//   compute  = m · b·T · F_stage · r / t / R
//              F_stage: the stage's model FLOPs per token (6·N + 6·L·C·T split by stage), r the
//              recomputation factor (full: the forward runs twice, 8/6; selective: the attention
//              scores' forward again, + 2·L·C·T), R the rank's FLOP/s = peak · efficiency, divided
//              by the node's ranks on a host-only cluster (they share its cores), and slower by
//              1 + serial_fraction · (cores/ranks − 1) when fewer ranks than cores leave some idle.
//   tp comm  = m · n_ar · allreduce(b·T·C·e, t)
//              n_ar per micro-batch: 2 per block in forward (attention and MLP output rows), 2 in
//              backward (their inputs' gradients), 2 more with full recomputation; +1 for the
//              vocab-parallel embedding (first stage), +1 for the head's input gradient and 2 small
//              ones of b·T floats for the vocab-parallel loss (last stage).
//   pp comm  = m · k · p2p(b·T·C·e) + allreduce(wte's gradient, 2)
//              k = 1 send each way per neighbour: the stage's activation forward and its input's
//              gradient backward (a receive is the neighbour's send, counted there); the tied wte
//              gradient is summed between the first and last stage once a step.
//   bubble   = (p − 1)/m · (compute + tp comm + m · k · p2p): (p − 1) micro-batch slots of fill
//              and drain, i.e. (p − 1)/(m + p − 1) of the pipelined time (GPipe and 1F1B alike).
//   dp comm  = the reduction of the rank's gradients, Ψ = its parameters · e bytes, in buckets of
//              parallel.bucket_mb (α once per bucket): ZeRO 0 all-reduce(Ψ); 1 and 2
//              reduce-scatter(Ψ) + all-gather(Ψ) of the updated parameters, the same volume;
//              3 reduce-scatter(Ψ) + an all-gather(Ψ) of the parameters in each micro-batch's
//              forward and again in its backward.
//
// e = 4 bytes under fp32, 2 under bf16/fp16 (weights, activations and gradients travel in the
// compute type). A group's traffic crosses the slowest link any group of its kind spans (ranks are
// placed tp fastest, then dp, then pp, in blocks of ranks_per_node); on a host-only node with more
// ranks than cores every message waits about a scheduler tick (Cluster::intra_link). Nothing overlaps: the total is
// the sum (on CPU ranks sharing cores, communication cannot hide behind compute anyway). Not
// modelled: the optimizer update, the gradient-norm all-reduce, data loading, checkpoints.
#include "plan/step_time.hpp"

#include "model/parameters.hpp"
#include "core/accumulation.hpp"

#include <algorithm>
#include <cmath>

namespace meshtrain {
namespace {

double element_bytes(const std::string& precision) { return precision == "fp32" ? 4.0 : 2.0; }

double tensor_elements(const TensorInfo& t) {
  double n = 1;
  for (auto d : t.shape) n *= double(d);
  return n;
}

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
  const ParameterLayout layout(model, 1, 0, StagePlace{stage, stages});
  double parameters = 0;
  for (const TensorInfo& t : layout.tensors()) {
    // The tied wte is one matrix: its FLOPs are the output head's, on the last stage.
    if (t.name == "wte.weight" && !layout.place().last()) continue;
    parameters += tensor_elements(t);
  }
  return 6.0 * parameters + 6.0 * layout.stage_layers() * double(model.d_model) * model.seq_len;
}

std::vector<StepTime> stage_step_times(const Config& cfg, const Layout& layout, const Cluster& cluster) {
  const ModelConfig& model = cfg.model;
  const int m = accumulation_steps(cfg, layout.dp);
  const int p = layout.pp, t = layout.tp, d = layout.dp;
  const double b = cfg.train.micro_batch, T = model.seq_len, C = model.d_model;
  const double e = element_bytes(cfg.train.precision);
  const double activation_bytes = b * T * C * e;
  const int world = layout.world();
  const Link tp_link = group_link(tp_groups(layout), cluster, world);
  const Link pp_link = group_link(pp_groups(layout), cluster, world);
  const Link dp_link = group_link(dp_groups(layout), cluster, world);
  const double bucket_bytes = cfg.parallel.bucket_mb * 1024.0 * 1024.0;

  std::vector<StepTime> stages;
  for (int s = 0; s < p; ++s) {
    const ParameterLayout held(model, t, 0, StagePlace{s, p});
    const bool first = held.place().first(), last = held.place().last();
    const int L = held.stage_layers();
    StepTime st;
    st.stage = s;

    double flops = stage_flops_per_token(model, s, p);
    if (cfg.train.recompute == "full") flops *= 8.0 / 6.0;
    if (cfg.train.recompute == "selective") flops += 2.0 * L * C * T;
    const int rank = Topology::global_rank(layout, GridPosition{0, 0, s});
    const double rate = cluster.rank_flops(cfg.train.precision, cluster.ranks_on_node(rank, world));
    st.compute_s = m * b * T * flops / t / rate;

    if (t > 1) {
      const int per_block = cfg.train.recompute == "full" ? 6 : 4;
      const double wide = per_block * L + (first ? 1 : 0) + (last ? 1 : 0);
      st.tp_comm_s = m * wide * ring_allreduce_s(activation_bytes, t, tp_link);
      if (last) st.tp_comm_s += m * 2 * ring_allreduce_s(b * T * 4, t, tp_link);
    }

    const int sends = (first ? 0 : 1) + (last ? 0 : 1);
    const double pipeline_transfers_s = m * sends * point_to_point_s(activation_bytes, pp_link);
    st.pp_comm_s = pipeline_transfers_s;
    if (p > 1 && (first || last)) {
      const TensorInfo& wte = held.find("wte.weight");
      st.pp_comm_s += ring_allreduce_s(double(wte.numel) * e, 2, pp_link);
    }
    st.bubble_s = double(p - 1) / m * (st.compute_s + st.tp_comm_s + pipeline_transfers_s);

    if (d > 1) {
      const double psi = double(held.total()) * e;
      const double buckets = std::max(1.0, std::ceil(psi / bucket_bytes));
      // The α of the extra buckets, per collective over the whole gradient.
      const double per_bucket_latency = (buckets - 1) * (d - 1) * dp_link.latency_s;
      if (cfg.parallel.zero == 0) {
        st.dp_comm_s = ring_allreduce_s(psi, d, dp_link) + 2 * per_bucket_latency;
      } else if (cfg.parallel.zero < 3) {
        st.dp_comm_s = ring_reduce_scatter_s(psi, d, dp_link) + ring_allgather_s(psi, d, dp_link) +
                       2 * per_bucket_latency;
      } else {
        st.dp_comm_s = ring_reduce_scatter_s(psi, d, dp_link) + 2 * m * ring_allgather_s(psi, d, dp_link) +
                       (1 + 2 * m) * per_bucket_latency;
      }
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
