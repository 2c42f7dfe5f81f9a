#!/usr/bin/env bash
# The test command: installs what is missing, configures, builds and runs the whole suite twice —
# optimised (the `release` preset), then under AddressSanitizer and UndefinedBehaviorSanitizer
# (`debug-asan`). `.ci/run` calls exactly this. Extra arguments go to both ctest runs
# (e.g. -L oracle, -R kernels).
set -euo pipefail
cd "$(dirname "$0")/.."

share/scripts/setup.sh
jobs=$(nproc)

cmake --preset release
cmake --build --preset release -j "$jobs"
ctest --preset release -j "$jobs" "$@"

cmake --preset debug-asan
cmake --build --preset debug-asan -j "$jobs"
ctest --preset debug-asan -j "$jobs" "$@"
