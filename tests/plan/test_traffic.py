#!/usr/bin/env python3
"""The planner's traffic is the trainer's: `meshtrain plan --json` predicts, for every rank, the
calls and bytes of each group (dp, tp, pp, tied) and kind of collective in one step, and
`meshtrain train` with `log.traffic` counts them (a counting Comm around each group). They must
agree exactly, on every rank, for every layout below.

The layouts cover dp, tp and pp alone and together, ZeRO 0-3, fp32 and bf16, the three pipeline
schedules, accumulation (micro-batches per step > 1 in most), full recomputation (extra
tensor-parallel sums), sequence parallelism (gathers and reduce-scatters), and buckets small enough that the gradient buffer takes many. fp16 is left
out: its traffic is bf16's (both are 16 bits), except in a step whose update the loss scaler skips.

usage: test_traffic.py --meshtrain BIN --workdir DIR [--mpiexec MPIEXEC] [--only NAME ...] [--arch gpt2|llama|lora]
"""
import argparse
import json
import os
import shutil
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'oracle'))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gpt2_torch  # noqa: E402
from plan_and_train import case_keys, plan_json, train  # noqa: E402

# 4 blocks (2 per stage under pp 2), 4 heads; a bucket of 0.01 MiB is 2621 floats, so the ~56k
# gradients of a rank take a few dozen buckets, the last one short.
MODEL = ["--model.layers", "4", "--model.heads", "4", "--model.d_model", "32", "--model.vocab", "71",
         "--model.seq_len", "16", "--train.micro_batch", "2", "--train.global_batch", "8", "--train.steps", "2",
         "--parallel.bucket_mb", "0.01"]
