#!/usr/bin/python3
"""Pipeline bubbles (issue 44), simulated: `meshtrain schedule`'s idle fraction and stage 0's activation peak for
p = 4, 8 stages and m = 8, 16, 32 micro-batches under gpipe, 1f1b, interleaved (v = 2, 4) and zb-h1, at equal
costs F = B = W = 1 (a micro-batch's forward through a stage, its input's gradient, its weights' gradients),
beside the closed forms.

With --measured: training at pp 2 on this machine (one rank a core) under each schedule the trainer runs, the
pipeline idle its timing table measures beside the schedule simulated at the compute each stage measured in the
same run (per micro-batch: forward, backward or its input gradient, weight gradient), and the step time.

usage: bench/pipeline_bubbles.py [--build build/release] [--costs 1,1,1] [--measured [--mpiexec MPIEXEC]]
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "bench"))
from benchmark import write_random_shard  # noqa: E402
from trainer_output import timing_tables  # noqa: E402

# GPT-2 of 8 blocks, d_model 256, 128 positions: a stage's micro-batch takes tens of milliseconds on a core, so
# that the idle time is far above the timer's resolution. 8 micro-batches a step; the table over 12 steps.
MEASURED_MODEL = ["--model.layers", "8", "--model.heads", "8", "--model.d_model", "256", "--model.vocab", "512",
                  "--model.seq_len", "128", "--train.micro_batch", "2", "--train.global_batch", "16",
                  "--train.steps", "12", "--log.timing_every", "12", "--checkpoint.every", "0"]
KINDS = [("gpipe", "gpipe", 1), ("1f1b", "1f1b", 1), ("interleaved v 2", "interleaved", 2),
         ("interleaved v 4", "interleaved", 4), ("zb-h1", "zb-h1", 1)]


def measured(binary, mpiexec):
    """pp 2 under each schedule the trainer runs: measured idle, simulated idle, step time."""
    print("| schedule | measured idle | simulated at the measured compute | measured ÷ simulated | "
          "compute per micro-batch, stage 0 / 1 (F / B or BI / W, ms) | step (s) |")
    print("|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        shard = os.path.join(tmp, "tokens.bin")
        write_random_shard(shard, 400000, 512)
        for schedule in ("1f1b", "zb-h1"):
            out = subprocess.run([mpiexec, "-n", "2", binary, "train", "--data.train", shard, "--checkpoint.dir",
                                  os.path.join(tmp, schedule), "--parallel.pp", "2", "--parallel.schedule", schedule,
                                  *MEASURED_MODEL], check=True, capture_output=True, text=True, timeout=600).stdout
            t = timing_tables(out)[-1]
            step = sum(t[k]["max"] for k in ("compute", "communication", "idle"))
            costs = " · ".join(" / ".join(f"{1e3 * c:.1f}" for c in stage) for stage in t["stage_costs_s"])
            print(f"| {schedule} | {100 * t['pipeline_idle']:.1f} % | {100 * t['simulated_idle']:.1f} % | "
                  f"{t['pipeline_idle'] / t['simulated_idle']:.2f} | {costs} | {step:.3f} |")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=os.path.join(ROOT, "build", "release"))
    ap.add_argument("--costs", default="1,1,1")
    ap.add_argument("--measured", action="store_true")
    ap.add_argument("--mpiexec", default=shutil.which("mpiexec"))
    args = ap.parse_args()
    binary = os.path.join(args.build, "bin", "meshtrain")
    if args.measured:
        return measured(binary, args.mpiexec)
    print(f"costs F,B,W = {args.costs}")
    print(f"| p | m | schedule | idle fraction | closed form | stage 0 peak (micro-batches) |")
    print("|---|---|---|---|---|---|")
    rows = []
    for p in (4, 8):
        for m in (8, 16, 32):
            for name, kind, v in KINDS:
                out = subprocess.run([binary, "schedule", "--kind", kind, "--stages", str(p), "--micro-batches",
                                      str(m), "--chunks", str(v), "--costs", args.costs, "--json"],
                                     check=True, capture_output=True, text=True).stdout
                r = json.loads(out)
                closed = r["closed_form_idle_fraction"]
                peak = r["per_stage"][0]["peak_activations"]
                rows.append(r)
                print(f"| {p} | {m} | {name} | {r['idle_fraction']:.4f} | "
                      f"{'—' if closed is None else f'{closed:.4f}'} | {peak:g} |")
    print(json.dumps(rows))


if __name__ == "__main__":
    main()
