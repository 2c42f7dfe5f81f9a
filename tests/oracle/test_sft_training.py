#!/usr/bin/python3
"""Fine-tuning on packed records (ctest: oracle_sft_training_*) against sft_reference.py and across layouts.

The records (vocab 67, seq_len 24, written here as a fine-tuning shard) mix what packing must get right: a
prompt part without loss and an answer with it, records longer than seq_len (truncated or dropped), records of
one loss-carrying target, records without any, three that fill one window with no loss at all, and one of a
single token (skipped); the micro-batches of a step carry different numbers of loss-carrying targets.

Groups:
  reference  ten steps of gpt2 (data.overlong = truncate) and of a GQA llama (drop) against the float64
             reference run record by record (loss 1e-4, grad_norm 1e-3 relative, lr 1e-9); the reference with
             the other overlong policy must differ, so the check can tell them apart.
  layouts    the same run under accum 4, dp 2 x accum 2, dp 4, tp 3 (also with sequence parallelism, documents
             crossing the ranks' blocks of rows), pp 2 (1F1B and ZB-H1) and dp 2 with ZeRO-3 equals one
             rank's (loss 2e-5, grad_norm 1e-4 relative).
  resume     a shuffled dp 2 run stopped after step 5 and resumed gives bitwise the metrics of the run that
             went through; materialized attention is refused (exit 2, naming model.attention).

usage: /usr/bin/python3 test_sft_training.py --meshtrain BIN --mpiexec MPIEXEC --workdir DIR --group NAME
"""
import argparse
import json
import math
import os
import shutil
import subprocess
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gpt2_torch  # noqa: E402
import sft_reference  # noqa: E402

VOCAB, T = 67, 24
SHAPES = {
    "gpt2": {"layers": 2, "heads": 3, "d_model": 36, "vocab": VOCAB, "seq_len": T},
    "llama": {"arch": "llama", "layers": 2, "heads": 4, "kv_heads": 2, "d_model": 40, "ffn_hidden": 52,
              "vocab": VOCAB, "seq_len": T},
}
# The llama with a mixture of experts in both blocks (4 experts, k 2, capacity 1.25, aux and z losses).
SHAPES["moe"] = {**SHAPES["llama"], "experts": 4, "experts_per_token": 2, "expert_hidden": 24,
                 "capacity_factor": 1.25, "aux_loss_coef": 0.05, "z_loss_coef": 0.01}


def make_records(seed=27):
    rng = np.random.default_rng(seed)
    records = []

    def record(length, prompt, loss=True):
        tokens = [int(t) for t in rng.integers(0, VOCAB, size=length)]
        mask = [0] * prompt + [1 if loss else 0] * (length - prompt)
        return tokens, mask

    for i in range(60):
        length = int(rng.integers(4, 19))
        records.append(record(length, int(rng.integers(1, length))))
        if i == 7:
            records.append(record(40, 5))          # over-long: its loss lies past the cut and before it
        if i == 15:
            records.append(record(9, 8))           # one loss-carrying target
        if i == 21:
            records.append(record(1, 1))           # one token: nothing to predict
        if i == 30:
            records += [record(9, 3, loss=False) for _ in range(3)]  # a window of 24 positions without loss
        if i == 44:
            records.append(record(31, 2))          # over-long
            records.append(record(25, 20))         # exactly seq_len positions
    return records


def config(arch, overlong="truncate"):
    return {
        "model": dict(SHAPES[arch]),
        "train": {"micro_batch": 1, "global_batch": 4, "steps": 10, "seed": 4242, "precision": "fp32"},
        "optim": {"lr": 1e-3, "min_lr": 1e-4, "warmup_steps": 3, "decay": "cosine", "weight_decay": 0.1,
                  "beta1": 0.9, "beta2": 0.95, "eps": 1e-8, "grad_clip": 1.0},
        "data": {"order": "sequential", "overlong": overlong},
    }


