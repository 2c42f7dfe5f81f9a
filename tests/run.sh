#!/usr/bin/env bash
# The test command: installs what is missing, configures, builds and runs the whole suite twice —
# optimised (the `release` preset), then under AddressSanitizer and UndefinedBehaviorSanitizer
# (`debug-asan`; the multi-rank equivalence runs, minutes each there, the peak-RSS check of the
# planner, whose memory the sanitizers' shadow would falsify, and the Slurm and scaling-study runs,
# which test scripts rather than the binary's memory, only in the first pass) — and, where
# the CUDA toolkit is installed, compiles the NCCL backend and runs its test (without a GPU: its
# error path). `.ci/run` calls exactly this. Extra arguments go to the
# ctest runs (e.g. -L oracle, -R kernels).
set -euo pipefail
cd "$(dirname "$0")/.."

share/scripts/setup.sh
jobs=$(nproc)

cmake --preset release
cmake --build --preset release -j "$jobs"
ctest --preset release -j "$jobs" "$@"

cmake --preset debug-asan
cmake --build --preset debug-asan -j "$jobs"
ctest --preset debug-asan -j "$jobs" -LE "equivalence|plan_rss|slurm|scaling" "$@"

if [[ -x /usr/local/cuda/bin/nvcc ]]; then
  cmake --preset nccl
  cmake --build --preset nccl -j "$jobs" --target test_comm
  ctest --preset nccl -j "$jobs" -R '^test_comm'
else
  echo "tests/run.sh: no CUDA toolkit in /usr/local/cuda: the NCCL backend is not compiled"
fi
