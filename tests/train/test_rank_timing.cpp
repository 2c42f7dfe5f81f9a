// The per-rank timing table on one rank, against its text written out by hand: compute is the
// step's time less the rest, and the all-to-all row appears only once an all-to-all took time,
// leaving the other rows as they were.
#include "train/rank_timing.hpp"

#include <gtest/gtest.h>
#include <mpi.h>

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

  timing.add_step(1.0, 0.25, 0.125, 0.5);
  timing.add_step(1.0, 0.25, 0.125, 0.5);
  EXPECT_EQ(timing.report(MPI_COMM_WORLD, 3, 0.25),
            "per-rank time per step, steps 2–3 (1 rank): min / median / max, slowest rank\n"
            "  compute          0.1250 /   0.1250 /   0.1250 s   rank 0\n"
            "  communication    0.2500 /   0.2500 /   0.2500 s   rank 0\n"
            "  all-to-all       0.5000 /   0.5000 /   0.5000 s   rank 0\n"
            "  idle             0.1250 /   0.1250 /   0.1250 s   rank 0\n"
            "  pipeline idle: 12.5 % of rank time, schedule bubble (p − 1)/(m + p − 1) = 25.0 %\n");
  EXPECT_EQ(timing.report(MPI_COMM_WORLD, 3), "");  // nothing added since
}

}  // namespace test_rank_timing
}  // namespace meshtrain
