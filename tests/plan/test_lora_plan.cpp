// The planner's LoRA (plan/lora_plan.hpp, and the trainer's sizing code it asks) against counts
// worked out here by hand from the shape: the adapters' names, shapes and tensor-parallel pieces,
// the trainable count, every memory category of a LoRA rank beside full training's, FLOPs, traffic
// and the step's compute.
#include "plan/lora_plan.hpp"

#include "model/lora_adapters.hpp"
#include "model/parameters.hpp"
#include "plan/memory_plan.hpp"
#include "plan/planner.hpp"
#include "plan/traffic.hpp"

#include <gtest/gtest.h>

#include <map>

namespace meshtrain {
namespace test_lora_plan {

// C 64, NH 4 (head size 16, query width Q 64), KV 2 (k and v rows 32), SwiGLU H 176, V 259, T 32.
ModelConfig small_llama(int layers, int rank, const std::string& targets) {
  ModelConfig m{layers, 4, 64, 259, 32};
  m.arch = Arch::llama;
  m.kv_heads = 2;
  m.ffn_hidden = 176;
  m.lora.rank = rank;
  m.lora.targets = targets;
  return m;
}

// By hand, r 3: Σ (in + out) per block over the modules
//   q 64 + 64 = 128, k 64 + 32 = 96, v 96, o 64 + 64 = 128         attention: 448
//   gate 64 + 176 = 240, up 240, down 176 + 64 = 240                all-linear: 448 + 720 = 1168
// so r·Σ = 3504 per block all-linear, 1344 attention only.
constexpr std::int64_t all_linear_block = 3504, attention_block = 1344;
// The base: one block 46,208 parameters, embed_tokens and lm_head 259·64 = 16,576 each, norm 64
// (test_llama_plan's count).
constexpr std::int64_t base_block = 46'208, table = 16'576, final_norm = 64;

TEST(LoraPlan, TrainableCountByHand) {
  for (int layers : {1, 2, 3}) {
    EXPECT_EQ(lora_trainable_parameters(small_llama(layers, 3, "all-linear")), layers * all_linear_block);
    EXPECT_EQ(lora_trainable_parameters(small_llama(layers, 3, "q_proj,k_proj,v_proj,o_proj")),
              layers * attention_block);
    EXPECT_EQ(lora_trainable_parameters(small_llama(layers, 8, "v_proj,down_proj")), layers * 8 * (96 + 240));
    EXPECT_EQ(full_trainable_parameters(small_llama(layers, 3, "all-linear")),
              layers * base_block + 2 * table + final_norm);
  }
  EXPECT_EQ(trainable_parameters(small_llama(2, 0, "all-linear")), 2 * base_block + 2 * table + final_norm);
  EXPECT_EQ(trainable_parameters(small_llama(2, 3, "all-linear")), 2 * all_linear_block);
}

// The adapters of block 1 as the trainer lays them out (ParameterLayout::adapters), in PEFT's names
// (issue 28: base_model.model.model.<these>) and shapes [r, in] and [out, r], written out; one unit
// per block; their sum is the count.
TEST(LoraPlan, AdapterNamesAndShapesAsHuggingFaceNamesThem) {
  const ModelConfig m = small_llama(2, 3, "all-linear");
  const ParameterLayout adapters = ParameterLayout::adapters(m);
  ASSERT_EQ(adapters.tensors().size(), 28u);
  const std::vector<std::tuple<std::string, std::uint64_t, std::uint64_t>> block1 = {
      {"layers.1.self_attn.q_proj.lora_A.weight", 3, 64}, {"layers.1.self_attn.q_proj.lora_B.weight", 64, 3},
      {"layers.1.self_attn.k_proj.lora_A.weight", 3, 64}, {"layers.1.self_attn.k_proj.lora_B.weight", 32, 3},
      {"layers.1.self_attn.v_proj.lora_A.weight", 3, 64}, {"layers.1.self_attn.v_proj.lora_B.weight", 32, 3},
      {"layers.1.self_attn.o_proj.lora_A.weight", 3, 64}, {"layers.1.self_attn.o_proj.lora_B.weight", 64, 3},
      {"layers.1.mlp.gate_proj.lora_A.weight", 3, 64},    {"layers.1.mlp.gate_proj.lora_B.weight", 176, 3},
      {"layers.1.mlp.up_proj.lora_A.weight", 3, 64},      {"layers.1.mlp.up_proj.lora_B.weight", 176, 3},
      {"layers.1.mlp.down_proj.lora_A.weight", 3, 176},   {"layers.1.mlp.down_proj.lora_B.weight", 64, 3}};
  std::int64_t sum = 0;
  for (std::size_t i = 0; i < adapters.tensors().size(); ++i) {
    const TensorInfo& t = adapters.tensors()[i];
    ASSERT_EQ(t.shape.size(), 2u);
    EXPECT_EQ(t.numel, t.shape[0] * t.shape[1]);
    sum += std::int64_t(t.numel);
    if (i < 14) continue;
    const auto& [name, rows, cols] = block1[i - 14];
    EXPECT_EQ(t.name, name);
    EXPECT_EQ(t.shape[0], rows) << name;
    EXPECT_EQ(t.shape[1], cols) << name;
  }
  EXPECT_EQ(sum, lora_trainable_parameters(m));
  ASSERT_EQ(adapters.units().size(), 2u);
  EXPECT_EQ(adapters.units()[1].block, 1);
  EXPECT_EQ(adapters.units()[1].size(), std::size_t(all_linear_block));
}

// tp 2, r 3 (which 2 does not divide): column-parallel modules keep A whole and halve B's rows,
// row-parallel ones halve A's columns and keep B whole; by hand, per block on each tp rank
//   q 3·64 + 32·3 = 288, k 192 + 16·3 = 240, v 240, o 3·32 + 64·3 = 288,
//   gate 192 + 88·3 = 456, up 456, down 3·88 + 192 = 456            = 2424.
TEST(LoraPlan, TensorParallelPiecesFollowTheBaseSplit) {
  const ModelConfig m = small_llama(2, 3, "all-linear");
  std::int64_t counted = 0;
  for (int tp_rank : {0, 1}) {
    const ParameterLayout adapters = ParameterLayout::adapters(m, 2, tp_rank);
    using Shape = std::vector<std::uint64_t>;
    std::map<std::string, Shape> local;
    for (const TensorInfo& t : adapters.tensors()) {
      local[t.name] = t.local_shape;
      const bool is_a = t.name.find("lora_A") != std::string::npos;
      const bool row_parallel =
          t.name.find("o_proj") != std::string::npos || t.name.find("down_proj") != std::string::npos;
      EXPECT_EQ(t.replicated, is_a != row_parallel) << t.name;
      if (adapters.holds_counted_copy(t)) counted += std::int64_t(t.piece.elements());
    }
    EXPECT_EQ(adapters.total(), 2u * 2424u);
    EXPECT_EQ(local["layers.0.self_attn.q_proj.lora_A.weight"], Shape({3, 64}));
    EXPECT_EQ(local["layers.0.self_attn.q_proj.lora_B.weight"], Shape({32, 3}));
    EXPECT_EQ(local["layers.0.self_attn.k_proj.lora_B.weight"], Shape({16, 3}));
    EXPECT_EQ(local["layers.0.self_attn.o_proj.lora_A.weight"], Shape({3, 32}));
    EXPECT_EQ(local["layers.0.self_attn.o_proj.lora_B.weight"], Shape({64, 3}));
    EXPECT_EQ(local["layers.1.mlp.gate_proj.lora_B.weight"], Shape({88, 3}));
    EXPECT_EQ(local["layers.1.mlp.down_proj.lora_A.weight"], Shape({3, 88}));
    EXPECT_EQ(local["layers.1.mlp.down_proj.lora_B.weight"], Shape({64, 3}));
  }
  // Each element once over the tp group: the global count.
  EXPECT_EQ(counted, lora_trainable_parameters(m));
}

// GPT-2, C 16, NH 4, r 2, all-linear: c_attn 16 → 48, attn.c_proj 16 → 16, c_fc 16 → 64, mlp.c_proj 64 → 16
// (c_proj names both), PEFT's shapes [r, in] and [out, r] though Conv1D stores W [in, out]; by hand
// r·Σ (in + out) = 2·(64 + 32 + 80 + 80) = 512 a block. tp 2: c_attn's B rows split as its weight's columns,
// in three groups q|k|v (rank 1's rows 8-15, 24-31, 40-47), the c_proj A's columns halved.
TEST(LoraPlan, Gpt2AdaptersConv1dAndTheirTensorParallelPieces) {
  ModelConfig m{2, 4, 16, 61, 32};
  m.arch = Arch::gpt2;
  m.lora.rank = 2;
  m.lora.targets = "all-linear";
  EXPECT_EQ(lora_adapted_module_count(m), 4u);
  const ParameterLayout adapters = ParameterLayout::adapters(m);
  using Shape = std::vector<std::uint64_t>;
  const std::vector<std::pair<std::string, Shape>> block1 = {
      {"h.1.attn.c_attn.lora_A.weight", {2, 16}}, {"h.1.attn.c_attn.lora_B.weight", {48, 2}},
      {"h.1.attn.c_proj.lora_A.weight", {2, 16}}, {"h.1.attn.c_proj.lora_B.weight", {16, 2}},
      {"h.1.mlp.c_fc.lora_A.weight", {2, 16}},    {"h.1.mlp.c_fc.lora_B.weight", {64, 2}},
      {"h.1.mlp.c_proj.lora_A.weight", {2, 64}},  {"h.1.mlp.c_proj.lora_B.weight", {16, 2}}};
  ASSERT_EQ(adapters.tensors().size(), 16u);
  for (std::size_t i = 0; i < block1.size(); ++i) {
    EXPECT_EQ(adapters.tensors()[8 + i].name, block1[i].first);
    EXPECT_EQ(adapters.tensors()[8 + i].shape, block1[i].second) << block1[i].first;
  }
  EXPECT_EQ(lora_trainable_parameters(m), 2 * 512);

  const ParameterLayout rank1 = ParameterLayout::adapters(m, 2, 1);
  const TensorInfo& b = rank1.find("h.0.attn.c_attn.lora_B.weight");
  ASSERT_EQ(b.local_shape, Shape({24, 2}));
  for (std::uint64_t row = 0; row < 24; ++row) {
    const std::uint64_t global_row = 16 * (row / 8) + 8 + row % 8;
    EXPECT_EQ(b.global_index(row * 2 + 1), std::int64_t(global_row * 2 + 1)) << "local row " << row;
  }
  EXPECT_EQ(rank1.find("h.0.attn.c_proj.lora_A.weight").local_shape, Shape({2, 8}));
  EXPECT_EQ(rank1.find("h.0.mlp.c_proj.lora_A.weight").local_shape, Shape({2, 32}));
  EXPECT_EQ(rank1.find("h.0.mlp.c_fc.lora_B.weight").local_shape, Shape({32, 2}));

  m.lora.targets = "c_proj";
  EXPECT_EQ(lora_adapted_module_count(m), 2u);
  EXPECT_EQ(lora_trainable_parameters(m), 2 * 2 * (32 + 80));
}

// A LoRA rank's every category by hand beside full training's: 3 blocks, r 3 all-linear, dp 2 and
// 3 on one stage, micro-batch 2 (N = 64 tokens). Base P = 3·46,208 + 2·16,576 + 64 = 171,840
// elements in units embed_tokens, 3 blocks, norm, lm_head, padded under ZeRO to a multiple of dp as
// the adapters' (dp 3 pads 2 + 3·1 + 2 + 2); held whole, or at ZeRO-3 as a shard of the padded total,
// the non-block units whole and two block rooms. Adapters a = 3·3504 = 10,512, one block's a_l = 3504
// (a multiple of 2 and 3: no padding); ZeRO's working units are two block rooms, 2·a_l.
TEST(LoraPlan, RankMemoryByHandAndBelowFullTraining) {
  constexpr std::int64_t a = 10'512, a_l = 3504, rooms = 2 * a_l;
  constexpr std::int64_t embed = 16'576, block = 46'208, norm = 64;
  const auto padded = [](std::int64_t n, std::int64_t d) { return (n + d - 1) / d * d; };
  for (const std::int64_t d : {2, 3}) {
    const Layout grid{int(d), 1, 1};
    for (const Precision precision : {Precision::fp32, Precision::bf16}) {
      for (int zero = 0; zero <= 3; ++zero) {
        Config cfg;
        cfg.model = small_llama(3, 3, "all-linear");
        cfg.train.micro_batch = 2;
        cfg.train.global_batch = 2 * int(d);
        cfg.train.precision = precision;
        cfg.parallel.zero = zero;
        const MemoryBytes lora = planned_rank_memory(cfg, grid, GridPosition{1, 0, 0});
        const MemoryBytes full = planned_rank_memory(full_training(cfg), grid, GridPosition{1, 0, 0});

        // The adapters' states as a dense run holds its parameters, the base in compute precision.
        const bool fp32 = precision == Precision::fp32;
        const std::int64_t cb = fp32 ? 4 : 2;
        const std::int64_t shard = zero >= 1 ? a / d : a;
        const std::int64_t fp32_grads = zero >= 2 ? rooms + a / d : a;
        const std::int64_t compute_weights = zero >= 3 ? rooms + a / d : a;
        const std::int64_t compute_grads = zero >= 2 ? rooms : a;
        const std::int64_t u = zero >= 1 ? d : 1;  // the units' padding
        const std::int64_t resident = 2 * padded(embed, u) + padded(norm, u), whole_block = padded(block, u);
        const std::int64_t base =
            zero >= 3 ? resident + 2 * whole_block + (resident + 3 * whole_block) / d : resident + 3 * whole_block;
        std::map<MemoryCategory, std::int64_t> want;
        want[MemoryCategory::weights] = cb * base + (fp32 ? 4 * compute_weights : 2 * compute_weights);
        want[MemoryCategory::master] = fp32 ? 0 : 4 * shard;
        want[MemoryCategory::grads] = 4 * fp32_grads + (fp32 ? 0 : 2 * compute_grads);
        want[MemoryCategory::optimizer] = 2 * 4 * shard;
        want[MemoryCategory::comm_buffers] = zero >= 1 ? 4 * a_l / d : 0;
        // h [N, r] per block and module in the one slot, and one backward scratch.
        want[MemoryCategory::activations] = full[MemoryCategory::activations] + cb * (3 * 7 * 1 + 1) * 64 * 3;
        want[MemoryCategory::workspace] = full[MemoryCategory::workspace];
        for (const auto& [category, bytes] : want) {
          EXPECT_EQ(lora[category], bytes)
              << category_name(category) << " dp " << d << " zero " << zero << " " << name_of(precision);
        }
        EXPECT_LT(lora.total(), full.total());
      }
    }
  }
}

// tp 2 × dp 1: the adapters of a tp rank (2424 a block, above) and its base piece (test_llama_plan:
// 63,040 elements with 2 blocks; 3 blocks 63,040 + 23,168).
TEST(LoraPlan, TensorParallelRankMemoryByHand) {
  Config cfg;
  cfg.model = small_llama(3, 3, "all-linear");
  cfg.train.micro_batch = 2;
  cfg.train.global_batch = 2;
  for (int tp_rank : {0, 1}) {
    const MemoryBytes m = planned_rank_memory(cfg, Layout{1, 2, 1}, GridPosition{0, tp_rank, 0});
    EXPECT_EQ(m[MemoryCategory::weights], 4 * (63'040 + 23'168) + 4 * 3 * 2424);
    EXPECT_EQ(m[MemoryCategory::grads], 4 * 3 * 2424);
    EXPECT_EQ(m[MemoryCategory::optimizer], 8 * 3 * 2424);
  }
}

TEST(LoraPlan, AttentionOnlyHoldsLessThanAllLinear) {
  Config cfg;
  cfg.model = small_llama(3, 3, "q_proj,k_proj,v_proj,o_proj");
  cfg.train.micro_batch = 2;
  cfg.train.global_batch = 2;
  const MemoryBytes attention = planned_rank_memory(cfg, Layout{1, 1, 1}, GridPosition{});
  cfg.model.lora.targets = "all-linear";
  const MemoryBytes all = planned_rank_memory(cfg, Layout{1, 1, 1}, GridPosition{});
  // fp32, ZeRO 0: weights, grads, two moments of the adapters' 3·(3504 − 1344) more elements; h of
  // 3 more modules in 3 blocks.
  const std::int64_t more = 3 * (all_linear_block - attention_block);
  EXPECT_EQ(all[MemoryCategory::weights] - attention[MemoryCategory::weights], 4 * more);
  EXPECT_EQ(all[MemoryCategory::grads] - attention[MemoryCategory::grads], 4 * more);
  EXPECT_EQ(all[MemoryCategory::optimizer] - attention[MemoryCategory::optimizer], 8 * more);
  EXPECT_EQ(all[MemoryCategory::activations] - attention[MemoryCategory::activations], 4 * 3 * 3 * 64 * 3);
}

// FLOPs per token, 2 blocks: the base's products N = 125,632 − 16,576 (embed_tokens a lookup) =
// 109,056, attention 6·L·Q·T = 24,576, adapters 7008. Dense: 6N + 24,576 = 678,912, forward a
// third. LoRA: 4N + 24,576 + 6·7008 = 502,848; forward 2N + 8192 + 2·7008 = 240,320.
TEST(LoraPlan, FlopsByHand) {
  const ModelConfig m = small_llama(2, 3, "all-linear");
  EXPECT_DOUBLE_EQ(dense_stage_flops(m, 0, 1).total, 678'912.0);
  EXPECT_DOUBLE_EQ(dense_stage_flops(m, 0, 1).forward, 678'912.0 / 3);
  EXPECT_DOUBLE_EQ(lora_stage_flops(m, 0, 1).total, 502'848.0);
  EXPECT_DOUBLE_EQ(lora_stage_flops(m, 0, 1).forward, 240'320.0);
  // Stage 1 of 2: one block, norm and lm_head: N = 46,208 + 64 + 16,576, attention 12,288, adapters 3504.
  EXPECT_DOUBLE_EQ(lora_stage_flops(m, 1, 2).total, 4.0 * 62'848 + 12'288 + 6.0 * 3504);
  EXPECT_DOUBLE_EQ(training_stage_flops(without_lora(m), 1, 2).total, 6.0 * 62'848 + 12'288);
}

const TrafficCount& count(const RankTraffic& t, const std::string& group, Collective kind) {
  static const TrafficCount none;
  const auto it = t.find(group);
  return it == t.end() ? none : it->second[kind];
}

// tp 2, 2 micro-batches of N = 64: LoRA adds per block and pass one all-reduce of [N, r] of the
// compute type per targeted module on the split side: forward o and down (2), backward q, k, v,
// gate, up (5).
TEST(LoraPlan, TensorParallelTrafficByHand) {
  Config cfg;
  cfg.model = small_llama(2, 3, "all-linear");
  cfg.train.micro_batch = 2;
  cfg.train.global_batch = 4;
  const Layout grid{1, 2, 1};
  const std::int64_t sums = 2 * 2 * (2 + 5);
  for (const Precision precision : {Precision::fp32, Precision::bf16}) {
    cfg.train.precision = precision;
    const std::int64_t h_bytes = 64 * 3 * (precision == Precision::fp32 ? 4 : 2);
    const RankTraffic lora = predicted_traffic(cfg, grid, GridPosition{0, 1, 0});
    const RankTraffic full = predicted_traffic(full_training(cfg), grid, GridPosition{0, 1, 0});
    EXPECT_EQ(count(lora, "tp", Collective::allreduce).calls, count(full, "tp", Collective::allreduce).calls + sums);
    EXPECT_EQ(count(lora, "tp", Collective::allreduce).bytes,
              count(full, "tp", Collective::allreduce).bytes + sums * h_bytes);
  }
  cfg.train.precision = Precision::fp32;
  // Full recomputation reruns one block's forward per micro-batch (the other is still resident):
  // its o and down sums again.
  cfg.train.recompute = Recompute::full;
  const RankTraffic lora_recomputed = predicted_traffic(cfg, grid, GridPosition{0, 1, 0});
  const RankTraffic full_recomputed = predicted_traffic(full_training(cfg), grid, GridPosition{0, 1, 0});
  EXPECT_EQ(count(lora_recomputed, "tp", Collective::allreduce).calls,
            count(full_recomputed, "tp", Collective::allreduce).calls + sums + 2 * 1 * 2);
}

// dp 2: only the adapters' gradients travel (a = 7008 elements, fp32), ZeRO 0 in one bucket,
// ZeRO 1 one reduce-scatter and one gather per block unit; the base's embedding is no tied group.
TEST(LoraPlan, DataParallelTrafficByHand) {
  Config cfg;
  cfg.model = small_llama(2, 3, "all-linear");
  cfg.model.tie_embeddings = true;
  cfg.train.micro_batch = 2;
  cfg.train.global_batch = 4;
  const RankTraffic zero0 = predicted_traffic(cfg, Layout{2, 1, 1}, GridPosition{});
  EXPECT_EQ(count(zero0, "dp", Collective::allreduce).calls, 2);
  EXPECT_EQ(count(zero0, "dp", Collective::allreduce).bytes, 8 + 4 * 7008);
  cfg.parallel.zero = 1;
  const RankTraffic zero1 = predicted_traffic(cfg, Layout{2, 1, 1}, GridPosition{});
  EXPECT_EQ(count(zero1, "dp", Collective::reduce_scatter).calls, 2);
  EXPECT_EQ(count(zero1, "dp", Collective::reduce_scatter).bytes, 4 * 7008);
  EXPECT_EQ(count(zero1, "dp", Collective::allgather).calls, 2);
  EXPECT_EQ(count(zero1, "dp", Collective::allgather).bytes, 4 * 7008);
  cfg.parallel.zero = 0;
  cfg.train.global_batch = 2;
  const RankTraffic pipeline = predicted_traffic(cfg, Layout{1, 1, 2}, GridPosition{0, 0, 1});
  EXPECT_EQ(pipeline.count("tied"), 0u);
  EXPECT_EQ(predicted_traffic(full_training(cfg), Layout{1, 1, 2}, GridPosition{0, 0, 1}).count("tied"), 1u);
}

// The plan of a LoRA config and of its full training differ in the step's compute as the FLOPs do
// (fused attention's backward recomputes the scores in both: 2·L·Q·T = 8192 more each).
TEST(LoraPlan, StepComputeFollowsTheFlops) {
  Config cfg;
  cfg.model = small_llama(2, 3, "all-linear");
  cfg.train.micro_batch = 2;
  cfg.train.global_batch = 2;
  const Cluster c = cluster_preset("h100-sxm-8");
  const Plan lora = make_plan(cfg, 1, c);
  const Plan full = full_training_plan(lora);
  EXPECT_DOUBLE_EQ(lora.step.compute_s / full.step.compute_s, (502'848.0 + 8192) / (678'912.0 + 8192));
  EXPECT_EQ(full.cfg.model.lora.rank, 0);
  cfg.train.recompute = Recompute::full;
  const Plan recomputed = make_plan(cfg, 1, c);
  EXPECT_DOUBLE_EQ(recomputed.step.compute_s / lora.step.compute_s,
                   (502'848.0 + 240'320.0 + 8192) / (502'848.0 + 8192));
}

// A background save copies the three saved states of the rank's even share of the adapters: dp 2,
// tp 2: per tp rank 2 blocks of 2424, of which A of q, k, v, gate, up and B of o, down (3·64·5 +
// 64·3·2 = 1344 a block) are replicated and counted on tp rank 0 only.
TEST(LoraPlan, BackgroundSaveSnapshotsTheAdapters) {
  Config cfg;
  cfg.model = small_llama(2, 3, "all-linear");
  cfg.train.micro_batch = 2;
  cfg.train.global_batch = 4;
  for (int tp_rank : {0, 1}) {
    const GridPosition at{1, tp_rank, 0};
    const MemoryBytes quiet = planned_rank_memory(cfg, Layout{2, 2, 1}, at);
    cfg.checkpoint.async = true;
    const MemoryBytes saving = planned_rank_memory(cfg, Layout{2, 2, 1}, at);
    cfg.checkpoint.async = false;
    const std::int64_t counted = 2 * (tp_rank == 0 ? 2424 : 2424 - 1344);
    EXPECT_EQ(saving[MemoryCategory::workspace] - quiet[MemoryCategory::workspace], 3 * 4 * counted / 2);
  }
}

// The small llama with block 0 of 2 MoE (moe_every 2): E 4 routed experts of width 16, top-2, one
// shared expert (width 16), r 3 all-linear unless `targets` says otherwise.
ModelConfig small_moe(const std::string& targets = "all-linear") {
  ModelConfig m = small_llama(2, 3, targets);
  m.experts = 4;
  m.experts_per_token = 2;
  m.expert_hidden = 16;
  m.moe_every = 2;
  m.shared_experts = 1;
  return m;
}

// By hand, r 3, Σ (in + out) per module: block 0 (MoE) attention 448; shared expert gate 64 + 16 = 80,
// up 80, down 16 + 64 = 80; router 64 + 4 = 68; each routed expert gate, up, down 80 each (240), four
// experts 960. So r·Σ = 1344 + 720 + 204 + 2880 = 5148; block 1 (dense) 3504 as above.
TEST(LoraPlan, MoeTrainableCountByHand) {
  EXPECT_EQ(lora_trainable_parameters(small_moe()), 5148 + 3504);
  // The router alone: A [3, 64], B [4, 3].
  EXPECT_EQ(lora_trainable_parameters(small_moe("gate")), 3 * 68);
  // up_proj: the shared expert's, the dense block's and the four routed experts'.
  EXPECT_EQ(lora_trainable_parameters(small_moe("up_proj")), 3 * 80 + 3 * 240 + 4 * 3 * 80);
  ModelConfig no_shared = small_moe();
  no_shared.shared_experts = 0;
  EXPECT_EQ(lora_trainable_parameters(no_shared), 5148 - 720 + 3504);
}

// Block 0: q, k, v and the shared gate and up column-parallel (5), o and the shared down row-parallel (2),
// the router in neither (replicated), the routed experts' gate and up (2) and down (1) apart; block 1 the
// dense split. Without shared experts their three leave the block's own count.
TEST(LoraPlan, MoeModuleSplitByHand) {
  const auto expect = [](const LoraModuleSplit& s, int column, int row, int expert_column, int expert_row) {
    EXPECT_EQ(s.column_parallel, column);
    EXPECT_EQ(s.row_parallel, row);
    EXPECT_EQ(s.expert_column_parallel, expert_column);
    EXPECT_EQ(s.expert_row_parallel, expert_row);
  };
  expect(lora_module_split(small_moe(), 0), 5, 2, 2, 1);
  expect(lora_module_split(small_moe(), 1), 5, 2, 0, 0);
  expect(lora_module_split(small_moe("gate"), 0), 0, 0, 0, 0);
  expect(lora_module_split(small_moe("down_proj,q_proj"), 0), 1, 1, 0, 1);
  ModelConfig no_shared = small_moe();
  no_shared.shared_experts = 0;
  expect(lora_module_split(no_shared, 0), 3, 1, 2, 1);
}

// The adapters a token passes: all but the routed experts', which it passes k/E = 1/2 of: all-linear
// 1344 + 720 + 204 + 2880 / 2 + 3504 = 7212, q_proj alone 2 · 3 · 128 = 768. The base is the same, so
// the difference is the adapters' 6 per token (2 forward).
TEST(LoraPlan, MoeFlopsCountTheExpertsAdaptersAtTheirShare) {
  const TokenFlops all = lora_stage_flops(small_moe(), 0, 1), q = lora_stage_flops(small_moe("q_proj"), 0, 1);
  EXPECT_DOUBLE_EQ(all.total - q.total, 6.0 * (7212 - 768));
  EXPECT_DOUBLE_EQ(all.forward - q.forward, 2.0 * (7212 - 768));
  // up_proj: shared 240 + dense 720 + routed 960 / 2 = 1440.
  EXPECT_DOUBLE_EQ(lora_stage_flops(small_moe("up_proj"), 0, 1).total - q.total, 6.0 * (1440 - 768));
}

// tp 2, 2 micro-batches of N = 64, fp32, r 3: LoRA adds per micro-batch block 0's o, shared down (forward)
// and q, k, v, shared gate, up (backward) and block 1's 2 + 5, each [N, r] = 768 bytes; the routed
// experts' down (forward), gate and up (backward), each [received, r]. Dropless received = N·k = 128
// (1536 bytes); capacity_factor 0.25 keeps E · ⌈0.25 · 128 / 4⌉ = 32 (384 bytes).
TEST(LoraPlan, MoeTensorParallelTrafficByHand) {
  Config cfg;
  cfg.model = small_moe();
  cfg.train.micro_batch = 2;
  cfg.train.global_batch = 4;
  const Layout grid{1, 2, 1};
  for (const auto& [factor, received] : {std::pair{0.0, 128}, std::pair{0.25, 32}}) {
    cfg.model.capacity_factor = factor;
    EXPECT_EQ(planned_received_rows(cfg.model, 64), received);
    const RankTraffic lora = predicted_traffic(cfg, grid, GridPosition{0, 1, 0});
    const RankTraffic full = predicted_traffic(full_training(cfg), grid, GridPosition{0, 1, 0});
    EXPECT_EQ(count(lora, "tp", Collective::allreduce).calls, count(full, "tp", Collective::allreduce).calls + 2 * 17);
    EXPECT_EQ(count(lora, "tp", Collective::allreduce).bytes,
              count(full, "tp", Collective::allreduce).bytes + 2 * (14 * 768 + 3 * received * 12));
  }
  // Full recomputation reruns block 0's forward in each micro-batch (block 1 is still resident): its
  // o, shared down and experts' down sums again.
  cfg.train.recompute = Recompute::full;
  const RankTraffic lora = predicted_traffic(cfg, grid, GridPosition{0, 1, 0});
  const RankTraffic full = predicted_traffic(full_training(cfg), grid, GridPosition{0, 1, 0});
  EXPECT_EQ(count(lora, "tp", Collective::allreduce).calls,
            count(full, "tp", Collective::allreduce).calls + 2 * 17 + 2 * 3);
  EXPECT_EQ(count(lora, "tp", Collective::allreduce).bytes,
            count(full, "tp", Collective::allreduce).bytes + 2 * (14 * 768 + 3 * 32 * 12) + 2 * (2 * 768 + 32 * 12));
}

}  // namespace test_lora_plan
}  // namespace meshtrain
