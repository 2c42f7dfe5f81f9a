// The process grid (share/docs/design.md, Parallelism): layout validation, rank arithmetic, the group
// communicators and the grid as rank 0 prints it.
//
// Global ranks are ordered tp fastest, then cp, then dp, then pp (Megatron's default order):
//
//     rank = tp_rank + tp · (cp_rank + cp · (dp_rank + dp · pp_rank))
//
// Without context parallelism (cp 1):
// Every group of the 16-rank example of Megatron's parallel_state docstring, dp 2 × tp 2 × pp 4
// (tests/parallel/test_topology.cpp holds the same table, written out by hand):
//
//     rank      0  1  2  3  4  5  6  7  8  9 10 11 12 13 14 15
//     tp_rank   0  1  0  1  0  1  0  1  0  1  0  1  0  1  0  1
//     dp_rank   0  0  1  1  0  0  1  1  0  0  1  1  0  0  1  1
//     pp_rank   0  0  0  0  1  1  1  1  2  2  2  2  3  3  3  3
//
//     8 tp groups (same dp and pp rank: one layer's shards, all-reduced inside every layer)
//         [0 1] [2 3] [4 5] [6 7] [8 9] [10 11] [12 13] [14 15]
//     8 dp groups (same tp and pp rank: replicas of one shard, gradients averaged once a step)
//         [0 2] [1 3] [4 6] [5 7] [8 10] [9 11] [12 14] [13 15]
//     4 pp groups (same dp and tp rank: the stages, pp_rank 0 first, activations sent along them)
//         [0 4 8 12] [1 5 9 13] [2 6 10 14] [3 7 11 15]
//     2 model replicas (same dp rank, tp × pp ranks; no collective spans one: no communicator)
//         [0 1 4 5 8 9 12 13] [2 3 6 7 10 11 14 15]
//
// With 4 ranks per node (ranks placed in blocks, as srun and mpiexec do by default) the nodes hold
// 0-3, 4-7, 8-11 and 12-15: every tp group stays inside a node, which carries the most frequent
// traffic, and each pipeline stage has a node of its own.
//
// Expert parallelism splits each dp group (Megatron's convention): dp_rank = edp_rank · ep +
// ep_rank. dp 4 × ep 2 × tp 2, 8 ranks (tests/parallel/test_topology.cpp holds it too):
//
//     rank      0  1  2  3  4  5  6  7
//     dp_rank   0  0  1  1  2  2  3  3
//     ep_rank   0  0  1  1  0  0  1  1
//     edp_rank  0  0  0  0  1  1  1  1
//
//     4 ep groups (same tp, pp and edp rank: the routed experts shared out, tokens exchanged all-to-all)
//         [0 2] [1 3] [4 6] [5 7]
//     4 edp groups (same tp, pp and ep rank: the replicas of the same experts, their gradients reduced)
//         [0 4] [1 5] [2 6] [3 7]
//
// Expert-parallel peers are neighbouring dp ranks, so with tp × ep ranks per node the token
// exchange stays inside a node, as tp's traffic does.
//
// Context parallelism puts a sequence's cp ranks next to the tp ones. dp 2 × cp 2 × tp 2, 8 ranks
// (tests/parallel/test_topology_cp.cpp holds it too):
//
//     rank      0  1  2  3  4  5  6  7
//     tp_rank   0  1  0  1  0  1  0  1
//     cp_rank   0  0  1  1  0  0  1  1
//     dp_rank   0  0  0  0  1  1  1  1
//
//     4 cp groups (same dp, tp and pp rank: one sequence's chunks, K/V passed around the ring)
//         [0 2] [1 3] [4 6] [5 7]
//     4 dp groups (same cp, tp and pp rank)   [0 4] [1 5] [2 6] [3 7]
//     2 dp × cp groups (same tp and pp rank: every replica of a shard, its gradient summed over them)
//         [0 2 4 6] [1 3 5 7]
#include "parallel/topology.hpp"

