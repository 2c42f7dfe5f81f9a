#!/usr/bin/python3
"""Parallel layouts against one rank: the same training, whatever the layout.

For each layout asked for, runs `meshtrain train` under `mpiexec -n <world>` from the same init
weights and data as a single-rank run, and checks that every step's loss and grad norm agree to
--rtol (fp32: the sums run in another order, so not bitwise) and that the final checkpoints'
weights agree to --wtol.

A layout written A/B trains the first --stop-at steps (default half of train.steps) under A,
leaves (train.stop_after, exit 3) and resumes from A's checkpoint under B to the end: checkpoints
are layout-free, so the run is the same. Layouts that share their A part share its first half: it
is trained once and its checkpoint directory (and metrics so far) copied for each resume.
A resume under the same layout it left (A/A: the same items, in any order) must moreover be
bitwise the run of A that never left: every step's loss, grad norm, lr and tokens, and the final
checkpoint's /model and /optim (exact resumption, share/docs/usage.md, Checkpoints). That uninterrupted run is
trained once too, and shared with a --layout A or --reference A given as well.
An item SECTION.KEY=VALUE of a layout sets that key for it (e.g. tp=2,train.recompute=full).
Both model families train here: --set model.arch=llama starts every layout from random weights of
the PyTorch oracle's Llama (tests/oracle/llama_torch.py) instead of GPT-2's.

With --reference LAYOUT the runs are compared with that layout's instead of one rank's; with
--exact every loss, grad norm and final weight must be bitwise equal (for runs that compute the
same sums in the same order, such as activation recomputation against none).

usage: test_equivalence.py --meshtrain BIN --mpiexec MPIEXEC --workdir DIR --layout dp=2 [--layout dp=2,tp=2 ...]
       [--layout tp=2/dp=2 ...] [--set SECTION.KEY=VALUE ...] [--steps N] [--stop-at K]
       [--rtol 1e-5] [--wtol 3e-5] [--reference LAYOUT] [--exact]
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import time

import h5py
import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "oracle"))
import gpt2_torch  # noqa: E402

BASE = {
    "model": {"layers": 4, "heads": 4, "d_model": 32, "vocab": 71, "seq_len": 16},
    "train": {"micro_batch": 2, "global_batch": 8, "steps": 5, "seed": 99},
    "optim": {"lr": 3e-3, "min_lr": 3e-4, "warmup_steps": 2, "decay": "cosine", "weight_decay": 0.1,
              "grad_clip": 1.0},
    "data": {"order": "shuffle"},
}
LEFT_EARLY = 3  # meshtrain's exit code after train.stop_after: checkpoint saved, requeue


class RunFailed(Exception):
    pass


def run(cmd, cwd, expect=0):
    start = time.monotonic()
    done = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=900)
    print(f"  [{time.monotonic() - start:5.1f} s] {os.path.basename(cwd)}", flush=True)
    if done.returncode != expect:
        lines = done.stderr.strip().splitlines() or [""]
        why = next((line for line in reversed(lines) if line.startswith("meshtrain")), lines[-1])
        raise RunFailed(f"{os.path.basename(cwd)} exited {done.returncode}, expected {expect}: {why}\n"
                        f"{' '.join(cmd)}\n{done.stdout}\n{done.stderr}")
    return done.stdout


def items(part):
    """'dp=2,train.recompute=full' -> [('parallel.dp', '2'), ('train.recompute', 'full')]."""
    out = []
    for item in filter(None, part.split(",")):
        key, eq, value = item.partition("=")
        if not eq or not key or not value:
            sys.exit(f"layout item {item!r}: expected KEY=VALUE (dp=2, schedule=gpipe, train.recompute=full)")
        out.append((key if "." in key else f"parallel.{key}", value))
    return out


def same_layout(a, b):
    return sorted(items(a)) == sorted(items(b))


def launch(args, layout):
    """mpiexec -n <dp·cp·tp·pp> meshtrain train --parallel.dp … for a layout like 'dp=2,tp=2,schedule=gpipe'."""
    world, flags = 1, []
    for key, value in items(layout):
        if key in ("parallel.dp", "parallel.cp", "parallel.tp", "parallel.pp"):
            world *= int(value)
        flags += [f"--{key}", value]
    return args.mpiexec.split() + ["-n", str(world), args.meshtrain, "train"] + flags


def run_name(layout):
    return layout.replace(",", "_").replace("=", "").replace("/", "_then_") or "one_rank"


class Runs:
    """Trains what the comparisons need, each run once: uninterrupted runs by layout, and the first
    --stop-at steps of each A part, copied for every A/B that resumes from it."""

    def __init__(self, args, work, common):
        self.args, self.work, self.common = args, work, common
        self.done = {}  # (kind, sorted items) -> result, or the RunFailed it ended with

    def _once(self, kind, layout, make):
        key = (kind, tuple(sorted(items(layout))))
        if key not in self.done:
            try:
                self.done[key] = make()
            except RunFailed as e:
                self.done[key] = e
        if isinstance(self.done[key], RunFailed):
            raise self.done[key]
        return self.done[key]

    def _cmd(self, part, out):
        return launch(self.args, part) + self.common + [
            "--checkpoint.dir", os.path.join(out, "ckpt"), "--log.metrics", os.path.join(out, "metrics.jsonl")]

    def uninterrupted(self, layout, name=None):
        def make():
            out = os.path.join(self.work, name or run_name(layout))
            os.makedirs(out)
            run(self._cmd(layout, out), out)
            return read_run(out)
        return self._once("full", layout, make)

    def first_part(self, part):
        """The directory of `part`'s run that left after --stop-at steps with a checkpoint."""
        def make():
            out = os.path.join(self.work, f"{run_name(part)}.first{self.args.stop_at}")
            os.makedirs(out)
            run(self._cmd(part, out) + ["--train.stop_after", str(self.args.stop_at)], out, expect=LEFT_EARLY)
            latest = open(os.path.join(out, "ckpt", "latest")).read().strip()
            if latest != f"step_{self.args.stop_at:08d}.h5":
                raise RunFailed(f"{part} left after --stop-at {self.args.stop_at} steps with checkpoint {latest}")
            return out
        return self._once("first", part, make)

    def resumed(self, first, then):
        out = os.path.join(self.work, run_name(f"{first}/{then}"))
        shutil.copytree(self.first_part(first), out)
        run(self._cmd(then, out) + ["--checkpoint.resume", "auto"], out)
        return read_run(out)

    def layout(self, layout):
        parts = layout.split("/")
        if len(parts) == 1:
            return self.uninterrupted(layout)
        return self.resumed(*parts)


