#!/usr/bin/python3
"""End-to-end oracle check (ctest labels: oracle): meshtrain's training vs. the PyTorch reference.

Writes a random token shard (odd vocab 67, 1133 tokens = 47 windows, so the order wraps) and
random init weights for a shape the other tests do not use (--arch gpt2: layers 2, heads 3,
d_model 36; --arch llama: layers 2, heads 4, kv_heads 2, d_model 40, SwiGLU width 52; --arch moe:
that llama with a mixture of experts in both blocks, 5 experts of width 24, k 2, capacity 1.25
(an expert keeps 24 of a micro-batch's 96 assignments), one shared expert, aux_loss_coef 0.05,
z_loss_coef 0.01; all seq_len 24, micro_batch 2, global_batch 6 -> accum 3, 10 steps, warmup 3,
lr 1e-3, min_lr 1e-4, weight_decay 0.1), runs `meshtrain train` on them, runs the float64
reference (gpt2_torch.train, whose objective adds the aux and z terms) from the same float32
weights and data, and compares per step:
loss (the cross-entropy; --rtol, default 1e-4), lr (1e-9 relative), grad_norm (1e-3 relative),
that the cumulative `tokens` is step * global_batch * seq_len, and under MoE the metrics' `moe`
object (share/docs/usage.md, Mixture of experts): aux_loss and z_loss (1e-4 relative; Σ over the
blocks of the step's mean per micro-batch) and dropped (the fraction of assignments, 1e-9).
Init: matrices/embeddings normal(0, 0.1) (larger than GPT-2's 0.02 so that the loss depends
visibly on the weights: with 0.02 it sits within 1e-6 of ln 67 and a wrong attention scale or a
missing causal mask passes), biases normal(0, 0.1), norm weights 1 + normal(0, 0.1).
Cases: cosine (cosine decay, grad_clip 1.2: 5 of the 10 steps clip; leaving clipping out shows
by step 5 in both loss and grad_norm) and constant (constant lr, grad_clip 0).
Exit 0 on agreement, 1 on any mismatch or failed run.

usage: /usr/bin/python3 compare_training.py --meshtrain build/bin/meshtrain --workdir DIR
       [--arch gpt2|llama|moe] [--case cosine|constant] [--rtol 1e-4] [--set SECTION.KEY=VALUE ...] [--launcher "mpiexec -n 4"]
--set changes the case's config (other shapes: --set model.vocab=101 --set model.d_model=60);
--launcher starts meshtrain under it (parallel layouts give the single-rank answer too).
"""
import argparse
import json
import math
import os
import shutil
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gpt2_torch  # noqa: E402

SHAPES = {
    "gpt2": {"layers": 2, "heads": 3, "d_model": 36, "vocab": 67, "seq_len": 24},
    "llama": {"arch": "llama", "layers": 2, "heads": 4, "kv_heads": 2, "d_model": 40, "ffn_hidden": 52,
              "vocab": 67, "seq_len": 24},
}
SHAPES["moe"] = {**SHAPES["llama"], "experts": 5, "experts_per_token": 2, "expert_hidden": 24, "shared_experts": 1,
                 "capacity_factor": 1.25, "aux_loss_coef": 0.05, "z_loss_coef": 0.01}
# metrics file's moe object key -> (gpt2_torch.train's history key, relative tolerance; dropped: absolute)
MOE_METRICS = {"aux_loss": ("moe_aux", 1e-4), "z_loss": ("moe_z", 1e-4), "dropped": ("moe_dropped", 1e-9)}
CASES = {
    "cosine": {"decay": "cosine", "grad_clip": 1.2},
    "constant": {"decay": "constant", "grad_clip": 0.0},
}


def make_config(arch, case):
    return {
        "model": dict(SHAPES[arch]),
        "train": {"micro_batch": 2, "global_batch": 6, "steps": 10, "seed": 4242, "precision": "fp32"},
        "optim": {"lr": 1e-3, "min_lr": 1e-4, "warmup_steps": 3, "decay": CASES[case]["decay"],
                  "weight_decay": 0.1, "beta1": 0.9, "beta2": 0.95, "eps": 1e-8,
                  "grad_clip": CASES[case]["grad_clip"]},
        "data": {"order": "sequential"},
    }


def rel(a, b):
    return abs(a - b) / max(abs(b), 1e-12)


def is_number(value):
    return isinstance(value, (int, float)) and math.isfinite(value)


