// What a rank's resident memory holds besides the trainer's own allocations: the runtime (MPI,
// OpenBLAS, HDF5, Kokkos, the binary and its libraries) and the mapped token shards. Measured, not
// derived: bench/measure_runtime_overhead.py re-measures the constants in runtime_overhead.cpp.
#pragma once

#include <cstdint>
#include <string>

namespace meshtrain {

// Resident bytes of the runtime on one rank that shares its node with `ranks_on_node` ranks
// (itself included) in a world of `world` ranks.
std::int64_t runtime_overhead_bytes(int ranks_on_node, int world);

// Scratch the MPI library holds while the data-parallel gradient all-reduce runs (stage 0 with
// dp > 1): MPICH's non-blocking all-reduce keeps a temporary as large as the bucket it reduces.
// Measured: one bucket of parallel.bucket_mb (at most the gradients' size) at peak.
std::int64_t collective_scratch_bytes(int dp, int zero, double bucket_mb, std::int64_t grad_bytes);

// Resident bytes of the token data on every rank: the size of every shard `data_train` names
// (a path or a glob). Each rank maps the shards whole and reads every token once at start (the
// vocabulary check), so all of their pages count in its resident set; the pages are the page
// cache's, shared by the ranks of a node. 0 when data_train is empty or names no file.
std::int64_t token_data_bytes(const std::string& data_train);

}  // namespace meshtrain
