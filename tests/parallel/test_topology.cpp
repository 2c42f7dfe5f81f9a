// The process grid, run under mpiexec at 1, 2, 4 and 8 ranks (every rank runs every test).
//
// Rank arithmetic and groups are checked against tables written out here by hand (the 16-rank
// example of Megatron's parallel_state docstring and other layouts) and against a brute-force
// enumeration of "tp fastest, then dp, then pp" that shares no code with the formula; so are the
// expert-parallel groups (ep, edp) of layouts that split dp. With the real MPI_COMM_WORLD, every
// layout whose product is the world size is built, with every ep that divides its dp, and each
// group communicator is checked by reducing and gathering the global ranks over it.
#include "parallel/topology.hpp"

#include "core/errors.hpp"
#include "core/mpi_check.hpp"

#include <fmt/ranges.h>
#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <map>
#include <numeric>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

namespace meshtrain {
namespace {

using Groups = std::vector<std::vector<int>>;

Layout make_layout(int dp, int tp, int pp, int ep = 1) {
  Layout layout;
  layout.dp = dp;
  layout.tp = tp;
  layout.pp = pp;
  layout.ep = ep;
  return layout;
}

std::string name(const Layout& layout) {
  return "dp" + std::to_string(layout.dp) + (layout.ep > 1 ? "·ep" + std::to_string(layout.ep) : "") + "·tp" +
         std::to_string(layout.tp) + "·pp" + std::to_string(layout.pp);
}

// ---------------------------------------------------------------------------------------------
// Hand-written tables.

// Megatron's docstring example: 16 ranks, tp 2, pp 4, so dp 2.
const Layout megatron16 = make_layout(2, 2, 4);
//                                   rank: 0  1  2  3  4  5  6  7  8  9 10 11 12 13 14 15
const std::vector<int> megatron16_tp_rank = {0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1};
const std::vector<int> megatron16_dp_rank = {0, 0, 1, 1, 0, 0, 1, 1, 0, 0, 1, 1, 0, 0, 1, 1};
const std::vector<int> megatron16_pp_rank = {0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3};

struct HandTable {
  Layout layout;
  Groups tp, dp, pp, model;  // model: same dp rank, in global rank order (Topology::position's)
};

const std::vector<HandTable>& hand_tables() {
  static const std::vector<HandTable> tables = {
      {megatron16,
       {{0, 1}, {2, 3}, {4, 5}, {6, 7}, {8, 9}, {10, 11}, {12, 13}, {14, 15}},
       {{0, 2}, {1, 3}, {4, 6}, {5, 7}, {8, 10}, {9, 11}, {12, 14}, {13, 15}},
       {{0, 4, 8, 12}, {1, 5, 9, 13}, {2, 6, 10, 14}, {3, 7, 11, 15}},
       {{0, 1, 4, 5, 8, 9, 12, 13}, {2, 3, 6, 7, 10, 11, 14, 15}}},
      {make_layout(8, 1, 1),
       {{0}, {1}, {2}, {3}, {4}, {5}, {6}, {7}},
       {{0, 1, 2, 3, 4, 5, 6, 7}},
       {{0}, {1}, {2}, {3}, {4}, {5}, {6}, {7}},
       {{0}, {1}, {2}, {3}, {4}, {5}, {6}, {7}}},
      {make_layout(1, 8, 1),
       {{0, 1, 2, 3, 4, 5, 6, 7}},
       {{0}, {1}, {2}, {3}, {4}, {5}, {6}, {7}},
       {{0}, {1}, {2}, {3}, {4}, {5}, {6}, {7}},
       {{0, 1, 2, 3, 4, 5, 6, 7}}},
      {make_layout(1, 1, 8),
       {{0}, {1}, {2}, {3}, {4}, {5}, {6}, {7}},
       {{0}, {1}, {2}, {3}, {4}, {5}, {6}, {7}},
       {{0, 1, 2, 3, 4, 5, 6, 7}},
       {{0, 1, 2, 3, 4, 5, 6, 7}}},
      {make_layout(2, 4, 1),
       {{0, 1, 2, 3}, {4, 5, 6, 7}},
       {{0, 4}, {1, 5}, {2, 6}, {3, 7}},
       {{0}, {1}, {2}, {3}, {4}, {5}, {6}, {7}},
       {{0, 1, 2, 3}, {4, 5, 6, 7}}},
      {make_layout(2, 2, 2),
       {{0, 1}, {2, 3}, {4, 5}, {6, 7}},
       {{0, 2}, {1, 3}, {4, 6}, {5, 7}},
       {{0, 4}, {1, 5}, {2, 6}, {3, 7}},
       {{0, 1, 4, 5}, {2, 3, 6, 7}}},
      {make_layout(1, 2, 4),
       {{0, 1}, {2, 3}, {4, 5}, {6, 7}},
       {{0}, {1}, {2}, {3}, {4}, {5}, {6}, {7}},
       {{0, 2, 4, 6}, {1, 3, 5, 7}},
       {{0, 1, 2, 3, 4, 5, 6, 7}}},
      {make_layout(2, 1, 4),
       {{0}, {1}, {2}, {3}, {4}, {5}, {6}, {7}},
       {{0, 1}, {2, 3}, {4, 5}, {6, 7}},
       {{0, 2, 4, 6}, {1, 3, 5, 7}},
       {{0, 2, 4, 6}, {1, 3, 5, 7}}},
      {make_layout(2, 2, 1), {{0, 1}, {2, 3}}, {{0, 2}, {1, 3}}, {{0}, {1}, {2}, {3}}, {{0, 1}, {2, 3}}},
      {make_layout(1, 2, 2), {{0, 1}, {2, 3}}, {{0}, {1}, {2}, {3}}, {{0, 2}, {1, 3}}, {{0, 1, 2, 3}}},
      {make_layout(2, 1, 2), {{0}, {1}, {2}, {3}}, {{0, 1}, {2, 3}}, {{0, 2}, {1, 3}}, {{0, 2}, {1, 3}}},
      // dp ≠ pp, so a dp/pp mix-up shows.
      {make_layout(3, 2, 2),
       {{0, 1}, {2, 3}, {4, 5}, {6, 7}, {8, 9}, {10, 11}},
       {{0, 2, 4}, {1, 3, 5}, {6, 8, 10}, {7, 9, 11}},
       {{0, 6}, {1, 7}, {2, 8}, {3, 9}, {4, 10}, {5, 11}},
       {{0, 1, 6, 7}, {2, 3, 8, 9}, {4, 5, 10, 11}}},
  };
  return tables;
}

const HandTable* hand_table(const Layout& layout) {
  for (const auto& table : hand_tables())
    if (table.layout.dp == layout.dp && table.layout.tp == layout.tp && table.layout.pp == layout.pp) return &table;
  return nullptr;
}

// Expert parallelism: the ep and edp groups of layouts written out by hand from
// rank = tp_rank + tp · (dp_rank + dp · pp_rank) and dp_rank = edp_rank · ep + ep_rank.
struct ExpertTable {
  Layout layout;
  Groups ep, edp;
};

const std::vector<ExpertTable>& expert_tables() {
  static const std::vector<ExpertTable> tables = {
      // dp ranks 0 0 1 1 2 2 3 3 over ranks 0-7: ep pairs dp ranks {0 1} and {2 3}, edp {0 2} and {1 3}.
      {make_layout(4, 2, 1, 2), {{0, 2}, {1, 3}, {4, 6}, {5, 7}}, {{0, 4}, {1, 5}, {2, 6}, {3, 7}}},
      {make_layout(8, 1, 1, 2), {{0, 1}, {2, 3}, {4, 5}, {6, 7}}, {{0, 2, 4, 6}, {1, 3, 5, 7}}},
      {make_layout(8, 1, 1, 4), {{0, 1, 2, 3}, {4, 5, 6, 7}}, {{0, 4}, {1, 5}, {2, 6}, {3, 7}}},
      {make_layout(8, 1, 1, 8), {{0, 1, 2, 3, 4, 5, 6, 7}}, {{0}, {1}, {2}, {3}, {4}, {5}, {6}, {7}}},
      {make_layout(4, 1, 2, 2), {{0, 1}, {2, 3}, {4, 5}, {6, 7}}, {{0, 2}, {1, 3}, {4, 6}, {5, 7}}},
      {make_layout(4, 1, 2, 4), {{0, 1, 2, 3}, {4, 5, 6, 7}}, {{0}, {1}, {2}, {3}, {4}, {5}, {6}, {7}}},
      {make_layout(2, 2, 1, 2), {{0, 2}, {1, 3}}, {{0}, {1}, {2}, {3}}},
      {make_layout(2, 1, 1, 2), {{0, 1}}, {{0}, {1}}},
      // ep 1: single-rank ep groups, edp = dp.
      {make_layout(2, 2, 2, 1), {{0}, {1}, {2}, {3}, {4}, {5}, {6}, {7}}, {{0, 2}, {1, 3}, {4, 6}, {5, 7}}},
      // ep 3 of dp 6 under tp 2: dp ranks 0 … 5 are ranks {0 1} {2 3} … {10 11}.
      {make_layout(6, 2, 1, 3),
       {{0, 2, 4}, {1, 3, 5}, {6, 8, 10}, {7, 9, 11}},
       {{0, 6}, {1, 7}, {2, 8}, {3, 9}, {4, 10}, {5, 11}}},
  };
  return tables;
}

const ExpertTable* expert_table(const Layout& layout) {
  for (const auto& table : expert_tables())
    if (table.layout.dp == layout.dp && table.layout.tp == layout.tp && table.layout.pp == layout.pp &&
        table.layout.ep == layout.ep)
      return &table;
  return nullptr;
}

// Every (dp, tp, pp) whose product is `world`.
std::vector<Layout> layouts_of(int world) {
  std::vector<Layout> layouts;
  for (int dp = 1; dp <= world; ++dp)
    for (int tp = 1; tp <= world; ++tp)
      if (world % (dp * tp) == 0) layouts.push_back(make_layout(dp, tp, world / (dp * tp)));
  return layouts;
}

// Every layout of 1 to 24 ranks, and a few odd ones.
std::vector<Layout> many_layouts() {
  std::vector<Layout> layouts;
  for (int world = 1; world <= 24; ++world)
    for (const auto& layout : layouts_of(world)) layouts.push_back(layout);
  for (const auto& layout : {make_layout(3, 5, 7), make_layout(7, 3, 5), make_layout(5, 7, 3), make_layout(16, 8, 4)})
    layouts.push_back(layout);
  return layouts;
}

// "tp fastest, then dp, then pp", by counting in nested loops rather than by the formula:
// positions[r] is global rank r's (dp, tp, pp).
std::vector<std::tuple<int, int, int>> counted_positions(const Layout& layout) {
  std::vector<std::tuple<int, int, int>> positions;
  for (int p = 0; p < layout.pp; ++p)
    for (int d = 0; d < layout.dp; ++d)
      for (int t = 0; t < layout.tp; ++t) positions.emplace_back(d, t, p);
  return positions;
}

// The layout with every expert-parallel degree its dp allows.
std::vector<Layout> with_every_ep(const std::vector<Layout>& layouts) {
  std::vector<Layout> out;
  for (const auto& layout : layouts)
    for (int ep = 1; ep <= layout.dp; ++ep)
      if (layout.dp % ep == 0) out.push_back(make_layout(layout.dp, layout.tp, layout.pp, ep));
  return out;
}

// Expert groups by brute force from the counted positions: ranks that agree on tp and pp rank and
// on which run of ep dp ranks they are in (ep groups) or on their place in it (edp groups).
Groups brute_force_expert_groups(const Layout& layout, bool ep_group) {
  const auto positions = counted_positions(layout);
  std::map<std::tuple<int, int, int>, std::vector<int>> by_key;
  for (int r = 0; r < static_cast<int>(positions.size()); ++r) {
    const auto [d, t, p] = positions[static_cast<std::size_t>(r)];
    by_key[{t, p, ep_group ? d / layout.ep : d % layout.ep}].push_back(r);
  }
  Groups groups;
  for (auto& [key, members] : by_key) groups.push_back(members);
  std::sort(groups.begin(), groups.end(), [](const auto& a, const auto& b) { return a.front() < b.front(); });
  return groups;
}

// Groups by brute force from the counted positions: ranks that agree on every coordinate but
// `along`, in rank order; groups ordered by their first rank.
Groups brute_force_groups(const Layout& layout, int along) {
  const auto positions = counted_positions(layout);
  std::map<std::tuple<int, int, int>, std::vector<int>> by_key;
  for (int r = 0; r < static_cast<int>(positions.size()); ++r) {
    auto key = positions[static_cast<std::size_t>(r)];
    if (along == 0) std::get<0>(key) = -1;
    if (along == 1) std::get<1>(key) = -1;
    if (along == 2) std::get<2>(key) = -1;
    by_key[key].push_back(r);
  }
  Groups groups;
  for (auto& [key, members] : by_key) groups.push_back(members);
  std::sort(groups.begin(), groups.end(), [](const auto& a, const auto& b) { return a.front() < b.front(); });
  return groups;
}

// ---------------------------------------------------------------------------------------------
// Pure rank arithmetic.

TEST(TopologyArithmetic, Megatron16PositionsMatchTheHandTable) {
  for (int r = 0; r < 16; ++r) {
    const GridPosition position = Topology::position(megatron16, r);
    const auto i = static_cast<std::size_t>(r);
    EXPECT_EQ(position.tp_rank, megatron16_tp_rank[i]) << "rank " << r;
    EXPECT_EQ(position.dp_rank, megatron16_dp_rank[i]) << "rank " << r;
    EXPECT_EQ(position.pp_rank, megatron16_pp_rank[i]) << "rank " << r;
    GridPosition from_table;
    from_table.dp_rank = megatron16_dp_rank[i];
    from_table.tp_rank = megatron16_tp_rank[i];
    from_table.pp_rank = megatron16_pp_rank[i];
    EXPECT_EQ(Topology::global_rank(megatron16, from_table), r);
  }
}

TEST(TopologyArithmetic, GroupsMatchTheHandTables) {
  for (const auto& table : hand_tables()) {
    SCOPED_TRACE(name(table.layout));
    EXPECT_EQ(tp_groups(table.layout), table.tp);
    EXPECT_EQ(dp_groups(table.layout), table.dp);
    EXPECT_EQ(pp_groups(table.layout), table.pp);
  }
}

TEST(TopologyArithmetic, HandTablesAgreeWithTheBruteForce) {
  // The tables above and the brute force are independent; agreeing, they vouch for each other.
  for (const auto& table : hand_tables()) {
    SCOPED_TRACE(name(table.layout));
    EXPECT_EQ(brute_force_groups(table.layout, 0), table.dp);
    EXPECT_EQ(brute_force_groups(table.layout, 1), table.tp);
    EXPECT_EQ(brute_force_groups(table.layout, 2), table.pp);
  }
}

TEST(TopologyArithmetic, PositionsAndGlobalRanksRoundTrip) {
  for (const auto& layout : many_layouts()) {
    SCOPED_TRACE(name(layout));
    const auto counted = counted_positions(layout);
    ASSERT_EQ(static_cast<int>(counted.size()), layout.world());
    for (int r = 0; r < layout.world(); ++r) {
      const auto [d, t, p] = counted[static_cast<std::size_t>(r)];
      const GridPosition position = Topology::position(layout, r);
      EXPECT_EQ(position.dp_rank, d) << "rank " << r;
      EXPECT_EQ(position.tp_rank, t) << "rank " << r;
      EXPECT_EQ(position.pp_rank, p) << "rank " << r;
      EXPECT_EQ(Topology::global_rank(layout, position), r);
    }
  }
}

TEST(TopologyArithmetic, GroupsMatchTheBruteForceForEveryLayout) {
  for (const auto& layout : many_layouts()) {
    SCOPED_TRACE(name(layout));
    EXPECT_EQ(dp_groups(layout), brute_force_groups(layout, 0));
    EXPECT_EQ(tp_groups(layout), brute_force_groups(layout, 1));
    EXPECT_EQ(pp_groups(layout), brute_force_groups(layout, 2));
  }
}

TEST(TopologyArithmetic, EveryRankIsInExactlyOneGroupOfEachKind) {
  for (const auto& layout : many_layouts()) {
    SCOPED_TRACE(name(layout));
    const std::vector<std::tuple<const char*, Groups, int, int>> kinds = {
        {"tp", tp_groups(layout), layout.dp * layout.pp, layout.tp},
        {"dp", dp_groups(layout), layout.tp * layout.pp, layout.dp},
        {"pp", pp_groups(layout), layout.dp * layout.tp, layout.pp}};
    for (const auto& [kind, groups, count, size] : kinds) {
      EXPECT_EQ(static_cast<int>(groups.size()), count) << kind << " groups";
      std::vector<int> seen(static_cast<std::size_t>(layout.world()), 0);
      for (const auto& group : groups) {
        EXPECT_EQ(static_cast<int>(group.size()), size) << kind << " group size";
        for (const int r : group) {
          ASSERT_GE(r, 0);
          ASSERT_LT(r, layout.world());
          ++seen[static_cast<std::size_t>(r)];
        }
      }
      for (int r = 0; r < layout.world(); ++r)
        EXPECT_EQ(seen[static_cast<std::size_t>(r)], 1) << "rank " << r << " in " << kind << " groups";
    }
  }
}

TEST(TopologyArithmetic, ExpertGroupsMatchTheHandTables) {
  for (const auto& table : expert_tables()) {
    SCOPED_TRACE(name(table.layout));
    EXPECT_EQ(ep_groups(table.layout), table.ep);
    EXPECT_EQ(edp_groups(table.layout), table.edp);
    // The tables and the brute force are independent; agreeing, they vouch for each other.
    EXPECT_EQ(brute_force_expert_groups(table.layout, true), table.ep);
    EXPECT_EQ(brute_force_expert_groups(table.layout, false), table.edp);
  }
}

TEST(TopologyArithmetic, ExpertGroupsMatchTheBruteForceForEveryLayout) {
  for (const auto& layout : with_every_ep(many_layouts())) {
    SCOPED_TRACE(name(layout));
    EXPECT_EQ(ep_groups(layout), brute_force_expert_groups(layout, true));
    EXPECT_EQ(edp_groups(layout), brute_force_expert_groups(layout, false));
    EXPECT_EQ(static_cast<int>(ep_groups(layout).size()), layout.world() / layout.ep);
    EXPECT_EQ(static_cast<int>(edp_groups(layout).size()), layout.world() / layout.edp());
  }
}

TEST(TopologyArithmetic, ExpertRanksSplitTheDataParallelRank) {
  // dp4·ep2·tp2 and dp6·ep3·tp2, by hand: rank → (ep rank, edp rank).
  const std::vector<std::pair<Layout, std::vector<std::pair<int, int>>>> tables = {
      {make_layout(4, 2, 1, 2), {{0, 0}, {0, 0}, {1, 0}, {1, 0}, {0, 1}, {0, 1}, {1, 1}, {1, 1}}},
      {make_layout(6, 2, 1, 3),
       {{0, 0}, {0, 0}, {1, 0}, {1, 0}, {2, 0}, {2, 0}, {0, 1}, {0, 1}, {1, 1}, {1, 1}, {2, 1}, {2, 1}}}};
  for (const auto& [layout, ranks] : tables) {
    SCOPED_TRACE(name(layout));
    for (int r = 0; r < layout.world(); ++r) {
      const GridPosition position = Topology::position(layout, r);
      EXPECT_EQ(position.ep_rank, ranks[static_cast<std::size_t>(r)].first) << "rank " << r;
      EXPECT_EQ(position.edp_rank, ranks[static_cast<std::size_t>(r)].second) << "rank " << r;
    }
  }
  // ep 1: every rank is ep rank 0, its edp rank its dp rank.
  for (int r = 0; r < 8; ++r) {
    const GridPosition position = Topology::position(make_layout(2, 2, 2), r);
    EXPECT_EQ(position.ep_rank, 0);
    EXPECT_EQ(position.edp_rank, position.dp_rank);
  }
  EXPECT_THROW(Topology::position(make_layout(4, 1, 1, 3), 0), std::invalid_argument);
  EXPECT_THROW(Topology::position(make_layout(4, 1, 1, 0), 0), std::invalid_argument);
}

TEST(TopologyArithmetic, PositionsOutsideTheLayoutAreRejected) {
  const Layout layout = make_layout(2, 2, 2);
  EXPECT_THROW(Topology::position(layout, 8), std::out_of_range);
  EXPECT_THROW(Topology::position(layout, -1), std::out_of_range);
  GridPosition position;
  position.tp_rank = 2;
  EXPECT_THROW(Topology::global_rank(layout, position), std::out_of_range);
  position.tp_rank = 0;
  position.pp_rank = 2;
  EXPECT_THROW(Topology::global_rank(layout, position), std::out_of_range);
  EXPECT_THROW(Topology::position(make_layout(0, 2, 2), 0), std::invalid_argument);
}

// ---------------------------------------------------------------------------------------------
// Topology::resolve.

ModelConfig model_with(int heads, int layers) {
  ModelConfig model;
  model.heads = heads;
  model.layers = layers;
  return model;
}

ParallelConfig parallel_with(int dp, int tp, int pp) {
  ParallelConfig parallel;
  parallel.dp = dp;
  parallel.tp = tp;
  parallel.pp = pp;
  return parallel;
}

// The InputError's message, or nullopt (and a test failure) when resolve does not throw one.
std::optional<std::string> resolve_error(const ParallelConfig& parallel, const ModelConfig& model, int world) {
  try {
    const Layout layout = Topology::resolve(parallel, model, world);
    ADD_FAILURE() << "resolve accepted " << name(layout) << " on " << world << " ranks";
  } catch (const InputError& e) {
    return std::string(e.what());
  } catch (const std::exception& e) {
    ADD_FAILURE() << "resolve threw something else than InputError: " << e.what();
  }
  return std::nullopt;
}

void expect_mentions(const std::optional<std::string>& message, const std::vector<std::string>& parts) {
  if (!message) return;
  for (const auto& part : parts)
    EXPECT_NE(message->find(part), std::string::npos) << "'" << part << "' in: " << *message;
}

TEST(TopologyResolve, InfersDataParallelFromTheWorld) {
  const ModelConfig model = model_with(12, 8);
  const std::vector<std::tuple<int, int, int, int>> cases = {
      // world, tp, pp, expected dp
      {8, 2, 2, 2}, {8, 1, 1, 8}, {8, 4, 2, 1}, {1, 1, 1, 1}, {12, 3, 2, 2}, {24, 6, 4, 1}, {6, 1, 2, 3}};
  for (const auto& [world, tp, pp, dp] : cases) {
    const Layout layout = Topology::resolve(parallel_with(0, tp, pp), model, world);
    EXPECT_EQ(layout.dp, dp) << "world " << world << " tp " << tp << " pp " << pp;
    EXPECT_EQ(layout.tp, tp);
    EXPECT_EQ(layout.pp, pp);
    EXPECT_EQ(layout.world(), world);
  }
}

TEST(TopologyResolve, KeepsAnExplicitLayoutThatFits) {
  const Layout layout = Topology::resolve(parallel_with(2, 2, 2), model_with(2, 2), 8);
  EXPECT_EQ(layout.dp, 2);
  EXPECT_EQ(layout.tp, 2);
  EXPECT_EQ(layout.pp, 2);
  EXPECT_EQ(Topology::resolve(parallel_with(1, 6, 4), model_with(6, 4), 24).world(), 24);
}

TEST(TopologyResolve, ProductNotTheWorldNamesEveryNumber) {
  expect_mentions(
      resolve_error(parallel_with(3, 2, 1), model_with(6, 4), 8),
      {"parallel.dp 3", "parallel.tp 2", "parallel.pp 1", "= 6", "≠ world size 8", "mpiexec -n 8", "product is 8"});
  expect_mentions(resolve_error(parallel_with(4, 2, 2), model_with(6, 4), 8),
                  {"parallel.dp 4", "parallel.tp 2", "parallel.pp 2", "= 16", "≠ world size 8"});
  expect_mentions(resolve_error(parallel_with(1, 1, 1), model_with(6, 4), 2), {"= 1", "≠ world size 2"});
}

TEST(TopologyResolve, InferredDataParallelMustBeWhole) {
  expect_mentions(resolve_error(parallel_with(0, 3, 1), model_with(6, 4), 8),
                  {"parallel.tp 3", "parallel.pp 1", "= 3", "does not divide world size 8", "1, 2, 4, 8"});
  expect_mentions(resolve_error(parallel_with(0, 2, 3), model_with(6, 4), 8),
                  {"parallel.tp 2", "parallel.pp 3", "= 6", "world size 8"});
  expect_mentions(resolve_error(parallel_with(0, 2, 2), model_with(6, 4), 2), {"= 4", "world size 2"});
}

TEST(TopologyResolve, TensorParallelMustDivideTheHeads) {
  expect_mentions(resolve_error(parallel_with(0, 4, 1), model_with(6, 4), 8),
                  {"parallel.tp = 4", "does not divide model.heads = 6", "attention heads", "1, 2, 3, 6"});
  expect_mentions(resolve_error(parallel_with(0, 8, 1), model_with(6, 4), 8),
                  {"parallel.tp = 8", "exceeds model.heads = 6"});
}

TEST(TopologyResolve, PipelineStagesNeedALayerEach) {
  expect_mentions(resolve_error(parallel_with(0, 1, 5), model_with(6, 4), 5),
                  {"parallel.pp = 5", "exceeds model.layers = 4", "at least one layer"});
}

ParallelConfig with_ep(ParallelConfig parallel, int ep) {
  parallel.ep = ep;
  return parallel;
}

ModelConfig with_experts(ModelConfig model, int experts) {
  model.arch = Arch::llama;
  model.experts = experts;
  return model;
}

TEST(TopologyResolve, ExpertParallelSplitsTheDataParallelGroup) {
  const ModelConfig moe = with_experts(model_with(12, 8), 8);
  const Layout layout = Topology::resolve(with_ep(parallel_with(0, 2, 1), 2), moe, 8);
  EXPECT_EQ(layout.dp, 4);
  EXPECT_EQ(layout.ep, 2);
  EXPECT_EQ(layout.edp(), 2);
  EXPECT_EQ(layout.world(), 8);
  EXPECT_EQ(Topology::resolve(with_ep(parallel_with(8, 1, 1), 8), moe, 8).edp(), 1);
  EXPECT_EQ(Topology::resolve(parallel_with(0, 1, 1), moe, 8).ep, 1);                // experts without ep
  EXPECT_EQ(Topology::resolve(parallel_with(0, 1, 1), model_with(12, 8), 8).ep, 1);  // dense
}

TEST(TopologyResolve, ExpertParallelMustDivideDataParallelAndTheExperts) {
  const ModelConfig moe = with_experts(model_with(12, 8), 6);
  expect_mentions(resolve_error(with_ep(parallel_with(0, 1, 1), 3), moe, 8),
                  {"parallel.ep = 3", "does not divide the data-parallel degree 8", "world size 8 / (tp 1 × pp 1)",
                   "choose parallel.ep among 1, 2 ", "dp 8 and model.experts = 6"});
  expect_mentions(resolve_error(with_ep(parallel_with(4, 2, 1), 6), moe, 8),
                  {"parallel.ep = 6", "does not divide the data-parallel degree 4 (parallel.dp)", "among 1, 2 "});
  expect_mentions(resolve_error(with_ep(parallel_with(0, 1, 1), 4), moe, 8),
                  {"parallel.ep = 4", "does not divide model.experts = 6", "choose parallel.ep among 1, 2, 3, 6"});
  expect_mentions(resolve_error(with_ep(parallel_with(0, 1, 1), 2), model_with(12, 8), 8),
                  {"parallel.ep = 2 with model.experts = 0", "set model.experts (a multiple of 2)", "parallel.ep = 1"});
  expect_mentions(resolve_error(with_ep(parallel_with(0, 1, 1), 0), moe, 8), {"parallel.ep = 0", "at least 1"});
  expect_mentions(resolve_error(with_ep(parallel_with(0, 1, 1), -2), moe, 8), {"parallel.ep = -2"});
}

TEST(TopologyResolve, DegreesBelowOneAreRejected) {
  expect_mentions(resolve_error(parallel_with(0, 0, 1), model_with(6, 4), 8), {"parallel.tp = 0"});
  expect_mentions(resolve_error(parallel_with(0, 1, 0), model_with(6, 4), 8), {"parallel.pp = 0"});
  expect_mentions(resolve_error(parallel_with(-1, 1, 1), model_with(6, 4), 8), {"parallel.dp = -1"});
  expect_mentions(resolve_error(parallel_with(0, -2, 1), model_with(6, 4), 8), {"parallel.tp = -2"});
}

// ---------------------------------------------------------------------------------------------
// describe_grid: the text rank 0 prints, for placements one machine cannot produce.

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

std::size_t count_of(const std::string& text, const std::string& part) {
  std::size_t count = 0;
  for (auto at = text.find(part); at != std::string::npos; at = text.find(part, at + part.size())) ++count;
  return count;
}

TEST(TopologyDescribe, SmallGridOnOneHost) {
  EXPECT_EQ(describe_grid(make_layout(2, 2, 2), std::vector<std::string>(8, "node01")),
            "layout: dp 2 × tp 2 × pp 2 = 8 ranks on 1 host\n"
            "tp groups (4): [0 1] [2 3] [4 5] [6 7]\n"
            "dp groups (4): [0 2] [1 3] [4 6] [5 7]\n"
            "pp groups (4): [0 4] [1 5] [2 6] [3 7]\n"
            "host node01: ranks 0-7\n");
  EXPECT_EQ(describe_grid(make_layout(1, 1, 1), {"solo"}),
            "layout: dp 1 × tp 1 × pp 1 = 1 rank on 1 host\n"
            "tp groups (1): [0]\n"
            "dp groups (1): [0]\n"
            "pp groups (1): [0]\n"
            "host solo: rank 0\n");
}

TEST(TopologyDescribe, ExpertParallelGroupsFollowTheDataParallelOnes) {
  EXPECT_EQ(describe_grid(make_layout(4, 2, 1, 2), std::vector<std::string>(8, "node01")),
            "layout: dp 4 (ep 2 × edp 2) × tp 2 × pp 1 = 8 ranks on 1 host\n"
            "tp groups (4): [0 1] [2 3] [4 5] [6 7]\n"
            "dp groups (2): [0 2 4 6] [1 3 5 7]\n"
            "ep groups (4): [0 2] [1 3] [4 6] [5 7]\n"
            "edp groups (4): [0 4] [1 5] [2 6] [3 7]\n"
            "pp groups (8): [0] [1] [2] [3] [4] [5] [6] [7]\n"
            "host node01: ranks 0-7\n");
}

TEST(TopologyDescribe, Megatron16OnFourNodesListsEveryGroup) {
  std::vector<std::string> hosts;
  for (int r = 0; r < 16; ++r) hosts.push_back(fmt::format("n{}", r / 4));
  const std::string text = describe_grid(megatron16, hosts);
  EXPECT_EQ(text,
            "layout: dp 2 × tp 2 × pp 4 = 16 ranks on 4 hosts\n"
            "tp groups (8): [0 1] [2 3] [4 5] [6 7] [8 9] [10 11] [12 13] [14 15]\n"
            "dp groups (8): [0 2] [1 3] [4 6] [5 7] [8 10] [9 11] [12 14] [13 15]\n"
            "pp groups (4): [0 4 8 12] [1 5 9 13] [2 6 10 14] [3 7 11 15]\n"
            "host n0: ranks 0-3\n"
            "host n1: ranks 4-7\n"
            "host n2: ranks 8-11\n"
            "host n3: ranks 12-15\n");
}

TEST(TopologyDescribe, WarnsWhenATensorParallelGroupSpansHosts) {
  // 6 ranks, 3 per host, tp 2: the tp group [2 3] straddles the two hosts.
  const std::string text = describe_grid(make_layout(3, 2, 1), {"a", "a", "a", "b", "b", "b"});
  EXPECT_NE(text.find("on 2 hosts"), std::string::npos) << text;
  EXPECT_NE(text.find("host a: ranks 0-2\nhost b: ranks 3-5\n"), std::string::npos) << text;
  EXPECT_NE(text.find("warning: tp group [2 3] spans hosts a, b: tensor-parallel traffic will cross the network\n"),
            std::string::npos)
      << text;
  EXPECT_EQ(count_of(text, "warning:"), 1U) << text;

  // Aligned placement: no warning.
  std::vector<std::string> aligned;
  for (int r = 0; r < 8; ++r) aligned.push_back(r < 4 ? "a" : "b");
  EXPECT_EQ(describe_grid(make_layout(2, 2, 2), aligned).find("warning"), std::string::npos);
}

TEST(TopologyDescribe, RoundRobinPlacementWarnsAFewTimesAndCounts) {
  // Ranks dealt round-robin over 4 hosts: every tp group of 4 lands on 4 hosts.
  std::vector<std::string> hosts;
  for (int r = 0; r < 20; ++r) hosts.push_back(fmt::format("h{}", r % 4));
  const std::string text = describe_grid(make_layout(5, 4, 1), hosts);
  EXPECT_NE(text.find("host h0: ranks 0 4 8 12 16\n"), std::string::npos) << text;
  EXPECT_NE(text.find("warning: tp group [0 1 2 3] spans hosts h0, h1, h2, h3: "), std::string::npos) << text;
  EXPECT_EQ(count_of(text, "warning: tp group"), 3U) << text;
  EXPECT_NE(text.find("warning: 2 more tp groups spanning hosts (5 of 5 tp groups in all)\n"), std::string::npos)
      << text;
}

TEST(TopologyDescribe, LargeWorldStaysShort) {
  // 2048 ranks, 8 per host over 256 hosts: dp 64 × tp 8 × pp 4.
  const Layout layout = make_layout(64, 8, 4);
  std::vector<std::string> hosts;
  for (int r = 0; r < layout.world(); ++r) hosts.push_back(fmt::format("node{:04}", r / 8));
  const std::string text = describe_grid(layout, hosts);
  const auto lines = lines_of(text);
  EXPECT_LE(lines.size(), 20U) << text;
  for (const auto& line : lines) EXPECT_LE(line.size(), 200U) << line;
  EXPECT_EQ(lines.at(0), "layout: dp 64 × tp 8 × pp 4 = 2048 ranks on 256 hosts");
  EXPECT_EQ(lines.at(1),
            "tp groups (256 of 8 ranks): [0 1 2 3 4 5 6 7] [8 9 10 11 12 13 14 15] [16 17 18 19 20 21 22 23] "
            "… 252 more … [2040 2041 2042 2043 2044 2045 2046 2047]");
  EXPECT_EQ(lines.at(2),
            "dp groups (32 of 64 ranks): [0 8 16 24 … 504] [1 9 17 25 … 505] [2 10 18 26 … 506] "
            "… 28 more … [1543 1551 1559 1567 … 2047]");
  EXPECT_EQ(lines.at(3),
            "pp groups (512 of 4 ranks): [0 512 1024 1536] [1 513 1025 1537] [2 514 1026 1538] "
            "… 508 more … [511 1023 1535 2047]");
  EXPECT_EQ(lines.at(4), "host node0000: ranks 0-7");
  EXPECT_NE(text.find("… 251 more hosts …\nhost node0255: ranks 2040-2047\n"), std::string::npos) << text;
  EXPECT_EQ(text.find("warning"), std::string::npos) << text;

  // The same grid at 4 ranks per host: every tp group of 8 spans two hosts.
  for (int r = 0; r < layout.world(); ++r) hosts[static_cast<std::size_t>(r)] = fmt::format("node{:04}", r / 4);
  const std::string spanning = describe_grid(layout, hosts);
  EXPECT_LE(lines_of(spanning).size(), 20U) << spanning;
  EXPECT_NE(spanning.find("warning: tp group [0 1 2 3 4 5 6 7] spans hosts node0000, node0001: "), std::string::npos)
      << spanning;
  EXPECT_NE(spanning.find("warning: 253 more tp groups spanning hosts (256 of 256 tp groups in all)"),
            std::string::npos)
      << spanning;
}

TEST(TopologyDescribe, HostCountMustMatchTheWorld) {
  EXPECT_THROW(describe_grid(make_layout(2, 1, 1), {"a"}), std::invalid_argument);
}

// ---------------------------------------------------------------------------------------------
// With the real MPI_COMM_WORLD, at whatever rank count the test runs.

int world_rank() {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  return rank;
}

int world_size() {
  int size = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  return size;
}

// The group of `groups` that holds `rank` (empty, and a failure, if none does).
std::vector<int> group_of(const Groups& groups, int rank) {
  for (const auto& group : groups)
    if (std::find(group.begin(), group.end(), rank) != group.end()) return group;
  ADD_FAILURE() << "rank " << rank << " is in no group";
  return {};
}

// Checks `comm` against the expected members (global ranks, in group rank order) by its size, this
// rank's rank in it, an all-reduce and an all-gather of the global ranks over it. Every rank makes
// the same calls whatever the outcome, so a failure cannot hang the others.
void expect_group(MPI_Comm comm, const std::vector<int>& members, int me, const char* kind) {
  int size = 0, rank = -1;
  MPI_Comm_size(comm, &size);
  MPI_Comm_rank(comm, &rank);
  EXPECT_EQ(size, static_cast<int>(members.size())) << kind << " communicator size";
  const auto at = std::find(members.begin(), members.end(), me);
  EXPECT_EQ(rank, static_cast<int>(at - members.begin())) << kind << " communicator rank";

  int sum = 0;
  MPI_Allreduce(&me, &sum, 1, MPI_INT, MPI_SUM, comm);
  EXPECT_EQ(sum, std::accumulate(members.begin(), members.end(), 0)) << kind << " all-reduce of the global ranks";

  std::vector<int> gathered(static_cast<std::size_t>(size), -1);
  MPI_Allgather(&me, 1, MPI_INT, gathered.data(), 1, MPI_INT, comm);
  EXPECT_EQ(gathered, members) << kind << " all-gather of the global ranks";
}

TEST(TopologyMpi, EveryLayoutOfTheWorldBuildsItsGroups) {
  const int world = world_size();
  const int me = world_rank();
  for (const auto& layout : layouts_of(world)) {
    SCOPED_TRACE(name(layout));
    const HandTable* table = hand_table(layout);
    const Groups tp = table ? table->tp : tp_groups(layout);
    const Groups dp = table ? table->dp : dp_groups(layout);
    const Groups pp = table ? table->pp : pp_groups(layout);
    std::vector<int> model;  // same dp rank as this rank
    for (int r = 0; r < world; ++r)
      if (Topology::position(layout, r).dp_rank == Topology::position(layout, me).dp_rank) model.push_back(r);
    if (table) {
      EXPECT_EQ(model, group_of(table->model, me));
    }

    const Topology topology(MPI_COMM_WORLD, layout);
    EXPECT_EQ(topology.rank(), me);
    EXPECT_EQ(topology.layout().world(), world);
    const GridPosition position = Topology::position(layout, me);
    EXPECT_EQ(topology.position().dp_rank, position.dp_rank);
    EXPECT_EQ(topology.position().tp_rank, position.tp_rank);
    EXPECT_EQ(topology.position().pp_rank, position.pp_rank);
    EXPECT_EQ(topology.first_stage(), position.pp_rank == 0);
    EXPECT_EQ(topology.last_stage(), position.pp_rank == layout.pp - 1);

    int compared = MPI_UNEQUAL;
    MPI_Comm_compare(topology.world(), MPI_COMM_WORLD, &compared);
    EXPECT_EQ(compared, MPI_CONGRUENT) << "world() is an owned duplicate of MPI_COMM_WORLD";

    std::vector<int> all(static_cast<std::size_t>(world));
    std::iota(all.begin(), all.end(), 0);
    expect_group(topology.world(), all, me, "world");
    expect_group(topology.tp_comm(), group_of(tp, me), me, "tp");
    expect_group(topology.dp_comm(), group_of(dp, me), me, "dp");
    expect_group(topology.pp_comm(), group_of(pp, me), me, "pp");
  }
}

TEST(TopologyMpi, EveryExpertParallelDegreeBuildsItsGroups) {
  const int world = world_size();
  const int me = world_rank();
  for (const auto& layout : with_every_ep(layouts_of(world))) {
    // ep 1 once, on the all-dp layout (one-rank ep groups, edp = dp): 8 oversubscribed ranks split
    // communicators slowly.
    if (layout.ep == 1 && layout.dp != world) continue;
    SCOPED_TRACE(name(layout));
    const ExpertTable* table = expert_table(layout);
    const Groups ep = table ? table->ep : ep_groups(layout);
    const Groups edp = table ? table->edp : edp_groups(layout);
    const Topology topology(MPI_COMM_WORLD, layout);
    const GridPosition position = Topology::position(layout, me);
    EXPECT_EQ(topology.position().ep_rank, position.ep_rank);
    EXPECT_EQ(topology.position().edp_rank, position.edp_rank);
    expect_group(topology.ep_comm(), group_of(ep, me), me, "ep");
    expect_group(topology.edp_comm(), group_of(edp, me), me, "edp");
    expect_group(topology.dp_comm(), group_of(dp_groups(layout), me), me, "dp");
  }
}

int freed_count = 0;

int count_free(MPI_Comm, int, void*, void*) {
  ++freed_count;
  return MPI_SUCCESS;
}

TEST(TopologyMpi, DestructorFreesEveryCommunicator) {
  // An attribute's delete callback runs when MPI frees the communicator it is attached to.
  int keyval = MPI_KEYVAL_INVALID;
  ASSERT_EQ(MPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, count_free, &keyval, nullptr), MPI_SUCCESS);
  freed_count = 0;
  {
    const Topology topology(MPI_COMM_WORLD, make_layout(world_size(), 1, 1));
    for (MPI_Comm comm : {topology.world(), topology.tp_comm(), topology.dp_comm(), topology.pp_comm(),
                          topology.ep_comm(), topology.edp_comm()})
      MPI_Comm_set_attr(comm, keyval, nullptr);
    EXPECT_EQ(freed_count, 0);
  }
  EXPECT_EQ(freed_count, 6);
  MPI_Comm_free_keyval(&keyval);
}

TEST(TopologyMpi, GroupCommunicatorsReturnErrorsAndChecksCarryAHint) {
  const Topology topology(MPI_COMM_WORLD, make_layout(1, world_size(), 1));
  int size = 0;
  MPI_Comm_size(topology.tp_comm(), &size);
  int value = 0;
  try {
    // A peer that does not exist: MPI returns an error (rather than aborting) and the check throws.
    MESHTRAIN_MPI_CHECK(MPI_Send(&value, 1, MPI_INT, size + 7, 0, topology.tp_comm()), "the test's hint");
    ADD_FAILURE() << "MPI_Send to rank " << size + 7 << " of " << size << " succeeded";
  } catch (const mpi::Error& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("test_topology.cpp:"), std::string::npos) << message;
    EXPECT_NE(message.find("MPI call MPI_Send(&value, 1, MPI_INT, size + 7, 0, topology.tp_comm()) failed: "),
              std::string::npos)
        << message;
    EXPECT_NE(message.find(mpi::error_string(MPI_ERR_RANK).substr(0, 12)), std::string::npos) << message;
    EXPECT_NE(message.find("\nHINT: the test's hint"), std::string::npos) << message;
  }
  EXPECT_NO_THROW(mpi::check(MPI_SUCCESS, __FILE__, __LINE__, "nothing", "none"));
}

