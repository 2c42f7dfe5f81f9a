#!/usr/bin/env python3
"""The planner's traffic under expert parallelism is the trainer's: a llama MoE model trained with
`log.traffic` against `meshtrain plan --json`'s prediction for every rank, every group (dp, edp, tp,
pp, ep, cp) and kind, as test_traffic.py does for dense models.

The token all-to-alls move as many rows as the routing sends to the other ranks' experts, which
the plan cannot know: it assumes an even load, every expert at its capacity
(plan/traffic.hpp, planned_exchange_rows). The model makes that exact: N = 32 tokens a micro-batch,
k = 2, so 64 assignments over E = 4 experts, 16 each on average, against a capacity of
⌈0.25 · 64 / 4⌉ = 4: every expert overflows in every micro-batch, and the test checks that it did —
the last step's dropped fraction must be 1 − E·capacity/(N·k) = 0.75 in every MoE block, which it
is only when every expert of every micro-batch on every rank kept exactly its capacity. Those cases
must agree to the byte. One dropless case checks the plan's mean: its ep bytes within a tolerance,
everything else (the calls, the counts' all-to-all included) exactly. Padded to the capacity
(model.pad_to_capacity) the rows are E · capacity whatever the routing, and no counts travel: a case
with a capacity no expert fills (factor 2: 32 rows an expert, N) must agree to the byte as well.

LoRA on that model (lora_cases, run by test_traffic.py --arch lora beside the dense LoRA cases): rank 3
on every linear, the router's and each routed expert's adapters included, its base a checkpoint of one
step of the model; the same saturation makes the routed experts' tp sums over their received rows
(plan/traffic.hpp, planned_received_rows: E · capacity = 16 rows) exact too.

usage: test_moe_traffic.py --meshtrain BIN --workdir DIR [--mpiexec MPIEXEC] [--only NAME ...]
"""
import json
import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from plan_and_train import case_keys, train  # noqa: E402
from test_traffic import command_line, differences, plan_and_count, rank_failures, run_cases  # noqa: E402

TOKENS, K, E, FACTOR = 2 * 16, 2, 4, 0.25  # micro_batch · seq_len, experts_per_token, experts, capacity_factor
# Blocks 0 and 2 of 4 are MoE (moe_every 2), with one shared expert; 8 sequences a step.
MODEL = ["--model.arch", "llama", "--model.kv_heads", "2", "--model.ffn_hidden", "48", "--model.layers", "4",
         "--model.heads", "4", "--model.d_model", "32", "--model.vocab", "71", "--model.seq_len", "16",
         "--model.experts", str(E), "--model.experts_per_token", str(K), "--model.expert_hidden", "16",
         "--model.moe_every", "2", "--model.shared_experts", "1", "--model.capacity_factor", str(FACTOR),
         "--train.micro_batch", "2", "--train.global_batch", "8", "--train.steps", "2", "--parallel.bucket_mb", "0.01",
         "--parallel.ep", "2"]
# (name, ranks, keys); accumulation = 8 / (2 · dp).
SATURATED = [
    ("moe_dp4_ep2", 4, ["--parallel.dp", "4"]),
    ("moe_dp2_ep2_tp2_zero2_bf16", 4, ["--parallel.dp", "2", "--parallel.tp", "2", "--parallel.zero", "2",
                                       "--train.precision", "bf16"]),
    # Every block MoE: a stage's second block is sometimes still resident, sometimes recomputed.
    ("moe_dp2_ep2_pp2_recompute", 4, ["--parallel.dp", "2", "--parallel.pp", "2", "--train.recompute", "full",
                                      "--model.moe_every", "1"]),
    # Context parallelism: each rank routes its 16 of a micro-batch's 32 tokens under its own capacity (2 of
    # 32 assignments an expert: still saturated, the same dropped fraction), and every MoE block's forward,
    # rerun ones too, sums its routed counts over the cp group (one all-reduce).
    ("moe_dp2_ep2_cp2_recompute", 4, ["--parallel.dp", "2", "--parallel.cp", "2", "--train.recompute", "full"]),
]
# Dropless, the rows a rank sends to the other ep rank vary with the routing around the plan's even
# share; over a step's 16 row all-to-alls they measure within a few per cent of it.
DROPLESS = ("moe_dp2_ep2_dropless", 2, ["--parallel.dp", "2", "--model.capacity_factor", "0"])
TOLERANCE = 0.15
# Padded, under ep with tp and ZeRO-2: exact whatever the routing (no saturation to check); under sequence
# parallelism too (the router sees the gathered rows).
PADDED = ("moe_dp2_ep2_tp2_zero2_padded_sp", 4, ["--parallel.dp", "2", "--parallel.tp", "2", "--parallel.zero", "2",
                                                "--model.capacity_factor", "2", "--model.pad_to_capacity", "true",
                                                "--parallel.sequence_parallel", "true"])