#include "core/errors.hpp"
#include "core/mpi_check.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <map>
#include <stdexcept>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace meshtrain {
namespace {

using Groups = std::vector<std::vector<int>>;

// describe(): up to this many ranks, every group and every member is listed; above it the
// listing keeps the first groups and the last one (and the first members and the last one), so
// that the text stays within about 20 lines at any scale.
constexpr int full_listing_max_ranks = 64;
constexpr std::size_t head_groups = 3;
constexpr std::size_t head_members = 4;
constexpr std::size_t max_listed_members = 8;
constexpr std::size_t head_hosts = 4;
constexpr std::size_t max_listed_hosts = 8;
constexpr std::size_t head_rank_ranges = 4;
constexpr std::size_t max_listed_rank_ranges = 6;
constexpr std::size_t max_listed_warnings = 3;
constexpr std::size_t max_listed_hosts_in_warning = 4;

// "dp 2 × tp 2 × pp 1", with cp where it is not 1: "dp 2 × cp 2 × tp 2 × pp 1".
std::string degrees(const Layout& layout) {
  return layout.cp == 1 ? fmt::format("dp {} × tp {} × pp {}", layout.dp, layout.tp, layout.pp)
                        : fmt::format("dp {} × cp {} × tp {} × pp {}", layout.dp, layout.cp, layout.tp, layout.pp);
}

void check_layout(const Layout& layout) {
  if (layout.dp < 1 || layout.tp < 1 || layout.pp < 1 || layout.cp < 1)
    throw std::invalid_argument(
        fmt::format("layout {}: every degree must be at least 1 (Topology::resolve turns parallel.dp = 0 into a "
                    "number)",
                    degrees(layout)));
  if (layout.ep < 1 || layout.dp % layout.ep != 0)
    throw std::invalid_argument(
        fmt::format("layout dp {} with ep {}: ep must be at least 1 and divide dp", layout.dp, layout.ep));
}

// "1, 2, 3, 6": the divisors of n, or of n and m both.
std::string divisors(int n, int m = 0) {
  std::string out;
  for (const int d : divisors_of(n)) {
    if (m % d == 0) out += fmt::format("{}{}", out.empty() ? "" : ", ", d);
  }
  return out;
}

const char* plural(std::size_t n) { return n == 1 ? "" : "s"; }

// "[0 1 2 3]", or for a long group in a compact listing "[0 8 16 24 … 1016]".
std::string bracket(const std::vector<int>& members, bool compact) {
  std::string out = "[";
  const bool elide = compact && members.size() > max_listed_members;
  const std::size_t shown = elide ? head_members : members.size();
  for (std::size_t i = 0; i < shown; ++i) out += fmt::format("{}{}", i == 0 ? "" : " ", members[i]);
  if (elide) out += fmt::format(" … {}", members.back());
  return out + "]";
}

// "tp groups (4): [0 1] [2 3] [4 5] [6 7]", or compacted
// "dp groups (512 of 16 ranks): [0 8 16 24 … 120] [1 9 17 25 … 121] [2 …] … 508 more … [..]".
std::string groups_line(std::string_view kind, const Groups& groups, bool compact) {
  std::string out = compact ? fmt::format("{} groups ({} of {} ranks):", kind, groups.size(), groups.front().size())
                            : fmt::format("{} groups ({}):", kind, groups.size());
  const bool elide = compact && groups.size() > head_groups + 1;
  const std::size_t shown = elide ? head_groups : groups.size();
  for (std::size_t g = 0; g < shown; ++g) out += fmt::format(" {}", bracket(groups[g], compact));
  if (elide) out += fmt::format(" … {} more … {}", groups.size() - head_groups - 1, bracket(groups.back(), compact));
  return out;
}

// "ranks 0-7", "ranks 0-3 8-11", "rank 5", or for a scattered placement
// "ranks 0 4 8 12 … 1020 (256 ranks)". `ranks` is sorted.
std::string rank_ranges(const std::vector<int>& ranks) {
  std::vector<std::pair<int, int>> ranges;
  for (const int r : ranks) {
    if (!ranges.empty() && ranges.back().second + 1 == r)
      ranges.back().second = r;
    else
      ranges.emplace_back(r, r);
  }
  const auto range_text = [](const std::pair<int, int>& range) {
    return range.first == range.second ? fmt::format("{}", range.first)
                                       : fmt::format("{}-{}", range.first, range.second);
  };
  std::string out = ranks.size() == 1 ? "rank" : "ranks";
  const bool elide = ranges.size() > max_listed_rank_ranges;
  const std::size_t shown = elide ? head_rank_ranges : ranges.size();
  for (std::size_t i = 0; i < shown; ++i) out += fmt::format(" {}", range_text(ranges[i]));
  if (elide) out += fmt::format(" … {} ({} ranks)", range_text(ranges.back()), ranks.size());
  return out;
}

void split(MPI_Comm parent, int color, int key, mpi::OwnedComm& out) {
  MESHTRAIN_MPI_CHECK(MPI_Comm_split(parent, color, key, out.out()),
                      "MPI_Comm_split is collective: does every rank construct the Topology with the same "
                      "layout? (Running out of communicators means Topologies are created and never destroyed.)");
}

// parallel.ep against the model (resolve checks it against dp once dp is known).
void check_expert_degree(const ParallelConfig& parallel, const ModelConfig& model) {
  if (parallel.ep < 1) input_error("parallel.ep = {} must be at least 1 (1: no expert parallelism)", parallel.ep);
  if (parallel.ep > 1 && model.experts == 0)
    input_error(
        "parallel.ep = {} with model.experts = 0: expert parallelism shares out routed experts, and a dense model "
        "has none: set model.experts (a multiple of {}), or parallel.ep = 1",
        parallel.ep, parallel.ep);
  if (model.experts > 0 && model.experts % parallel.ep != 0)
    input_error(
        "parallel.ep = {} does not divide model.experts = {} (each expert-parallel rank holds an equal share of "
        "whole experts): choose parallel.ep among {}",
        parallel.ep, model.experts, divisors(model.experts));
}

}  // namespace