class Runner:
    def __init__(self, args, arch, overlong="truncate"):
        self.args = args
        self.work = os.path.join(os.path.abspath(args.workdir), f"{args.group}_{arch}")
        shutil.rmtree(self.work, ignore_errors=True)
        os.makedirs(self.work)
        self.cfg = config(arch, overlong)
        self.records = make_records()
        self.shard = os.path.join(self.work, "sft.bin")
        sft_reference.write_sft_shard(self.shard, self.records)
        self.model = gpt2_torch.build_model(self.cfg)
        gpt2_torch.random_init(self.model, seed=7, std=0.1)
        self.init = os.path.join(self.work, "init.h5")
        gpt2_torch.save_weights(self.model, self.init)
        self.ini = os.path.join(self.work, "cfg.ini")
        gpt2_torch.write_config(self.ini, self.cfg)
        # Held-out data of both kinds: records, and a token stream of 7 windows.
        self.valid_records = make_records(seed=28)[:25]
        self.valid_records_path = os.path.join(self.work, "valid_sft.bin")
        sft_reference.write_sft_shard(self.valid_records_path, self.valid_records)
        self.valid_tokens = np.random.default_rng(29).integers(0, VOCAB, size=7 * T + 1)
        self.valid_tokens_path = os.path.join(self.work, "valid_tokens.bin")
        gpt2_torch.write_shard(self.valid_tokens_path, self.valid_tokens)

    def run(self, name, ranks=1, keys=(), expected=0, resume="never"):
        """meshtrain train on `ranks` ranks with extra keys; its metrics rows by step (None on failure)."""
        metrics = os.path.join(self.work, f"{name}.jsonl")
        launch = [self.args.mpiexec, "-n", str(ranks)] if ranks > 1 else []
        cmd = launch + [self.args.meshtrain, "train", "--config", self.ini, "--data.train", self.shard,
                        "--checkpoint.init_weights", self.init, "--checkpoint.dir", os.path.join(self.work, name),
                        "--checkpoint.every", "0", "--checkpoint.resume", resume, "--log.metrics", metrics]
        for key, value in keys:
            cmd += [f"--{key}", str(value)]
        print("running:", " ".join(cmd), flush=True)
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
        if p.returncode != expected:
            print(f"FAIL: exit {p.returncode}, expected {expected}\n--- stdout\n{p.stdout}\n--- stderr\n{p.stderr}")
            return None
        self.last = p
        if expected != 0 and expected != 3:
            return {}
        return {r["step"]: r for r in (json.loads(line) for line in open(metrics) if line.strip())}


def verdict(failures, success):
    """The group's exit status, printing its failures or `success`."""
    if failures:
        print("FAIL:\n  " + "\n  ".join(failures))
        return 1
    print("OK: " + success)
    return 0


def rel(a, b):
    return abs(a - b) / max(abs(b), 1e-12)


def compare(got, want, tol, label):
    """Failures of metrics rows `got` against per-step lists `want` (keys of tol)."""
    failures = []
    for s in range(len(want["loss"])):
        row = got.get(s + 1, {})
        for key, t in tol.items():
            value = row.get(key)
            if not isinstance(value, (int, float)) or not math.isfinite(value) or rel(value, want[key][s]) > t:
                failures.append(f"{label}: step {s + 1} {key} {value} vs {want[key][s]:.10g} (rtol {t})")
    return failures


def compare_validation(got, want, tol, label):
    failures = []
    for step, value in want.items():
        row = got.get(step, {})
        if "val_loss" not in row or rel(row["val_loss"], value) > tol:
            failures.append(f"{label}: step {step} val_loss {row.get('val_loss')} vs {value:.10g} (rtol {tol})")
    unexpected = sorted(s for s, row in got.items() if "val_loss" in row and s not in want)
    if unexpected:
        failures.append(f"{label}: validation after steps {unexpected}, expected only after {sorted(want)}")
    return failures


def windows_by_loss_targets(records, overlong):
    """The first epoch's windows' loss-carrying targets, as the reference packs them."""
    return [sum(sum(records[r][1][1:p + 1]) for r, p in window)
            for window in sft_reference.pack_epoch(records, T, overlong)]


def group_reference(args):
    failures = []
    for overlong in ("truncate", "drop"):
        # The mask patterns the check is for must be in the steps it runs (10 steps of 4 samples).
        counts = windows_by_loss_targets(make_records(), overlong)[:40]
        if 0 not in counts or 1 not in counts:
            failures.append(f"{overlong}: the records pack into no window without loss or with one target: {counts}")
    for arch, overlong, other in (("gpt2", "truncate", "drop"), ("llama", "drop", "truncate")):
        r = Runner(args, arch, overlong)
        if arch == "gpt2":
            valid, valid_path, keys, windows = r.valid_records, r.valid_records_path, [], None
        else:
            valid, valid_path, keys, windows = r.valid_tokens, r.valid_tokens_path, [("train.eval_tokens", 5 * T - 3)], 5
        got = r.run("one_rank", keys=[("data.valid", valid_path), ("train.eval_every", 5)] + keys)
        if got is None:
            return 1
        gpt2_torch.load_weights(r.model, r.init)
        want = sft_reference.train(r.model, r.records, r.cfg, overlong, valid=valid, eval_every=5,
                                   eval_windows=windows)
        print(f"validation: meshtrain {[got.get(s, {}).get('val_loss') for s in (5, 10)]}, torch "
              f"{[want['val_loss'][s] for s in (5, 10)]}")
        failures += compare_validation(got, want["val_loss"], 1e-4, arch)
        print(f"\n{arch}, data.overlong = {overlong}")
        print(f"{'step':>4} {'loss meshtrain':>15} {'loss torch':>15} {'gnorm meshtrain':>15} {'gnorm torch':>15} targets")
        for s in range(10):
            row = got.get(s + 1, {})
            print(f"{s + 1:4d} {row.get('loss', math.nan):15.8f} {want['loss'][s]:15.8f}"
                  f" {row.get('grad_norm', math.nan):15.8f} {want['grad_norm'][s]:15.8f} {want['targets'][s]}")
        failures += compare(got, want, {"loss": 1e-4, "grad_norm": 1e-3, "lr": 1e-9}, arch)
        # The check must tell the two overlong policies apart on these records.
        gpt2_torch.load_weights(r.model, r.init)
        swapped = sft_reference.train(r.model, r.records, r.cfg, other)
        if not compare(got, swapped, {"loss": 1e-4}, "swapped"):
            failures.append(f"{arch}: the reference with data.overlong = {other} also matches: the test cannot fail")
    return verdict(failures, "packed fine-tuning matches the record-by-record reference")