# (name, ranks, keys); accumulation = 8 / (2 · dp).
CASES = [
    ("dp2_zero0", 2, ["--parallel.dp", "2"]),
    ("dp2_zero0_bf16", 2, ["--parallel.dp", "2", "--train.precision", "bf16"]),
    ("dp2_zero1", 2, ["--parallel.dp", "2", "--parallel.zero", "1"]),
    ("dp2_zero2_bf16", 2, ["--parallel.dp", "2", "--parallel.zero", "2", "--train.precision", "bf16"]),
    ("dp2_zero3", 2, ["--parallel.dp", "2", "--parallel.zero", "3"]),
    ("tp2", 2, ["--parallel.tp", "2"]),
    ("tp2_bf16_recompute", 2, ["--parallel.tp", "2", "--train.precision", "bf16", "--train.recompute", "full"]),
    ("pp2_gpipe", 2, ["--parallel.pp", "2", "--parallel.schedule", "gpipe"]),
    ("pp2_1f1b_zero1_bf16", 2, ["--parallel.pp", "2", "--parallel.zero", "1", "--train.precision", "bf16"]),
    ("dp2_pp2_zero3", 4, ["--parallel.dp", "2", "--parallel.pp", "2", "--parallel.zero", "3"]),
    ("dp2_tp2_zero3_bf16", 4, ["--parallel.dp", "2", "--parallel.tp", "2", "--parallel.zero", "3",
                               "--train.precision", "bf16"]),
    ("dp2_tp2_pp2_zero0", 8, ["--parallel.dp", "2", "--parallel.tp", "2", "--parallel.pp", "2"]),
    ("dp2_tp2_pp2_zero2_gpipe", 8, ["--parallel.dp", "2", "--parallel.tp", "2", "--parallel.pp", "2",
                                    "--parallel.zero", "2", "--parallel.schedule", "gpipe"]),
    ("dp2_tp2_pp2_zero3_bf16_recompute", 8, ["--parallel.dp", "2", "--parallel.tp", "2", "--parallel.pp", "2",
                                             "--parallel.zero", "3", "--train.precision", "bf16",
                                             "--train.recompute", "full"]),
    # Sequence parallelism: every region end a reduce-scatter or all-gather, the norms' gradient sums, the
    # pipeline's messages a tp rank's rows; full recomputation gathers again.
    ("tp2_pp2_sp_bf16_recompute", 4, ["--parallel.tp", "2", "--parallel.pp", "2", "--parallel.sequence_parallel", "true",
                                      "--train.precision", "bf16", "--train.recompute", "full"]),
    # More micro-batches than plan/traffic.hpp's affine_micros: the plan extrapolates these counts.
    ("tp2_accum8_recompute", 2, ["--parallel.tp", "2", "--train.global_batch", "16", "--train.recompute", "full"]),
    ("pp2_gpipe_accum16_zero3", 2, ["--parallel.pp", "2", "--parallel.schedule", "gpipe", "--parallel.zero", "3",
                                    "--train.global_batch", "32"]),
    ("dp2_pp2_1f1b_accum8_zero3", 4, ["--parallel.dp", "2", "--parallel.pp", "2", "--parallel.zero", "3",
                                      "--train.global_batch", "32"]),
    # ZB-H1: each backward's block visits (ZeRO-3's gathers) in its input half, its reduce-scatters in its weight half.
    ("dp2_pp2_zbh1_accum8_zero3", 4, ["--parallel.dp", "2", "--parallel.pp", "2", "--parallel.zero", "3",
                                      "--parallel.schedule", "zb-h1", "--train.global_batch", "32"]),
    # Context parallelism: the ring's K/V blocks (each way, every block's attention) and dK/dV sums in
    # backward, again in a recomputed forward; dp over the dp × cp replicas; the pipeline's messages and tp's
    # sums a rank's b·T/cp rows.
    ("cp2_recompute", 2, ["--parallel.cp", "2", "--train.recompute", "full"]),
    ("dp2_cp2_zero3_bf16", 4, ["--parallel.dp", "2", "--parallel.cp", "2", "--parallel.zero", "3",
                               "--train.precision", "bf16"]),
    ("cp2_tp2_pp2_sp", 8, ["--parallel.cp", "2", "--parallel.tp", "2", "--parallel.pp", "2",
                           "--parallel.sequence_parallel", "true"]),
]
# --arch llama: the same shape with grouped-query attention (4 heads, 2 kv heads: one a tp rank at
# tp 2) and a SwiGLU width of 88; the untied lm_head leaves pipelines no "tied" group. The second
# stage's first unit is a block (lm_head comes last): its backward reaches offset 0 at block 0, and
# each unit must still be reduce-scattered once per micro-batch.
LLAMA_MODEL = ["--model.arch", "llama", "--model.kv_heads", "2", "--model.ffn_hidden", "88"] + MODEL
LLAMA_CASES = [
    # grouped-query attention: the ring's blocks at the kv heads' width
    ("llama_cp2_tp2_zero1", 4, ["--parallel.cp", "2", "--parallel.tp", "2", "--parallel.zero", "1"]),
    ("llama_dp2_zero2_bf16", 2, ["--parallel.dp", "2", "--parallel.zero", "2", "--train.precision", "bf16"]),
    ("llama_tp2_bf16_recompute", 2, ["--parallel.tp", "2", "--train.precision", "bf16",
                                     "--train.recompute", "full"]),
    ("llama_pp2_1f1b_zero1", 2, ["--parallel.pp", "2", "--parallel.zero", "1"]),
    ("llama_dp2_pp2_zero2", 4, ["--parallel.dp", "2", "--parallel.pp", "2", "--parallel.zero", "2"]),
    ("llama_tp2_pp2_zbh1_zero2", 4, ["--parallel.tp", "2", "--parallel.pp", "2", "--parallel.zero", "2",
                                     "--parallel.schedule", "zb-h1"]),
    ("llama_dp2_tp2_zero3_bf16", 4, ["--parallel.dp", "2", "--parallel.tp", "2", "--parallel.zero", "3",
                                     "--train.precision", "bf16"]),
    ("llama_tp2_pp2_sp_recompute", 4, ["--parallel.tp", "2", "--parallel.pp", "2", "--parallel.sequence_parallel", "true",
                                       "--train.recompute", "full"]),
]
# --arch lora: LoRA (rank 3, not dividing tp 2) on that llama, its base a checkpoint of one dense step (BASE,
# made first): the dp reductions of the adapters alone, and tp's [N, r] sums (in forward for o and down,
# in backward for q, k, v, gate and up; again when full recomputation reruns a block). Then LoRA on an MoE
# model: test_moe_traffic.py's lora_cases.
LORA_MODEL = LLAMA_MODEL + ["--lora.rank", "3", "--checkpoint.init_weights", "BASE"]
LORA_CASES = [
    ("lora_dp2_zero2_bf16", 2, ["--parallel.dp", "2", "--parallel.zero", "2", "--train.precision", "bf16"]),
    ("lora_tp2_bf16_recompute", 2, ["--parallel.tp", "2", "--train.precision", "bf16", "--train.recompute", "full"]),
    ("lora_dp2_tp2_zero3_attention", 4, ["--parallel.dp", "2", "--parallel.tp", "2", "--parallel.zero", "3",
                                         "--lora.targets", "q_proj,k_proj,v_proj,o_proj"]),
    ("lora_dp2_tp2_pp2_zero1", 8, ["--parallel.dp", "2", "--parallel.tp", "2", "--parallel.pp", "2",
                                   "--parallel.zero", "1"]),
    # the frozen embedding's backward gathers nothing under sequence parallelism
    ("lora_tp2_pp2_sp", 4, ["--parallel.tp", "2", "--parallel.pp", "2", "--parallel.sequence_parallel", "true"]),
]
FAMILIES = {"gpt2": (MODEL, CASES), "llama": (LLAMA_MODEL, LLAMA_CASES), "lora": (LORA_MODEL, LORA_CASES)}
POSITION = ("dp_rank", "tp_rank", "pp_rank")


def differences(counted, predicted):
    """Lines naming every group and kind where the two disagree."""
    out = []
    for group in sorted(set(counted) | set(predicted)):
        c, p = counted.get(group, {}), predicted.get(group, {})
        for kind in sorted(set(c) | set(p)):
            if c.get(kind) != p.get(kind):
                out.append(f"{group} {kind}: counted {c.get(kind)}, predicted {p.get(kind)}")
    return out


