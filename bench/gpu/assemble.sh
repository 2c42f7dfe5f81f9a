#!/usr/bin/env bash
# Packs what bench/gpu/device_check.py needs on a machine that has only a GPU driver, a CUDA
# runtime and a Python: the meshtrain binary and test binaries of one build, every shared library
# they load that such a machine lacks, and MPICH's launcher.
#
#   bench/gpu/assemble.sh BUILD_DIR OUT_DIR [NCCL_BUILD_DIR]
#
# BUILD_DIR is build/cuda for the device run or build/release for the dry run here; test_comm comes
# from NCCL_BUILD_DIR when given (the `nccl` preset's build), else from BUILD_DIR. OUT_DIR is
# replaced; it holds bundle.tar.xz and manifest.tsv, and must stay within the budget: 64 MiB minus
# the working tree that travels with it (tracked files and untracked ones git does not ignore).
#
# Each library ldd names is sorted into one of:
#   host     glibc and its family (libc, libm, libpthread, libdl, librt, ld-linux, libresolv, ...),
#            tied to the host's own loader by private symbols: never carried, but copied to glibc/
#            for the fallback where the host's glibc is older than these binaries need;
#   driver   libcuda, libnvidia-*: the GPU driver's own, never carried;
#   device   the large CUDA libraries (cuBLAS, cuBLASLt, NCCL, ...): hundreds of MB, so found on the
#            device (its CUDA install or the pip wheels PyTorch brings) by device_check.py;
#   carried  everything else (MPICH, HDF5, Kokkos, OpenBLAS, libstdc++, libgfortran, cudart, ...)
#            into lib/.
# UCX loads its transports from lib/ucx beside libucs; those whose libraries are all carried go too.
set -euo pipefail

