#!/usr/bin/env python3
"""Scaling studies end to end (slurm/scaling/study.py, share/plot/plot_scaling.py).

usage: test_scaling.py --meshtrain BIN --mpiexec MPIEXEC --workdir DIR [-v]

Runs a strong-scaling campaign of a tiny model with `study.py submit --local` (1, 2 and 4 ranks;
layouts dp, pp2 and a bare tp, which the planner refuses at 4 ranks of a 2-head model), a
weak-scaling one from a JSON spec and a one-point expert-parallel one (a tiny mixture-of-experts
llama at dp 2 × ep 2), collects them, and checks scaling.csv against what the jobs
themselves wrote: medians recomputed here from the metrics files, the per-rank timing tables
re-read here from the trainer's stdout, the effective batch and layout from the trainer's own
lines, the plan from plan.json, and efficiency by its formula. The PNGs must be PNGs, and the
series the plot script drew (read back from its figures with --plot-json) must be the CSV's.
`submit --dry-run` must group the points into one job array per rank count. Nothing here uses the
collector's readers (bench/trainer_output.py): the parsing below is independent on purpose.

Needs numpy and matplotlib for this interpreter (Debian: python3-numpy, python3-matplotlib).
"""
import argparse
import csv
import json
import os
import re
import shutil
import subprocess
import sys
import time
import unittest

try:
    import matplotlib  # noqa: F401  (the plot script needs it; fail here, clearly, when it is missing)
    import numpy as np
except ImportError as e:  # a missing test dependency is a failure, never a silent skip
    sys.exit(f"test_scaling.py needs numpy and matplotlib for {sys.executable}: {e}")

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
STUDY = os.path.join(ROOT, "slurm", "scaling", "study.py")
PLOT = os.path.join(ROOT, "share", "plot", "plot_scaling.py")
OPTS = None  # set in main

# A tiny model (L2 C64 T64, 0.12M parameters): a step takes milliseconds, except where ranks outnumber
# the 2 cores; large enough that the timing tables (printed to 0.1 ms) resolve the pipeline idle.
TINY_KEYS = "model.layers = 2\nmodel.heads = 2\nmodel.d_model = 64\nmodel.seq_len = 64\n"
# 8 steps, warm-up 3: timing tables cover steps 1–3, 4–6 and 7–8, so the counted windows differ in
# length (their weights matter) and 5 counted steps have a middle one; the weak study's 4 counted
# steps take the even-count median.
STRONG_WARMUP = 3
STRONG_SPEC = f"""# strong scaling: global batch 8 at every point
[study]
name = tiny-strong
ranks = 1 2 4
layouts = dp, dp·pp2, tp    ; tp bare: all ranks
scaling = strong
global_batch = 8
micro_batch = 2
steps = 8
warmup = {STRONG_WARMUP}
out = strong
data = shard.bin

[keys]
{TINY_KEYS}
[slurm]
partition = testpart
time = 00:05:00
"""
# (ranks, layout name, dp, tp, pp) of every point the strong study must run, and the ones it skips.
STRONG_POINTS = [(1, "dp", 1, 1, 1), (1, "tp", 1, 1, 1), (2, "dp", 2, 1, 1), (2, "dp·pp2", 1, 1, 2),
                 (2, "tp", 1, 2, 1), (4, "dp", 4, 1, 1), (4, "dp·pp2", 2, 1, 2)]
STRONG_SKIPS = [(1, "dp·pp2", "1 rank is not a multiple of pp2 = 2"), (4, "tp", "parallel.tp = 4 exceeds model.heads")]

# A tiny llama MoE (4 experts, top-2) at 2 ranks with ep 2: the timing tables gain an all-to-all row.
MOE_KEYS = TINY_KEYS + "model.arch = llama\nmodel.experts = 4\nmodel.capacity_factor = 1.25\n"
MOE_WARMUP = 2
MOE_SPEC = f"""[study]
name = tiny-moe
ranks = 2
layouts = dp·ep2
global_batch = 8
micro_batch = 2
steps = 5
warmup = {MOE_WARMUP}
out = moe
data = shard.bin

[keys]
{MOE_KEYS}"""
# Layouts the planner refuses on 2 ranks of that model, and the reason each skip must give.
MOE_SKIPS = [("dp·ep4", "parallel.ep = 4 does not divide the data-parallel degree 2"),
             ("dp·ep3", "parallel.ep = 3 does not divide model.experts = 4")]

