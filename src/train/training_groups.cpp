// The training run's communicators, and the backend each one uses.
#include "train/training_groups.hpp"

#include "core/host_waits.hpp"
#include "core/mpi_check.hpp"
#include "parallel/compute_ordered_comm.hpp"
#include "parallel/pointer_audit.hpp"
#include "parallel/stream_standin.hpp"
#include "parallel/timed_comm.hpp"
#include "parallel/watched_comm.hpp"
#include "train/live_allocations.hpp"

namespace meshtrain {
namespace {

// The collectives of one group: parallel.backend `nccl`, or `auto` on a build whose tensors live
// on the GPU, use NCCL ordered with the execution space's stream; otherwise MPI, the host waiting
// for the compute before each call (parallel/comm.hpp, Ordering with the compute) or, test-only,
// played as a device would order it (parallel/stream_standin.hpp).
std::unique_ptr<Comm> open_group(CommBackend backend, MPI_Comm group, const ExecSpace& space) {
#if defined(MESHTRAIN_HAVE_NCCL) && defined(KOKKOS_ENABLE_CUDA)
  if (backend != CommBackend::mpi) return make_nccl_comm(group, space.cuda_stream());
#endif
  (void)backend;
  if (stream_standin_requested()) return make_stream_standin_comm(make_mpi_comm(group));
  return make_compute_ordered_comm(make_mpi_comm(group),
                                   [space] { host_fence(space, "MPI: the compute before a call on its buffers"); });
}

// The pipeline's first and last stage, split from the pipeline group (collective over it): its
// ranks share the dp and tp rank by construction, so the split needs no other coordinates.
mpi::OwnedComm tied_embedding_comm(const Topology& topology) {
  const int stage = topology.position().pp_rank, last = topology.layout().pp - 1;
  mpi::OwnedComm tied;
  MESHTRAIN_MPI_CHECK(
      MPI_Comm_split(topology.pp_comm(), stage == 0 || stage == last ? 0 : MPI_UNDEFINED, stage, tied.out()),
      "is every rank of the pipeline group making the training groups in the same order?");
  return tied;
}

}  // namespace

std::unique_ptr<Comm> audit_if_requested(std::unique_ptr<Comm> comm, const std::string& group) {
  if (!pointer_audit_requested()) return comm;
  record_live_allocations();
  return make_pointer_audit(std::move(comm), group, inside_live_allocation);
}

bool nccl_usable() {
#if defined(MESHTRAIN_HAVE_NCCL) && defined(KOKKOS_ENABLE_CUDA)
  return true;
#else
  return false;
#endif
}

TrainingGroups::TrainingGroups(CommBackend backend, const Topology& topology, const ExecSpace& space,
                               const std::string& traffic_path, bool tied_head)
    : traffic(traffic_path), world(topology.world()) {
  // Each group's waits are watched under its name (parallel/watchdog.hpp); all-to-alls are timed
  // apart from the other collectives, whatever the group. Test-only: MESHTRAIN_POINTER_AUDIT=1
  // refuses any buffer outside the execution space's live allocations (parallel/pointer_audit.hpp),
  // recorded from here on, before the state and the loader allocate theirs.
  const auto open = [&](const char* name, MPI_Comm group, double& seconds) {
    auto watched = make_watched_comm(open_group(backend, group, space), new_wait_group(group, name));
    return audit_if_requested(traffic.counted(name, make_timed_comm(std::move(watched), seconds, all_to_all_seconds)),
                              name);
  };
  dp = open("dp", topology.dp_cp_comm(), comm_seconds);
  tp = open("tp", topology.tp_comm(), comm_seconds);
  pp = open("pp", topology.pp_comm(), idle_seconds);
  if (topology.layout().pp > 1 && tied_head) {
    // The Comm keeps a duplicate; the split itself is freed when `split` goes.
    const mpi::OwnedComm split = tied_embedding_comm(topology);
    if (split.get() != MPI_COMM_NULL) tied = open("tied", split.get(), comm_seconds);
  }
  ep = open("ep", topology.ep_comm(), comm_seconds);
  // With ep = 1 the edp group is the dp group: its Comm serves both (no second NCCL communicator).
  if (topology.layout().ep > 1) edp_ = open("edp", topology.edp_cp_comm(), comm_seconds);
  if (topology.layout().cp > 1) cp = open("cp", topology.cp_comm(), comm_seconds);
  if (dp->backend() != "mpi") {
    set_before_host_fence([](void* groups) { static_cast<const TrainingGroups*>(groups)->settle(); }, this);
  }
}

TrainingGroups::~TrainingGroups() {
  if (before_host_fence.context == this) set_before_host_fence(nullptr, nullptr);
}

// Inner groups first: a data-parallel operation may wait on compute that waits on them.
void TrainingGroups::settle() const {
  for (Comm* group : {tp.get(), cp.get(), ep.get(), edp_.get(), pp.get(), tied.get(), dp.get()}) {
    if (group != nullptr) group->settle();
  }
}

}  // namespace meshtrain