Layout Topology::resolve(const ParallelConfig& parallel, const ModelConfig& model, int world) {
  if (world < 1) throw std::invalid_argument(fmt::format("Topology::resolve: world size {} < 1", world));
  if (parallel.tp < 1) input_error("parallel.tp = {} must be at least 1", parallel.tp);
  if (parallel.pp < 1) input_error("parallel.pp = {} must be at least 1", parallel.pp);
  if (parallel.cp < 1) input_error("parallel.cp = {} must be at least 1", parallel.cp);
  if (parallel.dp < 0)
    input_error("parallel.dp = {} must be at least 1 (or 0: world size / (parallel.cp × parallel.tp × parallel.pp))",
                parallel.dp);

  if (parallel.tp > model.heads)
    input_error(
        "parallel.tp = {} exceeds model.heads = {} (tensor parallelism splits attention heads: each tp "
        "rank needs at least one)",
        parallel.tp, model.heads);
  if (model.heads % parallel.tp != 0)
    input_error(
        "parallel.tp = {} does not divide model.heads = {} (tensor parallelism splits attention heads): "
        "choose parallel.tp among {}",
        parallel.tp, model.heads, divisors(model.heads));
  // llama: each tp rank holds whole key/value heads (no replication of kv heads across tp ranks)
  // and an equal share of the SwiGLU columns (gpt2's 4·C follows from the heads' split).
  if (model.kv_head_count() % parallel.tp != 0)
    input_error(
        "parallel.tp = {} does not divide model.kv_heads = {} (tensor parallelism gives each rank whole key/value "
        "heads; replicating kv heads over tp ranks is not supported): choose parallel.tp among {}",
        parallel.tp, model.kv_head_count(), divisors(model.kv_head_count()));
  if (family_shape(model.arch).mlp == MlpKind::swiglu && model.mlp_hidden() % parallel.tp != 0)
    input_error(
        "parallel.tp = {} does not divide the SwiGLU hidden size {} (model.ffn_hidden, or the LLaMA rule's): "
        "choose parallel.tp among {}, or a model.ffn_hidden that tp divides",
        parallel.tp, model.mlp_hidden(), divisors(model.mlp_hidden()));
  if (model.experts > 0 && model.expert_hidden_size() % parallel.tp != 0)
    input_error(
        "parallel.tp = {} does not divide the expert SwiGLU width {} (model.expert_hidden, or the dense width): "
        "choose parallel.tp among {}, or a model.expert_hidden that tp divides",
        parallel.tp, model.expert_hidden_size(), divisors(model.expert_hidden_size()));
  if (parallel.pp > model.layers)
    input_error("parallel.pp = {} exceeds model.layers = {} (each pipeline stage needs at least one layer)",
                parallel.pp, model.layers);
  check_expert_degree(parallel, model);

  // The ranks one replica of the model spans (cp × tp × pp); dp replicas make the world.
  const std::int64_t model_ranks = std::int64_t{parallel.cp} * parallel.tp * parallel.pp;
  Layout layout{parallel.dp, parallel.tp, parallel.pp, parallel.ep, parallel.cp};
  const std::string degrees_named =
      parallel.cp > 1
          ? fmt::format("parallel.cp {} × parallel.tp {} × parallel.pp {}", parallel.cp, parallel.tp, parallel.pp)
          : fmt::format("parallel.tp {} × parallel.pp {}", parallel.tp, parallel.pp);
  const char* product = parallel.cp > 1 ? "cp × tp × pp" : "tp × pp";
  if (parallel.dp == 0) {
    if (world % model_ranks != 0)
      input_error(
          "{} = {} does not divide world size {} (mpiexec -n {}), so parallel.dp = 0 (world size / ({})) has no "
          "answer: choose {} among {}",
          degrees_named, model_ranks, world, world, product, product, divisors(world));
    layout.dp = static_cast<int>(world / model_ranks);
  } else if (model_ranks * parallel.dp != world) {
    input_error("parallel.dp {} × {} = {} ≠ world size {} (mpiexec -n {}): choose degrees whose product is {}",
                parallel.dp, degrees_named, model_ranks * parallel.dp, world, world, world);
  }
  // Expert-parallel groups are cut out of the data-parallel ones.
  if (layout.dp % layout.ep != 0)
    input_error(
        "parallel.ep = {} does not divide the data-parallel degree {} ({}): expert-parallel groups are made of "
        "data-parallel ranks: choose parallel.ep among {} (the divisors of both dp {} and model.experts = {})",
        layout.ep, layout.dp,
        parallel.dp == 0
            ? fmt::format("world size {} / ({}tp {} × pp {})", world,
                          parallel.cp > 1 ? fmt::format("cp {} × ", parallel.cp) : "", parallel.tp, parallel.pp)
            : std::string("parallel.dp"),
        divisors(layout.dp, model.experts), layout.dp, model.experts);
  return layout;
}

