#!/usr/bin/env bash
# The test command: installs what is missing, configures, builds and runs the whole suite.
# `.ci/run` calls exactly this. Extra arguments go to ctest (e.g. -L oracle, -R kernels).
set -euo pipefail
cd "$(dirname "$0")/.."

share/scripts/setup.sh
cmake --preset release
cmake --build --preset release -j "$(nproc)"
ctest --preset release -j "$(nproc)" "$@"
