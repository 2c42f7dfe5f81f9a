#!/usr/bin/python3
"""Parallel layouts against one rank: the same training, whatever the layout.

For each layout asked for, runs `meshtrain train` under `mpiexec -n <world>` from the same init
weights and data as a single-rank run, and checks that every step's loss and grad norm agree to
--rtol (fp32: the sums run in another order, so not bitwise) and that the final checkpoints'
weights agree to --wtol.

A layout written A/B trains the first steps under A, leaves (train.stop_after, exit 3) and resumes
from A's checkpoint under B to the end: checkpoints are layout-free, so the run is the same.
An item SECTION.KEY=VALUE of a layout sets that key for it (e.g. tp=2,train.recompute=full).

With --reference LAYOUT the runs are compared with that layout's instead of one rank's; with
--exact every loss, grad norm and final weight must be bitwise equal (for runs that compute the
same sums in the same order, such as activation recomputation against none).

usage: test_equivalence.py --meshtrain BIN --mpiexec MPIEXEC --workdir DIR --layout dp=2 [--layout dp=2,tp=2 ...]
       [--layout tp=2/dp=2 ...] [--set SECTION.KEY=VALUE ...] [--rtol 1e-5] [--wtol 3e-5]
       [--reference LAYOUT] [--exact]
"""
import argparse
import json
import os
import shutil
import subprocess
import sys

import h5py
import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "oracle"))
import gpt2_torch  # noqa: E402

BASE = {
    "model": {"layers": 4, "heads": 4, "d_model": 32, "vocab": 71, "seq_len": 16},
    "train": {"micro_batch": 2, "global_batch": 8, "steps": 5, "seed": 99},
    "optim": {"lr": 3e-3, "min_lr": 3e-4, "warmup_steps": 2, "decay": "cosine", "weight_decay": 0.1,
              "grad_clip": 1.0},
    "data": {"order": "shuffle"},
}


def write_ini(path, cfg):
    with open(path, "w") as f:
        for section, keys in cfg.items():
            f.write(f"[{section}]\n" + "".join(f"{k} = {v}\n" for k, v in keys.items()) + "\n")


def comparable(name, values, d_model):
    """The weights whose training is determined: the key bias (the middle third of c_attn.bias) has
    a true gradient of exactly zero (softmax ignores a shift shared by all keys of a row), so
    AdamW turns its rounding noise into ±lr steps in any implementation, one rank included."""
    if name.endswith("attn.c_attn.bias"):
        return np.concatenate([values[:d_model], values[2 * d_model:]])
    return values


def run(cmd, cwd, expect=0):
    done = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=900)
    if done.returncode != expect:
        sys.exit(f"FAIL: {' '.join(cmd)} exited {done.returncode}, expected {expect}\n{done.stdout}\n{done.stderr}")
    return done.stdout


def launch(args, layout):
    """mpiexec -n <dp·tp·pp> meshtrain train --parallel.dp … for a layout like 'dp=2,tp=2,schedule=gpipe'."""
    world, flags = 1, []
    for item in filter(None, layout.split(",")):
        key, _, value = item.partition("=")
        if key in ("dp", "tp", "pp"):
            world *= int(value)
        flags += [f"--{key}" if "." in key else f"--parallel.{key}", value]
    return args.mpiexec.split() + ["-n", str(world), args.meshtrain, "train"], flags


