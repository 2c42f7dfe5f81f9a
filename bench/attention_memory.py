#!/usr/bin/python3
"""Memory of model.attention = fused against materialized as T grows: planned (`meshtrain plan --json`,
rank 0's activations category and predicted peak RSS) and measured (`meshtrain train` for two steps on
one rank: the ledger's activations category and the peak RSS its metrics line reports), for a small
GPT-2 at micro-batch 1.

usage: bench/attention_memory.py [--build build/release] [--seq-lens 1024 4096 16384]
                                 [--layers 2 --heads 4 --d_model 64] [--attention fused materialized]

Under fused a block keeps one fp32 log-sum-exp per row and head instead of the B·H·T² probabilities,
so the activations grow linearly in T; the last lines print each kind's activations ratio between the
two largest T (fused: about their ratio, materialized: about its square).
"""
import argparse
import json
import os
import subprocess
import tempfile

import trainer_output
from benchmark import write_random_shard

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def keys(args, T, attention):
    return ["--model.layers", str(args.layers), "--model.heads", str(args.heads), "--model.d_model",
            str(args.d_model), "--model.vocab", "256", "--model.seq_len", str(T), "--model.attention", attention,
            "--train.micro_batch", "1", "--train.global_batch", "1"]


def planned(binary, args, T, attention):
    out = subprocess.run([binary, "plan", "--world", "1", "--json"] + keys(args, T, attention), check=True,
                         capture_output=True, text=True).stdout
    rank = json.loads(out)["per_rank"][0]
    return rank["memory"]["activations"], rank["peak_rss"]


def measured(binary, args, T, attention):
    with tempfile.TemporaryDirectory() as tmp:
        shard, metrics = os.path.join(tmp, "tokens.bin"), os.path.join(tmp, "metrics.jsonl")
        write_random_shard(shard, 3 * T + 1, 256)
        subprocess.run([binary, "train", "--data.train", shard, "--train.steps", "2", "--checkpoint.dir",
                        os.path.join(tmp, "ckpt"), "--checkpoint.resume", "never", "--log.metrics", metrics]
                       + keys(args, T, attention), check=True, stdout=subprocess.DEVNULL)
        memory = trainer_output.read_metrics(metrics)[-1]["memory"]
    return memory["activations"], memory["peak_rss"]


def mib(n):
    return f"{n / 2**20:10.1f}"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=os.path.join(ROOT, "build", "release"))
    ap.add_argument("--seq-lens", type=int, nargs="+", default=[1024, 4096, 16384])
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--d_model", type=int, default=64)
    ap.add_argument("--attention", nargs="+", default=["fused", "materialized"])
    args = ap.parse_args()
    binary = os.path.join(args.build, "bin", "meshtrain")

    print(f"GPT-2 L{args.layers} H{args.heads} C{args.d_model}, micro-batch 1, one rank, fp32 (MiB)")
    print(f"  {'attention':13} {'T':>6} {'act. plan':>10} {'act. run':>10} {'rss plan':>10} {'rss run':>10}")
    rows = []
    for attention in args.attention:
        for T in args.seq_lens:
            plan_act, plan_rss = planned(binary, args, T, attention)
            run_act, run_rss = measured(binary, args, T, attention)
            rows.append(dict(attention=attention, seq_len=T, planned_activations=plan_act,
                             measured_activations=run_act, planned_peak_rss=plan_rss, measured_peak_rss=run_rss))
            print(f"  {attention:13} {T:6} {mib(plan_act)} {mib(run_act)} {mib(plan_rss)} {mib(run_rss)}")
    if len(args.seq_lens) >= 2:
        a, b = sorted(args.seq_lens)[-2:]
        for attention in args.attention:
            act = {r["seq_len"]: r["measured_activations"] for r in rows if r["attention"] == attention}
            print(f"  {attention}: activations at T {b} / T {a} = {act[b] / act[a]:.2f} (T ratio {b / a:g})")
    print(json.dumps({"results": rows}))


if __name__ == "__main__":
    main()
