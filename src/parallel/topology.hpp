// The process grid (share/docs/design.md, Parallelism): world = dp × cp × tp × pp, global ranks ordered
// tp fastest, then cp, then dp, then pp (Megatron's default: tensor-parallel peers are neighbours, so
// they share a node's fast links, context-parallel ones next), and the MPI sub-communicators of every
// group. Expert parallelism divides the data-parallel group, as Megatron does: dp = ep × edp, the ep
// neighbouring dp ranks of an expert-parallel group sharing out the routed experts, the edp ranks that
// hold the same experts reducing their gradients. Context parallelism (cp) splits every sequence over cp
// ranks that hold the same weights: a gradient is summed over the dp × cp ranks of its replicas (edp × cp
// for the routed experts). Built once and passed explicitly; there are no global communicators.
#pragma once

#include "core/config.hpp"
#include "core/mpi_check.hpp"

#include <mpi.h>

#include <string>
#include <vector>

namespace meshtrain {

struct Layout {
  int dp = 1, tp = 1, pp = 1;
  int ep = 1;  // expert-parallel degree, a divisor of dp
  int cp = 1;  // context-parallel degree: the ranks each sequence is split over
  int world() const { return dp * cp * tp * pp; }
  int edp() const { return dp / ep; }  // expert-data-parallel degree: the replicas of one expert
  // The ranks holding the same weights (dp × cp): a gradient's sum, the ZeRO shards and the loss sum span them.
  int replicas() const { return dp * cp; }
  // The ranks holding the same routed experts (edp × cp): their gradients' sum and ZeRO shards span them.
  int expert_replicas() const { return edp() * cp; }
};

struct GridPosition {
  int dp_rank = 0, tp_rank = 0, pp_rank = 0;
  // Derived from dp_rank by Topology::position (global_rank does not read them):
  // dp_rank = edp_rank · ep + ep_rank, so expert-parallel peers are neighbouring dp ranks.
  int ep_rank = 0, edp_rank = 0;
  int cp_rank = 0;
  // Its place among the layout's replicas (Layout::replicas; the rank of Topology::dp_cp_comm, whose ranks are
  // ordered by global rank: cp before dp).
  int replica_rank(const Layout& layout) const { return dp_rank * layout.cp + cp_rank; }
};

class Topology {
 public:
  // The layout asked for by `parallel` on `world` ranks (dp = 0: world / (cp × tp × pp)); InputError
  // naming every number when it does not fit (`dp 3 × tp 2 × pp 1 = 6 ≠ world 8`), or when tp
  // exceeds heads or does not divide them, or pp exceeds layers, or ep does not divide dp and the
  // experts (ep > 1 needs model.experts > 0).
  static Layout resolve(const ParallelConfig& parallel, const ModelConfig& model, int world);

  // Pure rank arithmetic, no MPI.
  static int global_rank(const Layout& layout, const GridPosition& position);
  static GridPosition position(const Layout& layout, int global_rank);

  // Collective over `world`: splits it into the groups (the communicators are owned and freed).
  Topology(MPI_Comm world, const Layout& layout);

  const Layout& layout() const { return layout_; }
  const GridPosition& position() const { return position_; }
  int rank() const { return rank_; }
  MPI_Comm world() const { return world_.get(); }
  MPI_Comm dp_comm() const { return dp_.get(); }    // same tp and pp rank
  MPI_Comm tp_comm() const { return tp_.get(); }    // same dp and pp rank
  MPI_Comm pp_comm() const { return pp_.get(); }    // same dp and tp rank
  MPI_Comm ep_comm() const { return ep_.get(); }    // same tp, pp and edp rank: one expert-parallel group
  MPI_Comm edp_comm() const { return edp_.get(); }  // same tp, pp and ep rank: the ranks holding the same experts
  MPI_Comm cp_comm() const { return cp_.get(); }    // same dp, tp and pp rank: one sequence's ranks
  // The replicas a gradient is summed over: same tp and pp rank (dp × cp ranks); for the routed experts
  // same tp, pp and ep rank (edp × cp ranks). The dp and edp groups themselves under cp 1.
  MPI_Comm dp_cp_comm() const { return dp_cp_.get(); }
  MPI_Comm edp_cp_comm() const { return edp_cp_.get(); }
  bool first_stage() const { return position_.pp_rank == 0; }
  bool last_stage() const { return position_.pp_rank == layout_.pp - 1; }

  // The grid as rank 0 prints it at start: every group's global ranks and each rank's host, one
  // line per group kind, compacted for large worlds. Collective (gathers host names).
  std::string describe() const;

 private:
  Layout layout_;
  GridPosition position_;
  int rank_ = 0;
  // Owned (freed with the Topology, the groups before the world they were split from); move-only,
  // as OwnedComm is.
  mpi::OwnedComm world_;
  mpi::OwnedComm tp_, dp_, pp_, ep_, edp_, cp_, dp_cp_, edp_cp_;
};

// The groups of each kind as lists of global ranks, in group order (for describe() and tests):
// e.g. tp groups of dp2·tp2·pp2 are {0,1} {2,3} {4,5} {6,7}.
std::vector<std::vector<int>> dp_groups(const Layout& layout);
std::vector<std::vector<int>> tp_groups(const Layout& layout);
std::vector<std::vector<int>> pp_groups(const Layout& layout);
// Each dp group cut into runs of ep neighbouring dp ranks (ep groups), and the ranks of a dp group
// with the same ep rank (edp groups): for dp4·ep2·tp2 [0 2] [1 3] [4 6] [5 7] and
// [0 4] [1 5] [2 6] [3 7]. Groups ordered by their first rank, as the others are.
std::vector<std::vector<int>> ep_groups(const Layout& layout);
std::vector<std::vector<int>> edp_groups(const Layout& layout);
// The cp ranks of one sequence (neighbours but for tp: for dp2·cp2·tp2 [0 2] [1 3] [4 6] [5 7]), and the
// groups gradients are summed over: dp × cp ranks ([0 2 4 6] [1 3 5 7]), edp × cp for the routed experts.
std::vector<std::vector<int>> cp_groups(const Layout& layout);
std::vector<std::vector<int>> dp_cp_groups(const Layout& layout);
std::vector<std::vector<int>> edp_cp_groups(const Layout& layout);

// The divisors of n in increasing order, in O(√n) (n may be as large as a SwiGLU width): the degrees
// a dimension of n can be split by, as refusals list them and `plan --search` tries them.
std::vector<int> divisors_of(int n);

// describe()'s text for a given placement, without MPI: hosts[r] is global rank r's host name
// (hosts.size() == layout.world()). What describe() returns on rank 0; tests use it for multi-host
// and large-world placements that a single machine cannot produce.
std::string describe_grid(const Layout& layout, const std::vector<std::string>& hosts);

}  // namespace meshtrain
