// The machines a plan is made for (`meshtrain plan`): ranks per node, memory and compute per device,
// and the links between ranks, as named presets that command-line options override.
//
// Figures of the GPU presets are vendor peaks and public measurements (share/docs/usage.md, `plan`);
// those of the `local` preset were measured on the machine this project is developed on (see
// cluster.cpp for how and when).
#pragma once

#include "core/config.hpp"

#include <string>
#include <vector>

namespace meshtrain {

// One kind of link between two ranks: time for n bytes = latency_s + n / bandwidth_Bps.
struct Link {
  double bandwidth_Bps = 0;  // bytes per second (for collectives: the ring's bus bandwidth)
  double latency_s = 0;      // α: the fixed cost of one message
};

struct Cluster {
  std::string preset;
  // Ranks placed on one node, in blocks of consecutive global ranks (as srun and mpiexec place
  // them); 0: every rank on one node, however many (the local machine, oversubscribed).
  int ranks_per_node = 0;
  // true: the host's CPUs compute and its RAM holds everything, shared by the node's ranks
  // (`device_memory_bytes` and `peak_flops_*` are the node's); false: one GPU per rank (per device).
  bool host_only = false;
  double device_memory_bytes = 0;
  double peak_flops_fp32 = 0;   // dense peak without tensor cores (CPU: sgemm rate)
  double peak_flops_16bit = 0;  // dense bf16/fp16 tensor peak
  // Fraction of the peak the trainer's compute reaches (model FLOPs per second / peak).
  double efficiency = 1;
  Link intra;  // between ranks of one node
  Link inter;  // between ranks of different nodes
  // GPU: device memory taken by the CUDA context and the collectives' own buffers, not counted in
  // the trainer's categories (assumed, not measured).
  double device_reserve_bytes = 0;

  // Host-only clusters: CPU cores per node (0: not modelled). With fewer ranks than cores, the
  // part of the compute that runs on one thread per rank (`serial_fraction`: the Kokkos Serial
  // kernels; BLAS uses every core) leaves cores idle. With more ranks than cores, a message waits
  // for its receiver to be scheduled: the latency becomes `oversubscribed_latency_s` × ranks /
  // cores (a scheduler tick per message).
  int cores_per_node = 0;
  double serial_fraction = 0;
  double oversubscribed_latency_s = 0;

  // The peak for a train.precision (fp32 or a 16-bit type).
  double peak_flops(Precision precision) const;
  // Node index of a global rank: ranks are placed in blocks of ranks_per_node.
  int node_of(int rank) const { return ranks_per_node > 0 ? rank / ranks_per_node : 0; }
  // Ranks that share the node of `rank` in a world of `world` ranks.
  int ranks_on_node(int rank, int world) const;
  // Model FLOP/s of one rank on a node shared by `ranks` ranks, in `precision`.
  double rank_flops(Precision precision, int ranks) const;
  // The link between ranks of one node holding `ranks` ranks (slower when they oversubscribe it).
  Link intra_link(int ranks) const;
};

// The preset called `name`; InputError naming the valid presets otherwise.
Cluster cluster_preset(const std::string& name);
std::vector<std::string> cluster_preset_names();

}  // namespace meshtrain