def read_run(out):
    """Metrics (one row per step) and the latest checkpoint's /model and /optim of a run directory."""
    with open(os.path.join(out, "metrics.jsonl")) as f:
        metrics = [json.loads(line) for line in f]
    ckpt = os.path.join(out, "ckpt", open(os.path.join(out, "ckpt", "latest")).read().strip())
    with h5py.File(ckpt, "r") as f:
        model = {k: f["model"][k][...] for k in f["model"]}
        optim = {f"{g}/{k}": f["optim"][g][k][...] for g in f["optim"] for k in f["optim"][g]}
    return {"metrics": metrics, "model": model, "optim": optim}


def family(model):
    return model.get("arch", "gpt2")


def write_init_weights(model, path):
    """Random initial weights for the family model.arch names, the one file every layout starts from."""
    reference = gpt2_torch.build_model({"model": model})
    gpt2_torch.random_init(reference, seed=3, std=0.1)
    gpt2_torch.save_weights(reference, path)


def comparable(model):
    """The elements of each trained tensor that training determines (gpt2: gpt2_torch.comparable;
    llama: all but a k_proj bias (model.qkv_bias), whose gradient — exactly zero without rotary, where
    softmax ignores a shift shared by a row's keys — is only what the rotation leaves of it, small
    enough that AdamW turns each layout's rounding into visibly different steps)."""
    if family(model) == "llama":
        return lambda name, values, d_model: values[:0] if name.endswith("self_attn.k_proj.bias") else values
    return gpt2_torch.comparable


def compare_close(layout, got, ref, args, model):
    """Every step's loss (rtol) and grad norm (10 rtol), and the final weights (wtol); bitwise under --exact."""
    failures = []
    for r, q in zip(ref["metrics"], got["metrics"]):
        rel_loss = abs(q["loss"] - r["loss"]) / abs(r["loss"])
        rel_norm = abs(q["grad_norm"] - r["grad_norm"]) / abs(r["grad_norm"])
        print(f"  step {r['step']}: loss {r['loss']:.8f} vs {q['loss']:.8f} ({rel_loss:.1e}), "
              f"grad norm {r['grad_norm']:.6f} vs {q['grad_norm']:.6f} ({rel_norm:.1e})")
        if rel_loss > args.rtol or rel_norm > 10 * args.rtol:  # both 0 under --exact
            failures.append(f"{layout} step {r['step']}: loss {q['loss']} vs {r['loss']}, "
                            f"grad norm {q['grad_norm']} vs {r['grad_norm']}")
    weights, ref_weights = got["model"], ref["model"]
    if set(weights) != set(ref_weights):
        return failures + [f"{layout}: tensors {sorted(set(weights) ^ set(ref_weights))} are not in both"]
    # The stored shapes are the model's whatever the layout (a padded vocabulary is never stored).
    shapes = [f"{k} {weights[k].shape} vs {ref_weights[k].shape}" for k in sorted(ref_weights)
              if weights[k].shape != ref_weights[k].shape]
    if shapes:
        return failures + [f"{layout}: stored shapes differ: {', '.join(shapes)}"]
    if args.exact:
        differ = [k for k in ref_weights if weights[k].tobytes() != ref_weights[k].tobytes()]
        print(f"  final weights: {len(differ)} of {len(ref_weights)} tensors differ")
        if differ:
            failures.append(f"{layout}: final weights of {', '.join(differ[:5])} … are not bitwise equal")
        return failures
    determined, d_model = comparable(model), model["d_model"]
    worst = max(float(np.max(np.abs(determined(k, weights[k], d_model) - determined(k, ref_weights[k], d_model)),
                             initial=0.0))
                for k in ref_weights)
    print(f"  final weights: max |difference| {worst:.2e}")
    if worst > args.wtol:
        failures.append(f"{layout}: final weights differ by {worst:.2e}")
    return failures


