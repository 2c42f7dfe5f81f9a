#!/usr/bin/env bash
# The test command: installs what is missing, configures, builds and runs the whole suite twice —
# optimised (the `release` preset), then under AddressSanitizer and UndefinedBehaviorSanitizer
# (`debug-asan`; the multi-rank equivalence runs, minutes each there, the peak-RSS check of the
# planner, whose memory the sanitizers' shadow would falsify, large_logits' 4 GiB of logits
# (label `large`: one step of it would take the unoptimised, instrumented build many minutes; its
# 64-bit offsets are checked in the first pass), the Slurm and scaling-study runs,
# which test scripts rather than the binary's memory, and mixed_precision's dozens of training
# runs, whose 16-bit paths the low-precision model tests cover under the sanitizers, cli_tokenizer's
# SentencePiece trainings (the library's code, not instrumented; the prepare and tokenizer paths run
# sanitized in test_tokenizer), checkpoint_crash_kill's kill -9 at random instants (what a file holds
# after a crash, not memory; the sanitized checkpoint_corruption reads damaged files), the Hugging Face
# import's training runs (hf_import_training: layouts against a reference; its files the sanitized
# hf_import_files reads) and LoRA's layouts (hf_lora_training_layouts; its reference group runs sanitized,
# dp2·tp2 included), the planner's traffic checks (plan_*traffic: byte counts of 4- and 8-rank
# runs against the plan, figures rather than memory; the traffic log is written sanitized in save_failure),
# and the checks
# of the sources themselves (label `source`: formatting, the Spack recipe), only in the
# first pass) — then runs the
# kernel, model, oracle and equivalence tests on Kokkos' OpenMP backend with 2 threads (`openmp`:
# a race between the kernels' teams shows there), and the kernel and model tests once more with
# teams of 2 threads (MESHTRAIN_TEAM_SIZE=2: a race inside a team, as a GPU would run it), and,
# where the CUDA toolkit is installed, compiles the NCCL backend and runs its test (without a GPU:
# its error path). `.ci/run` calls exactly this. Extra arguments go to the ctest runs (e.g. -L
# oracle, -R kernels).
# CI's budget is 40 minutes on 2 cores; the table printed at the end says where they go. Every test
# runs with tests/common/mpi_yield.c preloaded (tests/CMakeLists.txt): the 4- and 8-rank jobs on 2
# cores would otherwise spend most of their time with waiting ranks spinning in MPI.
set -euo pipefail
cd "$(dirname "$0")/.."

# Each pass's build and test time (wall seconds), printed as a table when the script ends, also
# when a pass fails: CI's budget is read off it.
timings=()
timed() {  # timed PASS PHASE COMMAND...: runs COMMAND and records how long it took
  local start=$SECONDS status=0
  "${@:3}" || status=$?
  timings+=("$1 $2 $((SECONDS - start))")
  return "$status"
}
print_timings() {
  local total=0 row pass phase seconds
  echo "tests/run.sh: time by pass (wall seconds)"
  printf '  %-22s %-8s %7s\n' pass phase seconds
  for row in "${timings[@]}"; do
    read -r pass phase seconds <<<"$row"
    printf '  %-22s %-8s %7d\n' "$pass" "$phase" "$seconds"
    total=$((total + seconds))
  done
  printf '  %-22s %-8s %7d\n' total "" "$total"
}
trap print_timings EXIT

timed setup install share/scripts/setup.sh --kokkos-openmp
jobs=$(nproc)
# Each target compiles as unity batches of up to 8 sources (CMake's UNITY_BUILD): one parse of the
# shared headers (Kokkos, fmt, gtest, the kernels' templates) serves 8 files. The release build took
# 586 s as 197 translation units and 250 s as 56 on 2 cores. Sources keep their file-local names
# apart (tests: a namespace named after the file), so either way builds; the presets, for
# incremental work and the CUDA build, compile file by file.
unity=(-DCMAKE_UNITY_BUILD=ON)

timed release configure cmake --preset release "${unity[@]}"
timed release build cmake --build --preset release -j "$jobs"
timed release test ctest --preset release -j "$jobs" "$@"

timed debug-asan configure cmake --preset debug-asan "${unity[@]}"
timed debug-asan build cmake --build --preset debug-asan -j "$jobs"
timed debug-asan test ctest --preset debug-asan -j "$jobs" -LE "equivalence|plan_rss|large|slurm|scaling|source" -E '^(mixed_precision|cli_tokenizer|checkpoint_crash_kill|hf_import_training|hf_lora_training_layouts|plan_(llama_|moe_|lora_)?traffic)$' "$@"

# Only what these tests run is built (the binary, for the oracle and equivalence runs); the cuBLAS
# wrapper's test has nothing to do with the host backend and stays in the release pass. The
# threaded backend changes the kernels, so their tests, the model's, the PyTorch oracles (gpt2,
# llama and its mixture of experts, one rank and tp2·pp2), gpt2's layouts under dp, tp, pp and
# ZeRO, and the gradient norm's digests across team sizes (test_owned_launches) run here; the
# resharding, 3-D and other families' layouts (the same kernels, more ranks) and the fine-tuning
# oracle (oracle_sft_training_*: packed windows, whose kernels test_kernels and test_model's packed
# documents run here) run once, in the release pass.
timed openmp configure cmake --preset openmp "${unity[@]}"
timed openmp build cmake --build --preset openmp -j "$jobs" --target meshtrain test_kernels test_flash_attention test_half_types test_model \
  test_recompute_tp test_long_context test_gpt2_tp_low_precision test_model_vs_torch test_owned_launches \
  test_lora_dropout test_lora_gradients test_ring_attention test_context_ring meshtrain_test_mpi_yield
timed openmp test ctest --preset openmp -j "$jobs" -L '^(kernels|model|oracle|equivalence)$' \
  -E '^(test_cublas_gemm|equivalence_(llama|moe).*|equivalence_(reshard|3d|zero_3d|resume_across_layouts)|oracle_sft_training_.*)$' "$@"
timed openmp-team2 test env MESHTRAIN_TEAM_SIZE=2 ctest --preset openmp -j "$jobs" -L '^(kernels|model)$' -E '^test_cublas_gemm$' "$@"

if [[ -x /usr/local/cuda/bin/nvcc ]]; then
  timed nccl configure cmake --preset nccl "${unity[@]}"
  timed nccl build cmake --build --preset nccl -j "$jobs" --target test_comm meshtrain_test_mpi_yield
  timed nccl test ctest --preset nccl -j "$jobs" -R '^test_comm'
else
  echo "tests/run.sh: no CUDA toolkit in /usr/local/cuda: the NCCL backend is not compiled"
fi
