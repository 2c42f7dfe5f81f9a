// The planner's alpha-beta step-time model against closed forms worked out here by hand from the
// model's shape (GPT-2 parameter counts written out, not taken from the model code), and what a
// device hides of the communication (the overlap model in plan/step_time.cpp) by the same hand.
#include "model/parameters.hpp"
#include "parallel/pipeline_schedule.hpp"
#include "plan/step_time.hpp"
#include "plan/traffic.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

namespace meshtrain {
namespace test_step_time {

// A two-node cluster with exact round numbers: 2 GPUs per node.
Cluster test_cluster() {
  Cluster c;
  c.preset = "test";
  c.ranks_per_node = 2;
  c.host_only = false;
  c.device_memory_bytes = 1e12;
  c.peak_flops_fp32 = 1e12;
  c.peak_flops_16bit = 4e12;
  c.efficiency = 0.5;
  c.intra = {1e10, 1e-6};
  c.inter = {1e9, 1e-5};
  return c;
}

Config small_config() {
  Config cfg;
  cfg.model = {2, 2, 64, 256, 64};  // L 2, heads 2, C 64, V 256, T 64
  cfg.train.micro_batch = 4;
  cfg.train.global_batch = 16;
  return cfg;
}

// GPT-2 parameters, by hand: wte V·C, wpe T·C, per block 12C² + 13C, ln_f 2C.
double gpt2_parameters(double L, double C, double V, double T) {
  return V * C + T * C + L * (12 * C * C + 13 * C) + 2 * C;
}

TEST(RingCollectives, ClosedForms) {
  const Link link{1e9, 1e-6};
  EXPECT_DOUBLE_EQ(ring_allreduce_s(1e6, 4, link), 2.0 * 3 / 4 * 1e6 / 1e9 + 2 * 3 * 1e-6);
  EXPECT_DOUBLE_EQ(ring_reduce_scatter_s(1e6, 4, link), 3.0 / 4 * 1e6 / 1e9 + 3 * 1e-6);
  EXPECT_DOUBLE_EQ(ring_allgather_s(1e6, 4, link), 3.0 / 4 * 1e6 / 1e9 + 3 * 1e-6);
  EXPECT_DOUBLE_EQ(point_to_point_s(1e6, link), 1e-6 + 1e6 / 1e9);
  EXPECT_EQ(ring_allreduce_s(1e6, 1, link), 0.0);
}

TEST(GroupLink, InterNodeWhenAGroupSpansNodes) {
  Cluster c = test_cluster();
  c.ranks_per_node = 4;
  EXPECT_EQ(group_link(tp_groups(Layout{2, 4, 1}), c, 64).bandwidth_Bps, c.intra.bandwidth_Bps);  // [0-3] [4-7]
  EXPECT_EQ(group_link(tp_groups(Layout{1, 8, 1}), c, 64).bandwidth_Bps, c.inter.bandwidth_Bps);
  EXPECT_EQ(group_link(dp_groups(Layout{2, 4, 1}), c, 64).bandwidth_Bps, c.inter.bandwidth_Bps);  // [0 4]
  EXPECT_EQ(group_link(dp_groups(Layout{2, 2, 1}), c, 64).bandwidth_Bps, c.intra.bandwidth_Bps);  // [0 2] [1 3]
  c.ranks_per_node = 0;                                                                           // one node
  EXPECT_EQ(group_link(pp_groups(Layout{1, 1, 64}), c, 64).bandwidth_Bps, c.intra.bandwidth_Bps);
}

TEST(StageFlops, StagesSumToTheWholeModel) {
  const ModelConfig m{6, 6, 384, 256, 256};
  const double whole = flops_per_token(ParameterLayout(m));
  EXPECT_DOUBLE_EQ(whole, 6 * gpt2_parameters(6, 384, 256, 256) + 6.0 * 6 * 384 * 256);
  for (int p : {1, 2, 3, 6}) {
    double sum = 0;
    for (int s = 0; s < p; ++s) sum += stage_flops_per_token(m, s, p);
    EXPECT_NEAR(sum, whole, 1e-9 * whole) << "pp " << p;
  }
  // pp 2: stage 0 has wpe and blocks 0-2; stage 1 blocks 3-5, ln_f and the head (wte).
  const double C = 384, T = 256, V = 256, block = 12 * C * C + 13 * C;
  EXPECT_DOUBLE_EQ(stage_flops_per_token(m, 0, 2), 6 * (T * C + 3 * block) + 6 * 3 * C * T);
  EXPECT_DOUBLE_EQ(stage_flops_per_token(m, 1, 2), 6 * (V * C + 3 * block + 2 * C) + 6 * 3 * C * T);
}

// dp 2 × tp 2 × pp 1 on 2 ranks per node: tp groups inside a node, dp groups across nodes.
TEST(StepTime, DataAndTensorParallelClosedForm) {
  const Config cfg = small_config();
  const Cluster c = test_cluster();
  const StepTime st = predict_step_time(cfg, Layout{2, 2, 1}, c);
  const double L = 2, C = 64, V = 256, T = 64, b = 4, m = 16 / (4 * 2), t = 2;
  // The model FLOPs, and the scores fused attention's backward computes again (2·C·T a block).
  const double F = 6 * gpt2_parameters(L, C, V, T) + 6 * L * C * T + 2 * L * C * T;
  EXPECT_NEAR(st.compute_s, m * b * T * F / t / (1e12 * 0.5), 1e-15);

  // 4 all-reduces per block, +1 embedding, +1 head gradient, of b·T·C fp32 over 2 ranks intra-node;
  // and for the vocab-parallel loss the row maxima (b·T floats) and partial sums (2·b·T floats).
  const double ar = 2.0 * 1 / 2 * (b * T * C * 4) / 1e10 + 2 * 1e-6;
  const double ar_max = 2.0 * 1 / 2 * (b * T * 4) / 1e10 + 2 * 1e-6;
  const double ar_partials = 2.0 * 1 / 2 * (2 * b * T * 4) / 1e10 + 2 * 1e-6;
  EXPECT_NEAR(st.tp_comm_s, m * (4 * L + 2) * ar + m * (ar_max + ar_partials), 1e-15);

  // The rank's parameters at tp 2: wte V/2 rows, wpe whole; per block ln_1, ln_2 (2C each), c_attn
  // C·3C/2 + 3C/2, attn c_proj C/2·C + C, c_fc C·4C/2 + 4C/2, mlp c_proj 4C/2·C + C; ln_f 2C.
  const double block =
      2 * C + (C * 3 * C / 2 + 3 * C / 2) + (C / 2 * C + C) + 2 * C + (C * 4 * C / 2 + 4 * C / 2) + (4 * C / 2 * C + C);
  const double local = V / 2 * C + T * C + L * block + 2 * C;
  // One bucket (25 MiB) and the loss sum (one double), over 2 ranks across nodes.
  EXPECT_NEAR(st.dp_comm_s, 2.0 * 1 / 2 * local * 4 / 1e9 + 2 * 1e-5 + 2.0 * 1 / 2 * 8 / 1e9 + 2 * 1e-5, 1e-15);
  EXPECT_EQ(st.pp_comm_s, 0.0);
  EXPECT_EQ(st.bubble_s, 0.0);
  EXPECT_DOUBLE_EQ(st.total_s(), st.compute_s + st.tp_comm_s + st.dp_comm_s);
}

// `layers` blocks, micro-batches of one sequence, m = 8 a step.
Config pipeline_config(int layers) {
  Config cfg = small_config();
  cfg.model.layers = layers;
  cfg.train.micro_batch = 1;
  cfg.train.global_batch = 8;
  return cfg;
}

// One node, free communication: only compute and the bubble remain.
Cluster compute_only_cluster() {
  Cluster c = test_cluster();
  c.ranks_per_node = 0;
  c.intra = {1e30, 0};
  return c;
}

TEST(StepTime, PipelineBubbleIsTheIdealFraction) {
  const Config cfg = pipeline_config(4);
  Cluster c = compute_only_cluster();
  for (int p : {2, 4}) {
    const StepTime st = predict_step_time(cfg, Layout{1, 1, p}, c);
    const double m = 8;
    EXPECT_NEAR(st.bubble_s / (st.compute_s + st.bubble_s), (p - 1) / (m + p - 1), 1e-12) << "pp " << p;
  }
  // With communication: per micro-batch one activation out and one gradient back for a middle
  // stage's neighbours; the first and last stage send one each way and sum the tied wte gradient;
  // every stage sums the loss (one double) over the 4 stages.
  c.intra = {1e9, 1e-6};
  const auto stages = stage_step_times(cfg, Layout{1, 1, 4}, c);
  ASSERT_EQ(stages.size(), 4u);
  const double b = 1, T = 64, C = 64, V = 256, m = 8;
  const double p2p = 1e-6 + b * T * C * 4 / 1e9;
  const double tied = 2.0 * 1 / 2 * V * C * 4 / 1e9 + 2 * 1e-6;
  const double loss = 2.0 * 3 / 4 * 8 / 1e9 + 2 * 3 * 1e-6;
  EXPECT_NEAR(stages[1].pp_comm_s, m * 2 * p2p + loss, 1e-15);
  EXPECT_NEAR(stages[0].pp_comm_s, m * 1 * p2p + tied + loss, 1e-15);
  EXPECT_NEAR(stages[3].pp_comm_s, m * 1 * p2p + tied + loss, 1e-15);
  EXPECT_NEAR(stages[1].bubble_s, 3 / m * (stages[1].compute_s + m * 2 * p2p), 1e-15);
}

// ZB-H1 against the schedule's closed form (p − 1)(F + B − W) (parallel/pipeline_schedule.hpp) for a middle
// stage, its costs counted by hand per token and block: the block's parameters P = 12C² + 13C (the planner's
// count takes 6 FLOPs per parameter, its biases and norms as products), F = 2P + 2QT (the products and QKᵀ, PV),
// W = 2P, B = 2P + 4QT + 2QT (input gradients, the attention's backward and the fused kernel's rescoring).
TEST(StepTime, ZeroBubbleH1BubbleIsItsClosedForm) {
  Config cfg = pipeline_config(8);
  const Cluster c = compute_only_cluster();
  const double C = 64, T = 64, P = 12 * C * C + 13 * C, Q = C, m = 8;
  const ScheduleCosts per_token{2 * P + 2 * Q * T, 2 * P + 6 * Q * T, 2 * P};
  for (int p : {4, 8}) {
    cfg.parallel.schedule = PipelineSchedule::zero_bubble_h1;
    const StepTime zb = stage_step_times(cfg, Layout{1, 1, p}, c)[1];
    const double work = per_token.forward + per_token.backward_input + per_token.backward_weight;
    EXPECT_NEAR(zb.bubble_s / zb.compute_s, zero_bubble_h1_idle(p, per_token) / (m * work), 1e-12) << "pp " << p;
    cfg.parallel.schedule = PipelineSchedule::one_f_one_b;
    const StepTime classic = stage_step_times(cfg, Layout{1, 1, p}, c)[1];
    EXPECT_DOUBLE_EQ(classic.compute_s, zb.compute_s);
    EXPECT_LT(zb.bubble_s, classic.bubble_s);
  }
}

// dp 2 × tp 2, L 2, C 64, V 256, T 64, b 4, m = 16 / (4 · 2) = 2; dp across nodes: β 1e9, α 1e-5.
// The rank's tensors at tp 2 (as in DataAndTensorParallelClosedForm), each a ZeRO unit, all even
// (no padding at dp 2): wte 128·64 = 8192, wpe 64·64 = 4096, each block 25184, ln_f 128; Ψ = 62784
// floats = 251136 bytes. Over 2 ranks an all-reduce of B bytes takes B/1e9 + 2e-5 s, a
// reduce-scatter or all-gather B/2e9 + 1e-5 s; each call pays its α.
//   loss sum, every stage:  8 B             → 8e-9 + 2e-5                          = 2.0008e-5
//   ZeRO 0: 1 bucket        251136 B        → 2.51136e-4 + 2e-5; with the loss     = 2.91144e-4
//   ZeRO 1: 5 reduce-scatters of Ψ once, 5 gathers of Ψ: 2 · (1.25568e-4 + 5e-5) + loss
//                                                                                  = 3.71144e-4
//   ZeRO 2: 10 reduce-scatters (every micro-batch's backward), 2Ψ: 2.51136e-4 + 1e-4,
//           5 gathers: 1.75568e-4, loss                                            = 5.46712e-4
//   ZeRO 3: reduce-scatters as ZeRO 2; gathers: wte, wpe, ln_f after the update (12416 floats)
//           and the blocks: F0 asks for h0 (gathered) and prefetches h1 into the other room;
//           both rooms then hold the stage's two blocks for the rest of the step — 2 blocks,
//           5 calls of 12416 + 2 · 25184 = 62784 floats = 251136 B, the same as ZeRO 2's
//           gathers; with the reduce-scatters and the loss                          = 5.46712e-4
// Under bf16 the gradients are still reduced in fp32 (ZeRO 0: the fp32 figure, not half), and
// only the gathers travel in 16 bits: ZeRO 3 gathers 125568 B: 6.2784e-5 + 5e-5    = 4.83928e-4
TEST(StepTime, ZeroStagesAndPrecisionPriceTheTrainersTraffic) {
  Config cfg = small_config();
  const Cluster c = test_cluster();
  const Layout layout{2, 2, 1};
  auto dp_s = [&](int zero, Precision precision) {
    cfg.parallel.zero = zero;
    cfg.train.precision = precision;
    return predict_step_time(cfg, layout, c).dp_comm_s;
  };
  EXPECT_NEAR(dp_s(0, Precision::fp32), 2.91144e-4, 1e-15);
  EXPECT_NEAR(dp_s(1, Precision::fp32), 3.71144e-4, 1e-15);
  EXPECT_NEAR(dp_s(2, Precision::fp32), 5.46712e-4, 1e-15);
  EXPECT_NEAR(dp_s(3, Precision::fp32), 5.46712e-4, 1e-15);
  EXPECT_NEAR(dp_s(0, Precision::bf16), 2.91144e-4, 1e-15);
  EXPECT_NEAR(dp_s(3, Precision::bf16), 4.83928e-4, 1e-15);

  // The counts behind them.
  cfg.parallel.zero = 3;
  cfg.train.precision = Precision::fp32;
  const GroupTraffic dp = predicted_traffic(cfg, layout, GridPosition{1, 1, 0}).at("dp");
  EXPECT_EQ(dp[Collective::allreduce], (TrafficCount{1, 8}));
  EXPECT_EQ(dp[Collective::reduce_scatter], (TrafficCount{10, 2 * 251136}));
  EXPECT_EQ(dp[Collective::allgather], (TrafficCount{5, 251136}));
}

// The gather policy alone, worked by hand: two rooms (h even in room 0, odd in room 1), each visit
// gathers its block unless its room holds it, then prefetches the next block of its pass.
TEST(ZeroThree, GathersIntoTwoRoomsAndPrefetchesTheNextBlock) {
  // Two blocks, two micro-batches: h0 and its prefetch h1 fill both rooms for the whole step.
  const std::vector<BlockVisit> two = {{0, false}, {1, false}, {1, true}, {0, true},
                                       {0, false}, {1, false}, {1, true}, {0, true}};
  EXPECT_EQ(zero3_block_gathers(two, 2), (std::vector<int>{0, 1}));
  // Four blocks, one micro-batch: F0 gathers 0, prefetches 1; F1 prefetches 2 (over 0); F2
  // prefetches 3 (over 1); F3 and B3 find 3 and 2 in place; B2 prefetches 1 (over 3), B1
  // prefetches 0 (over 2): six gathers where one room alone would need seven.
  const std::vector<BlockVisit> four = {{0, false}, {1, false}, {2, false}, {3, false},
                                        {3, true},  {2, true},  {1, true},  {0, true}};
  EXPECT_EQ(zero3_block_gathers(four, 4), (std::vector<int>{0, 1, 2, 3, 1, 0}));
  // One block: one room, gathered once.
  EXPECT_EQ(zero3_block_gathers({{0, false}, {0, true}, {0, false}, {0, true}}, 1), (std::vector<int>{0}));
}

TEST(StepTime, RecomputationCostsForwardAgain) {
  Config cfg = small_config();
  cfg.model.attention = AttentionKernel::materialized;  // fused rescores in every mode (below)
  const Cluster c = test_cluster();
  const Layout layout{2, 2, 1};
  const StepTime none = predict_step_time(cfg, layout, c);
  cfg.train.recompute = Recompute::full;
  const StepTime full = predict_step_time(cfg, layout, c);
  EXPECT_NEAR(full.compute_s, none.compute_s * 8 / 6, 1e-15);
  const double b = 4, T = 64, C = 64, L = 2, m = 2;
  const double ar = 2.0 * 1 / 2 * (b * T * C * 4) / 1e10 + 2 * 1e-6;
  // The rerun stops before the MLP's projection: one more sum per block, except the last block of
  // each micro-batch, whose activations are still there when its backward starts.
  EXPECT_NEAR(full.tp_comm_s - none.tp_comm_s, m * (L - 1) * ar, 1e-15);
  cfg.train.recompute = Recompute::selective;
  const StepTime selective = predict_step_time(cfg, layout, c);
  EXPECT_NEAR(selective.compute_s - none.compute_s, m * b * T * 2 * L * C * T / 2 / (1e12 * 0.5), 1e-15);
}

// Fused attention's backward recomputes the scores (Q·Kᵀ, 2·C·T a token per block) whatever the mode;
// selective recomputation adds nothing more under it.
TEST(StepTime, FusedAttentionRescoresInBackward) {
  Config cfg = small_config();
  const Cluster c = test_cluster();
  const Layout layout{2, 2, 1};
  cfg.model.attention = AttentionKernel::materialized;
  const StepTime materialized = predict_step_time(cfg, layout, c);
  cfg.model.attention = AttentionKernel::fused;
  const StepTime fused = predict_step_time(cfg, layout, c);
  const double b = 4, T = 64, C = 64, L = 2, m = 2;
  EXPECT_NEAR(fused.compute_s - materialized.compute_s, m * b * T * 2 * L * C * T / 2 / (1e12 * 0.5), 1e-15);
  cfg.train.recompute = Recompute::selective;
  EXPECT_EQ(predict_step_time(cfg, layout, c).compute_s, fused.compute_s);
}

TEST(StepTime, HostRanksShareTheNode) {
  const Config cfg = small_config();
  Cluster c = test_cluster();
  c.host_only = true;
  c.ranks_per_node = 0;
  const double one = predict_step_time(cfg, Layout{1, 1, 1}, c).compute_s;
  // dp 2: each rank computes half the tokens at half the node's rate.
  EXPECT_NEAR(predict_step_time(cfg, Layout{2, 1, 1}, c).compute_s, one, 1e-15);
  c.ranks_per_node = 1;  // one rank per node: the whole node's rate each
  EXPECT_NEAR(predict_step_time(cfg, Layout{2, 1, 1}, c).compute_s, one / 2, 1e-15);

  // 4 cores: 1 rank leaves 3 idle during its serial fraction s, 2 ranks 1 each, 4 or more none.
  c.ranks_per_node = 0;
  c.cores_per_node = 4;
  c.serial_fraction = 0.2;
  Config single = cfg;
  single.train.micro_batch = 1;  // 16 sequences over dp 1 … 8
  const double full = predict_step_time(single, Layout{4, 1, 1}, c).compute_s;
  EXPECT_NEAR(predict_step_time(single, Layout{1, 1, 1}, c).compute_s, full * (1 + 0.2 * 3), 1e-15);
  EXPECT_NEAR(predict_step_time(single, Layout{2, 1, 1}, c).compute_s, full * (1 + 0.2 * 1), 1e-15);
  EXPECT_NEAR(predict_step_time(single, Layout{8, 1, 1}, c).compute_s, full, 1e-15);
}

TEST(StepTime, OversubscribedHostWaitsATickPerMessage) {
  Config cfg = small_config();
  cfg.train.global_batch = 32;
  Cluster c = test_cluster();
  c.host_only = true;
  c.ranks_per_node = 0;
  c.cores_per_node = 2;
  c.oversubscribed_latency_s = 2e-3;
  EXPECT_EQ(c.intra_link(2).latency_s, c.intra.latency_s);
  EXPECT_EQ(c.intra_link(4).latency_s, 4e-3);
  EXPECT_EQ(c.intra_link(8).latency_s, 8e-3);
  // dp 4 on 2 cores: the all-reduce's 2(p − 1) messages each wait 4 ms, and so do the loss sum's.
  const StepTime st = predict_step_time(cfg, Layout{4, 1, 1}, c);
  const double psi = 4 * (256 * 64 + 64 * 64 + 2 * (12 * 64 * 64 + 13 * 64) + 2 * 64);
  EXPECT_NEAR(st.dp_comm_s, 2.0 * 3 / 4 * (psi + 8) / 1e10 + 2 * 2 * 3 * 4e-3, 1e-15);
}

// What a device hides, on small_config (gpt2 L 2, C 64, V 256, T 64, b 4, fused attention): per token
// the model's 6Ψ + 6LCT, Ψ = 120576, and the scores again in backward, 2LCT: F = 788992 FLOPs, of which
// the forward is (6Ψ + 6LCT)/3 = 257536. One micro-batch's backward takes B1 = (compute/m)·(F − 257536)/F.
constexpr double kTokenFlops = 788992, kForwardFlops = 257536;

// Calls of one kind priced as the model prices them: f(B) + (c − 1)·f(0).
double priced_by_hand(double (*f)(double, int, const Link&), double calls, double bytes, int ranks, const Link& link) {
  return f(bytes, ranks, link) + (calls - 1) * f(0, ranks, link);
}

TEST(StepTime, ADeviceHidesWhatTheScheduleLeavesRoomFor) {
  Config cfg = small_config();
  cfg.parallel.bucket_mb = 0.1;  // several buckets
  Cluster c = test_cluster();
  const Layout dp2{2, 1, 1};  // ranks 0 and 1 on one node: the intra link
  const auto backward_of = [](const StepTime& st, double m) {
    return st.compute_s / m * (kTokenFlops - kForwardFlops) / kTokenFlops;
  };
  // ZeRO 0: the buckets reduce behind the step's last backward (m = 2), all but the last bucket.
  const TrafficCount all_reduces = predicted_traffic(cfg, dp2, GridPosition{0, 0, 0}).at("dp")[Collective::allreduce];
  const double n = double(all_reduces.calls - 1);  // less the loss sum
  ASSERT_GT(n, 2);
  for (const double bandwidth : {1e10, 1e7}) {  // the reduction fits in the backward; it does not
    c.intra = {bandwidth, 1e-6};
    const StepTime st = predict_step_time(cfg, dp2, c);
    const double R = priced_by_hand(ring_allreduce_s, n, double(all_reduces.bytes - 8), 2, c.intra);
    const double B1 = backward_of(st, 2);
    EXPECT_NEAR(st.hidden_s, std::min(R - R / n, B1), 1e-15) << "β " << bandwidth;
    EXPECT_DOUBLE_EQ(st.total_s(), st.compute_s + st.dp_comm_s - st.hidden_s);
  }
  EXPECT_NEAR(predict_step_time(cfg, dp2, c).hidden_s, backward_of(predict_step_time(cfg, dp2, c), 2), 1e-15);
  // Host ranks share their cores: nothing hides.
  c.host_only = true;
  EXPECT_EQ(predict_step_time(cfg, dp2, c).hidden_s, 0.0);

  // ZeRO 3 at dp 2 × tp 2 (the traffic of ZeroStagesAndPrecisionPriceTheTrainersTraffic; dp across
  // nodes, β 1e9, α 1e-5): 10 reduce-scatters of 2Ψ_rank = 502272 B, one window per micro-batch each
  // leaving its last call exposed; the block gathers are 2 of the 5 all-gathers (wte, wpe and ln_f are
  // the update's), 201472 B, all but the first hidden behind what compute the reduction left.
  c = test_cluster();
  cfg.parallel.zero = 3;
  const StepTime z3 = predict_step_time(cfg, Layout{2, 2, 1}, c);
  const double R = priced_by_hand(ring_reduce_scatter_s, 10, 502272, 2, c.inter);
  const double hidden_R = std::min(R - 2 * R / 10, 2 * backward_of(z3, 2));
  const double G = priced_by_hand(ring_allgather_s, 2, 201472, 2, c.inter);
  EXPECT_NEAR(z3.hidden_s, hidden_R + std::min(G - G / 2, z3.compute_s - hidden_R), 1e-15);
  // ZeRO 1 in a pipeline never arms the reduction: only the sends hide, each behind at most one
  // forward. Stage 0 of 2 sends m = 4 activations of b·T·C fp32 (b 4, T 64, C 64) over the intra link.
  cfg.parallel.zero = 1;
  const StepTime stage0 = stage_step_times(cfg, Layout{1, 1, 2}, c)[0];
  const double send = 1e-6 + 4.0 * 64 * 64 * 4 / 1e10, m = 16 / 4;
  const double stage_flops = stage_flops_per_token(cfg.model, 0, 2), rescored = 2.0 * 1 * 64 * 64;
  const double F1 = stage0.compute_s / m * (stage_flops / 3) / (stage_flops + rescored);
  EXPECT_NEAR(stage0.hidden_s, m * std::min(send, F1), 1e-15);
  EXPECT_GT(stage0.hidden_s, 0.0);
}

}  // namespace test_step_time
}  // namespace meshtrain
