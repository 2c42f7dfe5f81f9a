"""Reading what `meshtrain train` and `meshtrain plan` leave behind: the metrics file (one JSON
object per step), the per-rank timing tables the trainer prints, and `plan --json`.

Shared by bench/benchmark.py, bench/plan_vs_measured.py and slurm/scaling/study.py, so that a
"measured step" means the same thing in each: the median over the steps after the warm-up ones.
Standard library only (no numpy, no torch): the scaling collector runs on login nodes.
"""
import json
import re
import statistics
import subprocess

# The trainer's table (src/train/rank_timing.cpp):
#   per-rank time per step, steps 3–4 (4 ranks): min / median / max, slowest rank
#     compute          0.0142 /   0.0245 /   0.0254 s   rank 0
#     communication    0.0720 /   0.0990 /   0.1160 s   rank 2
#     all-to-all       0.0131 /   0.0150 /   0.0177 s   rank 3      (only once an all-to-all took time)
#     idle             0.0308 /   0.0491 /   0.0731 s   rank 1
#     pipeline idle: 29.9 % of rank time, schedule bubble (p − 1)/(m + p − 1) = 33.3 %
#     simulated at each stage's compute per micro-batch (…): 28.1 % idle (stage 0 2.10 / 3.90 / 0.00 ms, …)
_TABLE_HEAD = re.compile(r"^per-rank time per step, steps (\d+)[–-](\d+) \((\d+) ranks?\)")
_TABLE_ROW = re.compile(r"^\s+(compute|communication|all-to-all|idle)\s+([\d.]+) /\s+([\d.]+) /\s+([\d.]+) s\s+rank (\d+)")
_TABLE_PIPE = re.compile(r"^\s+pipeline idle: ([\d.]+) % of rank time, .*= ([\d.]+) %")
_TABLE_SIMULATED = re.compile(r"^\s+simulated at each stage's compute per micro-batch .*: ([\d.]+) % idle \((.*)\)")
_STAGE_COSTS = re.compile(r"stage (\d+) ([\d.]+) / ([\d.]+) / ([\d.]+) ms")
TIMING_KINDS = ("compute", "communication", "idle")
# The expert-parallel token exchange's row: a table without it had no all-to-all that took time.
ALL_TO_ALL = "all-to-all"


def read_metrics(path):
    """The metrics file's records, in file order."""
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def after_warmup(records, warmup):
    """The records of steps after the first `warmup` ones (step is 1-based)."""
    return [r for r in records if r["step"] > warmup]


def median_after_warmup(records, key, warmup):
    """Median of `key` over the steps after the warm-up; None when no step is left."""
    values = [r[key] for r in after_warmup(records, warmup)]
    return statistics.median(values) if values else None


def timing_tables(text):
    """Every per-rank timing table in a trainer's output, in order: dicts with `first` and `last`
    (the steps it covers), `ranks`, and for each of compute / communication / idle, and all-to-all
    where the table has that row, a dict of seconds per step (`min`, `median`, `max`) and the
    `slowest` rank; with pipeline parallelism also `pipeline_idle` and `schedule_bubble` (fractions
    of all ranks' time), `simulated_idle` (the schedule simulated at the measured compute) and `stage_costs_s`
    (each stage's forward, backward or input gradient, weight gradient seconds per micro-batch)."""
    tables = []
    for line in text.splitlines():
        m = _TABLE_HEAD.match(line)
        if m:
            tables.append({"first": int(m.group(1)), "last": int(m.group(2)), "ranks": int(m.group(3))})
            continue
        if not tables:
            continue
        m = _TABLE_ROW.match(line)
        if m and m.group(1) not in tables[-1]:
            tables[-1][m.group(1)] = {"min": float(m.group(2)), "median": float(m.group(3)),
                                      "max": float(m.group(4)), "slowest": int(m.group(5))}
            continue
        m = _TABLE_PIPE.match(line)
        if m:
            tables[-1]["pipeline_idle"] = float(m.group(1)) / 100
            tables[-1]["schedule_bubble"] = float(m.group(2)) / 100
            continue
        m = _TABLE_SIMULATED.match(line)
        if m:
            tables[-1]["simulated_idle"] = float(m.group(1)) / 100
            tables[-1]["stage_costs_s"] = [[float(c.group(k)) / 1e3 for k in (2, 3, 4)]
                                           for c in _STAGE_COSTS.finditer(m.group(2))]
    return [t for t in tables if all(k in t for k in TIMING_KINDS)]


def plan_command(binary, world, keys, options=()):
    """The `meshtrain plan --json` command line for `world` ranks, train keys and plan options."""
    return [binary, "plan", "--world", str(world), "--json", *options, *keys]


def plan(binary, world, keys, options=()):
    """`meshtrain plan --json`'s object; raises subprocess.CalledProcessError on refusal."""
    out = subprocess.run(plan_command(binary, world, keys, options), check=True, capture_output=True,
                         text=True).stdout
    return json.loads(out)