int Topology::global_rank(const Layout& layout, const GridPosition& position) {
  check_layout(layout);
  if (position.tp_rank < 0 || position.tp_rank >= layout.tp || position.dp_rank < 0 || position.dp_rank >= layout.dp ||
      position.pp_rank < 0 || position.pp_rank >= layout.pp || position.cp_rank < 0 || position.cp_rank >= layout.cp)
    throw std::out_of_range(fmt::format("grid position (dp {}, cp {}, tp {}, pp {}) is outside layout {}",
                                        position.dp_rank, position.cp_rank, position.tp_rank, position.pp_rank,
                                        degrees(layout)));
  return position.tp_rank +
         layout.tp * (position.cp_rank + layout.cp * (position.dp_rank + layout.dp * position.pp_rank));
}

GridPosition Topology::position(const Layout& layout, int global_rank) {
  check_layout(layout);
  if (global_rank < 0 || global_rank >= layout.world())
    throw std::out_of_range(
        fmt::format("rank {} is outside layout {} = {} ranks", global_rank, degrees(layout), layout.world()));
  GridPosition position;
  position.tp_rank = global_rank % layout.tp;
  position.cp_rank = (global_rank / layout.tp) % layout.cp;
  position.dp_rank = (global_rank / (layout.tp * layout.cp)) % layout.dp;
  position.pp_rank = global_rank / (layout.tp * layout.cp * layout.dp);
  position.ep_rank = position.dp_rank % layout.ep;
  position.edp_rank = position.dp_rank / layout.ep;
  return position;
}

