#!/usr/bin/env python3
"""`meshtrain plan --json` predicts rank 0's peak resident memory within 15 % (the issue's done-when)
for a model whose states dominate memory, across layouts and ZeRO stages.

Each case trains the model for 2 steps under mpiexec and reads `memory.peak_rss` from the last
metrics record (rank 0's VmHWM, written by the trainer), then compares it with `per_rank[0].peak_rss`
of `meshtrain plan --json` on the same keys. A metrics file without `memory.peak_rss` fails the test:
the trainer must report it.

usage: test_plan_rss.py --meshtrain BIN --workdir DIR [--mpiexec MPIEXEC] [--tolerance 0.15]
                       [--arch gpt2|llama|moe|lora]
"""
import argparse
import json
import os
import shutil
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'oracle'))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gpt2_torch  # noqa: E402
from plan_and_train import case_keys, plan_json, train  # noqa: E402

# L4 H8 C512: 12.8M parameters, 16 bytes each = 195 MiB of model state against ~35 MiB of runtime
# and a few MiB of activations at micro_batch 1, T 64.
MODEL = ["--model.layers", "4", "--model.heads", "8", "--model.d_model", "512", "--model.seq_len", "64",
         "--train.micro_batch", "1", "--train.global_batch", "2", "--train.steps", "2"]
# (name, ranks, keys)
CASES = [
    ("single", 1, []),
    ("dp2", 2, []),
    ("dp2_zero2", 2, ["--parallel.zero", "2"]),
    ("tp2", 2, ["--parallel.tp", "2"]),
    ("pp2_zero1", 2, ["--parallel.pp", "2", "--parallel.zero", "1"]),
    ("dp2_zero3", 2, ["--parallel.zero", "3"]),
    ("dp2_zero1_bf16", 2, ["--parallel.zero", "1", "--train.precision", "bf16"]),
]
# --arch llama: L4 H8 KV4 C512 with the LLaMA rule's SwiGLU width (8·512/3 rounded up to 1536):
# 12.9M parameters (embed_tokens and lm_head untied), states again ~200 MiB. The cases cover
# grouped-query tensor parallelism, an untied pipeline and ZeRO's sharding in 16 bits.
LLAMA_MODEL = ["--model.arch", "llama", "--model.kv_heads", "4"] + MODEL
LLAMA_CASES = [
    ("llama_single", 1, []),
    ("llama_tp2", 2, ["--parallel.tp", "2"]),
    ("llama_pp2_zero1", 2, ["--parallel.pp", "2", "--parallel.zero", "1"]),
    ("llama_dp2_zero3_bf16", 2, ["--parallel.zero", "3", "--train.precision", "bf16"]),
]
# --arch moe: that llama with blocks 0 and 2 MoE (4 routed experts of width 512, top-2, capacity
# 1.25, and a shared expert): 14.4M parameters, 11.3M active. Expert parallelism (ep 2) shards the
# routed experts and their states over the dp group; each case sets ep and ZeRO against fp32 and
# bf16 (the experts' 16-bit grouped products take the host's GEMM workspace).
MOE_MODEL = LLAMA_MODEL + ["--model.experts", "4", "--model.experts_per_token", "2", "--model.expert_hidden", "512",
                           "--model.moe_every", "2", "--model.shared_experts", "1", "--model.capacity_factor", "1.25"]
MOE_CASES = [
    ("moe_dp2", 2, ["--parallel.dp", "2"]),
    ("moe_dp2_zero3_bf16", 2, ["--parallel.dp", "2", "--parallel.zero", "3", "--train.precision", "bf16"]),
    ("moe_dp2_ep2_bf16", 2, ["--parallel.dp", "2", "--parallel.ep", "2", "--train.precision", "bf16"]),
    ("moe_dp4_ep2_zero3", 4, ["--parallel.dp", "4", "--parallel.ep", "2", "--parallel.zero", "3",
                              "--train.global_batch", "4"]),
]
# --arch lora: LoRA (rank 8) on that llama, its base a checkpoint of one dense step (BASE below): the
# adapters' states, the frozen base in the compute precision and the adapters' activations. One
# rank, a pipeline, ZeRO-3 in bf16 (the base sharded in 16 bits, staged tensor by tensor as it loads),
# all linears and attention only under full recomputation.
LORA_MODEL = LLAMA_MODEL + ["--lora.rank", "8", "--checkpoint.init_weights", "BASE"]
LORA_CASES = [
    ("lora_single", 1, []),
    ("lora_pp2", 2, ["--parallel.pp", "2"]),
    ("lora_pp2_zbh1", 2, ["--parallel.pp", "2", "--parallel.schedule", "zb-h1"]),
    ("lora_dp2_zero3_bf16", 2, ["--parallel.dp", "2", "--parallel.zero", "3", "--train.precision", "bf16"]),
    ("lora_attention_recompute", 1, ["--lora.targets", "q_proj,k_proj,v_proj,o_proj", "--train.recompute", "full"]),
]
# Then LoRA on the MoE model (its base MOE_BASE, one step of it), all linears: the router's, the shared
# expert's and every routed expert's adapters (their h over the rows the rank's experts receive), with
# expert parallelism in bf16 with lora.dropout (the rows' assignment ids kept, its scratch over the received
# rows), and on one rank under full recomputation. (name, ranks, keys, model)
LORA_MOE_MODEL = MOE_MODEL + ["--lora.rank", "8", "--checkpoint.init_weights", "MOE_BASE"]
LORA_CASES += [
    ("lora_moe_dp2_ep2_bf16_dropout", 2, ["--parallel.dp", "2", "--parallel.ep", "2", "--train.precision", "bf16",
                                          "--lora.dropout", "0.1"], LORA_MOE_MODEL),
    ("lora_moe_recompute", 1, ["--train.recompute", "full"], LORA_MOE_MODEL),
]
FAMILIES = {"gpt2": (MODEL, CASES), "llama": (LLAMA_MODEL, LLAMA_CASES), "moe": (MOE_MODEL, MOE_CASES),
            "lora": (LORA_MODEL, LORA_CASES)}