def train(args, work, name, layout, common):
    out = os.path.join(work, name)
    os.makedirs(out)
    files = ["--checkpoint.dir", os.path.join(out, "ckpt"), "--log.metrics", os.path.join(out, "metrics.jsonl")]
    stdout = ""
    parts = layout.split("/")
    for k, part in enumerate(parts):
        cmd, flags = launch(args, part)
        if len(parts) == 1:
            stdout += run(cmd + common + flags + files, out)
        elif k == 0:  # leave half-way with a checkpoint (the requeue exit code)
            stdout += run(cmd + common + flags + files + ["--train.stop_after", str(args.steps // 2)], out, expect=3)
        else:
            stdout += run(cmd + common + flags + files + ["--checkpoint.resume", "auto"], out)
    with open(os.path.join(out, "metrics.jsonl")) as f:
        metrics = [json.loads(line) for line in f]
    ckpt = os.path.join(out, "ckpt", open(os.path.join(out, "ckpt", "latest")).read().strip())
    with h5py.File(ckpt, "r") as f:
        weights = {k: f["model"][k][...] for k in f["model"]}
    return metrics, weights, stdout


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--meshtrain", required=True)
    ap.add_argument("--mpiexec", default="mpiexec")
    ap.add_argument("--workdir", required=True)
    ap.add_argument("--layout", action="append", required=True, help="e.g. dp=2 or dp=2,tp=2,pp=2")
    ap.add_argument("--set", action="append", default=[], metavar="SECTION.KEY=VALUE")
    ap.add_argument("--rtol", type=float, default=1e-5)
    # 1 % of one step of lr 3e-3: AdamW divides by sqrt(v), so elements with tiny gradients move a
    # whole step on rounding-level differences of the gradient; the bulk agrees to ~1e-6.
    ap.add_argument("--wtol", type=float, default=3e-5)
    ap.add_argument("--reference", default="", help="the layout to compare with (default: one rank)")
    ap.add_argument("--exact", action="store_true", help="require bitwise equality")
    args = ap.parse_args()
    if args.exact:
        args.rtol = args.wtol = 0.0

    cfg = {section: dict(keys) for section, keys in BASE.items()}
    gpt2_torch.apply_sets(cfg, args.set)

    work = os.path.abspath(args.workdir)
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    ini, shard, init = (os.path.join(work, n) for n in ("cfg.ini", "shard.bin", "init.h5"))
    m = cfg["model"]
    gpt2_torch.write_shard(shard, np.random.default_rng(5).integers(0, m["vocab"], size=m["seq_len"] * 97 + 3))
    model = gpt2_torch.build_model({"model": m})
    gpt2_torch.random_init(model, seed=3, std=0.1)
    gpt2_torch.save_weights(model, init)
    write_ini(ini, cfg)
    args.steps = int(cfg["train"]["steps"])
    common = ["--config", ini, "--data.train", shard, "--checkpoint.init_weights", init,
              "--checkpoint.resume", "never"]

    ref_metrics, ref_weights, _ = train(args, work, "reference", args.reference, common)
    failures = []
    for layout in args.layout:
        name = layout.replace(",", "_").replace("=", "").replace("/", "_then_")
        metrics, weights, stdout = train(args, work, name, layout, common)
        print(f"layout {layout}:")
        for r, q in zip(ref_metrics, metrics):
            rel_loss = abs(q["loss"] - r["loss"]) / abs(r["loss"])
            rel_norm = abs(q["grad_norm"] - r["grad_norm"]) / abs(r["grad_norm"])
            print(f"  step {r['step']}: loss {r['loss']:.8f} vs {q['loss']:.8f} ({rel_loss:.1e}), "
                  f"grad norm {r['grad_norm']:.6f} vs {q['grad_norm']:.6f} ({rel_norm:.1e})")
            if rel_loss > args.rtol or rel_norm > 10 * args.rtol:  # both 0 under --exact
                failures.append(f"{layout} step {r['step']}: loss {q['loss']} vs {r['loss']}, "
                                f"grad norm {q['grad_norm']} vs {r['grad_norm']}")
        if len(metrics) != len(ref_metrics):
            failures.append(f"{layout}: {len(metrics)} steps, the reference {len(ref_metrics)}")
        C = m["d_model"]
        if set(weights) != set(ref_weights):
            failures.append(f"{layout}: tensors {sorted(set(weights) ^ set(ref_weights))} are not in both")
            continue
        if args.exact:
            differ = [k for k in ref_weights if weights[k].tobytes() != ref_weights[k].tobytes()]
            print(f"  final weights: {len(differ)} of {len(ref_weights)} tensors differ")
            if differ:
                failures.append(f"{layout}: final weights of {', '.join(differ[:5])} … are not bitwise equal")
            continue
        worst = max(float(np.max(np.abs(comparable(k, weights[k], C) - comparable(k, ref_weights[k], C))))
                    for k in ref_weights)
        print(f"  final weights: max |difference| {worst:.2e}")
        if worst > args.wtol:
            failures.append(f"{layout}: final weights differ by {worst:.2e}")
    if failures:
        print("FAIL:\n  " + "\n  ".join(failures))
        return 1
    print(f"OK: {', '.join(args.layout)} train as {args.reference or 'one rank'} does"
          f"{' (bitwise)' if args.exact else ''}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
