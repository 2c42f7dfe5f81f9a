"""Runs and figures the device check shares with make_reference.py: the small model's data and keys, the
throughput run's keys, the comparisons and the FLOP count."""
import json
import os
import re

import token_data
from check_runner import StepFailure

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))

# H200 SXM, dense bf16 (NVIDIA's datasheet; the h200-sxm-8 preset of meshtrain plan has the same).
H200_BF16_PEAK_FLOPS = 989e12
LLMC_REFERENCE = ("llm.c (karpathy/llm.c, GPT-2 124M-1.5B reproductions on 8xH100 SXM, bf16): "
                  "about 38-50 % MFU")
TOLERANCE = {"fp32": 1e-4, "bf16": 2e-3}
WARMUP_STEPS = 3  # not counted in the throughput medians (cuBLAS heuristics, first allocations)
OOM = re.compile(r"out of memory|cudaErrorMemoryAllocation|Kokkos failed to allocate|Allocation of .* failed",
                 re.IGNORECASE)


def small_text_path(work):
    return os.path.join(work, "small_text.txt")


def make_small_shard(work, run, argv_of):
    """English-like text (the same bytes everywhere) through `meshtrain prepare`."""
    text, shard = small_text_path(work), os.path.join(work, "small.bin")
    with open(text, "w") as f:
        f.write(token_data.english_like_text(40_000, seed=2024))
    result = run(argv_of("meshtrain", "prepare", "--text", text, "--out", shard), "small_prepare")
    if result.rc != 0:
        raise StepFailure(f"meshtrain prepare exited {result.rc}: {result.tail(1500)}")
    return shard


def small_run_keys(precision, shard, out, init_weights=os.path.join(HERE, "init_weights_small.h5")):
    return ["--config", os.path.join(HERE, "small.ini"), "--train.precision", precision, "--data.train", shard,
            "--checkpoint.dir", os.path.join(out, "ck"), "--log.metrics", os.path.join(out, "metrics.jsonl")] + (
            ["--checkpoint.init_weights", init_weights] if init_weights else [])


def throughput_keys(config, shard, out, micro):
    return ["--config", config, "--train.micro_batch", str(micro), "--train.global_batch", str(micro),
            "--data.train", shard, "--checkpoint.dir", os.path.join(out, "ck"),
            "--log.metrics", os.path.join(out, "metrics.jsonl")]


def max_relative_difference(got, want):
    if len(got) != len(want) or not got:
        return float("inf")
    return max(abs(a - b) / abs(b) for a, b in zip(got, want))


def model_flops_per_token(ini):
    """llm.c's count: 6N + 6·L·C·T, N the parameters with wte counted once."""
    m = {k: int(v) for k, v in ini["model"].items()}
    L, C, T, V = m["layers"], m["d_model"], m["seq_len"], m["vocab"]
    n = V * C + T * C + L * (12 * C * C + 13 * C) + 2 * C
    return 6 * n + 6 * L * C * T


def read_ini(path):
    import configparser
    parser = configparser.ConfigParser(inline_comment_prefixes=("#",))
    parser.read(path)
    return {s: dict(parser[s]) for s in parser.sections()}


def gtest_counts(report):
    try:
        with open(report) as f:
            suites = json.load(f)
    except (OSError, ValueError):
        return {"error": "no gtest report"}
    cases = [c for s in suites["testsuites"] for c in s["testsuite"]]
    return {"tests": len(cases), "failures": suites["failures"],
            "skipped": [f"{c['classname']}.{c['name']}" for c in cases if c.get("result") == "SKIPPED"]}


def skip_reasons(output):
    return "; ".join(m.strip() for m in re.findall(r"Skipped\n(.*)", output)) or output[-1500:]