LAYOUTS = [
    ("accum4", 1, []),
    ("dp2_accum2", 2, []),
    ("dp4", 4, []),
    ("tp3_mb2", 3, [("parallel.tp", 3), ("train.micro_batch", 2)]),
    # sequence parallelism: each tp rank keeps 16 of the 48 rows, so documents cross the ranks' blocks
    ("tp3_mb2_sp", 3, [("parallel.tp", 3), ("train.micro_batch", 2), ("parallel.sequence_parallel", "true")]),
    ("pp2", 2, [("parallel.pp", 2)]),
    ("pp2_zb_h1", 2, [("parallel.pp", 2), ("parallel.schedule", "zb-h1")]),
    ("dp2_zero3", 2, [("parallel.zero", 3)]),
    # context parallelism: 2·3 chunks of 4 positions, documents across them; the loss-carrying targets counted
    # over the whole batch, validation's token sums over dp × cp
    ("cp3_mb2", 3, [("parallel.cp", 3), ("train.micro_batch", 2)]),
    ("dp2_cp2", 4, [("parallel.cp", 2)]),
]


def group_layouts(args):
    r = Runner(args, "gpt2")
    valid = [("data.valid", r.valid_records_path), ("train.eval_every", 5)]
    base = r.run("one_rank_mb4", keys=[("train.micro_batch", 4)] + valid)
    if base is None:
        return 1
    want = {k: [base[s + 1][k] for s in range(10)] for k in ("loss", "grad_norm")}
    want_valid = {s: base[s]["val_loss"] for s in (5, 10)}
    failures = []
    for name, ranks, keys in LAYOUTS:
        got = r.run(name, ranks, keys + valid)
        if got is None:
            return 1
        failures += compare(got, want, {"loss": 2e-5, "grad_norm": 1e-4}, name)
        failures += compare_validation(got, want_valid, 2e-5, name)
    # A mixture of experts: its auxiliary losses keep their per-micro-batch weight under dp 2 x ep 2.
    moe = Runner(args, "moe")
    base = moe.run("one_rank")
    if base is None:
        return 1
    want = {k: [base[s + 1][k] for s in range(10)] for k in ("loss", "grad_norm")}
    for name, ranks, keys in (("dp2_ep2", 2, [("parallel.ep", 2)]), ("dp4_ep2", 4, [("parallel.ep", 2)])):
        got = moe.run(name, ranks, keys)
        if got is None:
            return 1
        failures += compare(got, want, {"loss": 2e-5, "grad_norm": 1e-4}, "moe " + name)
        aux = [(got[s]["moe"]["aux_loss"], base[s]["moe"]["aux_loss"]) for s in range(1, 11)]
        failures += [f"moe {name}: step {s + 1} aux_loss {a} vs {b}" for s, (a, b) in enumerate(aux) if rel(a, b) > 2e-5]
    return verdict(failures, f"{len(LAYOUTS)} layouts and two expert-parallel ones give one rank's fine-tuning run")


def group_resume(args):
    r = Runner(args, "llama")
    shuffled = [("data.order", "shuffle"), ("train.global_batch", 6), ("checkpoint.every", 5)]
    straight = r.run("straight", 2, shuffled)
    if straight is None:
        return 1
    if r.run("split", 2, shuffled + [("train.stop_after", 5)], expected=3) is None:
        return 1
    resumed = r.run("split", 2, shuffled, resume="auto")
    if resumed is None:
        return 1
    failures = []
    for s in range(6, 11):
        a, b = straight.get(s), resumed.get(s)
        if a is None or b is None or a["loss"] != b["loss"] or a["grad_norm"] != b["grad_norm"]:
            failures.append(f"step {s}: straight {a and (a['loss'], a['grad_norm'])}, resumed "
                            f"{b and (b['loss'], b['grad_norm'])}")
    if r.run("materialized", 1, [("model.attention", "materialized")], expected=2) is None:
        return 1
    if "model.attention" not in r.last.stderr:
        failures.append(f"materialized attention: the message does not name model.attention: {r.last.stderr}")
    return verdict(failures, "a shuffled fine-tuning run resumes bitwise; materialized attention is refused")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--meshtrain", required=True)
    ap.add_argument("--mpiexec", required=True)
    ap.add_argument("--workdir", required=True)
    ap.add_argument("--group", choices=["reference", "layouts", "resume"], required=True)
    args = ap.parse_args()
    return {"reference": group_reference, "layouts": group_layouts, "resume": group_resume}[args.group](args)


if __name__ == "__main__":
    sys.exit(main())
