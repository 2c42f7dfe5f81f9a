#!/usr/bin/python3
"""Step 7 of a parallel meshtrain run, redone by torch.optim.AdamW from the step-6 checkpoint.

meshtrain trains a small model under --launcher with the layout that --set gives (ctest: mpiexec
-n 4, dp 2 × tp 2, ZeRO-1), data.order sequential, saving a checkpoint after step 6
(checkpoint.every 6) and leaving after step 7 (train.stop_after 7, exit 3) with another. The oracle
then takes the step-6 checkpoint alone: the PyTorch GPT-2 of gpt2_torch.py (float64) gets its
/model; a torch.optim.AdamW built by gpt2_torch.make_optimizer (weight decay only on tensors of two
or more dimensions, share/docs/usage.md, Model and optimizer) gets /optim/exp_avg and /optim/exp_avg_sq as its state with
state step 6, betas, eps and weight decay from the config, and the learning rate of update 6
(0-based) from the schedule. It computes the loss of step 7's global batch (share/docs/usage.md, Data order),
backpropagates, clips, steps, and checks:
  - lr equals the metrics' lr of step 7 (1e-9 relative);
  - the loss equals the metrics' loss of step 7 and the gradient norm its grad_norm (--rtol,
    default 1e-5 relative; see TOLERANCES below);
  - the updated parameters equal the step-7 checkpoint's /model and the moments its /optim
    (element-wise bounds, see TOLERANCES).
Negative controls: the same comparison is repeated from the same checkpoint with one deliberate
mistake each (AdamW step count t = 6 or 8 instead of 7, weight decay on the 1-D tensors too, no
clipping, the learning rate of update 5 or 7, step 6's batch) and each must FAIL it, so the
tolerances are shown to be tight enough to see those mistakes on every run.

TOLERANCES (meshtrain computes in float32, the oracle in float64 from the same float32 state, so
the oracle is the exact answer and the bounds are float32's error, not a shared rounding):
  - loss, grad norm: float32 rounding (6e-8 per operation) averaged over 128 tokens and ~28k
    gradient elements: ~1e-8 relative (measured 5e-9 and 3e-9 under dp 2 × tp 2). 1e-5 leaves
    room for any BLAS or summation order, while a wrong batch or a wrong step's weights moves the
    loss by >1e-3 (step 6's batch: 3e-2).
  - parameters: |meshtrain − oracle| <= 4 ulp(float32) of the value + 1e-3 · lr. The value is
    stored in float32 (half an ulp of rounding, ~6e-8 at |p| = 1), and the gradient's float32
    error (~1e-6 relative) moves an Adam step, lr·m̂/(sqrt(v̂)+eps) with |m̂/sqrt(v̂)| <~ 3, by far
    less than 1e-3 · lr; an off-by-one t changes the bias corrections by 5-9 %, i.e. the step by
    ~3e-2 · lr (measured: largest difference 5.9e-8, 3 % of its bound; with t off by one 5.3e-5,
    31× the bound). The key bias (middle third of c_attn.bias) is left out: its true gradient is
    exactly zero, float32 leaves rounding noise, and Adam turns noise into steps of ±lr in any
    implementation (gpt2_torch.comparable).
  - moments: |meshtrain − oracle| <= 4 ulp of the value + 1e-5 · max |value| of the tensor. New
    moment = β·old + (1−β)·g (or g²): the old part is exact, the gradient's float32 error is
    ~1e-6 of the tensor's scale, smaller for most elements; the key bias again has only noise,
    at ~1e-9 of the tensor's scale (measured: at most 10 % of the bound).

usage: /usr/bin/python3 test_adamw_from_checkpoint.py --meshtrain BIN --workdir DIR
       [--launcher "mpiexec -n 4"] [--set parallel.dp=2 --set parallel.tp=2 --set parallel.zero=1 ...]
       [--rtol 1e-5]
"""
import argparse
import json
import os
import shutil
import sys

import h5py
import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gpt2_torch  # noqa: E402

SAVED, CHECKED = 6, 7  # the checkpoint the oracle starts from, the step it redoes (1-based)


def make_config():
    """A shape of its own: heads and vocab divisible by tp 2, accumulation 2 under dp 2; 52 windows,
    so that step 7's batch (windows 48 … 55) wraps around the data; grad_clip low enough that
    step 7 clips; step 7 in the cosine decay (update 6 of 10, warmup 2)."""
    return {
        "model": {"layers": 2, "heads": 2, "d_model": 32, "vocab": 66, "seq_len": 16},
        "train": {"micro_batch": 2, "global_batch": 8, "steps": 10, "seed": 77, "precision": "fp32"},
        "optim": {"lr": 3e-3, "min_lr": 3e-4, "warmup_steps": 2, "decay": "cosine", "weight_decay": 0.1,
                  "beta1": 0.9, "beta2": 0.95, "eps": 1e-8, "grad_clip": 0.4},
        "data": {"order": "sequential"},
    }


