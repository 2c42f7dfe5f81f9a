// The one rule for whether a run fits its memory, and the largest micro-batch that does: `plan`
// prints it (--max-micro-batch) with the largest seq_len, the trainer refuses a config that breaks it, and
// bench/gpu/device_check.py asks `plan` for it rather than computing it again.
//
// A config fits when its sizes fit the kernels (require_sizes_fit: no weight of more than 2^31 − 1
// elements, no row count past an int) and make_plan's memory — every rank's allocations by
// category, the runtime and the mapped token shards — fits the cluster: each GPU, or each node's
// ranks together on a host-only cluster. Memory grows with the micro-batch, so the largest one that
// fits is found by doubling, then bisection.
#pragma once

#include "core/config.hpp"
#include "plan/cluster.hpp"

#include <string>

namespace meshtrain {

// The cluster the trainer's fit check measures against, for a rank with `ranks_on_node` ranks on
// its node: on the host (`device_memory` false) the `local` preset, that many ranks sharing the
// node's RAM or train.memory_gib; with tensors in GPU memory one GPU per rank of train.memory_gib
// (with the GPU presets' 1 GiB reserve), or of no memory when train.memory_gib is 0: nothing is
// checked then (the device check gives the key).
Cluster training_cluster(const Config& cfg, int ranks_on_node, bool device_memory);

// cfg with train.micro_batch = micro and train.global_batch = micro · dp · accum (cfg's accum, dp
// the layout's data-parallel degree).
Config with_micro_batch(const Config& cfg, int dp, int micro);

// The largest train.micro_batch that fits `world` ranks of `cluster` with cfg's layout and
// accumulation; 0 when not even 1 does. InputError when cfg's layout does not fit the world.
int largest_micro_batch(const Config& cfg, int world, const Cluster& cluster);

// The largest model.seq_len that fits `world` ranks of `cluster` with cfg's layout, micro-batch and
// accumulation (the sizes, then the memory, as for the micro-batch); 0 when not even 1 does. Memory
// grows with T: linearly under model.attention = fused, quadratically under materialized. Under
// sequence parallelism (and for the micro-batch too) only sizes whose B·T token rows tp divides count.
int largest_seq_len(const Config& cfg, int world, const Cluster& cluster);

// InputError (exit 2) naming `origin`, the memory needed and the cluster's, the largest micro-batch
// that fits and the keys to change, unless cfg fits `world` ranks of `cluster`. Nothing is checked
// against a cluster of no memory (training_cluster on a CUDA build without train.memory_gib).
void require_fits_memory(const Config& cfg, int world, const Cluster& cluster, const std::string& origin);

}  // namespace meshtrain
