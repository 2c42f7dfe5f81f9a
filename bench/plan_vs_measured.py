#!/usr/bin/python3
"""`meshtrain plan`'s predictions beside measured training runs on this machine: step time (the
median step_time_s of the steps after --warmup) and every rank's peak RSS (/usr/bin/time).

usage: bench/plan_vs_measured.py [--build build/release] [--config jobs/bench/gpt2_l6_c384.ini]
                                 [--steps 6] [--warmup 2] [--repeats 1] [--layout WORLD,TP,PP,MICRO ...] [--json]

Each --layout trains the config with those degrees and micro-batch (dp = world / (tp · pp)) on a
random shard under mpiexec, and plans the same keys with `meshtrain plan --json` (local preset).
With --repeats, each layout runs that many times and the fastest median counts (the machine is
shared: other work only ever slows a run down); --quiet waits before each run, up to two minutes,
for the CPUs to be at most 25 % busy.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np

import trainer_output

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'tests', 'oracle'))
import gpt2_torch  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
DEFAULT_LAYOUTS = ["1,1,1,8", "2,1,1,4", "2,2,1,8", "2,1,2,2"]


def write_shard(path, tokens, vocab=256):
    """A shard of `tokens` random tokens (the format is gpt2_torch's, tests/oracle)."""
    gpt2_torch.write_shard(path, np.random.default_rng(0).integers(0, vocab, size=tokens))


def cpu_busy(seconds=3.0):
    """Fraction of all CPUs busy over the next `seconds` (from /proc/stat)."""
    def sample():
        with open("/proc/stat") as f:
            fields = [int(x) for x in f.readline().split()[1:]]
        return sum(fields), fields[3] + fields[4]  # total, idle + iowait
    t0, i0 = sample()
    time.sleep(seconds)
    t1, i1 = sample()
    return 1 - (i1 - i0) / max(1, t1 - t0)


def wait_for_quiet(limit_s=120, busy=0.25):
    start = time.time()
    while time.time() - start < limit_s and cpu_busy() > busy:
        pass


def run_layout(binary, config, world, tp, pp, micro, steps, warmup, work, extra):
    keys = ["--config", config, "--parallel.tp", str(tp), "--parallel.pp", str(pp), "--train.micro_batch", str(micro),
            "--train.steps", str(steps), "--data.train", os.path.join(work, "shard.bin"),
            "--checkpoint.dir", os.path.join(work, "ck"), "--checkpoint.resume", "never",
            "--log.metrics", os.path.join(work, "metrics.jsonl")] + extra
    plan = trainer_output.plan(binary, world, keys)
    for f in os.listdir(work):
        if f.startswith("rss.") or f == "metrics.jsonl":
            os.remove(os.path.join(work, f))
    inner = (f"exec /usr/bin/time -f %M -o {work}/rss.$PMI_RANK {binary} train {' '.join(keys)} "
             f"> {work}/out.$PMI_RANK 2>&1")
    subprocess.run(["mpiexec", "-n", str(world), "sh", "-c", inner], check=True, cwd=work, stdin=subprocess.DEVNULL)
    records = trainer_output.read_metrics(os.path.join(work, "metrics.jsonl"))
    rss = []
    for r in range(world):
        with open(os.path.join(work, f"rss.{r}")) as f:
            rss.append(int(f.read().split()[-1]) * 1024)
    with open(os.path.join(work, "out.0")) as f:
        out0 = f.read()
    tables = trainer_output.timing_tables(out0)
    timing = {kind: tables[0][kind]["median"] for kind in trainer_output.TIMING_KINDS} if tables else {}
    return {
        "layout": f"dp{plan['layout']['dp']} tp{tp} pp{pp} b{micro}",
        "accum": plan["effective_batch"]["accum"],
        "predicted": plan["step_time"],
        "measured_step_s": trainer_output.median_after_warmup(records, "step_time_s", warmup),
        "measured_steps_s": [r["step_time_s"] for r in records],
        "measured_median_rank_s": timing,
        "predicted_peak_rss": [r["peak_rss"] for r in plan["per_rank"]],
        "measured_peak_rss": rss,
        "metrics_peak_rss": records[-1].get("memory", {}).get("peak_rss"),
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=os.path.join(ROOT, "build", "release"))
    ap.add_argument("--config", default=os.path.join(ROOT, "jobs", "bench", "gpt2_l6_c384.ini"))
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--quiet", action="store_true", help="wait for idle CPUs before each run")
    ap.add_argument("--layout", action="append", help="WORLD,TP,PP,MICRO (repeatable)")
    ap.add_argument("--json", action="store_true", help="print the results as JSON too")
    ap.add_argument("extra", nargs="*", help="more train keys, after --")
    args = ap.parse_args()
    binary = os.path.join(args.build, "bin", "meshtrain")
    results = []
    with tempfile.TemporaryDirectory(prefix="meshtrain_plan_vs_measured_") as work:
        write_shard(os.path.join(work, "shard.bin"), 1_000_000)
        for spec in args.layout or DEFAULT_LAYOUTS:
            world, tp, pp, micro = map(int, spec.split(","))
            runs = []
            for _ in range(args.repeats):
                if args.quiet:
                    wait_for_quiet()
                runs.append(run_layout(binary, os.path.abspath(args.config), world, tp, pp, micro, args.steps,
                                       args.warmup, work, args.extra))
            best = min(runs, key=lambda r: r["measured_step_s"])
            best["measured_step_s_runs"] = [r["measured_step_s"] for r in runs]
            results.append(best)
    with open("/proc/loadavg") as f:
        load = f.read().split()[:3]
    print(f"load average during the runs' end: {' '.join(load)} (2 cores)")
    print(f"{'layout':<18} {'accum':>5} {'compute':>8} {'tp':>7} {'pp':>7} {'dp':>7} {'bubble':>7} {'pred s':>7} "
          f"{'meas s':>7} {'meas/pred':>9} | {'rss0 pred':>9} {'rss0 meas':>9} {'err':>6}")
    for r in results:
        p = r["predicted"]
        rss_p, rss_m = r["predicted_peak_rss"][0], r["measured_peak_rss"][0]
        print(f"{r['layout']:<18} {r['accum']:>5} {p['compute_s']:>8.3f} {p['tp_comm_s']:>7.3f} {p['pp_comm_s']:>7.3f} "
              f"{p['dp_comm_s']:>7.3f} {p['bubble_s']:>7.3f} {p['total_s']:>7.3f} {r['measured_step_s']:>7.3f} "
              f"{r['measured_step_s'] / p['total_s']:>9.2f} | {rss_p / 2**20:>9.1f} {rss_m / 2**20:>9.1f} "
              f"{(rss_p - rss_m) / rss_m:>+6.1%}")
    print("(seconds per step; rss in MiB, rank 0; measured: median step after the warm-up, peak RSS by /usr/bin/time)")
    if args.json:
        print(json.dumps(results, indent=1))


if __name__ == "__main__":
    sys.exit(main())