def plan_and_count(opts, shard, name, ranks, keys, logs=()):
    """plan --json's per-rank entries by rank and the ranks `train` counted in its last step, each
    run with `keys`, and the case's directory; or a list of failures. `logs`: (key, file name) of
    further logs the run writes into the case's directory."""
    work, run_keys = case_keys(opts.workdir, name, shard)
    log = os.path.join(work, "traffic.json")
    keys = keys + run_keys + ["--log.traffic", log]
    for key, file in logs:
        keys += [key, os.path.join(work, file)]
    plan = plan_json(opts.meshtrain, ranks, keys)
    if isinstance(plan, str):
        return [plan]
    failed = train(opts.mpiexec, opts.meshtrain, ranks, keys)
    if failed:
        return [failed]
    with open(log) as f:
        counted = json.load(f)["ranks"]
    return {r["rank"]: r for r in plan["per_rank"]}, counted, work


def rank_failures(counted, predicted, ranks, differ=differences):
    """Every rank's position and traffic against the plan's (`differ`: the lines where they disagree)."""
    failures = []
    if sorted(r["rank"] for r in counted) != list(range(ranks)):
        failures.append(f"the log holds ranks {[r['rank'] for r in counted]}, not 0..{ranks - 1}")
    for r in counted:
        plan_rank = predicted[r["rank"]]
        where = f"rank {r['rank']} (dp {r['dp_rank']} tp {r['tp_rank']} pp {r['pp_rank']})"
        if any(r[k] != plan_rank[k] for k in POSITION):
            failures.append(f"{where}: the plan puts it at {[plan_rank[k] for k in POSITION]}")
        if not r["traffic"]:
            failures.append(f"{where}: nothing counted")
        failures += [f"{where}: {d}" for d in differ(r["traffic"], plan_rank["traffic"])]
    return failures


def check_case(opts, shard, model, name, ranks, extra):
    run = plan_and_count(opts, shard, name, ranks, model + extra)
    if isinstance(run, list):
        return run
    predicted, counted, _ = run
    return rank_failures(counted, predicted, ranks)


def command_line(description, extra=()):
    """The options every traffic test takes (and `extra`: (flag, add_argument's keywords) pairs)."""
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("--meshtrain", required=True)
    ap.add_argument("--workdir", required=True)
    ap.add_argument("--mpiexec", default=shutil.which("mpiexec"))
    ap.add_argument("--only", nargs="*", help="run only these cases")
    for flag, keywords in extra:
        ap.add_argument(flag, **keywords)
    return ap.parse_args()


def run_cases(opts, cases, check):
    """A fresh work directory with a token shard, then check(shard, name, ranks, case) — the case's
    failures — for each (name, ranks, case) of `cases` that --only names; 1 when any failed."""
    shutil.rmtree(opts.workdir, ignore_errors=True)
    os.makedirs(opts.workdir)
    shard = os.path.join(opts.workdir, "shard.bin")
    gpt2_torch.write_shard(shard, np.random.default_rng(0).integers(0, 71, size=20_000))
    failed = 0
    for name, ranks, case in cases:
        if opts.only and name not in opts.only:
            continue
        start = time.monotonic()
        failures = check(shard, name, ranks, case)
        print(f"{'FAIL' if failures else 'ok  '} {name} ({ranks} ranks, {time.monotonic() - start:.1f} s)", flush=True)
        for f in failures[:20]:
            print(f"     {f}")
        if len(failures) > 20:
            print(f"     … and {len(failures) - 20} more")
        failed += bool(failures)
    print(f"{failed} of {len(cases)} layouts disagree" if failed else "every rank's traffic is the plan's")
    return 1 if failed else 0


def main():
    opts = command_line(__doc__, [("--arch", {"choices": sorted(FAMILIES), "default": "gpt2",
                                              "help": "the model family's model and cases"})])
    model, family_cases = FAMILIES[opts.arch]

    def check(shard, name, ranks, extra):
        nonlocal model
        if "BASE" in model:  # LoRA's base, made once: the dense model after one step
            work, run_keys = case_keys(opts.workdir, "base", shard)
            failed = train(opts.mpiexec, opts.meshtrain, 1, LLAMA_MODEL + run_keys + ["--train.steps", "1"])
            if failed:
                return [f"base: {failed}"]
            model = [os.path.join(work, "ck", "step_00000001.h5") if k == "BASE" else k for k in model]
        return check_case(opts, shard, model, name, ranks, extra)

    cases = [(name, ranks, (check, extra)) for name, ranks, extra in family_cases]
    if opts.arch == "lora":  # and LoRA on a mixture-of-experts model
        import test_moe_traffic
        cases += test_moe_traffic.lora_cases(opts)
    return run_cases(opts, cases, lambda shard, name, ranks, case: case[0](shard, name, ranks, case[1]))


if __name__ == "__main__":
    sys.exit(main())
