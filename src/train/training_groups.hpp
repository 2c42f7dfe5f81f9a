// The collectives of one training run: one Comm per group of the Topology that the step uses, each
// timed and watched (parallel/watchdog.hpp) and audited in tests, made in one place (the order they
// are made in is collective: every rank makes them alike).
#pragma once

#include "core/config.hpp"
#include "core/exec.hpp"
#include "parallel/comm.hpp"
#include "parallel/topology.hpp"
#include "train/traffic_log.hpp"

#include <memory>
#include <string>

namespace meshtrain {

// Whether this build can run parallel.backend = nccl: NCCL serves tensors in GPU memory, so it needs
// a CUDA build that has it.
bool nccl_usable();

// Test-only (MESHTRAIN_POINTER_AUDIT=1, parallel/pointer_audit.hpp): `comm` refusing any buffer
// outside the execution space's live allocations, recorded from the first such call on (so before
// the state and the loader allocate); `comm` as it is otherwise.
std::unique_ptr<Comm> audit_if_requested(std::unique_ptr<Comm> comm, const std::string& group);

class TrainingGroups {
 public:
  // Collective over the Topology's world. `traffic_path`: log.traffic (empty: nothing counted).
  // `tied_head`: the model's output head is its embedding (ModelConfig::ties_output_head).
  TrainingGroups(CommBackend backend, const Topology& topology, const ExecSpace& space, const std::string& traffic_path,
                 bool tied_head);
  ~TrainingGroups();
  TrainingGroups(const TrainingGroups&) = delete;  // the Comms hold the timers' addresses
  TrainingGroups& operator=(const TrainingGroups&) = delete;

  // The host waits for every operation each group has enqueued (Comm::settle): what runs before
  // every host fence while the groups use a device backend.
  void settle() const;

  double comm_seconds = 0;         // time inside collectives, all groups together, all-to-alls apart
  double idle_seconds = 0;         // time a pipeline stage waits for its neighbours
  double all_to_all_seconds = 0;   // time inside all-to-alls (expert parallelism's token exchange)
  TrafficLog traffic;              // each group's calls and bytes, when log.traffic asks
  MPI_Comm world = MPI_COMM_NULL;  // the Topology's (not owned): the ranks injected faults name
  // The replicas a gradient is summed over and the optimizer state sharded over (ZeRO), the loss summed
  // over: the dp group, or under context parallelism its dp × cp ranks (Topology::dp_cp_comm).
  std::unique_ptr<Comm> dp;
  std::unique_ptr<Comm> tp;
  std::unique_ptr<Comm> pp;  // timed as idle: its waits are the pipeline's bubble
  // The first and the last stage of one pipeline (same dp and tp rank) both hold the tied wte and
  // sum its gradients in this group; null on the other stages, without a pipeline and for an untied head.
  std::unique_ptr<Comm> tied;
  // One expert-parallel group (parallel.ep ranks of the dp group, which share out the routed
  // experts and exchange tokens all-to-all); a single rank when ep = 1.
  std::unique_ptr<Comm> ep;
  // The expert-data-parallel group: the ranks holding the same experts, over which their gradients
  // are reduced and their states ZeRO-sharded (edp × cp ranks under context parallelism). With ep = 1 it
  // is the dp group, and this its Comm.
  Comm& edp() const { return edp_ ? *edp_ : *dp; }
  // The context-parallel group: one sequence's ranks, around which attention passes K/V blocks; null
  // under cp 1.
  std::unique_ptr<Comm> cp;

 private:
  std::unique_ptr<Comm> edp_;  // ep > 1 only
};

}  // namespace meshtrain