def moe_failures(step, row, ref):
    """The differences of a metrics line's `moe` object from the reference's step (0-based)."""
    moe = row.get("moe")
    if not isinstance(moe, dict):
        return [f"step {step + 1}: the metrics line has no moe object"]
    out = []
    for key, (ref_key, tol) in MOE_METRICS.items():
        value, want = moe.get(key), ref[ref_key][step]
        if not is_number(value):
            off = math.inf
        else:
            off = abs(value - want) if key == "dropped" else rel(value, want)
        if off > tol:
            out.append(f"step {step + 1}: moe.{key} meshtrain {value} vs torch {want:.10g} (tolerance {tol})")
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--meshtrain", required=True, help="path of the meshtrain binary")
    ap.add_argument("--workdir", required=True, help="scratch directory (recreated)")
    ap.add_argument("--arch", choices=sorted(SHAPES), default="gpt2", help="model family (moe: llama with experts)")
    ap.add_argument("--case", choices=sorted(CASES), default="cosine")
    ap.add_argument("--rtol", type=float, default=1e-4, help="relative tolerance of the loss")
    ap.add_argument("--set", action="append", default=[], metavar="SECTION.KEY=VALUE",
                    help="override a key of the case's config (repeatable)")
    ap.add_argument("--launcher", default="", help='command to start meshtrain with, e.g. "mpiexec -n 4"')
    args = ap.parse_args()

    cfg = make_config(args.arch, args.case)
    try:
        gpt2_torch.apply_sets(cfg, args.set)
    except ValueError as e:
        ap.error(str(e))
    m, t = cfg["model"], cfg["train"]
    work = os.path.abspath(args.workdir)
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    ini, shard, init = (os.path.join(work, n) for n in ("cfg.ini", "shard.bin", "init.h5"))
    metrics = os.path.join(work, "metrics.jsonl")

    # (a) data and init weights: enough tokens for 10 steps x 6 windows, plus a wrap-around.
    rng = np.random.default_rng(20240520)
    gpt2_torch.write_shard(shard, rng.integers(0, m["vocab"], size=m["seq_len"] * 47 + 5))
    model = gpt2_torch.build_model(cfg)
    gpt2_torch.random_init(model, seed=7, std=0.1)
    gpt2_torch.save_weights(model, init)                      # float32, as a checkpoint holds it
    gpt2_torch.write_config(ini, cfg)

    # (b) meshtrain
    cmd = args.launcher.split() + [args.meshtrain, "train", "--config", ini, "--data.train", shard,
           "--checkpoint.init_weights", init, "--checkpoint.dir", os.path.join(work, "ckpt"),
           "--checkpoint.every", "0", "--checkpoint.resume", "never", "--log.metrics", metrics]
    if not gpt2_torch.run_meshtrain(cmd):
        return 1
    try:
        rows = [json.loads(line) for line in open(metrics) if line.strip()]
        got = {r["step"]: r for r in rows}
    except (OSError, ValueError, KeyError) as e:
        print(f"FAIL: cannot read the metrics file {metrics}: {e}")
        return 1

    # (c) the float64 reference from the same (float32) weights and data
    gpt2_torch.load_weights(model, init)
    ref = gpt2_torch.train(model, gpt2_torch.read_tokens(shard), cfg)

    tol = {"loss": args.rtol, "lr": 1e-9, "grad_norm": 1e-3}
    failures = []
    print(f"\n{args.arch}, case {args.case}: tolerances {tol}")
    print(f"{'step':>4} {'loss meshtrain':>15} {'loss torch':>15} {'lr meshtrain':>13} {'lr torch':>13}"
          f" {'gnorm meshtrain':>15} {'gnorm torch':>15}")
    for s in range(t["steps"]):
        r = got.get(s + 1)
        if r is None:
            failures.append(f"step {s + 1}: missing from {metrics}")
            continue
        print(f"{s + 1:4d} {r.get('loss', math.nan):15.8f} {ref['loss'][s]:15.8f} {r.get('lr', math.nan):13.6e}"
              f" {ref['lr'][s]:13.6e} {r.get('grad_norm', math.nan):15.8f} {ref['grad_norm'][s]:15.8f}")
        for key in tol:
            value = r.get(key)
            if not is_number(value) or rel(value, ref[key][s]) > tol[key]:
                failures.append(f"step {s + 1}: {key} meshtrain {value} vs torch {ref[key][s]:.10g}"
                                f" (relative tolerance {tol[key]})")
        if "moe_aux" in ref:
            moe = r.get("moe") if isinstance(r.get("moe"), dict) else {}
            print(f"{'':4} moe aux {moe.get('aux_loss', math.nan):12.8f} vs {ref['moe_aux'][s]:12.8f}"
                  f"  z {moe.get('z_loss', math.nan):12.8f} vs {ref['moe_z'][s]:12.8f}"
                  f"  dropped {moe.get('dropped', math.nan):.6f} vs {ref['moe_dropped'][s]:.6f}")
            failures += moe_failures(s, r, ref)
        if r.get("tokens") != (s + 1) * t["global_batch"] * m["seq_len"]:
            failures.append(f"step {s + 1}: tokens {r.get('tokens')}, expected {(s + 1) * t['global_batch'] * m['seq_len']}")
    clip = cfg["optim"]["grad_clip"]
    clipped = sum(n > clip for n in ref["grad_norm"]) if clip > 0 else 0
    print(f"\nsteps clipped (grad_norm > {clip}): {clipped} of {t['steps']}")
    if failures:
        print("FAIL: meshtrain's training differs from the PyTorch reference:\n  " + "\n  ".join(failures))
        return 1
    print(f"OK: {t['steps']} steps of meshtrain match the PyTorch reference ({args.arch}, {args.case})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