usage() { echo "usage: $0 BUILD_DIR OUT_DIR [NCCL_BUILD_DIR]" >&2; exit 2; }
[[ $# -eq 2 || $# -eq 3 ]] || usage
build=$(realpath "$1")
out=$2
nccl_build=$(realpath "${3:-$1}")
repo=$(realpath "$(dirname "$0")/../..")
budget_mib=64

[[ -f $build/CMakeCache.txt ]] || { echo "$0: $build is not a CMake build directory" >&2; exit 2; }
cache_value() { sed -n "s/^$1:[A-Z]*=//p" "$2/CMakeCache.txt" | head -n 1; }

stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/bin" "$stage/lib" "$stage/glibc"
manifest=$stage/manifest.tsv

# --- binaries ---------------------------------------------------------------------------------
required=(meshtrain test_kernels test_model test_comm)
optional=(test_cublas_gemm)
for name in "${required[@]}" "${optional[@]}"; do
  from=$build
  [[ $name == test_comm ]] && from=$nccl_build
  if [[ -x $from/bin/$name ]]; then
    cp "$from/bin/$name" "$stage/bin/"
    printf 'binary\t%s\t%s\n' "$name" "$from/bin/$name" >> "$manifest"
  elif [[ " ${required[*]} " == *" $name "* ]]; then
    echo "$0: $from/bin/$name is missing: build it (cmake --build $from --target $name)" >&2
    exit 1
  else
    echo "note: $from/bin/$name not built (the build has no cuBLAS); its step will say so"
  fi
done
# The kernel timer (a Kokkos Tools library) for the throughput step's profiled run.
timer=$build/lib/libmeshtrain_kernel_timer.so
[[ -f $timer ]] || { echo "$0: $timer is missing: build it (cmake --build $build --target meshtrain_kernel_timer)" >&2; exit 1; }
cp "$timer" "$stage/lib/"
printf 'tool\t%s\t%s\n' "$(basename "$timer")" "$timer" >> "$manifest"

# MPICH's launcher: the mpiexec the build was configured with; Hydra runs hydra_pmi_proxy from its own directory.
mpiexec=$(cache_value MPIEXEC_EXECUTABLE "$build")
mpiexec=$(realpath "$(command -v "${mpiexec:-mpiexec}")")
[[ $(basename "$mpiexec") == mpiexec.hydra ]] || { echo "$0: $mpiexec is not MPICH's Hydra" >&2; exit 1; }
cp "$mpiexec" "$(dirname "$mpiexec")/hydra_pmi_proxy" "$stage/bin/"
printf 'launcher\tmpiexec.hydra\t%s\n' "$mpiexec" >> "$manifest"

# --- libraries --------------------------------------------------------------------------------
host_re='^(libc|libm|libmvec|libpthread|libdl|librt|libresolv|libutil|libanl|libnsl|libBrokenLocale'
host_re+='|libnss_[a-z]+)\.so|^ld-linux'
driver_re='^lib(cuda|nvidia-[a-z-]+|nvcuvid)\.so'
device_re='^lib(cublas|cublasLt|nccl|cudnn[a-z_]*|cufft|cufftw|curand|cusolver|cusolverMg|cusparse|nvJitLink'
device_re+='|nvrtc[a-z-]*|cupti|nvToolsExt)\.so'

declare -A seen=()
# ldd_needed FILE: "soname<TAB>path" for every library FILE loads, directly or not; path "not found" when unresolved.
ldd_needed() {
  ldd "$1" | awk '/=>/ { name = $1; path = $3; if ($3 == "not") path = "not found"; print name "\t" path }
                  /^[ \t]*\/.*ld-linux/ { n = split($1, p, "/"); print p[n] "\t" $1 }'
}
take_libraries() {
  local file=$1 name path
  while IFS=$'\t' read -r name path; do
    [[ -n ${seen[$name]:-} ]] && continue
    seen[$name]=1
    if [[ $name =~ $driver_re ]]; then
      printf 'driver\t%s\t-\n' "$name" >> "$manifest"
    elif [[ $path == "not found" ]]; then
      echo "$0: $file needs $name, which ldd cannot find here" >&2
      exit 1
    elif [[ $name =~ $host_re ]]; then
      cp -L "$path" "$stage/glibc/$name"
      printf 'host\t%s\t%s\n' "$name" "$path" >> "$manifest"
    elif [[ $name =~ $device_re ]]; then
      # The build machine's file itself: its name carries the full version (libcublas.so.13.0.2.14),
      # which device_check.py's libraries step compares with the device's.
      printf 'device\t%s\t%s\n' "$name" "$(realpath "$path")" >> "$manifest"
    else
      cp -L "$path" "$stage/lib/$name"
      printf 'carried\t%s\t%s\n' "$name" "$path" >> "$manifest"
    fi
  done < <(ldd_needed "$file")
}
for file in "$stage"/bin/* "$stage/lib/$(basename "$timer")"; do take_libraries "$file"; done

# UCX transports, where every library they load is already here.
if [[ -f $stage/lib/libucs.so.0 ]]; then
  ucx_dir=$(dirname "$(awk -F'\t' '$1 == "carried" && $2 == "libucs.so.0" { print $3 }' "$manifest")")/ucx
  mkdir -p "$stage/lib/ucx"
  for module in "$ucx_dir"/*.so.0; do
    [[ -e $module ]] || continue
    missing=$(ldd_needed "$module" | awk -F'\t' '{ print $1 }' | while read -r name; do
      [[ -n ${seen[$name]:-} ]] || echo "$name"; done | tr '\n' ' ')
    if [[ -z $missing ]]; then
      cp -L "$module" "$stage/lib/ucx/"
      printf 'ucx\t%s\t%s\n' "$(basename "$module")" "$module" >> "$manifest"
    else
      echo "note: UCX transport $(basename "$module") left out (it needs ${missing% })"
    fi
  done
fi

# The newest glibc symbol version anything carried asks for: the host's glibc must be at least this.
glibc_needed=$(for f in "$stage"/bin/* "$stage"/lib/*.so* "$stage"/lib/ucx/*; do
  [[ -f $f ]] && objdump -T "$f" 2>/dev/null | awk '/\*UND\*/' | grep -o 'GLIBC_[0-9.]*' || true
done | sed 's/GLIBC_//' | sort -uV | tail -n 1)

# The CUDA runtime the build carries (libcudart's full version: the driver must support its major).
cudart=$(awk -F'\t' '$1 == "carried" && $2 ~ /^libcudart\.so/ { print $3 }' "$manifest" | head -n 1)
cudart_version=-
[[ -n $cudart ]] && cudart_version=$(basename "$(realpath "$cudart")" | sed 's/^libcudart\.so\.//')

{
  printf 'glibc_needed\t%s\t-\n' "$glibc_needed"
  printf 'cuda_runtime\t%s\t%s\n' "$cudart_version" "${cudart:--}"
  printf 'build\t%s\t%s\n' "$(cache_value CMAKE_BUILD_TYPE "$build")" "$build"
  printf 'cuda\t%s\t-\n' "$(cache_value MESHTRAIN_ENABLE_CUDA "$build")"
  printf 'nccl\t%s\t%s\n' "$(cache_value MESHTRAIN_ENABLE_NCCL "$nccl_build")" "$nccl_build"
  source_dir=$(cache_value CMAKE_HOME_DIRECTORY "$build")
  source_commit=$(git -C "$source_dir" describe --always --dirty 2>/dev/null || echo unknown)
  printf 'source\t%s\t%s\n' "$source_commit" "$source_dir"
} >> "$manifest"

# --- pack and check the budget ----------------------------------------------------------------
rm -rf "$out"
mkdir -p "$out"
cp "$manifest" "$out/manifest.tsv"
tar -C "$stage" -cf - bin lib glibc manifest.tsv | xz -6 -T2 > "$out/bundle.tar.xz"

unpacked_kib=$(du -sk "$stage" | cut -f1)
carried_kib=$(du -sk "$out" | cut -f1)
# What travels with the folder: the tracked files and the untracked ones git does not ignore.
tree_kib=$(cd "$repo" && git ls-files -z --cached --others --exclude-standard |
  while IFS= read -r -d '' f; do [[ -e $f ]] && printf '%s\0' "$f"; done | du -ck --files0-from=- | tail -n 1 | cut -f1)
budget_kib=$((budget_mib * 1024 - tree_kib))
device_libs=$(awk -F'\t' '$1 == "device" { printf "%s ", $2 }' "$manifest")
echo "carried: $(ls "$stage/bin" | wc -l) programs, $(ls "$stage/lib" | grep -c '\.so') libraries," \
  "$(grep -c '^ucx' "$manifest" || true) UCX transports; left to the device: ${device_libs:-nothing}"
echo "size: $unpacked_kib KiB unpacked, $carried_kib KiB in $out; working tree $tree_kib KiB;" \
  "budget $budget_kib KiB (64 MiB minus the tree)"
if ((carried_kib > budget_kib)); then
  echo "$0: $out is $carried_kib KiB, over the budget of $budget_kib KiB" >&2
  exit 1
fi