def read_checkpoint(path, step):
    with h5py.File(path, "r") as f:
        if int(f.attrs["step"]) != step:
            raise ValueError(f"{path} holds step {f.attrs['step']}, expected {step}")
        return ({k: f["model"][k][...] for k in f["model"]},
                {g: {k: f["optim"][g][k][...] for k in f["optim"][g]} for g in ("exp_avg", "exp_avg_sq")})


def ulp(x):
    return np.spacing(np.abs(x).astype(np.float32)).astype(np.float64)


def redo_step(cfg, tokens, saved, *, t=CHECKED, decay_1d=False, clip=True, update=CHECKED - 1,
              batch=CHECKED - 1):
    """The oracle's step 7 from the step-6 state `saved` (model, optim): returns loss, grad norm,
    lr, and the new parameters and moments as float64 arrays by name. The keywords are the
    negative controls' mistakes; their defaults are the interface's step 7."""
    model_w, optim = saved
    model = gpt2_torch.build_model(cfg)                      # float64
    params = dict(model.named_parameters())
    with torch.no_grad():
        for name, p in params.items():
            p.copy_(torch.from_numpy(model_w[name].astype(np.float64)))
    opt = gpt2_torch.make_optimizer(model, cfg)
    if decay_1d:
        for group in opt.param_groups:
            group["weight_decay"] = cfg["optim"]["weight_decay"]
    for name, p in params.items():                          # AdamW increments step first: t = step + 1
        opt.state[p] = {"step": torch.tensor(float(t - 1)),
                        "exp_avg": torch.from_numpy(optim["exp_avg"][name].astype(np.float64)),
                        "exp_avg_sq": torch.from_numpy(optim["exp_avg_sq"][name].astype(np.float64))}
    lr = gpt2_torch.lr_at(update, cfg)
    for group in opt.param_groups:
        group["lr"] = lr

    inputs, targets = gpt2_torch.step_windows(tokens, batch, cfg["train"]["global_batch"], cfg["model"]["seq_len"])
    loss = model(inputs, targets)                            # mean over the whole global batch
    loss.backward()
    if clip and cfg["optim"]["grad_clip"] > 0:
        norm = float(torch.nn.utils.clip_grad_norm_(model.parameters(), cfg["optim"]["grad_clip"]))
    else:
        norm = gpt2_torch.global_grad_norm(list(model.parameters()))
    opt.step()
    return {"loss": loss.item(), "grad_norm": norm, "lr": lr,
            "model": {n: p.detach().numpy() for n, p in params.items()},
            "exp_avg": {n: opt.state[p]["exp_avg"].numpy() for n, p in params.items()},
            "exp_avg_sq": {n: opt.state[p]["exp_avg_sq"].numpy() for n, p in params.items()}}


