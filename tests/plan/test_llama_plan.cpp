// The planner on the llama family: parameter count, FLOPs per token, per-stage FLOPs, per-rank
// state memory and the step-time model's compute and traffic, each against a count worked out here
// by hand from the shape (not taken from the model code).
#include "core/errors.hpp"
#include "model/parameters.hpp"
#include "plan/memory_plan.hpp"
#include "plan/plan_report.hpp"
#include "plan/planner.hpp"
#include "plan/step_time.hpp"
#include "plan/traffic.hpp"

#include <gtest/gtest.h>

namespace meshtrain {
namespace test_llama_plan {

// C 64, NH 4 (head size 16), KV 2, SwiGLU hidden 176 (not a power of two), V 259 (odd: tp pads
// it), L 2, T 32.
ModelConfig small_llama() {
  ModelConfig m{2, 4, 64, 259, 32};
  m.arch = Arch::llama;
  m.kv_heads = 2;
  m.ffn_hidden = 176;
  return m;
}

// A run of small_llama, fp32, ZeRO 0.
Config llama_run(int micro_batch, int global_batch) {
  Config cfg;
  cfg.model = small_llama();
  cfg.train.micro_batch = micro_batch;
  cfg.train.global_batch = global_batch;
  return cfg;
}

// By hand, C 64, hs 16, q rows NH·hs = 64, k and v rows KV·hs = 32, H 176:
//   one block: input_layernorm 64 + q 64·64 = 4096 + k 32·64 = 2048 + v 2048 + o 64·64 = 4096
//              + post_attention_layernorm 64 + gate, up, down 3 · 176·64 = 33792      = 46,208
//   embed_tokens 259·64 = 16,576; norm 64; lm_head (untied) 259·64 = 16,576
//   parameters  = 2 · 46,208 + 16,576 + 64 + 16,576                                     = 125,632
//   FLOPs/token = 6 · (125,632 − 16,576, embed_tokens being a lookup) + 6·L·C·T
//               = 6 · 109,056 + 6 · 2 · 64 · 32 = 654,336 + 24,576                      = 678,912
constexpr double block_parameters = 46'208, table = 16'576, attention_per_block = 6.0 * 64 * 32;

TEST(LlamaPlan, ParametersAndFlopsPerTokenByHand) {
  const ParameterLayout layout(small_llama());
  EXPECT_EQ(layout.total(), 125'632u);
  EXPECT_DOUBLE_EQ(flops_per_token(layout), 678'912.0);
  // pp 2, one block a stage: stage 0 the block (embed_tokens adds nothing), stage 1 the block, norm
  // and lm_head.
  EXPECT_DOUBLE_EQ(stage_flops_per_token(small_llama(), 0, 2), 6 * block_parameters + attention_per_block);
  EXPECT_DOUBLE_EQ(stage_flops_per_token(small_llama(), 1, 2),
                   6 * (block_parameters + 64 + table) + attention_per_block);
}

// tp 2 × dp 2, ZeRO 1, fp32. A tp rank's share, by hand: per block the two norms whole (128), q and
// o half (2 · 2048), k and v half (2 · 1024), gate, up and down half (3 · 5632) = 23,168; the
// padded vocabulary 260 / 2 = 130 rows of embed_tokens and of lm_head (8,320 each); norm 64:
// 2 · 23,168 + 2 · 8,320 + 64 = 63,040 elements, every unit even, so ZeRO 1 halves the moments.
TEST(LlamaPlan, StateMemoryOfATensorParallelRankByHand) {
  Config cfg = llama_run(2, 4);
  cfg.parallel.zero = 1;
  const std::int64_t local = 63'040;
  for (int tp_rank : {0, 1}) {
    const MemoryBytes m = planned_rank_memory(cfg, Layout{2, 2, 1}, GridPosition{1, tp_rank, 0});
    EXPECT_EQ(m[MemoryCategory::weights], 4 * local) << "tp rank " << tp_rank;
    EXPECT_EQ(m[MemoryCategory::grads], 4 * local);
    EXPECT_EQ(m[MemoryCategory::optimizer], 2 * 4 * local / 2);
    EXPECT_EQ(m[MemoryCategory::master], 0);
    EXPECT_GT(m[MemoryCategory::activations], 0);
  }
}

// dp 1 × tp 2 × pp 2 on one node: compute from the hand count, tp sums as gpt2's (the same
// row-parallel products per block), and no tied-head group (lm_head is untied).
TEST(LlamaPlan, StepTimeComputeAndTrafficByHand) {
  const Config cfg = llama_run(2, 8);  // m = 4 micro-batches
  Cluster c;
  c.ranks_per_node = 4;
  c.host_only = false;
  c.peak_flops_fp32 = 1e12;
  c.efficiency = 0.5;
  c.intra = {1e10, 1e-6};
  c.inter = c.intra;
  const Layout layout{1, 2, 2};
  const std::vector<StepTime> stages = stage_step_times(cfg, layout, c);
  ASSERT_EQ(stages.size(), 2u);
  const double m = 4, b = 2, T = 32, t = 2, rate = 1e12 * 0.5;
  // Each stage's model FLOPs and the scores fused attention's backward computes again (2·C·T, its block).
  const double rescoring = 2.0 * 64 * 32;
  const double stage_flops[] = {6 * block_parameters + attention_per_block + rescoring,
                                6 * (block_parameters + 64 + table) + attention_per_block + rescoring};
  for (int s = 0; s < 2; ++s) {
    EXPECT_NEAR(stages[s].compute_s, m * b * T * stage_flops[s] / t / rate, 1e-15) << "stage " << s;
    const RankTraffic traffic = predicted_traffic(cfg, layout, GridPosition{0, 0, s});
    EXPECT_EQ(traffic.count("tied"), 0u);
    // One block a stage: 2 sums forward and 2 backward per micro-batch, the embedding's on stage 0,
    // the head's input gradient and the loss's two on stage 1.
    const std::int64_t wide = m * (4 + 1), rows = std::int64_t(b * T);
    const TrafficCount& sums = traffic.at("tp")[Collective::allreduce];
    EXPECT_EQ(sums.calls, s == 0 ? wide : wide + 2 * std::int64_t(m));
    EXPECT_EQ(sums.bytes, wide * rows * 64 * 4 + (s == 0 ? 0 : std::int64_t(m) * 3 * rows * 4));
  }
}

// Expert parallelism, dp 4 × ep 2: block 0 with E = 4 routed experts of width 16 (moe_every 2), a
// rank holding 2 of them. By hand: block 0's own unit is the attention 12,416 + the router 4·64 =
// 12,672; its experts' unit 2 · 3·16·64 = 6,144; the dense units 16,576 + 12,672 + 46,208 + 64 +
// 16,576 = 92,096. Every unit is a multiple of 4: ZeRO pads nothing.
TEST(LlamaPlan, ExpertParallelStateMemoryAndTrafficByHand) {
  Config cfg = llama_run(2, 8);
  cfg.model.experts = 4;
  cfg.model.moe_every = 2;
  cfg.model.expert_hidden = 16;
  cfg.parallel.ep = 2;
  const Layout grid{4, 1, 1, 2};
  const std::int64_t dense = 92'096, experts = 6'144;
  for (int zero : {0, 1}) {
    cfg.parallel.zero = zero;
    for (int d = 0; d < 4; ++d) {
      SCOPED_TRACE(testing::Message() << "zero " << zero << " dp rank " << d);
      const MemoryBytes m = planned_rank_memory(cfg, grid, GridPosition{d, 0, 0});
      EXPECT_EQ(m[MemoryCategory::weights], 4 * (dense + experts));
      // ZeRO 1: the dense units' moments over dp 4, the experts' over the dp / ep = 2 ranks holding them.
      EXPECT_EQ(m[MemoryCategory::optimizer], 2 * 4 * (zero == 0 ? dense + experts : dense / 4 + experts / 2));
      const RankTraffic traffic = predicted_traffic(cfg, grid, GridPosition{d, 0, 0});
      const GroupTraffic &dp = traffic.at("dp"), &edp = traffic.at("edp");
      if (zero == 0) {
        // The loss sum, then one bucket per run of dense units (embed_tokens..layers.0, layers.1..
        // lm_head) and one for the experts' unit.
        EXPECT_EQ(dp[Collective::allreduce].calls, 1 + 2);
        EXPECT_EQ(dp[Collective::allreduce].bytes, 8 + 4 * dense);
        EXPECT_EQ(edp[Collective::allreduce].calls, 1);
        EXPECT_EQ(edp[Collective::allreduce].bytes, 4 * experts);
      } else {
        EXPECT_EQ(dp[Collective::reduce_scatter].calls, 5);
        EXPECT_EQ(dp[Collective::reduce_scatter].bytes, 4 * dense);
        EXPECT_EQ(edp[Collective::reduce_scatter].calls, 1);
        EXPECT_EQ(edp[Collective::reduce_scatter].bytes, 4 * experts);
        EXPECT_EQ(edp[Collective::allgather].bytes, 4 * experts);
      }
    }
  }
  EXPECT_NO_THROW(make_plan(cfg, 4, Cluster{}));
  cfg.parallel.ep = 3;  // divides neither dp 4 nor E 4
  EXPECT_THROW(make_plan(cfg, 4, Cluster{}), InputError);
}

// An MoE llama: L 3, V 97, C 64, NH 4, KV 2 (hs 16), dense SwiGLU 176, T 32; blocks 0 and 2 (moe_every
// 2) with E 6 routed experts of width 40, top-2, and one shared expert of width 40.
ModelConfig small_moe() {
  ModelConfig m{3, 4, 64, 97, 32};
  m.arch = Arch::llama;
  m.kv_heads = 2;
  m.ffn_hidden = 176;
  m.experts = 6;
  m.experts_per_token = 2;
  m.expert_hidden = 40;
  m.shared_experts = 1;
  m.moe_every = 2;
  return m;
}

// By hand:
//   attention of a block: norms 2 · 64 + q 64·64 + k 32·64 + v 32·64 + o 64·64        = 12,416
//   dense block 1: + gate, up, down 3 · 176·64 = 33,792                                = 46,208
//   MoE blocks 0, 2: + router 6·64 = 384 + shared 3·40·64 = 7,680
//                    + routed 6 · 3·40·64 = 46,080                                     = 66,560
//   embed_tokens 97·64 = 6,208; norm 64; lm_head 6,208
//   total      = 2 · 66,560 + 46,208 + 6,208 + 64 + 6,208                              = 191,808
//   active     = total − 2 · (1 − k/E) · 46,080 = 191,808 − 2 · 30,720                 = 130,368
//   FLOPs/tok  = 6 · (130,368 − 6,208, embed_tokens a lookup) + 6·L·C·T
//              = 744,960 + 6 · 3 · 64 · 32 = 744,960 + 36,864                          = 781,824
TEST(LlamaPlan, MoeTotalAndActiveParametersAndFlopsByHand) {
  const ModelConfig m = small_moe();
  const ParameterLayout layout(m);
  EXPECT_EQ(layout.total(), 191'808u);
  EXPECT_NEAR(active_parameters(layout), 130'368.0, 1e-6);  // k/E = 1/3 is not a binary fraction
  EXPECT_DOUBLE_EQ(flops_per_token(layout), 781'824.0);
  Config cfg;
  cfg.model = m;
  cfg.train.micro_batch = 2;
  cfg.train.global_batch = 2;
  const std::string text = plan_table(make_plan(cfg, 1, Cluster{}));
  EXPECT_EQ(text.substr(0, text.find('\n')),
            "model: llama, 3 layers, 4 heads (2 kv), d_model 64, SwiGLU 176, MoE 6 experts of width 40, top-2, 2 of 3 "
            "blocks, 1 shared, vocab 97, seq_len 32: 0.19M parameters total, 0.13M active per token, 781.8 k FLOP per "
            "token");
}

// dp 2 × ep 2, fp32, b 2 · T 32 = N 64 tokens, k 2: 128 assignments a micro-batch; capacity
// ⌈0.5 · 128 / 6⌉ = 11, so the plan keeps E · 11 = 66 rows and sends half, 33 rows of 64 floats =
// 8,448 B, to the other rank in each token all-to-all; the counts' all-to-all sends the other rank
// its El = 3 int64, 24 B. m = 8 / (2 · 2) = 2 micro-batches over 2 MoE blocks: forward 4 count
// and 8 row all-to-alls, backward 8 row all-to-alls. Full recomputation reruns blocks 0 and 1 of
// each micro-batch (block 2 is still resident): MoE block 0 repeats its 3 forward all-to-alls.
TEST(LlamaPlan, ExpertParallelAllToAllsAndTheirTimeByHand) {
  Config cfg;
  cfg.model = small_moe();
  cfg.model.capacity_factor = 0.5;
  cfg.train.micro_batch = 2;
  cfg.train.global_batch = 8;
  cfg.parallel.dp = 2;
  cfg.parallel.ep = 2;
  const Layout grid{2, 1, 1, 2};
  EXPECT_EQ(planned_exchange_rows(cfg.model, 64, 2), 33);
  // One token's 2 assignments under a capacity of 1: the even spread keeps both (no expert over), sends 1.
  EXPECT_EQ(planned_exchange_rows(cfg.model, 1, 2), 1);
  const std::int64_t rows_bytes = 33 * 64 * 4, count_bytes = 3 * 8;
  for (const Recompute recompute : {Recompute::none, Recompute::full}) {
    cfg.train.recompute = recompute;
    const std::int64_t counts = recompute == Recompute::full ? 4 + 2 : 4, row_calls = 16 + 2 * (counts - 4);
    for (int d = 0; d < 2; ++d) {
      const TrafficCount ep = predicted_traffic(cfg, grid, GridPosition{d, 0, 0}).at("ep")[Collective::alltoall];
      EXPECT_EQ(ep.calls, counts + row_calls) << "dp rank " << d;
      EXPECT_EQ(ep.bytes, counts * count_bytes + row_calls * rows_bytes) << "dp rank " << d;
    }
    // Both ranks on one node: each all-to-all pays α once (p − 1 = 1), the bytes β; on p ranks, p − 1
    // pairwise exchanges: 1 MB over 4 ranks at 1 GB/s and 10 µs, 1 ms + 30 µs.
    EXPECT_DOUBLE_EQ(alltoall_s(1e6, 4, Link{1e9, 1e-5}), 1e-3 + 3e-5);
    EXPECT_EQ(alltoall_s(1e6, 1, Link{1e9, 1e-5}), 0.0);
    Cluster c;
    c.host_only = false;
    c.peak_flops_fp32 = 1e12;
    c.intra = {1e10, 1e-6};
    const StepTime st = predict_step_time(cfg, grid, c);
    const double bytes = double(counts * count_bytes + row_calls * rows_bytes);
    EXPECT_NEAR(st.ep_comm_s, bytes / 1e10 + double(counts + row_calls) * 1e-6, 1e-15);
    // ep's all-to-alls are on the critical path: what hides is dp's (step_time.cpp).
    EXPECT_DOUBLE_EQ(st.total_s(), st.compute_s + st.dp_comm_s + st.ep_comm_s - st.hidden_s);
    EXPECT_LT(st.hidden_s, st.dp_comm_s);
  }
  cfg.parallel.ep = 1;  // no expert parallelism: nothing travels, no ep group
  EXPECT_EQ(predicted_traffic(cfg, Layout{2, 1, 1}, GridPosition{0, 0, 0}).count("ep"), 0u);
}

}  // namespace test_llama_plan
}  // namespace meshtrain
