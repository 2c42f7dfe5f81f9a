#!/usr/bin/python3
"""A refactoring's check: two builds of meshtrain train the same runs bit for bit.

Runs every layout below with BASE (a meshtrain binary built from the commit before the change) and
NEW (the changed one) on the same data, config and seed, and compares, bitwise, every step's loss,
grad norm, lr, tokens and loss scale in the metrics file and every dataset of /model and /optim in
the final checkpoint. Then NEW resumes BASE's half-way checkpoint (a checkpoint written before the
change must resume after it) and must end where BASE ends.

Losses depend on the BLAS kernels the CPU picks, so the reference is built on the same machine in
the same session (a worktree at the old commit), never stored.

The layouts cover both families (gpt2; llama with multi-head, grouped-query attention and mixture of
experts under expert parallelism), every parallelism, ZeRO 0-3, recomputation and the 16-bit
precisions. --list prints their names; --only runs some of them.

usage: bitwise_against.py --base OLD_BIN --new NEW_BIN [--mpiexec mpiexec] [--workdir DIR] [--only NAME ...]
       bitwise_against.py --list
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile

import h5py
import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests", "oracle"))
import gpt2_torch  # noqa: E402  (the token shard writer)

MODEL = {"layers": 4, "heads": 4, "d_model": 32, "vocab": 71, "seq_len": 16}
TRAIN = {"micro_batch": 2, "global_batch": 8, "steps": 6, "seed": 7}

# The llama family: multi-head (LLAMA), grouped-query attention with 4 query heads over 2 kv heads
# (GQA; under tp 2 each rank holds one kv head) and mixture of experts on GQA's shape (MOE: 4 experts
# of width 20, top-2, capacity 1.25 so some assignments drop, one shared expert, z-loss), as
# tests/parallel/CMakeLists.txt trains them; SwiGLU width 44.
LLAMA = {"model.arch": "llama", "model.ffn_hidden": 44}
GQA = {**LLAMA, "model.kv_heads": 2}
MOE = {**GQA, "model.experts": 4, "model.expert_hidden": 20, "model.capacity_factor": 1.25,
       "model.shared_experts": 1, "model.z_loss_coef": 0.01}

# name: (ranks, extra keys). World sizes up to 8; accumulation 2 at dp 2 (8 / (2 · 2)).
LAYOUTS = {
    "one_fp32": (1, {}),
    "one_bf16": (1, {"train.precision": "bf16"}),
    "one_fp16": (1, {"train.precision": "fp16"}),
    "dp2_z0": (2, {"parallel.dp": 2}),
    "dp2_z1": (2, {"parallel.dp": 2, "parallel.zero": 1}),
    "dp2_z2": (2, {"parallel.dp": 2, "parallel.zero": 2}),
    "dp2_z3": (2, {"parallel.dp": 2, "parallel.zero": 3}),
    "dp4_z3": (4, {"parallel.dp": 4, "parallel.zero": 3}),
    "dp2_z3_bf16": (2, {"parallel.dp": 2, "parallel.zero": 3, "train.precision": "bf16"}),
    "dp2_z2_fp16": (2, {"parallel.dp": 2, "parallel.zero": 2, "train.precision": "fp16"}),
    "dp2_z1_bf16": (2, {"parallel.dp": 2, "parallel.zero": 1, "train.precision": "bf16"}),
    "tp2": (2, {"parallel.tp": 2}),
    "tp2_bf16": (2, {"parallel.tp": 2, "train.precision": "bf16"}),
    "pp2_1f1b": (2, {"parallel.pp": 2}),
    "pp2_gpipe_z1": (4, {"parallel.pp": 2, "parallel.dp": 2, "parallel.zero": 1, "parallel.schedule": "gpipe"}),
    "dp2_pp2_z3_bf16": (4, {"parallel.pp": 2, "parallel.dp": 2, "parallel.zero": 3, "train.precision": "bf16"}),
    "dp2_tp2_pp2_z2": (8, {"parallel.pp": 2, "parallel.dp": 2, "parallel.tp": 2, "parallel.zero": 2}),
    "dp2_z3_full": (2, {"parallel.dp": 2, "parallel.zero": 3, "train.recompute": "full"}),
    "tp2_selective": (2, {"parallel.tp": 2, "train.recompute": "selective"}),
    "llama_one": (1, LLAMA),
    "llama_dp2_z2": (2, {**LLAMA, "parallel.dp": 2, "parallel.zero": 2}),
    "gqa_one": (1, GQA),
    "gqa_tp2": (2, {**GQA, "parallel.tp": 2}),
    "gqa_pp2_gpipe": (2, {**GQA, "parallel.pp": 2, "parallel.schedule": "gpipe"}),
    "gqa_dp2_tp2_z3": (4, {**GQA, "parallel.dp": 2, "parallel.tp": 2, "parallel.zero": 3}),
    "gqa_tp2_pp2_full": (4, {**GQA, "parallel.tp": 2, "parallel.pp": 2, "train.recompute": "full"}),
    "gqa_bf16": (1, {**GQA, "train.precision": "bf16"}),
    "gqa_fp16": (1, {**GQA, "train.precision": "fp16"}),
    "gqa_dp2_z1_bf16": (2, {**GQA, "parallel.dp": 2, "parallel.zero": 1, "train.precision": "bf16"}),
    "gqa_tp2_pp2_bf16": (4, {**GQA, "parallel.tp": 2, "parallel.pp": 2, "train.precision": "bf16"}),
    "moe_one": (1, MOE),
    "moe_ep2": (2, {**MOE, "parallel.dp": 2, "parallel.ep": 2}),
    "moe_ep2_z3": (2, {**MOE, "parallel.dp": 2, "parallel.ep": 2, "parallel.zero": 3}),
    "moe_ep2_tp2_z1": (4, {**MOE, "parallel.dp": 2, "parallel.ep": 2, "parallel.tp": 2, "parallel.zero": 1}),
    "moe_ep2_pp2_z2": (4, {**MOE, "parallel.dp": 2, "parallel.ep": 2, "parallel.pp": 2, "parallel.zero": 2}),
    "moe_dp4_ep2_selective": (4, {**MOE, "parallel.dp": 4, "parallel.ep": 2, "train.recompute": "selective"}),
    "moe_ep2_bf16": (2, {**MOE, "parallel.dp": 2, "parallel.ep": 2, "train.precision": "bf16"}),
    "moe_ep2_tp2_z2_bf16": (4, {**MOE, "parallel.dp": 2, "parallel.ep": 2, "parallel.tp": 2, "parallel.zero": 2,
                                "train.precision": "bf16"}),
}
COMPARED = ("step", "loss", "lr", "grad_norm", "tokens", "loss_scale", "skipped")


def run(cmd):
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    if done.returncode not in (0, 3):
        sys.exit(f"{' '.join(cmd)} exited {done.returncode}\n{done.stdout}\n{done.stderr}")


def train(binary, args, ranks, extra, out, steps=None, resume_from=None):
    flags = []
    for key, value in {**extra, **({"train.steps": steps} if steps else {})}.items():
        flags += [f"--{key}", str(value)]
    ckpt = os.path.join(out, "ckpt")
    if resume_from:
        shutil.copytree(resume_from, ckpt)
    launcher = args.mpiexec.split() + ["-n", str(ranks)]
    run(launcher + [binary, "train", "--config", args.ini, "--checkpoint.dir", ckpt, "--log.metrics",
                    os.path.join(out, "metrics.jsonl")] + flags)


def metric_lines(out):
    with open(os.path.join(out, "metrics.jsonl")) as f:
        return [{k: r[k] for k in COMPARED if k in r} for r in map(json.loads, f)]


def final_checkpoint(out):
    ckpt = os.path.join(out, "ckpt")
    return os.path.join(ckpt, sorted(n for n in os.listdir(ckpt) if n.endswith(".h5"))[-1])


def datasets(path):
    found = {}
    with h5py.File(path, "r") as f:
        f.visititems(lambda name, obj: found.__setitem__(name, obj[()]) if isinstance(obj, h5py.Dataset) else None)
    return found


def differences(a_out, b_out):
    why = []
    a, b = metric_lines(a_out), metric_lines(b_out)
    if a != b:
        first = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
        why.append(f"metrics differ from step {first + 1}: {a[first:first + 1]} vs {b[first:first + 1]}")
    da, db = datasets(final_checkpoint(a_out)), datasets(final_checkpoint(b_out))
    if sorted(da) != sorted(db):
        why.append(f"datasets differ: {sorted(set(da) ^ set(db))}")
    changed = [n for n in sorted(set(da) & set(db)) if da[n].tobytes() != db[n].tobytes()]
    if changed:
        why.append(f"{len(changed)} datasets differ ({', '.join(changed[:3])}{', ...' if len(changed) > 3 else ''})")
    return why


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--base")
    ap.add_argument("--new")
    ap.add_argument("--mpiexec", default="mpiexec")
    ap.add_argument("--workdir")
    ap.add_argument("--only", nargs="*")
    ap.add_argument("--list", action="store_true", help="print each layout's name, ranks and keys and leave")
    args = ap.parse_args()
    if args.list:
        for name, (ranks, extra) in LAYOUTS.items():
            print(f"{name:22s} {ranks}  {' '.join(f'{k}={v}' for k, v in extra.items())}")
        return 0
    if not args.base or not args.new:
        ap.error("--base and --new are required")
    unknown = sorted(set(args.only or ()) - set(LAYOUTS))
    if unknown:
        ap.error(f"no layout named {', '.join(unknown)} (--list names them)")
    work = args.workdir or tempfile.mkdtemp(prefix="bitwise_")
    os.makedirs(work, exist_ok=True)
    rng = np.random.default_rng(11)
    shard = os.path.join(work, "shard.bin")
    gpt2_torch.write_shard(shard, rng.integers(0, MODEL["vocab"], size=MODEL["seq_len"] * 53 + 5))
    args.ini = os.path.join(work, "cfg.ini")
    with open(args.ini, "w") as f:
        f.write("[model]\n" + "".join(f"{k} = {v}\n" for k, v in MODEL.items()))
        f.write("[train]\n" + "".join(f"{k} = {v}\n" for k, v in TRAIN.items()))
        f.write("[optim]\nlr = 0.003\nwarmup_steps = 2\nweight_decay = 0.1\ngrad_clip = 1.0\n")
        f.write(f"[data]\ntrain = {shard}\norder = shuffle\n[checkpoint]\nevery = 3\nkeep = 4\n[log]\nevery = 1\n")
    failed = []
    for name, (ranks, extra) in LAYOUTS.items():
        if args.only and name not in args.only:
            continue
        outs = {}
        for which in ("base", "new"):
            outs[which] = os.path.join(work, name, which)
            shutil.rmtree(outs[which], ignore_errors=True)
            os.makedirs(outs[which])
            train(getattr(args, which), args, ranks, extra, outs[which])
        why = differences(outs["base"], outs["new"])
        # The new build resumes the old build's step-3 checkpoint and must end where the old one did.
        resumed = os.path.join(work, name, "resumed")
        shutil.rmtree(resumed, ignore_errors=True)
        os.makedirs(resumed)
        half = os.path.join(work, name, "half")
        shutil.rmtree(half, ignore_errors=True)
        os.makedirs(half)
        train(args.base, args, ranks, extra, half, steps=3)
        train(args.new, args, ranks, extra, resumed, resume_from=os.path.join(half, "ckpt"))
        da, db = datasets(final_checkpoint(outs["base"])), datasets(final_checkpoint(resumed))
        changed = [n for n in sorted(da) if n not in db or da[n].tobytes() != db[n].tobytes()]
        if changed:
            why.append(f"resumed: {len(changed)} datasets differ ({', '.join(changed[:3])})")
        print(f"{name:22s} {'bitwise' if not why else 'DIFFERS: ' + '; '.join(why)}", flush=True)
        if why:
            failed.append(name)
    print(f"{len(failed)} of {len(LAYOUTS) if not args.only else len(args.only)} layouts differ: {failed}" if failed
          else "every layout is bitwise the base build's")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
