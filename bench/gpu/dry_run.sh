#!/usr/bin/env bash
# The GPU check's dry run on this machine, as the device will run it: packs the folder from a CPU
# build, copies what the device gets (the tracked tree with its edits, and the untracked files git
# does not ignore) and the folder (build/gpu-carry) into a scratch directory, and runs
# bench/gpu/device_check.py --cpu there with an empty environment (env -i, PATH=/usr/bin:/bin, OUT),
# recording every shared object the carried programs load (--audit: all must come from the folder,
# but for glibc and the CUDA libraries left to the machine). Then checks the JSON: every step passes
# but nccl, which --cpu skips.
#
#   bench/gpu/dry_run.sh [BUILD_DIR] [device_check.py options ...]     (BUILD_DIR: build/release)
#
# Prints where the JSON and the logs are (the scratch directory is kept).
set -euo pipefail

repo=$(realpath "$(dirname "$0")/../..")
build=$(realpath "${1:-$repo/build/release}")
shift $(($# > 0 ? 1 : 0))
scratch=$(mktemp -d /tmp/meshtrain-gpu-dry-run.XXXXXX)
mkdir -p "$scratch/repo"
(cd "$repo" && git ls-files -z --cached --others --exclude-standard | tar --null --ignore-failed-read -T - -cf -) |
  tar -C "$scratch/repo" -xf -
"$repo/bench/gpu/assemble.sh" "$build" "$scratch/repo/build/gpu-carry"

cd "$scratch/repo"
start=$(date +%s)
status=0
env -i PATH=/usr/bin:/bin OUT="$scratch/out" python3 bench/gpu/device_check.py --cpu --audit "$scratch/audit" "$@" ||
  status=$?
echo "device_check.py --cpu exited $status after $(($(date +%s) - start)) s"

python3 - "$scratch/out/device_check.json" <<'PY'
import json, sys
report = json.load(open(sys.argv[1]))
want = {"setup": "pass", "libraries": "pass", "unit_tests": "pass", "small_vs_cpu": "pass", "mpi_ranks": "pass",
        "nccl": "skipped", "throughput": "pass", "nondeterministic": "pass", "kernel_profile": "pass",
        "communication_stream": "pass", "resume": "pass",
        "audit": "pass"}
got = {name: step["status"] for name, step in report["steps"].items()}
for name, step in report["steps"].items():
    print(f"  {name:13} {step['status']:8} {step['elapsed_s']:7.1f} s  {step.get('message', '')[:160]}")
t = report["steps"].get("throughput", {})
if t.get("tokens_per_s"):
    print(f"  throughput: micro-batch {t['micro_batch']}, {t['tokens_per_s']:,.0f} tokens/s, "
          f"{t['model_flops_per_s'] / 1e9:.1f} GFLOP/s, MFU {100 * t['mfu']:.1f} % ({t['peak_source']})")
if got != want:
    sys.exit(f"dry run: steps {got}, expected {want}")
print(f"dry run passed in {report['elapsed_s']:.0f} s")
PY
echo "JSON and logs: $scratch/out"
