#!/usr/bin/env bash
# Installs what meshtrain needs on Debian 12 (bookworm), skipping what is already there.
# Used by the quickstart and the test runner; safe to run again.
#
#   share/scripts/setup.sh [--kokkos-openmp]
#
# --kokkos-openmp also builds the multi-threaded Kokkos that the `openmp` preset compiles against
# (share/scripts/kokkos-openmp.sh: /opt/meshtrain/kokkos-3.4.1-openmp; tests/run.sh asks for it).
set -euo pipefail

kokkos_openmp=0
for arg in "$@"; do
  case $arg in
    --kokkos-openmp) kokkos_openmp=1 ;;
    *) echo "setup: unknown option '$arg' (known: --kokkos-openmp)" >&2; exit 2 ;;
  esac
done

packages=(
  # toolchain
  g++ cmake make pkg-config
  # the C++ style the code follows (.clang-format; test code_format)
  clang-format
  # MPI and parallel HDF5 built against it
  mpich libmpich-dev libhdf5-mpich-dev
  # Kokkos (Debian ships 3.4 inside Trilinos, Serial backend)
  libtrilinos-kokkos-dev
  # libraries
  libboost-program-options-dev libopenblas-dev librandom123-dev libfmt-dev nlohmann-json3-dev
  libxxhash-dev libgtest-dev
  # SentencePiece subword tokenizers (meshtrain tokenizer, prepare --tokenizer); its CLI and Python
  # module are the tests' independent encoders
  libsentencepiece-dev sentencepiece python3-sentencepiece
  # tokenizer.json byte-level BPE: the pre-tokenizer's split regex (PCRE2) and NFC (ICU)
  libpcre2-dev libicu-dev
  # the quickstart's default corpus
  fortunes fortunes-min
  # the tests' independent oracle (PyTorch) and HDF5 reader; the scaling studies' plots
  python3-torch python3-h5py python3-numpy python3-matplotlib
  # a one-node Slurm for slurm/local_cluster.sh and the slurm tests (slurmctld, slurmd, clients; munge)
  slurm-wlm munge
)

# Node.js runs Hugging Face's own JavaScript tokenizers, the tokenizer.json tests' independent
# encoder: Debian's nodejs and npm unless a node and an npm (e.g. NodeSource's Node 20) are there.
if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
  packages+=(nodejs npm)
fi

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  sudo_cmd=()
  [[ $(id -u) -ne 0 ]] && sudo_cmd=(sudo)
  "${sudo_cmd[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
else
  echo "setup: all packages present"
fi

# @huggingface/tokenizers, pinned, into build/npm/node_modules (ignored by git), where
# tests/cli/test_tokenizer_json.py finds it.
hf_tokenizers=@huggingface/tokenizers@0.2.0
npm_dir="$(cd "$(dirname "$0")/../.." && pwd)/build/npm"
if ! grep -qs '"version": "0.2.0"' "$npm_dir/node_modules/@huggingface/tokenizers/package.json"; then
  echo "setup: installing $hf_tokenizers into $npm_dir"
  mkdir -p "$npm_dir"
  npm install --no-save --no-audit --no-fund --prefix "$npm_dir" "$hf_tokenizers"
fi

if ((kokkos_openmp)); then
  "$(dirname "$0")/kokkos-openmp.sh"
fi
