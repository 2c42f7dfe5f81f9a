#!/usr/bin/env bash
# The quickstart: installs what is missing, builds meshtrain, turns Debian's fortunes into a
# byte-level token shard, trains jobs/quickstart.ini (~3 minutes on 2 cores), and samples text
# from the checkpoint it saved. Output lands in out/quickstart/.
set -euo pipefail
cd "$(dirname "$0")/.."

share/scripts/setup.sh
cmake --preset release >/dev/null
cmake --build --preset release --target meshtrain -j "$(nproc)"
meshtrain=build/release/bin/meshtrain

# OpenBLAS runs generic kernels on CPUs it does not recognise (Prescott's on a Xeon with AVX-512 of
# family 6 model 207: GEMMs 5x slower). Where it would and OPENBLAS_CORETYPE is unset, set the kernel
# set `meshtrain blas` names for this CPU; a value already set is kept.
if [[ -z ${OPENBLAS_CORETYPE:-} ]]; then
  core=$("$meshtrain" blas --openblas-coretype)
  if [[ -n $core ]]; then
    export OPENBLAS_CORETYPE=$core
    echo "quickstart: OpenBLAS would run generic kernels on this CPU: OPENBLAS_CORETYPE=$core"
  fi
fi

mkdir -p out/quickstart
# The fortune files themselves: not their .dat indexes nor the .u8 links to them.
mapfile -t corpus < <(find /usr/share/games/fortunes -maxdepth 1 -type f ! -name '*.dat' ! -name '*.u8' | sort)
"$meshtrain" prepare --text "${corpus[@]}" --out out/quickstart/fortunes.bin

# On a Kokkos with the OpenMP backend, kernel threads sleep between kernels instead of spinning
# against OpenBLAS's threads (read when the OpenMP runtime loads: share/docs/usage.md, Threads).
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}
# One rank; the same line under srun or with -n 8 is how larger jobs start.
mpiexec -n 1 "$meshtrain" train --config jobs/quickstart.ini --checkpoint.resume never

latest=out/quickstart/checkpoints/$(cat out/quickstart/checkpoints/latest)
echo
echo "--- sampled from $latest ---"
"$meshtrain" sample --checkpoint "$latest" --prompt "The " --tokens 400 --temperature 0.8 --seed 7
