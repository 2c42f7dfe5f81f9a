// The planner's alpha-beta step-time model against closed forms worked out here by hand from the
// model's shape (GPT-2 parameter counts written out, not taken from the model code).
#include "model/parameters.hpp"
#include "plan/step_time.hpp"

#include <gtest/gtest.h>

#include <cmath>

namespace meshtrain {
namespace {

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
  c.ranks_per_node = 0;  // one node
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
  const double F = 6 * gpt2_parameters(L, C, V, T) + 6 * L * C * T;
  EXPECT_NEAR(st.compute_s, m * b * T * F / t / (1e12 * 0.5), 1e-15);

  // 4 all-reduces per block, +1 embedding, +1 head gradient, of b·T·C fp32 over 2 ranks intra-node;
  // and 2 of b·T floats for the vocab-parallel loss.
  const double ar = 2.0 * 1 / 2 * (b * T * C * 4) / 1e10 + 2 * 1e-6;
  const double ar_loss = 2.0 * 1 / 2 * (b * T * 4) / 1e10 + 2 * 1e-6;
  EXPECT_NEAR(st.tp_comm_s, m * (4 * L + 2) * ar + m * 2 * ar_loss, 1e-15);

  // The rank's parameters at tp 2: wte V/2 rows, wpe whole; per block ln_1, ln_2 (2C each), c_attn
  // C·3C/2 + 3C/2, attn c_proj C/2·C + C, c_fc C·4C/2 + 4C/2, mlp c_proj 4C/2·C + C; ln_f 2C.
  const double block = 2 * C + (C * 3 * C / 2 + 3 * C / 2) + (C / 2 * C + C) + 2 * C + (C * 4 * C / 2 + 4 * C / 2) +
                       (4 * C / 2 * C + C);
  const double local = V / 2 * C + T * C + L * block + 2 * C;
  EXPECT_NEAR(st.dp_comm_s, 2.0 * 1 / 2 * local * 4 / 1e9 + 2 * 1e-5, 1e-15);
  EXPECT_EQ(st.pp_comm_s, 0.0);
  EXPECT_EQ(st.bubble_s, 0.0);
  EXPECT_DOUBLE_EQ(st.total_s(), st.compute_s + st.tp_comm_s + st.dp_comm_s);
}

TEST(StepTime, PipelineBubbleIsTheIdealFraction) {
  Config cfg = small_config();
  cfg.model.layers = 4;
  cfg.train.micro_batch = 1;
  cfg.train.global_batch = 8;  // m = 8
  Cluster c = test_cluster();
  c.ranks_per_node = 0;
  c.intra = {1e30, 0};  // free communication: only compute and the bubble remain
  for (int p : {2, 4}) {
    const StepTime st = predict_step_time(cfg, Layout{1, 1, p}, c);
    const double m = 8;
    EXPECT_NEAR(st.bubble_s / (st.compute_s + st.bubble_s), (p - 1) / (m + p - 1), 1e-12) << "pp " << p;
  }
  // With communication: per micro-batch one activation out and one gradient back for a middle
  // stage's neighbours; the first and last stage send one each way and sum the tied wte gradient.
  c.intra = {1e9, 1e-6};
  const auto stages = stage_step_times(cfg, Layout{1, 1, 4}, c);
  ASSERT_EQ(stages.size(), 4u);
  const double b = 1, T = 64, C = 64, V = 256, m = 8;
  const double p2p = 1e-6 + b * T * C * 4 / 1e9;
  const double tied = 2.0 * 1 / 2 * V * C * 4 / 1e9 + 2 * 1e-6;
  EXPECT_NEAR(stages[1].pp_comm_s, m * 2 * p2p, 1e-15);
  EXPECT_NEAR(stages[0].pp_comm_s, m * 1 * p2p + tied, 1e-15);
  EXPECT_NEAR(stages[3].pp_comm_s, m * 1 * p2p + tied, 1e-15);
  EXPECT_NEAR(stages[1].bubble_s, 3 / m * (stages[1].compute_s + m * 2 * p2p), 1e-15);
}

TEST(StepTime, ZeroStagesAndPrecisionChangeTheTrafficAsDocumented) {
  Config cfg = small_config();
  Cluster c = test_cluster();
  c.inter.latency_s = 0;
  const Layout layout{2, 2, 1};
  const double m = 2;
  const double zero0 = predict_step_time(cfg, layout, c).dp_comm_s;
  cfg.parallel.zero = 1;
  EXPECT_NEAR(predict_step_time(cfg, layout, c).dp_comm_s, zero0, 1e-15);  // 2Ψ either way
  cfg.parallel.zero = 2;
  EXPECT_NEAR(predict_step_time(cfg, layout, c).dp_comm_s, zero0, 1e-15);
  cfg.parallel.zero = 3;  // reduce-scatter once, all-gather in every micro-batch's forward and backward
  EXPECT_NEAR(predict_step_time(cfg, layout, c).dp_comm_s, zero0 * (1 + 2 * m) / 2, 1e-15);
  cfg.parallel.zero = 0;
  cfg.train.precision = Precision::bf16;  // half the bytes, the 16-bit peak
  const StepTime half = predict_step_time(cfg, layout, c);
  EXPECT_NEAR(half.dp_comm_s, zero0 / 2, 1e-15);
  cfg.train.precision = Precision::fp32;
  EXPECT_NEAR(half.compute_s, predict_step_time(cfg, layout, c).compute_s / 4, 1e-15);
}

TEST(StepTime, RecomputationCostsForwardAgain) {
  Config cfg = small_config();
  const Cluster c = test_cluster();
  const Layout layout{2, 2, 1};
  const StepTime none = predict_step_time(cfg, layout, c);
  cfg.train.recompute = Recompute::full;
  const StepTime full = predict_step_time(cfg, layout, c);
  EXPECT_NEAR(full.compute_s, none.compute_s * 8 / 6, 1e-15);
  const double b = 4, T = 64, C = 64, L = 2, m = 2;
  const double ar = 2.0 * 1 / 2 * (b * T * C * 4) / 1e10 + 2 * 1e-6;
  EXPECT_NEAR(full.tp_comm_s - none.tp_comm_s, m * 2 * L * ar, 1e-15);  // 2 more per block
  cfg.train.recompute = Recompute::selective;
  const StepTime selective = predict_step_time(cfg, layout, c);
  EXPECT_NEAR(selective.compute_s - none.compute_s, m * b * T * 2 * L * C * T / 2 / (1e12 * 0.5), 1e-15);
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
  // dp 4 on 2 cores: the all-reduce's 2(p − 1) messages each wait 4 ms.
  const StepTime st = predict_step_time(cfg, Layout{4, 1, 1}, c);
  const double psi = 4 * (256 * 64 + 64 * 64 + 2 * (12 * 64 * 64 + 13 * 64) + 2 * 64);
  EXPECT_NEAR(st.dp_comm_s, 2.0 * 3 / 4 * psi / 1e10 + 2 * 3 * 4e-3, 1e-15);
}

}  // namespace
}  // namespace meshtrain
