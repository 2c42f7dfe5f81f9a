#!/usr/bin/python3
"""Training throughput of meshtrain on named configs — by default a GPT-2 and a llama of
comparable shape — beside the machine's sgemm rate and PyTorch eager on the same shape, batch and
cores, all measured in this one run.

usage: bench/benchmark.py [--build build/release] [--baseline OTHER_BUILD]
                          [--config jobs/bench/gpt2_l6_c384.ini jobs/bench/llama_l6_c384.ini]
                          [--steps 12] [--warmup 2] [--torch-threads 1] [--materialized]

For each config: tokens/s and model FLOP/s (6N + 6·L·C·T per token, llm.c's count; llama's N
leaves out embed_tokens, a lookup) for meshtrain and for PyTorch (bench/torch_gpt2_bench.py,
bench/torch_llama_bench.py), each as a fraction of the sgemm rate meshtrain's GEMM dispatch
reaches on that model's own GEMM shapes; then the ratios meshtrain / PyTorch per family and
llama / gpt2 per implementation. The shape, derived widths and FLOPs per token come from
`meshtrain plan --json` (the planner's model object), and PyTorch's own count of its model must
agree with it. Steps before --warmup are not counted; the median step is reported.

--baseline names another build (e.g. of the commit before a change, in a git worktree): its
meshtrain runs each config in this same run, beside this build's, and the ratio of the two is
printed, so a change's effect on speed is read off one run on one machine state.

--materialized runs this build's meshtrain once more on each config with model.attention =
materialized (the B·H·T² probabilities kept) beside the config's own (fused by default), and prints
the ratio of the two.

The build directory must be configured (tests/run.sh or jobs/quickstart.sh does it); the targets
the run needs (meshtrain and bench_sgemm; the baseline's meshtrain) are built in it first, which is
quick when they are up to date. Exit code 2: a build directory that is not configured, or whose
configuration leaves the benchmarks out (MESHTRAIN_BUILD_BENCH=OFF).
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

import numpy as np

import trainer_output

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def model_shape(binary, config_path):
    """The planner's model object (family, widths, parameters, FLOPs per token) and the batch."""
    plan = json.loads(subprocess.run([os.path.join(binary, "meshtrain"), "plan", "--config", config_path, "--world",
                                      "1", "--json"], check=True, capture_output=True, text=True).stdout)
    shape = dict(plan["model"])
    shape.update(batch=plan["effective_batch"]["micro_batch"], accum=plan["effective_batch"]["accum"])
    return shape


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


def sgemm_shapes(shape, n_rows):
    """bench_sgemm's arguments for the products of one block and the head of this family."""
    common = [str(n_rows), str(shape["d_model"]), str(shape["vocab"])]
    if shape["arch"] == "llama":
        head_size = shape["d_model"] // shape["heads"]
        qkv = (shape["heads"] + 2 * shape["kv_heads"]) * head_size
        return ["--llama-shapes"] + common + [str(qkv), str(shape["mlp_hidden"])]
    return ["--model-shapes"] + common


def torch_command(shape, args):
    """The PyTorch baseline of this family on the same shape and batch."""
    family = [os.path.join(HERE, "torch_gpt2_bench.py")]
    if shape["arch"] == "llama":
        family = [os.path.join(HERE, "torch_llama_bench.py"), "--kv_heads", str(shape["kv_heads"]),
                  "--ffn_hidden", str(shape["mlp_hidden"])]
    return ["/usr/bin/python3"] + family + [
        "--layers", str(shape["layers"]), "--heads", str(shape["heads"]), "--d_model", str(shape["d_model"]),
        "--vocab", str(shape["vocab"]), "--seq_len", str(shape["seq_len"]), "--batch", str(shape["batch"]),
        "--steps", str(args.steps), "--warmup", str(args.warmup), "--threads", str(args.torch_threads)]