TEST(TopologyMpi, LayoutThatDoesNotFitTheCommunicatorIsRejected) {
  EXPECT_THROW(Topology(MPI_COMM_WORLD, make_layout(world_size() + 1, 1, 1)), std::invalid_argument);
  EXPECT_THROW(Topology(MPI_COMM_WORLD, make_layout(world_size(), 1, 2)), std::invalid_argument);
}

TEST(TopologyMpi, DescribeOnRankZeroListsEveryGroupAndHost) {
  const int world = world_size();
  const int me = world_rank();
  // This rank's host, gathered here independently of describe().
  char name_buffer[MPI_MAX_PROCESSOR_NAME] = {0};
  int length = 0;
  MPI_Get_processor_name(name_buffer, &length);
  std::vector<char> names(static_cast<std::size_t>(world) * MPI_MAX_PROCESSOR_NAME);
  MPI_Allgather(name_buffer, MPI_MAX_PROCESSOR_NAME, MPI_CHAR, names.data(), MPI_MAX_PROCESSOR_NAME, MPI_CHAR,
                MPI_COMM_WORLD);
  std::vector<std::string> hosts;
  for (int r = 0; r < world; ++r)
    hosts.emplace_back(names.data() + static_cast<std::size_t>(r) * MPI_MAX_PROCESSOR_NAME);

  for (const auto& layout : layouts_of(world)) {
    SCOPED_TRACE(name(layout));
    const Topology topology(MPI_COMM_WORLD, layout);
    const std::string text = topology.describe();
    if (me != 0) {
      EXPECT_EQ(text, "");
      continue;
    }
    EXPECT_EQ(text, describe_grid(layout, hosts));
    EXPECT_NE(text.find(fmt::format("layout: dp {} × tp {} × pp {} = {} rank", layout.dp, layout.tp, layout.pp, world)),
              std::string::npos)
        << text;
    // Every rank appears in each kind's line: the lines list the hand-table groups whole.
    const HandTable* table = hand_table(layout);
    const std::vector<std::pair<std::string, Groups>> kinds = {{"tp groups", table ? table->tp : tp_groups(layout)},
                                                               {"dp groups", table ? table->dp : dp_groups(layout)},
                                                               {"pp groups", table ? table->pp : pp_groups(layout)}};
    for (const auto& [kind, groups] : kinds) {
      const auto line_at = text.find(kind);
      if (line_at == std::string::npos) {
        ADD_FAILURE() << "no '" << kind << "' line in: " << text;  // not ASSERT: the other ranks go on
        continue;
      }
      const std::string line = text.substr(line_at, text.find('\n', line_at) - line_at);
      EXPECT_NE(line.find(fmt::format("({})", groups.size())), std::string::npos) << line;
      for (const auto& group : groups) {
        const std::string bracket = fmt::format("[{}]", fmt::join(group, " "));
        EXPECT_NE(line.find(bracket), std::string::npos) << bracket << " in: " << line;
      }
    }
    EXPECT_NE(text.find("host " + hosts[0] + ": rank"), std::string::npos) << text;
  }
}

}  // namespace
}  // namespace meshtrain