# LoRA (rank 3, all-linear), its base BASE: tp and ep together under full recomputation (the experts' down
# sums again in the rerun forward) and lora.dropout (the rows' assignment ids sent with them, again in the
# rerun), and tp without expert parallelism (each rank's experts receive every kept row) at ZeRO-3 in bf16.
LORA_KEYS = ["--lora.rank", "3", "--checkpoint.init_weights", "BASE"]
LORA_CASES = [
    ("lora_moe_dp2_ep2_tp2_recompute_dropout", 4, ["--parallel.dp", "2", "--parallel.tp", "2",
                                                   "--train.recompute", "full", "--lora.dropout", "0.1"]),
    ("lora_moe_dp2_tp2_zero3_bf16", 4, ["--parallel.dp", "2", "--parallel.tp", "2", "--parallel.ep", "1",
                                        "--parallel.zero", "3", "--train.precision", "bf16"]),
]


def saturation_failures(metrics_path):
    """Unless every expert kept exactly its capacity in the last step: each block's dropped fraction."""
    capacity = max(1, math.ceil(FACTOR * TOKENS * K / E - 1e-9))
    saturated = 1 - E * capacity / (TOKENS * K)
    with open(metrics_path) as f:
        last = [json.loads(line) for line in f if line.strip()][-1]
    blocks = last.get("moe", {}).get("blocks", [])
    if not blocks:
        return [f"the metrics record has no moe.blocks: {json.dumps(last)}"]
    return [f"block {b['block']} dropped {b['dropped']}, not {saturated}: some expert kept less than its capacity, "
            f"so the plan's rows are not the run's (lower capacity_factor)"
            for b in blocks if abs(b["dropped"] - saturated) > 1e-12]


def within_tolerance(counted, predicted):
    """differences, but ep's all-to-all bytes only beyond TOLERANCE of the plan's."""
    out = differences({g: c for g, c in counted.items() if g != "ep"}, {g: p for g, p in predicted.items() if g != "ep"})
    c, p = counted.get("ep", {}).get("alltoall"), predicted.get("ep", {}).get("alltoall")
    if c is None or p is None or c["calls"] != p["calls"]:
        return out + [f"ep alltoall: counted {c}, predicted {p}"]
    error = (c["bytes"] - p["bytes"]) / p["bytes"]
    print(f"     ep all-to-all bytes: counted {c['bytes']}, planned {p['bytes']} ({error:+.1%})")
    if abs(error) > TOLERANCE:
        out.append(f"ep alltoall bytes: counted {c['bytes']}, predicted {p['bytes']}: {error:+.1%}, beyond "
                   f"±{TOLERANCE:.0%}")
    return out


def check_case(opts, shard, name, ranks, extra, load):
    """load: "saturated" (every expert at its capacity: exact, checked), "padded" (exact whatever the routing)
    or "dropless" (ep's bytes within TOLERANCE)."""
    run = plan_and_count(opts, shard, name, ranks, MODEL + extra, logs=[("--log.metrics", "metrics.jsonl")])
    if isinstance(run, list):
        return run
    predicted, counted, work = run
    if load == "dropless":
        return rank_failures(counted, predicted, ranks, within_tolerance)
    if load == "padded":
        return rank_failures(counted, predicted, ranks)
    return saturation_failures(os.path.join(work, "metrics.jsonl")) + rank_failures(counted, predicted, ranks)


def lora_cases(opts):
    """LORA_CASES as run_cases takes them, each checked by check_case on LoRA's keys; the base, one step of
    MODEL on one rank, made before the first."""
    base = []

    def check(shard, name, ranks, extra):
        if not base:
            work, run_keys = case_keys(opts.workdir, "moe_base", shard)
            failed = train(opts.mpiexec, opts.meshtrain, 1,
                           MODEL + run_keys + ["--parallel.ep", "1", "--train.steps", "1"])
            if failed:
                return [f"moe base: {failed}"]
            base.append(os.path.join(work, "ck", "step_00000001.h5"))
        lora = [base[0] if k == "BASE" else k for k in LORA_KEYS]
        return check_case(opts, shard, name, ranks, lora + extra, "saturated")

    return [(name, ranks, (check, extra)) for name, ranks, extra in LORA_CASES]


def main():
    opts = command_line(__doc__)
    cases = [(name, ranks, (extra, "saturated")) for name, ranks, extra in SATURATED]
    cases.append((DROPLESS[0], DROPLESS[1], (DROPLESS[2], "dropless")))
    cases.append((PADDED[0], PADDED[1], (PADDED[2], "padded")))
    return run_cases(opts, cases, lambda shard, name, ranks, case: check_case(opts, shard, name, ranks, *case))


if __name__ == "__main__":
    sys.exit(main())
