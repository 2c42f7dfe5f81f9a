#!/usr/bin/python3
"""bf16 and fp16 training against fp32, on real text, and fp16's loss scaler on forced overflow.

Cases (each can fail on its own):
  real_text   a small GPT trained on English text (Debian's fortunes, the quickstart's corpus;
              byte-level) for --steps steps in fp32, bf16 and fp16 from the same seed on the same
              batches: the 16-bit runs' final loss (mean of the last 50 steps) must be within 3 % of
              fp32's, and fp32 must have learnt (its final loss well below the first) so that a
              broken run cannot pass.
  overflow    fp16 with an initial loss scale of 1e30, far past fp16's range: every step overflows,
              is skipped and halves the scale, so the saved weights equal the initial ones and the
              AdamW moments stay zero; then a run that starts at 1e9 backs off step by step and
              trains on once the scale fits.
  resume      fp16 with a loss scale that backs off and grows (window 2): a run that leaves after 4
              of 10 steps and resumes reproduces the uninterrupted run's losses and scales exactly
              (the scaler's state travels in the checkpoint).
  layouts     bf16 and fp16 under data parallelism with ZeRO 1–3, tensor and pipeline parallelism,
              against one rank of the same precision: the same losses up to the order of the sums
              (rtol 1e-4 where only fp32 sums reorder; 2e-3, half a bf16 unit roundoff, where tensor
              parallelism sums 16-bit partial products in another order).

usage: test_mixed_precision.py --meshtrain BIN --workdir DIR [--mpiexec MPIEXEC] [--case NAME ...]
"""
import argparse
import glob
import json
import os
import shutil
import subprocess
import sys

import h5py
import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))

MODEL = ["--model.layers", "2", "--model.heads", "4", "--model.d_model", "64", "--model.vocab", "256",
         "--model.seq_len", "64"]


def run(cmd, expect=0):
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    if done.returncode != expect:
        sys.exit(f"FAIL: {' '.join(cmd)} exited {done.returncode}, expected {expect}\n{done.stdout}\n{done.stderr}")
    return done


def metrics(path):
    with open(path) as f:
        return [json.loads(line) for line in f]


def train(args, work, name, extra, ranks=1):
    out = os.path.join(work, name)
    os.makedirs(out, exist_ok=True)
    launcher = args.mpiexec.split() + ["-n", str(ranks)] if ranks > 1 else []
    run(launcher + [args.meshtrain, "train"] + MODEL + ["--data.train", args.shard, "--checkpoint.dir",
        os.path.join(out, "ckpt"), "--checkpoint.resume", "never", "--log.metrics",
        os.path.join(out, "metrics.jsonl")] + extra)
    return metrics(os.path.join(out, "metrics.jsonl")), out


def case_real_text(args, work):
    # A learning rate low enough that no run spikes: a spike in one run and not in another (chance,
    # once rounding has made the trajectories differ) would compare luck, not precision.
    common = ["--train.steps", str(args.steps), "--train.micro_batch", "16", "--train.global_batch", "16",
              "--optim.lr", "1e-3", "--optim.min_lr", "1e-4", "--optim.warmup_steps", "20", "--data.order", "shuffle"]
    final = {}
    for precision in ("fp32", "bf16", "fp16"):
        m, _ = train(args, work, f"text_{precision}", common + ["--train.precision", precision])
        final[precision] = float(np.mean([r["loss"] for r in m[-50:]]))
        print(f"  {precision}: first loss {m[0]['loss']:.4f}, final (mean of last 50) {final[precision]:.4f}, "
              f"skipped {sum(1 for r in m if r.get('skipped'))}")
        if precision == "fp32" and final["fp32"] > m[0]["loss"] - 1.0:
            return [f"fp32 did not learn: {m[0]['loss']:.3f} → {final['fp32']:.3f}"]
    failures = []
    for precision in ("bf16", "fp16"):
        rel = abs(final[precision] - final["fp32"]) / final["fp32"]
        print(f"  {precision} vs fp32: {100 * rel:.2f} % (allowed 3 %)")
        if rel > 0.03:
            failures.append(f"{precision} final loss {final[precision]:.4f} is {100 * rel:.1f} % from fp32's "
                            f"{final['fp32']:.4f}")
    return failures


