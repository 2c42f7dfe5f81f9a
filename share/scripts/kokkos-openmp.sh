#!/usr/bin/env bash
# Builds a multi-threaded Kokkos for the `openmp` CMake preset: Kokkos 3.4.1 with the OpenMP and
# Serial backends, from the source that Debian's own Kokkos (libtrilinos-kokkos-dev, Serial only)
# is built from: packages/kokkos of bookworm's `trilinos` source package. Installs it in
#
#   /opt/meshtrain/kokkos-3.4.1-openmp     (include/, lib/libkokkoscore.a, lib/cmake/Kokkos)
#
# outside the repository, so that it outlives `rm -rf build` and clean clones, and one build serves
# every checkout on the machine (the prefix is fixed because CMakePresets.json names it). Run by
# `share/scripts/setup.sh --kokkos-openmp` (tests/run.sh does); when the prefix holds this recipe's
# build it returns at once. Needs root (or sudo) for /opt, g++ and cmake (setup.sh installs them).
# Exit codes: 0 installed (or present); 3 the machine's apt configuration names no Debian bookworm
# `main` mirror to fetch the source from (nothing fetched; the message says how to add one); 1 any
# other failure.
#
# The source comes through apt with a private deb-src list and private index and cache folders
# (`apt-get -o Dir::...`): the machine's /etc/apt and /var/lib/apt are never written, so nothing
# is left to undo, even when this script is killed, and it needs no lock that a concurrent apt-get
# holds. apt verifies the tarball against the signed Sources index. The mirror is the one the
# machine's apt configuration takes bookworm's main packages from (share/scripts/debian-mirror.sh);
# where it names none the script exits 3 with that script's message, before fetching anything.
set -euo pipefail

version=3.4.1
# CMakePresets.json names this prefix; MESHTRAIN_KOKKOS_OPENMP_PREFIX moves it (the tests use it to
# reach the mirror lookup on a machine where the real prefix is installed).
prefix=${MESHTRAIN_KOKKOS_OPENMP_PREFIX:-/opt/meshtrain/kokkos-${version}-openmp}
# What the prefix's stamp must say for the build to be reused; change it to force a rebuild.
recipe="kokkos ${version} from trilinos 13.2.0 (bookworm); Release; Serial+OpenMP; static"

present() { [[ -f $prefix/meshtrain-recipe && $(<"$prefix/meshtrain-recipe") == "$recipe" ]]; }
if present; then
  echo "kokkos-openmp: $prefix present"
  exit 0
fi

sudo_cmd=()
[[ $(id -u) -ne 0 ]] && sudo_cmd=(sudo)
"${sudo_cmd[@]}" mkdir -p "$(dirname "$prefix")"
# Several checkouts may run this at once: one builds, the others wait and find its install.
exec 9>"/var/tmp/meshtrain-kokkos-openmp.lock"
flock 9
if present; then
  echo "kokkos-openmp: $prefix present (built meanwhile)"
  exit 0
fi

work=$(mktemp -d /var/tmp/meshtrain-kokkos.XXXXXX)
trap 'rm -rf "$work"' EXIT
# apt downloads as the unprivileged _apt user where it exists: let it write here.
chmod 755 "$work"
if [[ $(id -u) -eq 0 ]] && id _apt >/dev/null 2>&1; then
  mkdir -p "$work/download" && chown _apt "$work/download"
else
  mkdir -p "$work/download"
fi

# The machine's own Debian mirror (the one its bookworm main packages come from); none: exit 3.
mirror=$("$(dirname "$0")/debian-mirror.sh") || exit $?
mkdir -p "$work/apt/sources" "$work/apt/lists/partial" "$work/apt/cache/archives/partial"
{
  echo "Types: deb-src"
  echo "URIs: $mirror"
  echo "Suites: bookworm"
  echo "Components: main"
  if [[ -f /usr/share/keyrings/debian-archive-keyring.gpg ]]; then
    echo "Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg"
  fi
} >"$work/apt/sources/trilinos-src.sources"
apt_private=(-o "Dir::Etc::SourceList=/dev/null" -o "Dir::Etc::SourceParts=$work/apt/sources"
             -o "Dir::State::Lists=$work/apt/lists" -o "Dir::Cache=$work/apt/cache")

echo "kokkos-openmp: fetching the trilinos source of bookworm, component main, from the machine's Debian mirror"
apt-get "${apt_private[@]}" -qq update
(cd "$work/download" && apt-get "${apt_private[@]}" -qq source --download-only trilinos)
tarball=$(find "$work/download" -maxdepth 1 -name 'trilinos_*.orig.tar.*' -print -quit)
[[ -n $tarball ]] || { echo "kokkos-openmp: no trilinos orig tarball was downloaded" >&2; exit 1; }

# Only Kokkos from the 166 MB of Trilinos. Debian's one patch to it removes Trilinos-internal test
# declarations, which a standalone build does not read.
mkdir -p "$work/src"
tar -xf "$tarball" -C "$work/src" --strip-components=1 --wildcards '*/packages/kokkos/*'
src=$work/src/packages/kokkos
grep -q "set(Kokkos_VERSION_MINOR 4)" "$src/CMakeLists.txt" ||
  { echo "kokkos-openmp: $tarball does not hold Kokkos 3.4" >&2; exit 1; }

echo "kokkos-openmp: building Kokkos $version (OpenMP, Serial) into $prefix"
cmake -S "$src" -B "$work/build" -DCMAKE_BUILD_TYPE=Release -DCMAKE_INSTALL_PREFIX="$prefix" \
      -DKokkos_ENABLE_SERIAL=ON -DKokkos_ENABLE_OPENMP=ON -DBUILD_SHARED_LIBS=OFF \
      -DCMAKE_POSITION_INDEPENDENT_CODE=ON >"$work/configure.log" ||
  { cat "$work/configure.log" >&2; exit 1; }
cmake --build "$work/build" -j "$(nproc)" >"$work/build.log" || { tail -50 "$work/build.log" >&2; exit 1; }

# Installed beside the prefix and renamed into place, so that an interrupted run leaves no prefix
# that looks whole.
staging=$prefix.tmp.$$
"${sudo_cmd[@]}" rm -rf "$staging"
"${sudo_cmd[@]}" cmake --install "$work/build" --prefix "$staging" >/dev/null
echo "$recipe" | "${sudo_cmd[@]}" tee "$staging/meshtrain-recipe" >/dev/null
"${sudo_cmd[@]}" rm -rf "$prefix"
"${sudo_cmd[@]}" mv "$staging" "$prefix"
echo "kokkos-openmp: installed $prefix"