Topology::Topology(MPI_Comm world, const Layout& layout) : layout_(layout) {
  check_layout(layout);
  int size = 0;
  MESHTRAIN_MPI_CHECK(MPI_Comm_size(world, &size), "is the communicator given to Topology valid?");
  if (size != layout.world())
    throw std::invalid_argument(
        fmt::format("layout {} = {} ≠ communicator size {} (Topology::resolve checks a layout against the world size)",
                    degrees(layout), layout.world(), size));

  // A failure halfway frees what was already made: every communicator is owned from the start.
  MESHTRAIN_MPI_CHECK(MPI_Comm_dup(world, world_.out()),
                      "MPI_Comm_dup is collective: does every rank construct the Topology?");
  // Failures in the group communicators (which inherit this handler) come back as mpi::Error with
  // a hint, instead of MPI aborting the job with its own message only.
  MESHTRAIN_MPI_CHECK(MPI_Comm_set_errhandler(world_.get(), MPI_ERRORS_RETURN),
                      "the MPI library refused MPI_ERRORS_RETURN on a duplicated communicator");
  MESHTRAIN_MPI_CHECK(MPI_Comm_rank(world_.get(), &rank_), "is the duplicated world communicator valid?");
  position_ = position(layout, rank_);
  const GridPosition& at = position_;
  const int c = at.cp_rank, e = at.ep_rank, r = at.edp_rank, ep = layout.ep;

  // A group's color is its first global rank (this rank's position with the coordinates along the
  // group at 0); keys keep the natural order, so a rank's rank in each group communicator is its
  // coordinate along that group (c + cp · d along dp × cp).
  const auto first = [&](GridPosition p) { return global_rank(layout, p); };
  const auto with_dp = [&](int d, int cp_rank) {
    GridPosition p = at;
    p.dp_rank = d;
    p.cp_rank = cp_rank;
    return p;
  };
  split(world_.get(), first({at.dp_rank, 0, at.pp_rank, 0, 0, c}), at.tp_rank, tp_);
  split(world_.get(), first(with_dp(0, c)), at.dp_rank, dp_);
  split(world_.get(), first({at.dp_rank, at.tp_rank, 0, 0, 0, c}), at.pp_rank, pp_);
  split(world_.get(), first(with_dp(r * ep, c)), e, ep_);
  split(world_.get(), first(with_dp(e, c)), r, edp_);
  split(world_.get(), first(with_dp(at.dp_rank, 0)), c, cp_);
  split(world_.get(), first(with_dp(0, 0)), c + layout.cp * at.dp_rank, dp_cp_);
  split(world_.get(), first(with_dp(e, 0)), c + layout.cp * r, edp_cp_);
}