def case_overflow(args, work):
    failures = []
    common = ["--train.micro_batch", "2", "--train.global_batch", "2", "--train.precision", "fp16"]
    m, out = train(args, work, "overflow_all", common + ["--train.steps", "3", "--train.loss_scale", "1e30"])
    scales = [r["loss_scale"] for r in m]
    if not all(r.get("skipped") for r in m) or scales != [5e29, 2.5e29, 1.25e29]:
        failures.append(f"every step should overflow and halve the scale from 1e30: {scales}, "
                        f"skipped {[r.get('skipped', False) for r in m]}")
    init = os.path.join(work, "overflow_init")
    run([args.meshtrain, "train"] + MODEL + common + ["--train.steps", "1", "--train.stop_after", "1",
        "--train.loss_scale", "1e30", "--data.train", args.shard, "--checkpoint.dir", init,
        "--checkpoint.resume", "never"])
    with h5py.File(glob.glob(os.path.join(out, "ckpt", "step_*.h5"))[0], "r") as after, \
            h5py.File(glob.glob(os.path.join(init, "step_*.h5"))[0], "r") as before:
        for name in after["model"]:
            if not np.array_equal(after["model"][name][...], before["model"][name][...]):
                failures.append(f"skipped steps changed /model/{name}")
                break
        if any(np.any(after["optim/exp_avg"][n][...] != 0) for n in after["optim/exp_avg"]):
            failures.append("skipped steps changed the AdamW moments")
    m, _ = train(args, work, "overflow_backoff", common + ["--train.steps", "40", "--train.loss_scale", "1e9",
                                                         "--train.loss_scale_window", "1000"])
    skipped = [r["step"] for r in m if r.get("skipped")]
    print(f"  from 1e9: skipped steps {skipped}, final scale {m[-1]['loss_scale']:g}, final loss {m[-1]['loss']:.4f}")
    if not skipped or skipped != list(range(1, len(skipped) + 1)) or len(skipped) == len(m):
        failures.append(f"from 1e9 the first steps should be skipped, then none: {skipped}")
    if m[-1]["loss_scale"] != 1e9 / 2 ** len(skipped) or not np.isfinite(m[-1]["loss"]):
        failures.append(f"final scale {m[-1]['loss_scale']} != 1e9 / 2^{len(skipped)}, or loss not finite")
    return failures


def case_resume(args, work):
    common = ["--train.steps", "10", "--train.micro_batch", "2", "--train.global_batch", "4", "--train.precision",
              "fp16", "--train.loss_scale", "1e6", "--train.loss_scale_window", "2"]
    straight, _ = train(args, work, "fp16_straight", common)
    out = os.path.join(work, "fp16_resumed")
    files = ["--data.train", args.shard, "--checkpoint.dir", os.path.join(out, "ckpt"), "--log.metrics",
             os.path.join(out, "metrics.jsonl")]
    os.makedirs(out)
    run([args.meshtrain, "train"] + MODEL + common + files + ["--checkpoint.resume", "never", "--train.stop_after", "4"],
        expect=3)
    run([args.meshtrain, "train"] + MODEL + common + files + ["--checkpoint.resume", "auto"])
    resumed = metrics(os.path.join(out, "metrics.jsonl"))
    pairs = [(a["loss"], a["loss_scale"], b["loss"], b["loss_scale"]) for a, b in zip(straight, resumed)]
    print(f"  scales {[p[1] for p in pairs]}")
    if len(resumed) != len(straight) or any(p[0] != p[2] or p[1] != p[3] for p in pairs):
        return [f"fp16 resume differs from the straight run: {pairs}"]
    if len({p[1] for p in pairs}) < 2:
        return ["the loss scale never changed: the case would not test the scaler's state"]
    return []


def case_layouts(args, work):
    common = ["--train.steps", "6", "--train.micro_batch", "2", "--train.global_batch", "8", "--train.seed", "5"]
    # (precision, ranks, keys, rtol)
    cases = [("bf16", 2, ["--parallel.zero", "1"], 1e-4), ("bf16", 2, ["--parallel.zero", "2"], 1e-4),
             ("bf16", 2, ["--parallel.zero", "3"], 1e-4), ("bf16", 2, ["--parallel.pp", "2"], 1e-4),
             ("bf16", 2, ["--parallel.tp", "2"], 2e-3),
             ("fp16", 4, ["--parallel.pp", "2", "--parallel.zero", "3", "--parallel.schedule", "gpipe"], 1e-4)]
    refs, failures = {}, []
    for precision, ranks, keys, rtol in cases:
        if precision not in refs:
            refs[precision], _ = train(args, work, f"{precision}_single", common + ["--train.precision", precision])
        name = f"{precision}_" + "_".join(k.lstrip("-").replace("parallel.", "") for k in keys)
        m, _ = train(args, work, name, common + ["--train.precision", precision] + keys, ranks=ranks)
        ref = refs[precision]
        worst = max(abs(a["loss"] - b["loss"]) / abs(b["loss"]) for a, b in zip(m, ref))
        print(f"  {precision} {' '.join(keys)}: worst relative loss difference {worst:.1e} (allowed {rtol:g})")
        if worst > rtol or len(m) != len(ref):
            failures.append(f"{precision} {' '.join(keys)} differs from one rank by {worst:.1e}")
    return failures


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--meshtrain", required=True)
    ap.add_argument("--mpiexec", default="mpiexec")
    ap.add_argument("--workdir", required=True)
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--corpus", default="/usr/share/games/fortunes", help="a folder of text files")
    ap.add_argument("--case", action="append", choices=["real_text", "overflow", "resume", "layouts"])
    args = ap.parse_args()
    work = os.path.abspath(args.workdir)
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    # Real text, byte-level: the fortunes' plain files (not their .dat indexes or .u8 links).
    texts = sorted(p for p in glob.glob(os.path.join(args.corpus, "*"))
                   if os.path.isfile(p) and not p.endswith((".dat", ".u8")))
    if not texts:
        sys.exit(f"FAIL: no text files in {args.corpus} (Debian: apt-get install fortunes)")
    args.shard = os.path.join(work, "docs.bin")
    run([args.meshtrain, "prepare", "--text"] + texts + ["--out", args.shard])
    failures = []
    for name in args.case or ["real_text", "overflow", "resume", "layouts"]:
        print(f"{name}:")
        failures += globals()[f"case_{name}"](args, work)
    if failures:
        print("FAIL:\n  " + "\n  ".join(failures))
        return 1
    print("OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())
