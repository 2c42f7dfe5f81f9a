#!/usr/bin/python3
"""Pipeline bubbles (issue 44), simulated: `meshtrain schedule`'s idle fraction and stage 0's activation peak for
p = 4, 8 stages and m = 8, 16, 32 micro-batches under gpipe, 1f1b, interleaved (v = 2, 4) and zb-h1, at equal
costs F = B = W = 1 (a micro-batch's forward through a stage, its input's gradient, its weights' gradients),
beside the closed forms.

usage: bench/pipeline_bubbles.py [--build build/release] [--costs 1,1,1]
"""
import argparse
import json
import os
import subprocess

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
KINDS = [("gpipe", "gpipe", 1), ("1f1b", "1f1b", 1), ("interleaved v 2", "interleaved", 2),
         ("interleaved v 4", "interleaved", 4), ("zb-h1", "zb-h1", 1)]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=os.path.join(ROOT, "build", "release"))
    ap.add_argument("--costs", default="1,1,1")
    args = ap.parse_args()
    binary = os.path.join(args.build, "bin", "meshtrain")
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