std::string Topology::describe() const {
  // Rank 0 gathers every rank's host name and returns the text; the other ranks return "".
  char name[MPI_MAX_PROCESSOR_NAME] = {0};
  int length = 0;
  MESHTRAIN_MPI_CHECK(MPI_Get_processor_name(name, &length), "the MPI library could not name this host");
  const int world = layout_.world();
  std::vector<char> names(rank_ == 0 ? static_cast<std::size_t>(world) * MPI_MAX_PROCESSOR_NAME : 0);
  MESHTRAIN_MPI_CHECK(MPI_Gather(name, MPI_MAX_PROCESSOR_NAME, MPI_CHAR, names.data(), MPI_MAX_PROCESSOR_NAME, MPI_CHAR,
                                 0, world_.get()),
                      "Topology::describe() is collective: does every rank call it?");
  if (rank_ != 0) return {};
  std::vector<std::string> hosts;
  hosts.reserve(static_cast<std::size_t>(world));
  for (int r = 0; r < world; ++r) {
    const char* begin = names.data() + static_cast<std::size_t>(r) * MPI_MAX_PROCESSOR_NAME;
    hosts.emplace_back(begin, std::find(begin, begin + MPI_MAX_PROCESSOR_NAME, '\0'));
  }
  return describe_grid(layout_, hosts);
}

namespace {

// The groups of ranks that agree on key(position), each in rank order (which is the order of the
// coordinates along it), the groups in order of their first rank.
template <class Key>
Groups groups_by(const Layout& layout, Key key) {
  check_layout(layout);
  Groups groups;
  std::map<std::array<int, 5>, std::size_t> index;
  for (int rank = 0; rank < layout.world(); ++rank) {
    const auto [it, added] = index.try_emplace(key(Topology::position(layout, rank)), groups.size());
    if (added) groups.emplace_back();
    groups[it->second].push_back(rank);
  }
  return groups;
}

}  // namespace

Groups tp_groups(const Layout& layout) {
  return groups_by(layout, [](const GridPosition& p) { return std::array{p.dp_rank, p.cp_rank, p.pp_rank, 0, 0}; });
}

Groups dp_groups(const Layout& layout) {
  return groups_by(layout, [](const GridPosition& p) { return std::array{p.tp_rank, p.cp_rank, p.pp_rank, 0, 0}; });
}

Groups pp_groups(const Layout& layout) {
  return groups_by(layout, [](const GridPosition& p) { return std::array{p.dp_rank, p.cp_rank, p.tp_rank, 0, 0}; });
}

// An ep group is one replica of the whole set of experts: ep neighbouring dp ranks, the edp rank
// numbering the replicas.
Groups ep_groups(const Layout& layout) {
  return groups_by(layout, [](const GridPosition& p) {
    return std::array{p.tp_rank, p.cp_rank, p.pp_rank, p.edp_rank, 0};
  });
}

Groups edp_groups(const Layout& layout) {
  return groups_by(layout, [](const GridPosition& p) {
    return std::array{p.tp_rank, p.cp_rank, p.pp_rank, p.ep_rank, 0};
  });
}

Groups cp_groups(const Layout& layout) {
  return groups_by(layout, [](const GridPosition& p) { return std::array{p.dp_rank, p.tp_rank, p.pp_rank, 0, 0}; });
}

Groups dp_cp_groups(const Layout& layout) {
  return groups_by(layout, [](const GridPosition& p) { return std::array{p.tp_rank, p.pp_rank, 0, 0, 0}; });
}

Groups edp_cp_groups(const Layout& layout) {
  return groups_by(layout, [](const GridPosition& p) { return std::array{p.tp_rank, p.pp_rank, p.ep_rank, 0, 0}; });
}