def meshtrain_tokens_per_s(binary, config, n_rows, vocab, args, keys=()):
    """Median tokens/s of meshtrain's steps after the warm-up, on random tokens; keys: more --key value."""
    with tempfile.TemporaryDirectory() as tmp:
        shard = os.path.join(tmp, "tokens.bin")
        write_random_shard(shard, n_rows * (args.steps + 1) + 1, vocab)
        metrics = os.path.join(tmp, "metrics.jsonl")
        subprocess.run([os.path.join(binary, "meshtrain"), "train", "--config", config,
                        "--data.train", shard, "--train.steps", str(args.steps),
                        "--checkpoint.dir", os.path.join(tmp, "ckpt"), "--log.metrics", metrics,
                        "--log.every", str(args.steps)] + list(keys), check=True, stdout=subprocess.DEVNULL)
        records = trainer_output.read_metrics(metrics)
    return trainer_output.median_after_warmup(records, "tokens_per_s", args.warmup)


def build_targets(build, targets):
    """Builds `targets` in the configured CMake build directory `build`, saying so in one line."""
    if not os.path.isfile(os.path.join(build, "CMakeCache.txt")):
        sys.stderr.write(f"benchmark: {build} is not a configured build directory (run tests/run.sh or "
                         f"jobs/quickstart.sh first, or name one with --build)\n")
        sys.exit(2)
    with open(os.path.join(build, "CMakeCache.txt")) as f:
        if "bench_sgemm" in targets and "MESHTRAIN_BUILD_BENCH:BOOL=OFF" in f.read():
            sys.stderr.write(f"benchmark: {build} was configured with MESHTRAIN_BUILD_BENCH=OFF; use the release "
                             f"preset's build/release\n")
            sys.exit(2)
    print(f"benchmark: building {', '.join(targets)} in {os.path.relpath(build)}", flush=True)
    subprocess.run(["cmake", "--build", build, "--target", *targets, "-j", str(os.cpu_count() or 1)], check=True,
                   stdout=subprocess.DEVNULL)


def bench_config(binary, config, args):
    """sgemm on the model's shapes, meshtrain and PyTorch for one config: a dict of figures."""
    shape = model_shape(binary, config)
    if shape["accum"] != 1:
        sys.exit(f"{config}: benchmark configs use one micro-batch per step (global_batch == micro_batch)")
    n_rows = shape["batch"] * shape["seq_len"]
    roofline = run_json([os.path.join(binary, "bench_sgemm")] + sgemm_shapes(shape, n_rows) + ["--seconds", "3"])
    ours = meshtrain_tokens_per_s(binary, config, n_rows, shape["vocab"], args)
    base = (meshtrain_tokens_per_s(os.path.join(args.baseline, "bin"), config, n_rows, shape["vocab"], args)
            if args.baseline else None)
    materialized = (meshtrain_tokens_per_s(binary, config, n_rows, shape["vocab"], args,
                                           ("--model.attention", "materialized"))
                    if args.materialized else None)
    torch = run_json(torch_command(shape, args))
    if abs(torch["flops_per_token"] - shape["flops_per_token"]) > 1e-9 * shape["flops_per_token"]:
        sys.exit(f"{config}: PyTorch's model counts {torch['flops_per_token']} FLOP per token, the planner "
                 f"{shape['flops_per_token']}: not the same model")
    return dict(config=os.path.relpath(config, ROOT), shape=shape, sgemm_flops_per_s=roofline["sgemm_flops_per_s"],
                meshtrain_tokens_per_s=ours, baseline_tokens_per_s=base, materialized_tokens_per_s=materialized,
                torch_tokens_per_s=torch["tokens_per_s"],
                flops_per_token=shape["flops_per_token"], blas=roofline["blas"],
                blas_kernels=roofline["blas_kernels"], blas_threads=roofline["blas_threads"],
                torch_blas=torch["blas"], torch_blas_kernels=torch["blas_kernels"])


