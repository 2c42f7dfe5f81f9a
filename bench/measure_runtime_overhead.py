#!/usr/bin/python3
"""Measures the runtime's resident memory per rank (MPI, OpenBLAS, HDF5, Kokkos, the binary) for the
planner's model in src/plan/runtime_overhead.cpp: base + per_peer · (ranks on the node − 1).

usage: bench/measure_runtime_overhead.py [--build build/release] [--repeats 2]

Trains a tiny model (2 layers, d_model 16, T 16) for 3 steps at 1, 2, 4 and 8 ranks on this node,
in dp, tp and pp layouts, with every rank under /usr/bin/time; subtracts from each rank's peak RSS
what `meshtrain plan --json` counts for that rank besides the runtime (the trainer's categories and
the mapped shard), and fits the residual by least squares. Prints each run's residuals, the fit and
its worst error. Paste base and per_peer into runtime_overhead.cpp with the date.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'tests', 'oracle'))
import gpt2_torch  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

TINY = ["--model.layers", "2", "--model.heads", "2", "--model.d_model", "16", "--model.seq_len", "16",
        "--train.micro_batch", "2", "--train.global_batch", "16", "--train.steps", "3"]
# (world, tp, pp)
LAYOUTS = [(1, 1, 1), (2, 1, 1), (2, 2, 1), (2, 1, 2), (4, 1, 1), (4, 2, 2), (8, 1, 1), (8, 2, 2)]


def write_shard(path, tokens):
    """A shard of `tokens` random tokens (the format is gpt2_torch's, tests/oracle)."""
    gpt2_torch.write_shard(path, np.random.default_rng(0).integers(0, 256, size=tokens))


def measured_rss(binary, world, keys, work):
    """Peak RSS in bytes of every rank of one training run (GNU time's %M, KiB)."""
    for f in os.listdir(work):
        if f.startswith("rss."):
            os.remove(os.path.join(work, f))
    inner = f"exec /usr/bin/time -f %M -o {work}/rss.$PMI_RANK {binary} train {' '.join(keys)} > {work}/out.$PMI_RANK 2>&1"
    subprocess.run(["mpiexec", "-n", str(world), "sh", "-c", inner], check=True, cwd=work, stdin=subprocess.DEVNULL)
    rss = []
    for r in range(world):
        with open(os.path.join(work, f"rss.{r}")) as f:
            rss.append(int(f.read().split()[-1]) * 1024)
    return rss


def planned_besides_runtime(binary, world, keys):
    """Per rank: what the plan counts besides the runtime (categories + data), and ranks on the node."""
    out = subprocess.run([binary, "plan", "--world", str(world), "--json"] + keys, check=True, capture_output=True,
                         text=True).stdout
    plan = json.loads(out)
    return [r["peak_rss"] - r["runtime_bytes"] for r in plan["per_rank"]]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=os.path.join(ROOT, "build", "release"))
    ap.add_argument("--repeats", type=int, default=2)
    args = ap.parse_args()
    binary = os.path.join(args.build, "bin", "meshtrain")
    rows = []  # (peers, residual bytes)
    with tempfile.TemporaryDirectory(prefix="meshtrain_overhead_") as work:
        shard = os.path.join(work, "shard.bin")
        write_shard(shard, 100_000)
        print(f"{'world':>5} {'tp':>3} {'pp':>3}  residual per rank (MiB)")
        for world, tp, pp in LAYOUTS:
            keys = TINY + ["--parallel.tp", str(tp), "--parallel.pp", str(pp), "--data.train", shard,
                           "--checkpoint.dir", os.path.join(work, "ck"), "--checkpoint.resume", "never"]
            planned = planned_besides_runtime(binary, world, keys)
            for _ in range(args.repeats):
                rss = measured_rss(binary, world, keys, work)
                residual = [m - p for m, p in zip(rss, planned)]
                rows += [(world - 1, r) for r in residual]
                print(f"{world:>5} {tp:>3} {pp:>3}  " + " ".join(f"{r / 2**20:.2f}" for r in residual))
    x = np.array([p for p, _ in rows], dtype=float)
    y = np.array([r for _, r in rows], dtype=float)
    per_peer, base = np.polyfit(x, y, 1)
    worst = np.max(np.abs(y - (base + per_peer * x)))
    print(f"\nfit: base = {base:.0f} bytes ({base / 2**20:.2f} MiB), per_peer = {per_peer:.0f} bytes "
          f"({per_peer / 2**20:.3f} MiB); worst residual {worst / 2**20:.2f} MiB")
    print(json.dumps({"base_bytes": round(base), "per_peer_bytes": round(per_peer), "worst_residual_bytes": round(worst)}))


if __name__ == "__main__":
    sys.exit(main())
