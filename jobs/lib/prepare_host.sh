# Sourced by the jobs/*.sh examples, from the repository root: installs what is missing, builds
# meshtrain, sets OPENBLAS_CORETYPE where OpenBLAS would run generic kernels, and lists the corpus.
# Leaves `meshtrain` (the binary's path) and `corpus` (Debian's fortune files) set.

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
    echo "$(basename "$0"): OpenBLAS would run generic kernels on this CPU: OPENBLAS_CORETYPE=$core"
  fi
fi

# The fortune files themselves: not their .dat indexes nor the .u8 links to them.
mapfile -t corpus < <(find /usr/share/games/fortunes -maxdepth 1 -type f ! -name '*.dat' ! -name '*.u8' | sort)

# On a Kokkos with the OpenMP backend, kernel threads sleep between kernels instead of spinning
# against OpenBLAS's threads (read when the OpenMP runtime loads: share/docs/usage.md, Threads).
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}