def compare(cfg, oracle, metrics, after, rtol, log=print):
    """Mismatches between the oracle's step 7 and meshtrain's (metrics row, step-7 checkpoint)."""
    model_w, optim = after
    C, lr = cfg["model"]["d_model"], metrics["lr"]
    bad = []
    for key, tol in (("lr", 1e-9), ("loss", rtol), ("grad_norm", rtol)):
        rel = abs(metrics[key] - oracle[key]) / abs(oracle[key])
        log(f"  {key:10s} meshtrain {metrics[key]:.10g}  oracle {oracle[key]:.10g}  relative {rel:.1e} (<= {tol:g})")
        if not rel <= tol:
            bad.append(f"{key} {metrics[key]!r} vs oracle {oracle[key]!r} (relative {rel:.1e} > {tol:g})")
    groups = (("model", model_w, lambda ref: 4 * ulp(ref) + 1e-3 * lr),
              ("exp_avg", optim["exp_avg"], lambda ref: 4 * ulp(ref) + 1e-5 * np.abs(ref).max()),
              ("exp_avg_sq", optim["exp_avg_sq"], lambda ref: 4 * ulp(ref) + 1e-5 * np.abs(ref).max()))
    for group, got, bound in groups:
        worst, where, n_bad, largest = 0.0, "", 0, 0.0
        for name, ref in oracle[group].items():
            mine = got[name].astype(np.float64)
            if group == "model":                             # the key bias: see TOLERANCES
                mine, ref = gpt2_torch.comparable(name, mine, C), gpt2_torch.comparable(name, ref, C)
            excess = np.abs(mine - ref) / bound(ref)
            n_bad += int(np.sum(excess > 1))
            largest = max(largest, float(np.abs(mine - ref).max()))
            if excess.max() > worst:
                worst, where = float(excess.max()), name
        log(f"  /{'model' if group == 'model' else 'optim/' + group}: max |difference| {largest:.1e},"
            f" worst |difference| / bound {worst:.2e} ({where}), {n_bad} elements over")
        if n_bad:
            bad.append(f"/{group}: {n_bad} elements beyond the bound, worst {worst:.1f}× it in {where}")
    return bad


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--meshtrain", required=True, help="path of the meshtrain binary")
    ap.add_argument("--workdir", required=True, help="scratch directory (recreated)")
    ap.add_argument("--launcher", default="", help='command to start meshtrain with, e.g. "mpiexec -n 4"')
    ap.add_argument("--set", action="append", default=[], metavar="SECTION.KEY=VALUE",
                    help="override a key of the config (repeatable), e.g. parallel.tp=2")
    ap.add_argument("--rtol", type=float, default=1e-5, help="relative tolerance of loss and grad norm")
    args = ap.parse_args()

    cfg = make_config()
    try:
        gpt2_torch.apply_sets(cfg, args.set)
    except ValueError as e:
        ap.error(str(e))
    m, t = cfg["model"], cfg["train"]
    if t["steps"] <= CHECKED or cfg["data"]["order"] != "sequential":
        ap.error(f"the test needs train.steps > {CHECKED} and data.order sequential")
    work = os.path.abspath(args.workdir)
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    ini, shard, init, ckpt = (os.path.join(work, n) for n in ("cfg.ini", "shard.bin", "init.h5", "ckpt"))
    metrics_path = os.path.join(work, "metrics.jsonl")

    rng = np.random.default_rng(606)
    gpt2_torch.write_shard(shard, rng.integers(0, m["vocab"], size=m["seq_len"] * 52 + 5))
    model = gpt2_torch.random_init(gpt2_torch.build_model(cfg), seed=17, std=0.1)
    gpt2_torch.save_weights(model, init)
    gpt2_torch.write_config(ini, cfg)

    cmd = args.launcher.split() + [
        args.meshtrain, "train", "--config", ini, "--data.train", shard, "--checkpoint.init_weights", init,
        "--checkpoint.dir", ckpt, "--checkpoint.every", str(SAVED), "--checkpoint.resume", "never",
        "--train.stop_after", str(CHECKED), "--log.metrics", metrics_path]
    if not gpt2_torch.run_meshtrain(cmd, expected_code=3):  # left after train.stop_after with a checkpoint
        return 1
    try:
        metrics = {r["step"]: r for r in (json.loads(line) for line in open(metrics_path) if line.strip())}[CHECKED]
        saved = read_checkpoint(os.path.join(ckpt, f"step_{SAVED:08d}.h5"), SAVED)
        after = read_checkpoint(os.path.join(ckpt, f"step_{CHECKED:08d}.h5"), CHECKED)
    except (OSError, ValueError, KeyError) as e:
        print(f"FAIL: cannot read meshtrain's metrics or checkpoints in {work}: {e}")
        return 1

    cfg = gpt2_torch.load_config(ini)        # the file meshtrain read, typed as the oracle types it
    tokens = gpt2_torch.read_tokens(shard)
    oracle = redo_step(cfg, tokens, saved)
    print(f"\nstep {CHECKED} from the step-{SAVED} checkpoint, torch.optim.AdamW (float64) against meshtrain"
          f" ({' '.join([args.launcher or 'one rank'] + args.set)}):")
    failures = compare(cfg, oracle, metrics, after, args.rtol)
    clip = cfg["optim"]["grad_clip"]
    if not oracle["grad_norm"] > clip:
        failures.append(f"step {CHECKED} does not clip (grad norm {oracle['grad_norm']:.4f} <= grad_clip {clip}):"
                        " the config no longer tests clipping")

    controls = {
        f"t = {CHECKED - 1}": {"t": CHECKED - 1},
        f"t = {CHECKED + 1}": {"t": CHECKED + 1},
        "weight decay on 1-D tensors": {"decay_1d": True},
        "no clipping": {"clip": False},
        f"lr of update {CHECKED - 2}": {"update": CHECKED - 2},
        f"lr of update {CHECKED}": {"update": CHECKED},
        f"step {SAVED}'s batch": {"batch": SAVED - 1},
    }
    print("\nnegative controls (each must fail the comparison):")
    for what, mistake in controls.items():
        bad = compare(cfg, redo_step(cfg, tokens, saved, **mistake), metrics, after, args.rtol, log=lambda _: None)
        print(f"  {what:28s} " + ("fails: " + "; ".join(b.split(" (")[0][:60] for b in bad) if bad else "PASSES"))
        if not bad:
            failures.append(f"the comparison does not see a mistake: {what}")

    if failures:
        print("FAIL:\n  " + "\n  ".join(failures))
        return 1
    print(f"\nOK: meshtrain's step {CHECKED} is torch.optim.AdamW's from the step-{SAVED} checkpoint"
          f" (loss, lr, grad norm, clipped update, moments)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