std::string describe_grid(const Layout& layout, const std::vector<std::string>& hosts) {
  check_layout(layout);
  const int world = layout.world();
  if (hosts.size() != static_cast<std::size_t>(world))
    throw std::invalid_argument(
        fmt::format("describe_grid: {} host names for {} = {} ranks", hosts.size(), degrees(layout), world));

  // Hosts in the order of their first rank, each with its ranks.
  std::vector<std::pair<std::string, std::vector<int>>> by_host;
  std::unordered_map<std::string, std::size_t> host_index;
  for (int r = 0; r < world; ++r) {
    const auto& host = hosts[static_cast<std::size_t>(r)];
    const auto [it, added] = host_index.try_emplace(host, by_host.size());
    if (added) by_host.emplace_back(host, std::vector<int>{});
    by_host[it->second].second.push_back(r);
  }

  const bool compact = world > full_listing_max_ranks;
  const Groups tp = tp_groups(layout);
  // With expert parallelism the dp degree shows its two factors, and the ep and edp groups follow dp's.
  const bool experts_split = layout.ep > 1;
  const std::string dp = experts_split ? fmt::format("{} (ep {} × edp {})", layout.dp, layout.ep, layout.edp())
                                       : fmt::format("{}", layout.dp);
  const std::string cp = layout.cp > 1 ? fmt::format(" × cp {}", layout.cp) : std::string();
  std::string out =
      fmt::format("layout: dp {}{} × tp {} × pp {} = {} rank{} on {} host{}\n", dp, cp, layout.tp, layout.pp, world,
                  plural(static_cast<std::size_t>(world)), by_host.size(), plural(by_host.size()));
  out += groups_line("tp", tp, compact) + "\n";
  if (layout.cp > 1) out += groups_line("cp", cp_groups(layout), compact) + "\n";
  out += groups_line("dp", dp_groups(layout), compact) + "\n";
  if (layout.cp > 1) out += groups_line("dp × cp", dp_cp_groups(layout), compact) + "\n";
  if (experts_split) {
    out += groups_line("ep", ep_groups(layout), compact) + "\n";
    out += groups_line("edp", edp_groups(layout), compact) + "\n";
  }
  out += groups_line("pp", pp_groups(layout), compact) + "\n";

  const bool elide_hosts = by_host.size() > max_listed_hosts;
  const std::size_t shown_hosts = elide_hosts ? head_hosts : by_host.size();
  const auto host_line = [](const auto& entry) {
    return fmt::format("host {}: {}\n", entry.first, rank_ranges(entry.second));
  };
  for (std::size_t h = 0; h < shown_hosts; ++h) out += host_line(by_host[h]);
  if (elide_hosts) {
    out += fmt::format("… {} more hosts …\n", by_host.size() - head_hosts - 1);
    out += host_line(by_host.back());
  }

  // Tensor-parallel collectives run inside every layer, forward and backward: they belong on one
  // node's fast links.
  std::size_t spanning = 0;
  for (const auto& group : tp) {
    std::vector<std::string> group_hosts;
    for (const int r : group) {
      const auto& host = hosts[static_cast<std::size_t>(r)];
      if (std::find(group_hosts.begin(), group_hosts.end(), host) == group_hosts.end()) group_hosts.push_back(host);
    }
    if (group_hosts.size() == 1) continue;
    if (++spanning > max_listed_warnings) continue;
    std::string names;
    for (std::size_t h = 0; h < std::min(group_hosts.size(), max_listed_hosts_in_warning); ++h)
      names += fmt::format("{}{}", h == 0 ? "" : ", ", group_hosts[h]);
    if (group_hosts.size() > max_listed_hosts_in_warning) names += fmt::format(" … ({} hosts)", group_hosts.size());
    out += fmt::format("warning: tp group {} spans hosts {}: tensor-parallel traffic will cross the network\n",
                       bracket(group, compact), names);
  }
  if (spanning > max_listed_warnings)
    out += fmt::format("warning: {} more tp group{} spanning hosts ({} of {} tp groups in all)\n",
                       spanning - max_listed_warnings, plural(spanning - max_listed_warnings), spanning, tp.size());
  return out;
}

std::vector<int> divisors_of(int n) {
  std::vector<int> low, high;
  for (int d = 1; std::int64_t(d) * d <= n; ++d) {
    if (n % d != 0) continue;
    low.push_back(d);
    if (d != n / d) high.push_back(n / d);
  }
  low.insert(low.end(), high.rbegin(), high.rend());
  return low;
}

}  // namespace meshtrain