def compare_bitwise(layout, got, ref):
    """A resume under the layout that left: the very run that never left, to the bit."""
    failures = []
    for r, q in zip(ref["metrics"], got["metrics"]):
        differ = [k for k in ("loss", "grad_norm", "lr", "tokens") if q.get(k) != r.get(k)]
        if differ:
            failures.append(f"{layout} step {r['step']}: " + ", ".join(
                f"{k} {q.get(k)!r} vs {r.get(k)!r} uninterrupted" for k in differ))
    if len(got["metrics"]) != len(ref["metrics"]):
        failures.append(f"{layout}: {len(got['metrics'])} steps, uninterrupted {len(ref['metrics'])}")
    for group in ("model", "optim"):
        a, b = got[group], ref[group]
        differ = sorted(set(a) ^ set(b)) + [k for k in sorted(set(a) & set(b)) if a[k].tobytes() != b[k].tobytes()]
        print(f"  bitwise against the uninterrupted run: /{group} {len(differ)} of {len(b)} tensors differ")
        if differ:
            failures.append(f"{layout}: final /{group} {', '.join(differ[:5])} … not bitwise the uninterrupted run's")
    return failures


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--meshtrain", required=True)
    ap.add_argument("--mpiexec", default="mpiexec")
    ap.add_argument("--workdir", required=True)
    ap.add_argument("--layout", action="append", required=True,
                    help="e.g. dp=2 or dp=2,tp=2,pp=2; A/B leaves under A and resumes under B")
    ap.add_argument("--set", action="append", default=[], metavar="SECTION.KEY=VALUE")
    ap.add_argument("--steps", type=int, help=f"train.steps (default {BASE['train']['steps']})")
    ap.add_argument("--stop-at", type=int, help="steps an A/B layout trains under A (default half of train.steps)")
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
    try:
        gpt2_torch.apply_sets(cfg, args.set)
    except ValueError as e:
        ap.error(str(e))
    if args.steps is not None:
        if any(s.startswith("train.steps=") for s in args.set):
            ap.error("give the steps once: --steps or --set train.steps=N")
        cfg["train"]["steps"] = args.steps
    steps = int(cfg["train"]["steps"])
    if args.stop_at is None:
        args.stop_at = steps // 2
    for layout in args.layout:
        if layout.count("/") > 1:
            ap.error(f"--layout {layout}: at most one '/' (A/B: leave under A, resume under B)")
        if "/" in layout and not 0 < args.stop_at < steps:
            ap.error(f"--stop-at {args.stop_at}: an A/B layout leaves after 1 to {steps - 1} steps of {steps}")
    if "/" in args.reference:
        ap.error("--reference: one layout, not A/B")

    work = os.path.abspath(args.workdir)
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    ini, shard, init = (os.path.join(work, n) for n in ("cfg.ini", "shard.bin", "init.h5"))
    m = cfg["model"]
    gpt2_torch.write_shard(shard, np.random.default_rng(5).integers(0, m["vocab"], size=m["seq_len"] * 97 + 3))
    write_init_weights(m, init)
    gpt2_torch.write_config(ini, cfg)
    common = ["--config", ini, "--data.train", shard, "--checkpoint.init_weights", init,
              "--checkpoint.resume", "never"]

    runs = Runs(args, work, common)
    try:
        ref = runs.uninterrupted(args.reference, name="reference")
    except RunFailed as e:
        print(f"FAIL: the reference run: {e}")
        return 1
    failures = []
    for layout in args.layout:  # a run that fails is reported with the others' comparisons
        print(f"layout {layout}:")
        try:
            got = runs.layout(layout)
        except RunFailed as e:
            print(f"  FAIL: {e}")
            failures.append(f"{layout}: {str(e).splitlines()[0]}")
            continue
        failures += compare_close(layout, got, ref, args, m)
        got_steps = [r["step"] for r in got["metrics"]]
        if got_steps != list(range(1, steps + 1)):
            failures.append(f"{layout}: metrics of steps {got_steps}, expected 1 to {steps} once each")
        first, _, then = layout.partition("/")
        if then and same_layout(first, then):
            try:
                failures += compare_bitwise(layout, got, runs.uninterrupted(first))
            except RunFailed as e:
                failures.append(f"{layout}: the uninterrupted run of {first}: {e}")
    if failures:
        print("FAIL:\n  " + "\n  ".join(failures))
        return 1
    same = [x for x in args.layout if "/" in x and same_layout(*x.split("/"))]
    print(f"OK: {', '.join(args.layout)} train as {args.reference or 'one rank'} does"
          f"{' (bitwise)' if args.exact else ''}"
          + (f"; {', '.join(same)} bitwise as without leaving" if same else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
