#!/usr/bin/python3
"""Training throughput of meshtrain on a named config, beside the machine's sgemm rate and
PyTorch eager on the same shape, batch and cores, all measured in this one run.

usage: bench/benchmark.py [--build build/release] [--config jobs/bench/gpt2_l6_c384.ini]
                          [--steps 12] [--warmup 2] [--torch-threads 1]

Prints tokens/s and model FLOP/s (6N + 6·L·C·T per token, llm.c's count) for meshtrain and for
PyTorch, and each as a fraction of the sgemm rate meshtrain's GEMM dispatch reaches on the
model's own GEMM shapes. Steps before --warmup are not counted; the median step is reported.
"""
import argparse
import configparser
import json
import os
import subprocess
import sys
import tempfile

import numpy as np

import trainer_output

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def model_shape(config_path):
    ini = configparser.ConfigParser()
    ini.read(config_path)
    m, t = ini["model"], ini["train"]
    return dict(layers=int(m["layers"]), heads=int(m["heads"]), d_model=int(m["d_model"]),
                vocab=int(m["vocab"]), seq_len=int(m["seq_len"]),
                batch=int(t["micro_batch"]), global_batch=int(t["global_batch"]))


def write_random_shard(path, tokens, vocab, seed=0):
    header = np.zeros(256, dtype="<i4")
    header[:3] = (20240520, 1, tokens)
    data = np.random.default_rng(seed).integers(0, vocab, size=tokens, dtype=np.uint16)
    with open(path, "wb") as f:
        f.write(header.tobytes())
        f.write(data.astype("<u2").tobytes())


def run_json(cmd, env=None):
    out = subprocess.run(cmd, check=True, capture_output=True, text=True, env=env).stdout
    return json.loads([line for line in out.splitlines() if line.startswith("{")][-1])


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=os.path.join(ROOT, "build", "release"))
    ap.add_argument("--config", default=os.path.join(ROOT, "jobs", "bench", "gpt2_l6_c384.ini"))
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--torch-threads", type=int, default=1)
    args = ap.parse_args()

    shape = model_shape(args.config)
    if shape["global_batch"] != shape["batch"]:
        sys.exit("benchmark configs use one micro-batch per step (global_batch == micro_batch)")
    n_rows = shape["batch"] * shape["seq_len"]
    binary = os.path.join(args.build, "bin")

    roofline = run_json([os.path.join(binary, "bench_sgemm"), "--model-shapes", str(n_rows),
                         str(shape["d_model"]), str(shape["vocab"]), "--seconds", "3"])
    sgemm = roofline["sgemm_flops_per_s"]

    with tempfile.TemporaryDirectory() as tmp:
        shard = os.path.join(tmp, "tokens.bin")
        write_random_shard(shard, n_rows * (args.steps + 1) + 1, shape["vocab"])
        metrics = os.path.join(tmp, "metrics.jsonl")
        subprocess.run([os.path.join(binary, "meshtrain"), "train", "--config", args.config,
                        "--data.train", shard, "--train.steps", str(args.steps),
                        "--checkpoint.dir", os.path.join(tmp, "ckpt"), "--log.metrics", metrics,
                        "--log.every", str(args.steps)], check=True, stdout=subprocess.DEVNULL)
        records = trainer_output.read_metrics(metrics)
    counted = trainer_output.after_warmup(records, args.warmup)
    ours_tps = trainer_output.median_after_warmup(records, "tokens_per_s", args.warmup)
    flops_per_token = counted[0]["model_flops_per_s"] / counted[0]["tokens_per_s"]

    env = dict(os.environ)
    torch = run_json(["/usr/bin/python3", os.path.join(HERE, "torch_gpt2_bench.py"),
                      "--layers", str(shape["layers"]), "--heads", str(shape["heads"]),
                      "--d_model", str(shape["d_model"]), "--vocab", str(shape["vocab"]),
                      "--seq_len", str(shape["seq_len"]), "--batch", str(shape["batch"]),
                      "--steps", str(args.steps), "--warmup", str(args.warmup),
                      "--threads", str(args.torch_threads)], env=env)

    rows = [("meshtrain", ours_tps), ("pytorch eager", torch["tokens_per_s"])]
    print(f"config {os.path.relpath(args.config, ROOT)}: L{shape['layers']} H{shape['heads']} "
          f"C{shape['d_model']} V{shape['vocab']} T{shape['seq_len']}, {shape['batch']}x{shape['seq_len']} "
          f"tokens/step, fp32, {os.cpu_count()} cores")
    print(f"flops per token (6N + 6LCT): {flops_per_token / 1e6:.2f} M")
    print(f"meshtrain's BLAS: {roofline['blas']}, kernels {roofline['blas_kernels'] or '-'}, "
          f"{roofline['blas_threads']} threads (OPENBLAS_CORETYPE {os.environ.get('OPENBLAS_CORETYPE', 'unset')}); "
          f"PyTorch's: {torch['blas']}, kernels {torch['blas_kernels'] or '-'}")
    print(f"sgemm on the model's GEMM shapes: {sgemm / 1e9:.1f} GFLOP/s")
    print(f"{'':15} {'tokens/s':>10} {'GFLOP/s':>9} {'of sgemm':>9}")
    for name, tps in rows:
        flops = tps * flops_per_token
        print(f"{name:15} {tps:10.0f} {flops / 1e9:9.1f} {flops / sgemm:9.2f}")
    print(f"meshtrain / pytorch: {ours_tps / torch['tokens_per_s']:.2f}x")
    print(json.dumps({"meshtrain_tokens_per_s": ours_tps, "torch_tokens_per_s": torch["tokens_per_s"],
                      "sgemm_flops_per_s": sgemm, "flops_per_token": flops_per_token,
                      "meshtrain_fraction_of_sgemm": ours_tps * flops_per_token / sgemm,
                      "torch_fraction_of_sgemm": torch["tokens_per_s"] * flops_per_token / sgemm,
                      "blas": roofline["blas"], "blas_kernels": roofline["blas_kernels"],
                      "torch_blas": torch["blas"], "torch_blas_kernels": torch["blas_kernels"]}))


if __name__ == "__main__":
    main()
