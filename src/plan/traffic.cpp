// The predicted traffic of one step (see traffic.hpp for the rules and where each comes from).
#include "plan/traffic.hpp"

#include "core/accumulation.hpp"
#include "core/families.hpp"
#include "core/lora_targets.hpp"
#include "core/model_sizes.hpp"
#include "model/parameters.hpp"
#include "parallel/pipeline_schedule.hpp"
#include "plan/lora_plan.hpp"
#include "plan/memory_plan.hpp"
#include "state/gradient_reduction.hpp"
#include "state/shard_map.hpp"
#include "state/zero_stage.hpp"

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <optional>
#include <utility>

namespace meshtrain {
namespace {

constexpr std::int64_t fp32_bytes = 4;  // gradients and optimizer side
constexpr std::int64_t loss_bytes = loss_sum_bytes;

// A forward or backward pass of one micro-batch over the stage, in the order the step runs them.
struct Pass {
  bool backward;
  int micro;
};

std::vector<Pass> step_passes(const Config& cfg, const Layout& grid, int stage, int accum) {
  std::vector<Pass> passes;
  if (grid.pp == 1) {
    for (int micro = 0; micro < accum; ++micro) {
      passes.push_back({false, micro});
      passes.push_back({true, micro});
    }
    return passes;
  }
  for (const Action& a : pipeline_schedule(cfg.parallel.schedule, grid.pp, stage, accum)) {
    // A zero-bubble backward visits (and under ZeRO-3 gathers) its blocks in its input-gradient half; its weight
    // half reports the same units to the same reductions, once per pass.
    const bool backward = a.kind == ActionKind::backward || a.kind == ActionKind::backward_input;
    if (a.kind == ActionKind::forward || backward) passes.push_back({backward, a.micro});
  }
  return passes;
}

// The blocks each pass asks for: ascending in forward, descending in backward.
std::vector<BlockVisit> block_visits(const std::vector<Pass>& passes, int blocks) {
  std::vector<BlockVisit> visits;
  for (const Pass& p : passes) {
    for (int k = 0; k < blocks; ++k) visits.push_back({p.backward ? blocks - 1 - k : k, p.backward});
  }
  return visits;
}

// How often full recomputation reruns each stage block's forward before its backward: every time
// but when its activations are still resident (the model keeps the last block it ran, forward or
// recomputed). Indexed by the stage's block.
std::vector<std::int64_t> recomputed_blocks(const std::vector<Pass>& passes, int blocks) {
  std::optional<std::pair<int, int>> resident;  // (micro-batch, block)
  std::vector<std::int64_t> reruns(std::size_t(blocks), 0);
  for (const Pass& p : passes) {
    if (!p.backward) {
      resident = std::pair{p.micro, blocks - 1};
      continue;
    }
    for (int l = blocks - 1; l >= 0; --l) {
      if (resident != std::pair{p.micro, l}) ++reruns[std::size_t(l)];
      resident = std::pair{p.micro, l};
    }
  }
  return reruns;
}

// A unit's data-parallel group's traffic: "dp", or under expert parallelism "edp" for the routed experts' units.
GroupTraffic& unit_group(RankTraffic& traffic, const UnitGroups& groups, bool experts) {
  return traffic[experts && groups.distinct() ? "edp" : "dp"];
}

// ZeRO 1–3's gathers after the update: every unit the model reads whole (ZeRO 3: the non-block ones),
// in the compute type.
void add_post_update_gathers(RankTraffic& traffic, const Config& cfg, const ParameterLayout& layout,
                             const UnitGroups& groups) {
  const ZeroStage stage{cfg.parallel.zero};
  if (!stage.shards()) return;
  const bool on_demand = stage.compute_weights() == Held::working_and_shard;
  for (const ShardUnit& u : layout.units()) {
    if (!on_demand || u.block < 0) {
      unit_group(traffic, groups, u.experts)
          .add(Collective::allgather, 1, std::int64_t(u.size()) * compute_bytes(cfg.train.precision));
    }
  }
}

// The loss sum, and each unit's gradient reduction and weight gathers in its data-parallel group's
// traffic.
void add_data_parallel(RankTraffic& traffic, const Config& cfg, const Layout& grid, const GridPosition& position,
                       const ParameterLayout& layout, const std::vector<Pass>& passes, int accum) {
  traffic["dp"].add(Collective::allreduce, 1, loss_bytes);
  const UnitGroups groups = UnitGroups::of_grid(grid.replicas(), 0, layout.ep());
  const auto group_of = [&](bool experts) -> GroupTraffic& { return unit_group(traffic, groups, experts); };
  // What the stage shards and when it reduces, asked of the one place that says it.
  const ZeroStage stage{cfg.parallel.zero};
  if (!stage.shards()) {
    const std::size_t bucket_bytes = std::size_t(cfg.parallel.bucket_mb * (1 << 20));
    for (const GradientBucket& b : gradient_buckets(layout, groups.distinct(), bucket_bytes)) {
      if (groups.size(b.experts) > 1) {
        group_of(b.experts).add(Collective::allreduce, 1, std::int64_t(b.end - b.begin) * fp32_bytes);
      }
    }
    return;
  }
  const auto& units = layout.units();
  const std::int64_t reductions = stage.reduces_every_pass() ? accum : 1;
  for (const ShardUnit& u : units) {
    group_of(u.experts).add(Collective::reduce_scatter, reductions, reductions * std::int64_t(u.size()) * fp32_bytes);
  }

  // After the update every unit the model reads whole is gathered; blocks held as working units are
  // gathered on demand instead, each of a block's units in its group.
  add_post_update_gathers(traffic, cfg, layout, groups);
  const bool on_demand = stage.compute_weights() == Held::working_and_shard;
  const std::int64_t weight_bytes = compute_bytes(cfg.train.precision);
  const auto gather = [&](const ShardUnit& u) {
    group_of(u.experts).add(Collective::allgather, 1, std::int64_t(u.size()) * weight_bytes);
  };
  if (!on_demand) return;
  const int first_block = layout.first_layer();
  const std::vector<BlockVisit> visits = block_visits(passes, layout.stage_layers());
  // LoRA's frozen base is sharded alike at ZeRO-3, its blocks gathered with the adapters' (its other
  // units once, when it is loaded).
  const std::optional<ParameterLayout> frozen =
      cfg.model.lora.enabled() ? std::optional(planned_frozen_layout(cfg, grid, position)) : std::nullopt;
  for (const int gathered : zero3_block_gathers(visits, layout.stage_layers())) {
    for (const ShardUnit& u : units) {
      if (u.block == first_block + gathered) gather(u);
    }
  }
  if (!frozen) return;
  // The base's rooms are never emptied (its weights never change): a step finds the blocks the last left.
  for (const int gathered : zero3_block_gathers(visits, layout.stage_layers(), true)) {
    for (const ShardUnit& u : frozen->units()) {
      if (u.block == first_block + gathered) gather(u);
    }
  }
}

// The stage's blocks (stage indices) whose MLP is routed experts.
std::vector<int> moe_stage_blocks(const ParameterLayout& layout) {
  std::vector<int> moe;
  for (int l = 0; l < layout.stage_layers(); ++l) {
    if (layout.model().is_moe_block(layout.first_layer() + l)) moe.push_back(l);
  }
  return moe;
}

// Σ of `reruns` over `blocks`.
std::int64_t reruns_of(const std::vector<std::int64_t>& reruns, const std::vector<int>& blocks) {
  std::int64_t n = 0;
  for (const int l : blocks) n += reruns[std::size_t(l)];
  return n;
}

// The sums at the ends of the tensor-parallel regions (model/decoder_stage.hpp's enter_region,
// leave_region), per pass of a stage of L blocks: each block's two entries (the norms' outputs) and two
// exits (the row-parallel products), the embedding's exit on the first stage, the head's entry on the
// last. Without sequence parallelism only the exits' forward and the entries' backward sum (all-reduce).
// With it every end is a collective: an exit a reduce-scatter forward and an all-gather backward, an
// entry the reverse, and the norms' weight gradients (each rank's from its rows) are summed once per
// block and for the final norm. A frozen embedding (LoRA) has no backward.
void add_region_ends(GroupTraffic& tp, const Config& cfg, const ParameterLayout& layout, const Pass& p,
                     std::int64_t activation_bytes) {
  const StagePlace& place = layout.place();
  const std::int64_t L = layout.stage_layers();
  const std::int64_t entries = 2 * L + (place.last() ? 1 : 0);
  const std::int64_t exits = 2 * L + (place.first() ? 1 : 0);
  if (!cfg.model.sequence_parallel) {
    const std::int64_t sums = p.backward ? entries : exits;
    tp.add(Collective::allreduce, sums, sums * activation_bytes);
    return;
  }
  const bool embedding_backward = place.first() && !cfg.model.lora.enabled();
  const std::int64_t scattered = p.backward ? entries : exits;
  const std::int64_t gathered = p.backward ? 2 * L + (embedding_backward ? 1 : 0) : entries;
  tp.add(Collective::reduce_scatter, scattered, scattered * activation_bytes);
  tp.add(Collective::allgather, gathered, gathered * activation_bytes);
  if (!p.backward) return;
  // A norm's weight gradient: its weight, and LayerNorm's shift (C elements each, the compute type).
  const std::int64_t norm_bytes = (family_shape(cfg.model.arch).biases ? 2 : 1) * std::int64_t(cfg.model.d_model) *
                                  compute_bytes(cfg.train.precision);
  tp.add(Collective::allreduce, L, L * 2 * norm_bytes);
  if (place.last()) tp.add(Collective::allreduce, 1, norm_bytes);
}

void add_tensor_parallel(GroupTraffic& tp, const Config& cfg, const ParameterLayout& layout,
                         const std::vector<Pass>& passes, std::int64_t activation_bytes, std::int64_t rows) {
  const StagePlace& place = layout.place();
  const std::int64_t L = layout.stage_layers();
  const std::int64_t moe_blocks = std::int64_t(moe_stage_blocks(layout).size());
  for (const Pass& p : passes) {
    add_region_ends(tp, cfg, layout, p, activation_bytes);
    if (!p.backward && place.last()) {
      tp.add(Collective::allreduce, 1, rows * fp32_bytes);      // row maxima
      tp.add(Collective::allreduce, 1, 2 * rows * fp32_bytes);  // Σ exp and the target logit
    }
    if (p.backward) {
      // An MoE block's gate weights' gradient (b·T·k floats), a dot product with the partial ys.
      const std::int64_t gates = rows * cfg.model.experts_per_token * fp32_bytes;
      tp.add(Collective::allreduce, moe_blocks, moe_blocks * gates);
    }
  }
  if (cfg.train.recompute == Recompute::full) {
    // A rerun forward skips the block's output: its attention's exit (and under sequence parallelism
    // both entries).
    const std::vector<std::int64_t> per_block = recomputed_blocks(passes, int(L));
    const std::int64_t reruns = std::accumulate(per_block.begin(), per_block.end(), std::int64_t(0));
    if (!cfg.model.sequence_parallel) {
      tp.add(Collective::allreduce, reruns, reruns * activation_bytes);
    } else {
      tp.add(Collective::reduce_scatter, reruns, reruns * activation_bytes);
      tp.add(Collective::allgather, 2 * reruns, 2 * reruns * activation_bytes);
    }
  }
}

// LoRA's sums over tp (model/impl/lora_parts.hpp, model/families/llama_moe.cpp), per stage block and
// pass, of the compute type: h [b·T, r] of each targeted row-parallel module in forward, of each
// column-parallel one (its gradient) in backward; an MoE block's routed experts' down h over the
// received rows [received, r] in forward, gate's and up's gradient in backward. A forward that
// full recomputation reruns makes its h again and sums them again.
void add_lora_tensor_parallel(GroupTraffic& tp, const Config& cfg, const ParameterLayout& layout,
                              const std::vector<Pass>& passes, std::int64_t rows) {
  const ModelConfig& m = cfg.model;
  const std::int64_t row_bytes = std::int64_t(m.lora.rank) * compute_bytes(cfg.train.precision);
  const std::int64_t received = m.experts > 0 ? planned_received_rows(m, rows) : 0;
  const int L = layout.stage_layers();
  const std::size_t blocks = std::size_t(L);
  std::vector<TrafficCount> forward(blocks), backward(blocks);  // one pass's, per block
  for (int l = 0; l < L; ++l) {
    const LoraModuleSplit s = lora_module_split(m, layout.first_layer() + l);
    forward[std::size_t(l)] = {s.row_parallel + s.expert_row_parallel,
                               (s.row_parallel * rows + s.expert_row_parallel * received) * row_bytes};
    backward[std::size_t(l)] = {s.column_parallel + s.expert_column_parallel,
                                (s.column_parallel * rows + s.expert_column_parallel * received) * row_bytes};
  }
  const auto add = [&](const TrafficCount& block, std::int64_t times) {
    tp.add(Collective::allreduce, times * block.calls, times * block.bytes);
  };
  for (const Pass& p : passes) {
    for (int l = 0; l < L; ++l) add(p.backward ? backward[std::size_t(l)] : forward[std::size_t(l)], 1);
  }
  if (cfg.train.recompute != Recompute::full) return;
  const std::vector<std::int64_t> reruns = recomputed_blocks(passes, L);
  for (int l = 0; l < L; ++l) add(forward[std::size_t(l)], reruns[std::size_t(l)]);
}

// Expert parallelism's exchanges (model/impl/expert_exchange.hpp), per MoE block of the stage and
// micro-batch: forward the kept counts (an all-to-all of E int64, El = E / ep to each peer; none
// under model.pad_to_capacity, whose counts are the capacity), then
// the rows to the experts' ranks and their outputs back (two alltoallv); backward the rows'
// gradients there and back (two more); a forward that full recomputation reruns repeats its three. Under
// lora.dropout on the routed experts each forward also sends its rows' assignment ids, two int64 per row
// (one more alltoallv).
void add_expert_parallel(GroupTraffic& ep, const Config& cfg, const Layout& grid, const ParameterLayout& layout,
                         const std::vector<Pass>& passes, std::int64_t rows) {
  const ModelConfig& m = cfg.model;
  const std::vector<int> moe = moe_stage_blocks(layout);
  const std::int64_t blocks = std::int64_t(moe.size());
  const std::int64_t count_bytes =
      std::int64_t(grid.ep - 1) * (m.experts / grid.ep) * std::int64_t(sizeof(std::int64_t));
  const std::int64_t row_bytes =
      planned_exchange_rows(m, rows, grid.ep) * m.d_model * compute_bytes(cfg.train.precision);
  std::int64_t forwards = 0, backwards = 0;
  for (const Pass& p : passes) (p.backward ? backwards : forwards) += blocks;
  if (cfg.train.recompute == Recompute::full) {
    forwards += reruns_of(recomputed_blocks(passes, layout.stage_layers()), moe);
  }
  if (!m.pad_to_capacity) ep.add(Collective::alltoall, forwards, forwards * count_bytes);  // padded: sizes fixed
  const std::int64_t exchanges = 2 * (forwards + backwards);
  ep.add(Collective::alltoall, exchanges, exchanges * row_bytes);
  if (lora_drops_expert_inputs(m)) {
    const std::int64_t id_bytes = planned_exchange_rows(m, rows, grid.ep) * 2 * std::int64_t(sizeof(std::int64_t));
    ep.add(Collective::alltoall, forwards, forwards * id_bytes);
  }
}

// The ring of each attention (model/impl/context_ring.hpp): per block of every forward pass, and of every
// forward full recomputation reruns, cp − 1 K/V blocks each way; per block of every backward pass as many,
// and cp dK/dV partial sums (fp32) each way. An MoE block's forward (rerun too) sums its routed counts over
// the group (model/families/llama_moe.cpp): one all-reduce of E int32.
void add_context_parallel(GroupTraffic& cp, const Config& cfg, const Layout& grid, const ParameterLayout& layout,
                          const std::vector<Pass>& passes, std::int64_t rows) {
  const ModelConfig& m = cfg.model;
  const int L = layout.stage_layers();
  const std::int64_t elements = rows * 2 * (m.kv_head_count() / grid.tp) * m.head_size();
  const std::int64_t kv_bytes = elements * compute_bytes(cfg.train.precision), sum_bytes = elements * fp32_bytes;
  std::int64_t forwards = 0, backwards = 0;
  for (const Pass& p : passes) (p.backward ? backwards : forwards) += L;
  if (cfg.train.recompute == Recompute::full) {
    const std::vector<std::int64_t> reruns = recomputed_blocks(passes, L);
    forwards += std::accumulate(reruns.begin(), reruns.end(), std::int64_t(0));
  }
  const std::int64_t blocks = (forwards + backwards) * (grid.cp - 1), sums = backwards * grid.cp;
  for (const Collective kind : {Collective::send, Collective::recv}) {
    cp.add(kind, blocks, blocks * kv_bytes);
    cp.add(kind, sums, sums * sum_bytes);
  }
  const std::vector<int> moe = moe_stage_blocks(layout);
  if (moe.empty()) return;
  std::int64_t routings = 0;
  for (const Pass& p : passes) routings += p.backward ? 0 : std::int64_t(moe.size());
  if (cfg.train.recompute == Recompute::full) routings += reruns_of(recomputed_blocks(passes, L), moe);
  cp.add(Collective::allreduce, routings, routings * m.experts * std::int64_t(sizeof(std::int32_t)));
}

void add_pipeline(GroupTraffic& pp, const Config& cfg, const Layout& grid, int stage, int accum,
                  std::int64_t activation_bytes) {
  pp.add(Collective::allreduce, 1, loss_bytes);
  for (const Action& a : pipeline_schedule(cfg.parallel.schedule, grid.pp, stage, accum)) {
    if (a.kind == ActionKind::send_activation || a.kind == ActionKind::send_gradient) {
      pp.add(Collective::send, 1, activation_bytes);
    } else if (a.kind == ActionKind::recv_activation || a.kind == ActionKind::recv_gradient) {
      pp.add(Collective::recv, 1, activation_bytes);
    }
  }
}

}  // namespace

std::int64_t planned_received_rows(const ModelConfig& model, std::int64_t tokens) {
  return std::int64_t(expert_rows(model, std::size_t(tokens)));
}

std::int64_t planned_exchange_rows(const ModelConfig& model, std::int64_t tokens, int ep) {
  return planned_received_rows(model, tokens) * (ep - 1) / ep;
}

std::vector<int> zero3_block_gathers(const std::vector<BlockVisit>& visits, int blocks, bool kept) {
  const int rooms = std::min(blocks, 2);
  std::vector<int> holds(std::size_t(std::max(rooms, 1)), -1), gathered;
  const auto place = [&](int block) {
    int& room = holds[std::size_t(block % rooms)];
    if (room == block) return;
    room = block;
    gathered.push_back(block);
  };
  int previous = -1, direction = 1;
  const auto step = [&] {
    for (const BlockVisit& v : visits) {
      direction = v.block == previous ? -direction : v.block > previous ? 1 : -1;
      previous = v.block;
      place(v.block);
      const int next = v.block + direction;
      if (next >= 0 && next < blocks) place(next);
    }
  };
  if (kept) {  // the rooms and the direction as the previous step left them
    step();
    gathered.clear();
  }
  step();
  return gathered;
}

RankTraffic enumerated_traffic(const Config& cfg, const Layout& grid, const GridPosition& position, int accum) {
  const int stage = position.pp_rank;
  const StagePlace place{stage, grid.pp};
  const ParameterLayout layout = planned_layout(cfg, grid, position);
  const std::vector<Pass> passes = step_passes(cfg, grid, stage, accum);
  const std::int64_t rows = std::int64_t(cfg.train.micro_batch) * std::int64_t(local_positions(cfg.model));
  const std::int64_t activation_bytes = rows * cfg.model.d_model * compute_bytes(cfg.train.precision);
  // A stage's input and output: this rank's block of the rows under sequence parallelism.
  const std::int64_t message_bytes = std::int64_t(residual_rows(cfg.model, std::size_t(rows), grid.tp)) *
                                     cfg.model.d_model * compute_bytes(cfg.train.precision);

  RankTraffic traffic;
  add_data_parallel(traffic, cfg, grid, position, layout, passes, accum);
  if (grid.tp > 1) {
    add_tensor_parallel(traffic["tp"], cfg, layout, passes, activation_bytes, rows);
    if (cfg.model.lora.enabled()) add_lora_tensor_parallel(traffic["tp"], cfg, layout, passes, rows);
  }
  if (grid.ep > 1) add_expert_parallel(traffic["ep"], cfg, grid, layout, passes, rows);
  if (grid.cp > 1) add_context_parallel(traffic["cp"], cfg, grid, layout, passes, rows);
  if (grid.pp > 1) {
    add_pipeline(traffic["pp"], cfg, grid, stage, accum, message_bytes);
    // A tied table's two gradients (none under LoRA: the base is frozen).
    if ((place.first() || place.last()) && cfg.model.ties_output_head() && !cfg.model.lora.enabled()) {
      // The rank's slice of the wte unit (the whole tensor at stage 0: a shard group of one).
      const ZeroStage zero{cfg.parallel.zero};
      const ShardMap map(layout, zero.shard_group_size(grid.replicas()), 0);
      const std::int64_t elements = std::int64_t(map.shard(layout.unit_at(layout.tied_table().offset)));
      traffic["tied"].add(Collective::allreduce, 1, elements * fp32_bytes);
    }
  }
  return traffic;
}

int affine_micros(const Layout& grid) { return 2 * grid.pp + 2; }

RankTraffic post_update_gathers(const Config& cfg, const Layout& grid, const GridPosition& position) {
  RankTraffic traffic;
  const ParameterLayout layout = planned_layout(cfg, grid, position);
  add_post_update_gathers(traffic, cfg, layout, UnitGroups::of_grid(grid.replicas(), 0, layout.ep()));
  return traffic;
}

RankTraffic predicted_traffic(const Config& cfg, const Layout& grid, const GridPosition& position) {
  const int accum = accumulation_steps(cfg, grid.dp);
  const int a = affine_micros(grid);
  if (accum <= a + 1) return enumerated_traffic(cfg, grid, position, accum);
  // Past the pipeline's warm-up and cool-down every further micro-batch adds the same calls and
  // bytes: t(accum) = t(a) + (accum − a) · (t(a + 1) − t(a)), in O(a) instead of O(accum).
  const RankTraffic first = enumerated_traffic(cfg, grid, position, a);
  const RankTraffic next = enumerated_traffic(cfg, grid, position, a + 1);
  RankTraffic out = first;
  const std::int64_t more = accum - a;
  for (const auto& [group, counts] : next) {
    const GroupTraffic before = first.contains(group) ? first.at(group) : GroupTraffic{};
    for (int k = 0; k < collective_kinds; ++k) {
      const TrafficCount& b = before.by_kind[std::size_t(k)];
      const TrafficCount& n = counts.by_kind[std::size_t(k)];
      out[group].by_kind[std::size_t(k)] = {b.calls + more * (n.calls - b.calls), b.bytes + more * (n.bytes - b.bytes)};
    }
  }
  return out;
}

}  // namespace meshtrain
