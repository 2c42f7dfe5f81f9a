// The per-rank timing table on one rank, against its text written out by hand: compute is the
// step's time less the rest, the all-to-all row appears only once an all-to-all took time,
// leaving the other rows as they were, and a pipeline's simulation hears each stage's compute per micro-batch.
#include "train/rank_timing.hpp"

#include <gtest/gtest.h>
#include <mpi.h>

#include <vector>

namespace meshtrain {
namespace test_rank_timing {

TEST(RankTiming, ShowsAllToAllOnlyWhenOneTookTime) {
  RankTiming timing;
  timing.add_step(1.0, 0.25, 0.125);
  EXPECT_EQ(timing.report(MPI_COMM_WORLD, 1),
            "per-rank time per step, steps 1–1 (1 rank): min / median / max, slowest rank\n"
            "  compute          0.6250 /   0.6250 /   0.6250 s   rank 0\n"
            "  communication    0.2500 /   0.2500 /   0.2500 s   rank 0\n"
            "  idle             0.1250 /   0.1250 /   0.1250 s   rank 0\n");

  // A pipeline of one stage here (the gather is over this rank): the simulation hears the stage's compute per
  // micro-batch, the step's seconds ÷ 2 micro-batches.
  timing.add_step(1.0, 0.25, 0.125, 0.5, {0.004, 0.006, 0.002});
  timing.add_step(1.0, 0.25, 0.125, 0.5, {0.004, 0.006, 0.002});
  std::vector<ScheduleCosts> heard;
  const PipelineTiming pipeline{0.25, "1F1B's bubble", 0, 1, 2, [&](const std::vector<ScheduleCosts>& costs) {
                                  heard = costs;
                                  return 0.375;
                                }};
  EXPECT_EQ(timing.report(MPI_COMM_WORLD, 3, &pipeline),
            "per-rank time per step, steps 2–3 (1 rank): min / median / max, slowest rank\n"
            "  compute          0.1250 /   0.1250 /   0.1250 s   rank 0\n"
            "  communication    0.2500 /   0.2500 /   0.2500 s   rank 0\n"
            "  all-to-all       0.5000 /   0.5000 /   0.5000 s   rank 0\n"
            "  idle             0.1250 /   0.1250 /   0.1250 s   rank 0\n"
            "  pipeline idle: 12.5 % of rank time, 1F1B's bubble (p − 1)/(m + p − 1) = 25.0 %\n"
            "  simulated at each stage's compute per micro-batch (forward / backward or its input gradient / weight "
            "gradient): 37.5 % idle (stage 0 2.00 / 3.00 / 1.00 ms)\n");
  ASSERT_EQ(heard.size(), 1u);
  EXPECT_DOUBLE_EQ(heard[0].forward, 0.002);
  EXPECT_DOUBLE_EQ(heard[0].backward_input, 0.003);
  EXPECT_DOUBLE_EQ(heard[0].backward_weight, 0.001);
  EXPECT_EQ(timing.report(MPI_COMM_WORLD, 3), "");  // nothing added since
}

}  // namespace test_rank_timing
}  // namespace meshtrain
