#!/usr/bin/python3
"""Long contexts over ranks (issue 43): what sequence and context parallelism take off a rank, measured and
planned, and the longest context `plan` finds for two published shapes.

1. Activations per rank of a small GPT-2 (L2 H4 C64, micro-batch 1, fp32) at each T under cp 1, 2, 4 and tp 2
   with and without sequence parallelism: measured by the trainer's ledger (the activations column of the
   memory table `train` prints at start, rank 0, read from a run stopped once it has printed it: the
   buffers are allocated before the first step) beside `plan --json`'s rank-0 activations.
2. `plan`'s largest model.seq_len (max_seq_len) for GPT-2 124M and a Llama-3.2-1B shape on one H200 and on
   8 (the h200-sxm-8 preset), bf16, full recomputation, ZeRO-1, micro-batch 1, by layout.

usage: bench/context_memory.py [--build build/release] [--seq-lens 8192 32768] [--mpiexec mpiexec]
"""
import argparse
import json
import os
import signal
import subprocess
import tempfile

from benchmark import write_random_shard

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

# (name, ranks, keys) of part 1.
LAYOUTS = [
    ("cp 1", 1, []),
    ("cp 2", 2, ["--parallel.cp", "2"]),
    ("cp 4", 4, ["--parallel.cp", "4"]),
    ("tp 2", 2, ["--parallel.tp", "2"]),
    ("tp 2 + SP", 2, ["--parallel.tp", "2", "--parallel.sequence_parallel", "true"]),
]

GPT2_124M = ["--model.layers", "12", "--model.heads", "12", "--model.d_model", "768", "--model.vocab", "50257"]
LLAMA_1B = ["--model.arch", "llama", "--model.layers", "16", "--model.heads", "32", "--model.kv_heads", "8",
            "--model.d_model", "2048", "--model.ffn_hidden", "8192", "--model.vocab", "128256",
            "--model.tie_embeddings", "true"]
LONG_RUN = ["--train.precision", "bf16", "--train.recompute", "full", "--parallel.zero", "1",
            "--train.micro_batch", "1", "--model.seq_len", "8192"]
# (name, world, keys) of part 2; global_batch = dp so that accum is 1.
LONG_LAYOUTS = [
    ("1 GPU", 1, ["--train.global_batch", "1"]),
    ("dp 8", 8, ["--train.global_batch", "8"]),
    ("dp 2 × tp 4", 8, ["--parallel.tp", "4", "--train.global_batch", "2"]),
    ("dp 2 × tp 4 + SP", 8, ["--parallel.tp", "4", "--parallel.sequence_parallel", "true", "--train.global_batch", "2"]),
    ("cp 8", 8, ["--parallel.cp", "8", "--train.global_batch", "1"]),
    ("cp 2 × tp 4 + SP", 8, ["--parallel.cp", "2", "--parallel.tp", "4", "--parallel.sequence_parallel", "true",
                            "--train.global_batch", "1"]),
]


def small_keys(T):
    return ["--model.layers", "2", "--model.heads", "4", "--model.d_model", "64", "--model.vocab", "256",
            "--model.seq_len", str(T), "--train.micro_batch", "1", "--train.global_batch", "1"]


def planned_activations(binary, ranks, keys):
    out = subprocess.run([binary, "plan", "--world", str(ranks), "--json"] + keys, check=True, capture_output=True,
                         text=True).stdout
    return json.loads(out)["per_rank"][0]["memory"]["activations"]


def ledger_activations(binary, mpiexec, ranks, keys):
    """Rank 0's activations (bytes, from MiB to 2 decimals) in the memory table `train` prints at start."""
    with tempfile.TemporaryDirectory() as tmp:
        shard = os.path.join(tmp, "tokens.bin")
        write_random_shard(shard, 3 * int(keys[keys.index("--model.seq_len") + 1]) + 1, 256)
        launcher = [mpiexec, "-n", str(ranks)] if ranks > 1 else []
        cmd = launcher + [binary, "train", "--data.train", shard, "--train.steps", "1", "--checkpoint.dir",
                          os.path.join(tmp, "ckpt"), "--checkpoint.resume", "never"] + keys
        p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
        try:
            header = None
            for line in p.stdout:
                if header is None and "memory per rank at start" in line:
                    header = next(p.stdout).split()
                    row = next(p.stdout).split()
                    return float(row[header.index("activations")]) * 2**20
            raise RuntimeError(f"no memory table from {' '.join(cmd)}")
        finally:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()


def mib(n):
    return f"{n / 2**20:10.2f}"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=os.path.join(ROOT, "build", "release"))
    ap.add_argument("--seq-lens", type=int, nargs="+", default=[8192, 32768])
    ap.add_argument("--mpiexec", default="mpiexec")
    args = ap.parse_args()
    binary = os.path.join(args.build, "bin", "meshtrain")
    results = {"activations": [], "longest_context": []}

    print("1. GPT-2 L2 H4 C64, micro-batch 1, fp32: activations per rank (MiB), rank 0")
    print(f"  {'T':>6} {'layout':10} {'measured':>10} {'planned':>10} {'÷ cp 1':>8}")
    for T in args.seq_lens:
        base = None
        for name, ranks, keys in LAYOUTS:
            measured = ledger_activations(binary, args.mpiexec, ranks, small_keys(T) + keys)
            planned = planned_activations(binary, ranks, small_keys(T) + keys)
            base = base or measured
            results["activations"].append(dict(seq_len=T, layout=name, measured=measured, planned=planned))
            print(f"  {T:6} {name:10} {mib(measured)} {mib(planned)} {base / measured:8.2f}")

    print("\n2. plan's largest model.seq_len, bf16, full recomputation, ZeRO-1, micro-batch 1, h200-sxm-8")
    print(f"  {'model':14} {'layout':18} {'max T':>9}")
    for model, shape in (("GPT-2 124M", GPT2_124M), ("Llama-3.2-1B", LLAMA_1B)):
        for name, world, keys in LONG_LAYOUTS:
            out = subprocess.run([binary, "plan", "--world", str(world), "--cluster", "h200-sxm-8", "--json"] + shape
                                 + LONG_RUN + keys, check=True, capture_output=True, text=True).stdout
            longest = json.loads(out)["max_seq_len"]
            results["longest_context"].append(dict(model=model, layout=name, world=world, max_seq_len=longest))
            print(f"  {model:14} {name:18} {longest:9}")
    print(json.dumps(results))


if __name__ == "__main__":
    main()