def print_config(r):
    s = r["shape"]
    widths = f" KV{s['kv_heads']} SwiGLU {s['mlp_hidden']}" if s["arch"] == "llama" else ""
    print(f"config {r['config']}: {s['arch']} L{s['layers']} H{s['heads']}{widths} C{s['d_model']} V{s['vocab']} "
          f"T{s['seq_len']}, {s['batch']}x{s['seq_len']} tokens/step, fp32, {os.cpu_count()} cores")
    print(f"  {s['parameters'] / 1e6:.2f}M parameters, {r['flops_per_token'] / 1e6:.2f} MFLOP per token; "
          f"sgemm on the model's GEMM shapes: {r['sgemm_flops_per_s'] / 1e9:.1f} GFLOP/s")
    print(f"  {'':15} {'tokens/s':>10} {'GFLOP/s':>9} {'of sgemm':>9}")
    rows = [("meshtrain", r["meshtrain_tokens_per_s"])]
    if r["baseline_tokens_per_s"] is not None:
        rows.append(("baseline build", r["baseline_tokens_per_s"]))
    if r["materialized_tokens_per_s"] is not None:
        rows.append(("materialized", r["materialized_tokens_per_s"]))
    for name, tps in rows + [("pytorch eager", r["torch_tokens_per_s"])]:
        flops = tps * r["flops_per_token"]
        print(f"  {name:15} {tps:10.0f} {flops / 1e9:9.1f} {flops / r['sgemm_flops_per_s']:9.2f}")
    print(f"  meshtrain / pytorch: {r['meshtrain_tokens_per_s'] / r['torch_tokens_per_s']:.2f}x")
    if r["baseline_tokens_per_s"] is not None:
        print(f"  baseline build / pytorch: {r['baseline_tokens_per_s'] / r['torch_tokens_per_s']:.2f}x; "
              f"meshtrain / baseline build: {r['meshtrain_tokens_per_s'] / r['baseline_tokens_per_s']:.2f}x")
    if r["materialized_tokens_per_s"] is not None:
        print(f"  meshtrain (model.attention {s['attention']}) / materialized: "
              f"{r['meshtrain_tokens_per_s'] / r['materialized_tokens_per_s']:.2f}x")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=os.path.join(ROOT, "build", "release"))
    ap.add_argument("--baseline", help="another build whose meshtrain runs each config beside this one's")
    ap.add_argument("--config", nargs="+", default=[os.path.join(ROOT, "jobs", "bench", name)
                                                    for name in ("gpt2_l6_c384.ini", "llama_l6_c384.ini")])
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--torch-threads", type=int, default=1)
    ap.add_argument("--materialized", action="store_true",
                    help="also run meshtrain with model.attention = materialized on each config")
    args = ap.parse_args()
    binary = os.path.join(args.build, "bin")
    build_targets(args.build, ["meshtrain", "bench_sgemm"])
    if args.baseline:
        build_targets(args.baseline, ["meshtrain"])

    results = [bench_config(binary, config, args) for config in args.config]
    first = results[0]
    print(f"meshtrain's BLAS: {first['blas']}, kernels {first['blas_kernels'] or '-'}, {first['blas_threads']} "
          f"threads (OPENBLAS_CORETYPE {os.environ.get('OPENBLAS_CORETYPE', 'unset')}); "
          f"PyTorch's: {first['torch_blas']}, kernels {first['torch_blas_kernels'] or '-'}")
    for r in results:
        print_config(r)
    by_arch = {r["shape"]["arch"]: r for r in results}
    if "gpt2" in by_arch and "llama" in by_arch:
        g, l = by_arch["gpt2"], by_arch["llama"]
        for who, key in (("meshtrain", "meshtrain_tokens_per_s"), ("pytorch", "torch_tokens_per_s")):
            print(f"llama / gpt2, {who}: {l[key] / g[key]:.2f}x tokens/s, "
                  f"{l[key] * l['flops_per_token'] / (g[key] * g['flops_per_token']):.2f}x model FLOP/s")
    print(json.dumps({"results": results}))


if __name__ == "__main__":
    main()
