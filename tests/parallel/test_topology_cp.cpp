// The process grid with context parallelism (issue 43, part 2), under mpiexec at 1, 2, 4 and 8 ranks.
//
// Ranks are ordered tp fastest, then cp, then dp, then pp. The positions and groups of dp2·cp2·tp2 are
// checked against a table written out here by hand, and every layout's against a brute-force
// enumeration (nested loops in that order, sharing no code with the formula): cp groups, dp groups (same
// cp rank), the dp × cp and edp × cp groups gradients are summed over, and tp, pp, ep, edp as before.
// With the real MPI_COMM_WORLD every layout with cp > 1 whose product is the world size is built and each
// group communicator checked by reducing and gathering the global ranks over it.
#include "parallel/topology.hpp"

#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <array>
#include <map>
#include <numeric>
#include <string>
#include <vector>

namespace meshtrain {
namespace {

using Groups = std::vector<std::vector<int>>;

// dp × cp × tp × pp (Layout's members come in the order dp, tp, pp, ep, cp).
Layout layout_of(int dp, int cp, int tp, int pp, int ep = 1) { return Layout{dp, tp, pp, ep, cp}; }

std::string name(const Layout& l) {
  return "dp" + std::to_string(l.dp) + "·ep" + std::to_string(l.ep) + "·cp" + std::to_string(l.cp) + "·tp" +
         std::to_string(l.tp) + "·pp" + std::to_string(l.pp);
}

// Every position in rank order, by loops nested pp, dp, cp, tp (tp innermost): {dp, cp, tp, pp}.
std::vector<std::array<int, 4>> counted_positions(const Layout& l) {
  std::vector<std::array<int, 4>> out;
  for (int p = 0; p < l.pp; ++p)
    for (int d = 0; d < l.dp; ++d)
      for (int c = 0; c < l.cp; ++c)
        for (int t = 0; t < l.tp; ++t) out.push_back({d, c, t, p});
  return out;
}

// Ranks agreeing on key(dp, cp, tp, pp), in rank order; groups by their first rank.
template <class Key>
Groups brute_force(const Layout& l, Key key) {
  const auto positions = counted_positions(l);
  std::map<std::vector<int>, std::vector<int>> by_key;
  for (int r = 0; r < int(positions.size()); ++r) {
    const auto [d, c, t, p] = positions[std::size_t(r)];
    by_key[key(d, c, t, p)].push_back(r);
  }
  Groups groups;
  for (auto& [k, members] : by_key) groups.push_back(members);
  std::sort(groups.begin(), groups.end(), [](const auto& a, const auto& b) { return a.front() < b.front(); });
  return groups;
}

std::vector<Layout> many_layouts() {
  std::vector<Layout> out;
  for (int dp : {1, 2, 4})
    for (int cp : {1, 2, 3})
      for (int tp : {1, 2})
        for (int pp : {1, 3})
          for (int ep = 1; ep <= dp; ep *= 2) out.push_back(layout_of(dp, cp, tp, pp, ep));
  return out;
}

TEST(TopologyContextParallel, HandTable) {
  const Layout l = layout_of(2, 2, 2, 1);
  //                                 rank: 0  1  2  3  4  5  6  7
  const std::vector<int> tp_rank = {0, 1, 0, 1, 0, 1, 0, 1};
  const std::vector<int> cp_rank = {0, 0, 1, 1, 0, 0, 1, 1};
  const std::vector<int> dp_rank = {0, 0, 0, 0, 1, 1, 1, 1};
  for (int r = 0; r < 8; ++r) {
    const GridPosition at = Topology::position(l, r);
    EXPECT_EQ(at.tp_rank, tp_rank[std::size_t(r)]) << r;
    EXPECT_EQ(at.cp_rank, cp_rank[std::size_t(r)]) << r;
    EXPECT_EQ(at.dp_rank, dp_rank[std::size_t(r)]) << r;
    EXPECT_EQ(Topology::global_rank(l, at), r);
  }
  EXPECT_EQ(tp_groups(l), (Groups{{0, 1}, {2, 3}, {4, 5}, {6, 7}}));
  EXPECT_EQ(cp_groups(l), (Groups{{0, 2}, {1, 3}, {4, 6}, {5, 7}}));
  EXPECT_EQ(dp_groups(l), (Groups{{0, 4}, {1, 5}, {2, 6}, {3, 7}}));
  EXPECT_EQ(dp_cp_groups(l), (Groups{{0, 2, 4, 6}, {1, 3, 5, 7}}));
  EXPECT_EQ(pp_groups(l), (Groups{{0}, {1}, {2}, {3}, {4}, {5}, {6}, {7}}));
  EXPECT_EQ(l.world(), 8);
}

TEST(TopologyContextParallel, EveryLayoutAgreesWithTheBruteForce) {
  for (const Layout& l : many_layouts()) {
    SCOPED_TRACE(name(l));
    const auto positions = counted_positions(l);
    ASSERT_EQ(int(positions.size()), l.world());
    for (int r = 0; r < l.world(); ++r) {
      const GridPosition at = Topology::position(l, r);
      EXPECT_EQ((std::array{at.dp_rank, at.cp_rank, at.tp_rank, at.pp_rank}), positions[std::size_t(r)]) << r;
      EXPECT_EQ(Topology::global_rank(l, at), r);
    }
    const int ep = l.ep;
    using V = std::vector<int>;
    EXPECT_EQ(tp_groups(l), brute_force(l, [](int d, int c, int, int p) { return V{d, c, p}; }));
    EXPECT_EQ(cp_groups(l), brute_force(l, [](int d, int, int t, int p) { return V{d, t, p}; }));
    EXPECT_EQ(dp_groups(l), brute_force(l, [](int, int c, int t, int p) { return V{c, t, p}; }));
    EXPECT_EQ(pp_groups(l), brute_force(l, [](int d, int c, int t, int) { return V{d, c, t}; }));
    EXPECT_EQ(ep_groups(l), brute_force(l, [ep](int d, int c, int t, int p) { return V{d / ep, c, t, p}; }));
    EXPECT_EQ(edp_groups(l), brute_force(l, [ep](int d, int c, int t, int p) { return V{d % ep, c, t, p}; }));
    EXPECT_EQ(dp_cp_groups(l), brute_force(l, [](int, int, int t, int p) { return V{t, p}; }));
    EXPECT_EQ(edp_cp_groups(l), brute_force(l, [ep](int d, int, int t, int p) { return V{d % ep, t, p}; }));
  }
}

TEST(TopologyContextParallel, DescribeListsTheContextGroups) {
  const Layout l = layout_of(2, 2, 2, 1);
  const std::string text = describe_grid(l, std::vector<std::string>(8, "node0"));
  EXPECT_EQ(text,
            "layout: dp 2 × cp 2 × tp 2 × pp 1 = 8 ranks on 1 host\n"
            "tp groups (4): [0 1] [2 3] [4 5] [6 7]\n"
            "cp groups (4): [0 2] [1 3] [4 6] [5 7]\n"
            "dp groups (4): [0 4] [1 5] [2 6] [3 7]\n"
            "dp × cp groups (2): [0 2 4 6] [1 3 5 7]\n"
            "pp groups (8): [0] [1] [2] [3] [4] [5] [6] [7]\n"
            "host node0: ranks 0-7\n");
  EXPECT_THROW(Topology::position(layout_of(1, 0, 1, 1), 0), std::invalid_argument);
}

// `comm` holds `members` (global ranks, in group rank order): its size, this rank's rank, and an
// all-gather of the global ranks. Every rank makes the same calls, so a failure cannot hang the others.
void expect_group(MPI_Comm comm, const std::vector<int>& members, int me, const char* kind) {
  int size = 0, rank = -1;
  MPI_Comm_size(comm, &size);
  MPI_Comm_rank(comm, &rank);
  EXPECT_EQ(size, int(members.size())) << kind;
  EXPECT_EQ(rank, int(std::find(members.begin(), members.end(), me) - members.begin())) << kind;
  std::vector<int> gathered(std::size_t(size), -1);
  MPI_Allgather(&me, 1, MPI_INT, gathered.data(), 1, MPI_INT, comm);
  EXPECT_EQ(gathered, members) << kind;
}

std::vector<int> group_of(const Groups& groups, int rank) {
  for (const auto& g : groups)
    if (std::find(g.begin(), g.end(), rank) != g.end()) return g;
  return {};
}

TEST(TopologyContextParallel, EveryContextLayoutOfTheWorldBuildsItsGroups) {
  int world = 0, me = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  MPI_Comm_rank(MPI_COMM_WORLD, &me);
  int built = 0;
  for (int cp = 2; cp <= world; ++cp)
    for (int dp = 1; dp <= world / cp; ++dp)
      for (int tp = 1; tp <= world / (cp * dp); ++tp) {
        if (world % (cp * dp * tp) != 0) continue;
        for (int ep = 1; ep <= dp; ep *= 2) {
          if (dp % ep != 0) continue;
          const Layout l = layout_of(dp, cp, tp, world / (cp * dp * tp), ep);
          SCOPED_TRACE(name(l));
          const Topology topology(MPI_COMM_WORLD, l);
          EXPECT_EQ(topology.position().cp_rank, Topology::position(l, me).cp_rank);
          expect_group(topology.cp_comm(), group_of(cp_groups(l), me), me, "cp");
          expect_group(topology.dp_comm(), group_of(dp_groups(l), me), me, "dp");
          expect_group(topology.tp_comm(), group_of(tp_groups(l), me), me, "tp");
          expect_group(topology.pp_comm(), group_of(pp_groups(l), me), me, "pp");
          expect_group(topology.ep_comm(), group_of(ep_groups(l), me), me, "ep");
          expect_group(topology.edp_comm(), group_of(edp_groups(l), me), me, "edp");
          expect_group(topology.dp_cp_comm(), group_of(dp_cp_groups(l), me), me, "dp × cp");
          expect_group(topology.edp_cp_comm(), group_of(edp_cp_groups(l), me), me, "edp × cp");
          ++built;
        }
      }
  if (world > 1) {
    EXPECT_GT(built, 0);
  }
  // Without context parallelism the gradients' groups are the dp and edp groups.
  const Layout plain = layout_of(world, 1, 1, 1);
  const Topology topology(MPI_COMM_WORLD, plain);
  expect_group(topology.dp_cp_comm(), group_of(dp_groups(plain), me), me, "dp × cp at cp 1");
  expect_group(topology.edp_cp_comm(), group_of(edp_groups(plain), me), me, "edp × cp at cp 1");
  expect_group(topology.cp_comm(), {me}, me, "cp at cp 1");
}

}  // namespace
}  // namespace meshtrain