WEAK_WARMUP = 1
WEAK_SPEC = {
    "study": {"name": "tiny-weak", "ranks": [1, 2], "layouts": ["dp"], "scaling": "weak",
              "global_batch_per_dp": 4, "micro_batch": 2, "steps": 5, "warmup": WEAK_WARMUP, "out": "weak",
              "data": "shard.bin"},
    "keys": {"model.layers": 2, "model.heads": 2, "model.d_model": 64, "model.seq_len": 64},
}

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
REL = 1e-12  # the CSV holds repr() of doubles: what is recomputed from the same inputs must agree exactly


def run(cmd, timeout=500):
    start = time.monotonic()
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=OPTS.workdir,
                          stdin=subprocess.DEVNULL)
    print(f"$ {' '.join(cmd[1:4])} ... ({time.monotonic() - start:.1f} s, exit {proc.returncode})", flush=True)
    return proc


def median(values):
    v = sorted(values)
    n = len(v)
    return v[n // 2] if n % 2 else (v[n // 2 - 1] + v[n // 2]) / 2


def metrics(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def timing_windows(text):
    """[(first step, last step, {kind: median over ranks})] of the trainer's per-rank timing tables
    (compute, communication, all-to-all where a table has that row, idle)."""
    windows = []
    lines = text.splitlines()
    for i, line in enumerate(lines):
        m = re.match(r"per-rank time per step, steps (\d+)\D+(\d+) ", line)
        if not m:
            continue
        medians = {}
        for row in lines[i + 1:i + 5]:
            # "  compute   0.0142 /   0.0245 /   0.0254 s   rank 0": name, min, /, median, /, max, s, rank, r
            parts = row.split()
            if len(parts) != 9 or parts[-2] != "rank":
                break
            medians[parts[0]] = float(parts[3])
        windows.append((int(m.group(1)), int(m.group(2)), medians))
    return windows


def read_csv(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def close(a, b, rel=REL):
    return abs(a - b) <= rel * max(abs(a), abs(b), 1e-300)


class Campaign:
    """One study run once per test class: submit --local, then collect with the plot series dumped."""

    def __init__(self, spec_name, spec_text, out):
        self.spec = os.path.join(OPTS.workdir, spec_name)
        with open(self.spec, "w") as f:
            f.write(spec_text)
        self.submit = run([sys.executable, STUDY, "submit", self.spec, "--local", "--meshtrain", OPTS.meshtrain,
                           "--mpiexec", OPTS.mpiexec])
        self.out = os.path.join(OPTS.workdir, out)
        self.collect = None
        if self.submit.returncode == 0:
            self.plot_json = os.path.join(self.out, "plotted.json")
            self.collect = run([sys.executable, STUDY, "collect", self.out, "--plot-json", self.plot_json])

    def check_ran(self, test):
        test.assertEqual(self.submit.returncode, 0,
                         f"submit --local failed:\n{self.submit.stdout}\n{self.submit.stderr}")
        test.assertEqual(self.collect.returncode, 0, f"collect failed:\n{self.collect.stdout}\n{self.collect.stderr}")

    def study(self):
        with open(os.path.join(self.out, "study.json")) as f:
            return json.load(f)

    def rows(self):
        return read_csv(os.path.join(self.out, "scaling.csv"))

    def point_dir(self, row):
        return os.path.join(self.out, "points", row["point"])


def check_rows_against_jobs(test, campaign, warmup):
    """Every number of scaling.csv that comes from a job, recomputed from the job's own files."""
    rows = campaign.rows()
    test.assertTrue(rows)
    for row in rows:
        with test.subTest(point=row["point"]):
            test.assertEqual(row["status"], "ok")
            pdir = campaign.point_dir(row)
            records = metrics(os.path.join(pdir, "metrics.jsonl"))
            test.assertEqual([r["step"] for r in records], list(range(1, len(records) + 1)))
            counted = [r for r in records if r["step"] > warmup]
            test.assertEqual(int(row["steps_measured"]), len(counted))
            tps = median([r["tokens_per_s"] for r in counted])
            ranks = int(row["ranks"])
            test.assertTrue(close(float(row["tokens_per_s"]), tps), (row["tokens_per_s"], tps))
            test.assertTrue(close(float(row["step_time_s"]), median([r["step_time_s"] for r in counted])))
            test.assertTrue(close(float(row["tokens_per_s_per_rank"]), tps / ranks))
            test.assertEqual(int(row["peak_rss_bytes"]), max(r["memory"]["peak_rss"] for r in records))

            with open(os.path.join(pdir, "stdout.log")) as f:
                log = f.read()
            # The trainer's own account of the batch and the layout it ran.
            m = re.search(r"effective batch = micro_batch (\d+) × dp (\d+) × accum (\d+) = (\d+) sequences "
                          r"\((\d+) tokens\)", log)
            test.assertIsNotNone(m, "no effective-batch line in stdout.log")
            test.assertEqual([int(row[k]) for k in ("micro_batch", "dp", "accum", "global_batch", "tokens_per_step")],
                             [int(g) for g in m.groups()])
            # "layout: dp 4 × tp 1 …", or with expert parallelism "layout: dp 4 (ep 2 × edp 2) × tp 1 …"
            m = re.search(r"layout: dp (\d+)(?: \(ep (\d+) × edp \d+\))? × tp (\d+) × pp (\d+) = (\d+) ranks?", log)
            test.assertIsNotNone(m, "no layout line in stdout.log")
            test.assertEqual([int(row[k]) for k in ("dp", "ep", "tp", "pp", "ranks")],
                             [int(g or 1) for g in m.groups()])
            test.assertEqual([r["tokens"] for r in records], [r["step"] * int(row["tokens_per_step"]) for r in records])

            windows = [w for w in timing_windows(log) if w[0] > warmup]
            test.assertTrue(windows, "no timing table after the warm-up")
            test.assertEqual(sum(w[1] - w[0] + 1 for w in windows), len(counted))  # the tables cover the counted steps
            weight = sum(w[1] - w[0] + 1 for w in windows)
            mean = {k: sum((w[1] - w[0] + 1) * w[2].get(k, 0.0) for w in windows) / weight
                    for k in ("compute", "communication", "all-to-all", "idle")}
            total = sum(mean.values())
            for column, kind in (("compute_s", "compute"), ("comm_s", "communication"),
                                 ("all_to_all_s", "all-to-all"), ("idle_s", "idle")):
                test.assertTrue(close(float(row[column]), mean[kind], 1e-9), (column, row[column], mean[kind]))
            test.assertTrue(close(float(row["comm_fraction"]), mean["communication"] / total, 1e-9))
            test.assertTrue(close(float(row["all_to_all_fraction"]), mean["all-to-all"] / total, 1e-9))
            test.assertTrue(close(float(row["bubble_fraction"]), mean["idle"] / total, 1e-9))
            # the exchange is expert parallelism's alone: without it the table has no all-to-all row
            test.assertEqual(float(row["all_to_all_s"]) > 0, int(row["ep"]) > 1, row["point"])
            if int(row["pp"]) == 1:
                test.assertEqual(float(row["bubble_fraction"]), 0.0)
            else:
                test.assertGreater(float(row["bubble_fraction"]), 0.0)

            with open(os.path.join(pdir, "plan.json")) as f:
                plan = json.load(f)
            test.assertEqual([plan["layout"][k] for k in ("world", "dp", "tp", "pp")],
                             [int(row[k]) for k in ("ranks", "dp", "tp", "pp")])
            test.assertEqual(plan["effective_batch"]["sequences"], int(row["global_batch"]))
            st = plan["step_time"]
            test.assertTrue(close(float(row["predicted_step_time_s"]), st["total_s"]))
            test.assertTrue(close(float(row["predicted_tokens_per_s"]), plan["tokens_per_s"]))
            test.assertTrue(close(float(row["predicted_comm_fraction"]),
                                  (st["tp_comm_s"] + st["pp_comm_s"] + st["dp_comm_s"]) / st["total_s"], 1e-9))
            test.assertTrue(close(float(row["predicted_all_to_all_fraction"]), st["ep_comm_s"] / st["total_s"], 1e-9))
            test.assertTrue(close(float(row["predicted_bubble_fraction"]), st["bubble_s"] / st["total_s"], 1e-9))
            test.assertEqual(int(row["predicted_peak_rss_bytes"]), plan["per_rank"][0]["peak_rss"])


def check_efficiency(test, rows):
    """Baseline: the fastest point among those with the fewest ranks; efficiency = per-rank tokens/s
    over the baseline's (= speedup / rank ratio)."""
    fewest = min(int(r["ranks"]) for r in rows)
    base = max((r for r in rows if int(r["ranks"]) == fewest), key=lambda r: float(r["tokens_per_s"]))
    t0, r0 = float(base["tokens_per_s"]), int(base["ranks"])
    for row in rows:
        t, n = float(row["tokens_per_s"]), int(row["ranks"])
        test.assertTrue(close(float(row["speedup"]), t / t0, 1e-9), (row["point"], row["speedup"], t / t0))
        test.assertTrue(close(float(row["efficiency"]), (t / t0) / (n / r0), 1e-9), (row["point"], row["efficiency"]))


def check_png(test, path):
    test.assertTrue(os.path.isfile(path), f"{path} was not written")
    with open(path, "rb") as f:
        data = f.read()
    test.assertGreater(len(data), len(PNG_SIGNATURE) + 25)
    test.assertEqual(data[:8], PNG_SIGNATURE, f"{path} is not a PNG")
    test.assertEqual(data[12:16], b"IHDR")
    width, height = int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")
    test.assertGreater(width, 100)
    test.assertGreater(height, 100)
    test.assertEqual(data[-8:-4], b"IEND", f"{path} is truncated")


def check_plotted(test, rows, plot_json):
    """The series the plot script drew are the CSV's ok rows, point for point."""
    with open(plot_json) as f:
        drawn = json.load(f)
    rows = [r for r in rows if r["status"] == "ok"]
    layouts = {}
    for r in rows:
        layouts.setdefault(r["layout"], []).append(r)
    test.assertEqual(set(drawn["throughput"]), set(layouts))
    test.assertEqual(set(drawn["efficiency"]), set(layouts))
    for name, rs in layouts.items():
        rs = sorted(rs, key=lambda r: int(r["ranks"]))
        test.assertEqual(drawn["throughput"][name]["ranks"], [int(r["ranks"]) for r in rs])
        test.assertEqual(drawn["throughput"][name]["tokens_per_s"], [float(r["tokens_per_s"]) for r in rs])
        test.assertEqual(drawn["efficiency"][name]["ranks"], [int(r["ranks"]) for r in rs])
        test.assertEqual(drawn["efficiency"][name]["efficiency"], [float(r["efficiency"]) for r in rs])
    # A stacked bar keeps its bottom and top, so its height comes back as top − bottom: equal to the
    # CSV's value to within the rounding of that sum (relative 1e-12 of the top).
    # The all-to-all layer is drawn, between communication and idle, exactly when a point had one.
    bd = drawn["breakdown"]
    by_point = {r["point"]: r for r in rows}
    test.assertEqual(sorted(bd["points"]), sorted(by_point))
    exchanged = any(float(r["all_to_all_s"]) > 0 for r in rows)
    test.assertEqual("all_to_all_s" in bd, exchanged)
    for i, point in enumerate(bd["points"]):
        r = by_point[point]
        c, m, a, b = (float(r[k]) for k in ("compute_s", "comm_s", "all_to_all_s", "idle_s"))
        checks = [("compute_s", c, c), ("comm_s", m, c + m), ("idle_s", b, c + m + a + b),
                  ("comm_fraction", float(r["comm_fraction"]), 1.0),
                  ("bubble_fraction", float(r["bubble_fraction"]), 1.0)]
        if exchanged:
            checks += [("all_to_all_s", a, c + m + a), ("all_to_all_fraction", float(r["all_to_all_fraction"]), 1.0)]
        for column, want, top in checks:
            test.assertLessEqual(abs(bd[column][i] - want), 1e-12 * top, (point, column, bd[column][i], want))
        test.assertEqual(bd["predicted_step_time_s"][i], float(r["predicted_step_time_s"]), point)
        test.assertEqual(bd["stack_bottom_s"]["compute_s"][i], 0.0)
        test.assertEqual(bd["stack_bottom_s"]["comm_s"][i], c)
        if exchanged:
            test.assertEqual(bd["stack_bottom_s"]["all_to_all_s"][i], c + m)
        test.assertEqual(bd["stack_bottom_s"]["idle_s"][i], c + m + a)


class CampaignOutputs:
    """The checks every campaign's outputs pass; a TestCase mixing this in sets `campaign` and `warmup`."""
    campaign = None
    warmup = None

    def setUp(self):
        self.campaign.check_ran(self)

    def test_csv_matches_jobs(self):
        check_rows_against_jobs(self, self.campaign, self.warmup)

    def test_efficiency(self):
        check_efficiency(self, self.campaign.rows())

    def test_pngs_and_plotted_series(self):
        for name in ("scaling_throughput.png", "scaling_breakdown.png"):
            check_png(self, os.path.join(self.campaign.out, name))
        check_plotted(self, self.campaign.rows(), self.campaign.plot_json)


class StrongScaling(CampaignOutputs, unittest.TestCase):
    warmup = STRONG_WARMUP

    @classmethod
    def setUpClass(cls):
        cls.campaign = Campaign("strong.ini", STRONG_SPEC, "strong")

    def test_points_run_and_skipped(self):
        study = self.campaign.study()
        got = [(p["ranks"], p["layout"], p["dp"], p["tp"], p["pp"]) for p in study["points"]]
        self.assertEqual(sorted(got), sorted(STRONG_POINTS))
        skipped = {(s["ranks"], s["layout"]): s["reason"] for s in study["skipped"]}
        self.assertEqual(set(skipped), {(r, l) for r, l, _ in STRONG_SKIPS})
        for ranks, layout, reason in STRONG_SKIPS:
            self.assertIn(reason, skipped[(ranks, layout)])
            self.assertRegex(self.campaign.submit.stdout, rf"skip {ranks} ranks?, {re.escape(layout)}: .*"
                                                          rf"{re.escape(reason)}")
        # every point has exactly one row, and every row is a point
        rows = self.campaign.rows()
        self.assertEqual(sorted(r["point"] for r in rows),
                         sorted(os.path.basename(p["dir"]) for p in study["points"]))
        for p in study["points"]:
            pdir = os.path.join(self.campaign.out, p["dir"])
            for name in ("metrics.jsonl", "stdout.log", "plan.json", "train.args", "plan.args", "task.txt"):
                self.assertTrue(os.path.isfile(os.path.join(pdir, name)), f"{p['dir']}/{name} missing")
            self.assertTrue(os.listdir(os.path.join(pdir, "checkpoints")), f"{p['dir']}: no checkpoint")
            with open(os.path.join(pdir, "exit_code")) as f:
                self.assertEqual(f.read().strip(), "0")

    def test_strong_batch_is_fixed(self):
        for row in self.campaign.rows():
            self.assertEqual(int(row["global_batch"]), 8)
            self.assertEqual(int(row["micro_batch"]) * int(row["dp"]) * int(row["accum"]), 8)

    def test_failed_points_keep_their_rows(self):
        """Points whose job failed, never ran or was killed still have their rows, and are neither
        the baseline nor drawn; the baseline moves to the fastest ok point with the fewest ranks."""
        copy = os.path.join(OPTS.workdir, "strong_failed")
        shutil.copytree(self.campaign.out, copy)
        study = self.campaign.study()
        first = next(p for p in study["points"] if p["ranks"] == 1)
        other = next(p for p in study["points"] if p["ranks"] == 2)
        killed = next(p for p in study["points"] if p["ranks"] == 4)
        with open(os.path.join(copy, first["dir"], "exit_code"), "w") as f:
            f.write("1\n")
        os.remove(os.path.join(copy, other["dir"], "metrics.jsonl"))
        os.remove(os.path.join(copy, other["dir"], "exit_code"))
        os.remove(os.path.join(copy, killed["dir"], "exit_code"))  # as when Slurm kills the task
        plotted = os.path.join(copy, "plotted.json")
        proc = run([sys.executable, STUDY, "collect", copy, "--plot-json", plotted])
        self.assertEqual(proc.returncode, 1, "collect must say that points failed")
        rows = read_csv(os.path.join(copy, "scaling.csv"))
        by_point = {r["point"]: r for r in rows}
        self.assertEqual(sorted(by_point), sorted(os.path.basename(p["dir"]) for p in study["points"]))
        bad = by_point[os.path.basename(first["dir"])]
        self.assertEqual((bad["status"], bad["efficiency"]), ("exit 1", ""))
        self.assertNotEqual(bad["tokens_per_s"], "", "a failed point's measurements stay in its row")
        gone = by_point[os.path.basename(other["dir"])]
        self.assertEqual((gone["status"], gone["tokens_per_s"], gone["efficiency"]), ("not run", "", ""))
        cut = by_point[os.path.basename(killed["dir"])]
        self.assertEqual((cut["status"], cut["efficiency"]), ("unfinished", ""))
        ok = [r for r in rows if r["status"] == "ok"]
        self.assertEqual(len(ok), len(rows) - 3)
        check_efficiency(self, ok)
        check_plotted(self, rows, plotted)

    def test_dry_run_groups_points_into_arrays(self):
        """The Slurm path up to sbatch: one array per rank count, indices from points.tsv."""
        spec = os.path.join(OPTS.workdir, "strong_dry.ini")
        with open(spec, "w") as f:
            f.write(STRONG_SPEC.replace("out = strong", "out = strong_dry"))
        proc = run([sys.executable, STUDY, "submit", spec, "--dry-run", "--meshtrain", OPTS.meshtrain])
        self.assertEqual(proc.returncode, 0, proc.stderr)
        out = os.path.join(OPTS.workdir, "strong_dry")
        with open(os.path.join(out, "points.tsv")) as f:
            table = [line.rstrip("\n").split("\t") for line in f if not line.startswith("#")]
        by_ranks = {}
        for index, ranks, pdir in table:
            by_ranks.setdefault(int(ranks), []).append(index)
            self.assertTrue(os.path.isfile(os.path.join(out, pdir, "train.args")))
            self.assertFalse(os.path.exists(os.path.join(out, pdir, "metrics.jsonl")), "a dry run ran a point")
        sbatch = [line.split() for line in proc.stdout.splitlines() if line.startswith("sbatch ")]
        self.assertEqual(len(sbatch), len(by_ranks))
        for cmd in sbatch:
            ntasks = int(next(a for a in cmd if a.startswith("--ntasks=")).split("=")[1])
            array = next(a for a in cmd if a.startswith("--array=")).split("=")[1]
            self.assertEqual(array.split(","), by_ranks[ntasks])
            self.assertIn("--partition=testpart", cmd)
            self.assertIn("--time=00:05:00", cmd)
            self.assertTrue(cmd[cmd.index("--launcher") - 1].endswith("slurm/scaling/point.sbatch"))
            self.assertEqual(cmd[cmd.index("--launcher") + 1:], ["srun", out, os.path.abspath(OPTS.meshtrain)])
        with open(os.path.join(out, "sbatch.sh")) as f:
            self.assertEqual(sum(line.startswith("sbatch ") for line in f), len(by_ranks))


class WeakScaling(CampaignOutputs, unittest.TestCase):
    warmup = WEAK_WARMUP

    @classmethod
    def setUpClass(cls):
        cls.campaign = Campaign("weak.json", json.dumps(WEAK_SPEC), "weak")

    def test_batch_grows_with_dp(self):
        rows = self.campaign.rows()
        self.assertEqual(sorted(int(r["ranks"]) for r in rows), [1, 2])
        for row in rows:
            self.assertEqual(int(row["global_batch"]), 4 * int(row["dp"]))


class ExpertParallel(CampaignOutputs, unittest.TestCase):
    """One MoE point at ep 2: its row says ep 2 and carries the all-to-all's time (the CSV checks
    above recompute it from the trainer's table); the layouts the planner refuses are skipped."""
    warmup = MOE_WARMUP

    @classmethod
    def setUpClass(cls):
        cls.campaign = Campaign("moe.ini", MOE_SPEC, "moe")

    def test_row_has_ep_and_all_to_all(self):
        (row,) = self.campaign.rows()
        self.assertEqual((row["layout"], int(row["dp"]), int(row["ep"])), ("dp·ep2", 2, 2))
        self.assertGreater(float(row["all_to_all_s"]), 0.0)
        self.assertGreater(float(row["all_to_all_fraction"]), 0.0)
        with open(os.path.join(self.campaign.point_dir(row), "train.args")) as f:
            args = f.read().split("\n")
        self.assertEqual(args[args.index("--parallel.ep") + 1], "2")

    def test_refused_ep_is_skipped(self):
        spec = os.path.join(OPTS.workdir, "moe_skips.ini")
        layouts = ", ".join(layout for layout, _ in MOE_SKIPS)
        with open(spec, "w") as f:
            f.write(MOE_SPEC.replace("dp·ep2", f"dp·ep2, {layouts}").replace("out = moe", "out = moe_skips"))
        proc = run([sys.executable, STUDY, "submit", spec, "--dry-run", "--meshtrain", OPTS.meshtrain])
        self.assertEqual(proc.returncode, 0, proc.stderr)
        with open(os.path.join(OPTS.workdir, "moe_skips", "study.json")) as f:
            study = json.load(f)
        self.assertEqual([(p["layout"], p["ep"]) for p in study["points"]], [("dp·ep2", 2)])
        skipped = {s["layout"]: s["reason"] for s in study["skipped"]}
        self.assertEqual(set(skipped), {layout for layout, _ in MOE_SKIPS})
        for layout, reason in MOE_SKIPS:
            self.assertIn(reason, skipped[layout])
            self.assertRegex(proc.stdout, rf"skip 2 ranks, {re.escape(layout)}: .*{re.escape(reason)}")


class BadSpecs(unittest.TestCase):
    def check_refused(self, name, text, message):
        path = os.path.join(OPTS.workdir, name)
        with open(path, "w") as f:
            f.write(text)
        proc = run([sys.executable, STUDY, "submit", path, "--dry-run", "--meshtrain", OPTS.meshtrain])
        self.assertEqual(proc.returncode, 2, proc.stdout + proc.stderr)
        self.assertIn(message, proc.stderr)
        return proc

    def test_unknown_layout_term(self):
        self.check_refused("bad_layout.ini", STRONG_SPEC.replace("dp·pp2", "dp·qq2"), "'qq2' is not dp, dpN")

    def test_ep_needs_its_degree(self):
        self.check_refused("bad_ep.ini", MOE_SPEC.replace("dp·ep2", "dp·ep"), "ep needs its degree (ep2, ep4, …)")

    def test_ep_given_twice(self):
        self.check_refused("bad_ep_twice.ini", MOE_SPEC.replace("dp·ep2", "dp·ep2·ep4"), "ep is given twice")

    def test_ep_of_a_dense_model(self):
        """A dense model has no experts to share out: the planner refuses every point, each skip
        says why, and with no point left submit exits 2."""
        spec = re.sub(r"(?m)^layouts = .*$", "layouts = dp·ep2", STRONG_SPEC).replace("out = strong", "out = dense_ep")
        proc = self.check_refused("bad_ep_dense.ini", spec, "no point left to run")
        for ranks in (1, 2, 4):
            self.assertRegex(proc.stdout, rf"skip {ranks} ranks?, dp·ep2: parallel.ep = 2 with model.experts = 0")

    def test_weak_needs_batch_per_dp(self):
        self.check_refused("bad_weak.ini", STRONG_SPEC.replace("scaling = strong", "scaling = weak"),
                           "give global_batch_per_dp")

    def test_missing_data(self):
        self.check_refused("bad_data.ini", STRONG_SPEC.replace("data = shard.bin", "data = nowhere.bin"),
                           "nowhere.bin does not exist")

    def test_point_keys_belong_to_the_study(self):
        self.check_refused("bad_keys.ini", STRONG_SPEC.replace("[keys]\n", "[keys]\ntrain.steps = 3\n"),
                           "[keys] train.steps: every point sets it")


def main():
    global OPTS
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--meshtrain", required=True)
    ap.add_argument("--mpiexec", default=shutil.which("mpiexec"))
    ap.add_argument("--workdir", required=True)
    ap.add_argument("-v", "--verbose", action="store_true")
    OPTS = ap.parse_args()
    OPTS.meshtrain = os.path.abspath(OPTS.meshtrain)
    OPTS.workdir = os.path.abspath(OPTS.workdir)
    shutil.rmtree(OPTS.workdir, ignore_errors=True)
    os.makedirs(OPTS.workdir)
    header = np.zeros(256, dtype="<i4")
    header[:3] = (20240520, 1, 100_000)
    with open(os.path.join(OPTS.workdir, "shard.bin"), "wb") as f:
        f.write(header.tobytes() + np.random.default_rng(0).integers(0, 256, 100_000).astype("<u2").tobytes())
    start = time.monotonic()
    suite = unittest.TestSuite()
    for case in (StrongScaling, WeakScaling, ExpertParallel, BadSpecs):
        suite.addTests(unittest.TestLoader().loadTestsFromTestCase(case))
    result = unittest.TextTestRunner(verbosity=2 if OPTS.verbose else 1, stream=sys.stdout).run(suite)
    print(f"scaling: {suite.countTestCases()} cases in {time.monotonic() - start:.1f} s")
    return 0 if result.wasSuccessful() else 1


if __name__ == "__main__":
    sys.exit(main())