# LoRA's bases, each the model after one dense step on one rank, by the name its cases give init_weights.
BASES = {"BASE": LLAMA_MODEL, "MOE_BASE": MOE_MODEL}


def write_shard(path, tokens):
    """A shard of `tokens` random tokens (the format is gpt2_torch's, tests/oracle)."""
    gpt2_torch.write_shard(path, np.random.default_rng(0).integers(0, 256, size=tokens))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--meshtrain", required=True)
    ap.add_argument("--workdir", required=True)
    ap.add_argument("--mpiexec", default=shutil.which("mpiexec"))
    ap.add_argument("--tolerance", type=float, default=0.15)
    ap.add_argument("--arch", choices=sorted(FAMILIES), default="gpt2", help="the model family's model and cases")
    opts = ap.parse_args()
    model, cases = FAMILIES[opts.arch]
    shutil.rmtree(opts.workdir, ignore_errors=True)
    os.makedirs(opts.workdir)
    shard = os.path.join(opts.workdir, "shard.bin")
    write_shard(shard, 100_000)
    failures = []
    bases = {}  # a base's name → its checkpoint, made when a case first names it

    def with_bases(keys):
        for k in keys:
            if k in BASES and k not in bases:
                work, run_keys = case_keys(opts.workdir, k.lower(), shard)
                failed = train(opts.mpiexec, opts.meshtrain, 1, BASES[k] + run_keys + ["--train.steps", "1"])
                if failed:
                    return f"base {k}: {failed}"
                bases[k] = os.path.join(work, "ck", "step_00000001.h5")
        return [bases.get(k, k) for k in keys]

    print(f"{'case':<24} {'predicted MiB':>14} {'measured MiB':>13} {'error':>7}")
    for name, ranks, extra, *own_model in cases:
        case_model = with_bases(own_model[0] if own_model else model)
        if isinstance(case_model, str):
            failures.append(case_model)
            continue
        work, run_keys = case_keys(opts.workdir, name, shard)
        metrics = os.path.join(work, "metrics.jsonl")
        keys = case_model + extra + run_keys + ["--log.metrics", metrics]
        plan = plan_json(opts.meshtrain, ranks, keys)
        if isinstance(plan, str):
            failures.append(f"{name}: {plan}")
            continue
        planned_rank = plan["per_rank"][0]
        predicted = planned_rank["peak_rss"]
        failed = train(opts.mpiexec, opts.meshtrain, ranks, keys)
        if failed:
            failures.append(f"{name}: {failed}")
            continue
        with open(metrics) as f:
            last = [json.loads(line) for line in f if line.strip()][-1]
        measured = last.get("memory", {}).get("peak_rss")
        if not measured:
            failures.append(f"{name}: the metrics record has no memory.peak_rss (the trainer must write rank 0's "
                            f"peak RSS there); record: {json.dumps(last)}")
            continue
        # Every category is sized by the code that allocates it: they must agree to the byte.
        for category, planned_bytes in planned_rank["memory"].items():
            if last["memory"].get(category) != planned_bytes:
                failures.append(f"{name}: {category} planned {planned_bytes} B, allocated {last['memory'].get(category)} B")
        error = (predicted - measured) / measured
        print(f"{name:<24} {predicted / 2**20:>14.1f} {measured / 2**20:>13.1f} {error:>+7.1%}")
        if abs(error) > opts.tolerance:
            failures.append(f"{name}: predicted peak_rss {predicted} B, measured {measured} B: {error:+.1%}, "
                            f"beyond ±{opts.tolerance:.0%}")
    for f in failures:
        print("FAIL", f)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
