#!/usr/bin/env python3
"""End-to-end tests of `meshtrain plan` (share/docs/usage.md, Commands and Exit codes): bad input exits 2 naming the
option or key and writes nothing; --json and --search --json carry what scripts rely on; the table
shows the effective batch exactly as the trainer prints it.

usage: test_plan_cli.py --meshtrain BIN --workdir DIR [--mpiexec MPIEXEC] [-k PATTERN] [-v]
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import time
import unittest

MESHTRAIN = None
MPIEXEC = None
WORKDIR = None

CATEGORIES = ["weights", "master", "grads", "optimizer", "activations", "comm_buffers", "workspace"]
SMALL = ["--model.layers", "4", "--model.heads", "4", "--model.d_model", "64", "--model.seq_len", "32",
         "--train.micro_batch", "2", "--train.global_batch", "16"]
CRASH_MARKERS = ["terminate called", "what():", "Segmentation fault", "Aborted", "failure on rank", "std::"]


class PlanCli(unittest.TestCase):
    def setUp(self):
        self.dir = os.path.join(WORKDIR, self._testMethodName)
        shutil.rmtree(self.dir, ignore_errors=True)
        os.makedirs(self.dir)

    def plan(self, *args, launcher=()):
        p = subprocess.run(list(launcher) + [MESHTRAIN, "plan", *map(str, args)], cwd=self.dir, capture_output=True,
                           text=True, timeout=120)
        for marker in CRASH_MARKERS:
            self.assertNotIn(marker, p.stderr, p.stderr)
        return p

    def assert_bad_input(self, args, *needles, launcher=()):
        p = self.plan(*args, launcher=launcher)
        self.assertEqual(p.returncode, 2, f"{args}: exit {p.returncode}\n{p.stdout}\n{p.stderr}")
        self.assertEqual(p.stdout, "", "bad input must print no plan")
        for n in needles:
            self.assertIn(n, p.stderr)
        self.assertEqual(os.listdir(self.dir), [], "bad input must write nothing")
        return p

    def test_bad_input(self):
        self.assert_bad_input(SMALL, "--world is missing")
        self.assert_bad_input(SMALL + ["--world", "0"], "--world = 0")
        self.assert_bad_input(SMALL + ["--world", "x"], "world")
        self.assert_bad_input(SMALL + ["--world", "6", "--parallel.tp", "3"], "parallel.tp = 3", "1, 2, 4")
        self.assert_bad_input(SMALL + ["--world", "8", "--parallel.pp", "8"], "parallel.pp = 8", "model.layers = 4")
        self.assert_bad_input(SMALL + ["--world", "3"], "train.global_batch = 16", "micro_batch 2 × dp 3")
        self.assert_bad_input(SMALL + ["--world", "2", "--cluster", "tpu-v9"], "tpu-v9", "h100-sxm-8", "local")
        self.assert_bad_input(SMALL + ["--world", "2", "--efficiency", "1.5"], "--efficiency = 1.5", "(0, 1]")
        self.assert_bad_input(SMALL + ["--world", "2", "--intra-bw-gbs", "-1"], "--intra-bw-gbs")
        self.assert_bad_input(SMALL + ["--world", "2", "--ranks-per-node", "-2"], "--ranks-per-node")
        self.assert_bad_input(SMALL + ["--world", "2", "--model.layers", "many"], "model.layers", "an integer")
        self.assert_bad_input(SMALL + ["--world", "2", "--bogus", "1"], "bogus")
        self.assert_bad_input(SMALL + ["--world", "2", "--config", "missing.ini"], "missing.ini")
        self.assert_bad_input(SMALL + ["--world", "2", "--max-micro-batch", "--search"], "--max-micro-batch",
                              "--search")
        self.assert_bad_input(SMALL + ["--world", "1", "--max-micro-batch", "--device-memory-gib", "0.001"],
                              "not even train.micro_batch 1 fits")
        self.assert_bad_input(SMALL + ["--world", "1", "--train.memory_gib", "-1"], "train.memory_gib = -1")
        self.assert_bad_input(SMALL + ["--world", "2", "--parallel.cp", "3"], "parallel.cp = 3", "2 × cp = 6")

    def test_max_micro_batch_keeps_the_accumulation(self):
        # dp 2 × accum 4: the largest micro-batch under 1 GiB of GPU (after the 1 GiB reserve: 1 GiB of
        # states and activations), the global batch following it; one more does not fit.
        gpu = SMALL + ["--world", "2", "--cluster", "h100-sxm-8", "--json"]
        keys = gpu + ["--device-memory-gib", "2"]
        p = self.plan(*keys, "--max-micro-batch")
        self.assertEqual(p.returncode, 0, p.stderr)
        plan = json.loads(p.stdout)
        batch = plan["effective_batch"]
        micro = batch["micro_batch"]
        self.assertGreater(micro, 2)
        self.assertEqual((batch["dp"], batch["accum"], batch["sequences"]), (2, 4, micro * 8))
        self.assertTrue(plan["fits"])
        over = json.loads(self.plan(*keys, "--train.micro_batch", micro + 1, "--train.global_batch",
                                    (micro + 1) * 8).stdout)
        self.assertFalse(over["fits"])
        # train.memory_gib says the same as --device-memory-gib.
        p = self.plan(*gpu, "--train.memory_gib", 2, "--max-micro-batch")
        self.assertEqual(json.loads(p.stdout)["effective_batch"]["micro_batch"], micro, p.stderr)

    def test_largest_seq_len_fits_and_one_more_does_not(self):
        # Both attention kinds under 2 GiB of GPU: the planned max_seq_len fits, one more does not, and
        # fused attention (memory linear in T) reaches further than materialized (T²). The table prints it.
        gpu = SMALL + ["--world", "2", "--cluster", "h100-sxm-8", "--device-memory-gib", "2", "--json"]
        largest = {}
        for attention in ("fused", "materialized"):
            keys = gpu + ["--model.attention", attention]
            T = json.loads(self.plan(*keys).stdout)["max_seq_len"]
            self.assertGreater(T, 32)
            self.assertTrue(json.loads(self.plan(*keys, "--model.seq_len", T).stdout)["fits"], attention)
            self.assertFalse(json.loads(self.plan(*keys, "--model.seq_len", T + 1).stdout)["fits"], attention)
            largest[attention] = T
        self.assertGreater(largest["fused"], 2 * largest["materialized"])
        table = self.plan(*gpu[:-1]).stdout
        self.assertIn(f"largest seq_len that fits this layout at micro_batch 2: {largest['fused']}", table)

    def test_sizes_and_worlds(self):
        # train's checks, one rule: a tensor of 2^32 elements is refused by both.
        self.assert_bad_input(SMALL + ["--world", "1", "--model.d_model", "65536", "--model.vocab", "65536",
                                       "--model.heads", "1"], "wte.weight [65536, 65536]", "model.vocab")
        # micro_batch 2^20 × dp 2^12 wrapped an int to 0: SIGFPE.
        self.assert_bad_input(SMALL + ["--world", "4096", "--train.micro_batch", "1048576", "--model.seq_len", "1",
                                       "--model.vocab", "1"], "train.micro_batch 1048576 × dp 4096 = 4294967296")
        # --world is bounded: 2^31 − 1 ranks died of bad_alloc, or of SIGFPE with --search.
        for world in ("2147483647", "131073"):
            for search in ([], ["--search"]):
                start = time.monotonic()
                self.assert_bad_input(SMALL + ["--world", world, *search], f"--world = {world}", "131072")
                self.assertLess(time.monotonic() - start, 10)
        # The largest world: the table and the search compute each kind of rank once, not every rank. (seq_len 2:
        # one context-parallel degree, so that the search's layouts are those of the world's other degrees.) The
        # search plans each pipelined layout under 1F1B and ZB-H1 and bisects each row's largest seq_len over
        # plans: 3 s in release, 18 s under ASan; computing every rank would take minutes.
        big = [("2" if previous == "--model.seq_len" else x) for previous, x in zip([None] + SMALL, SMALL)]
        big += ["--world", "131072", "--train.micro_batch", "1", "--train.global_batch", "131072"]
        for search in ([], ["--search"]):
            start = time.monotonic()
            p = self.plan(*big, *search)
            self.assertEqual(p.returncode, 0, p.stderr)
            self.assertLess(time.monotonic() - start, 40, "a plan of the largest world takes seconds")
        self.assertIn("0 1 2 3 … (131072 ranks)", self.plan(*big).stdout)

    def test_cost_does_not_grow_with_the_accumulation_steps(self):
        # 2·10^9 micro-batches a step: the traffic and the pipeline's activation slots are worked out from a few,
        # where every pass was enumerated (memory and time in proportion: bad_alloc, or the machine's memory).
        for layout in (["--world", "1"], ["--world", "2", "--parallel.pp", "2", "--parallel.schedule", "gpipe"]):
            start = time.monotonic()
            p = self.plan(*SMALL, "--train.micro_batch", "1", "--train.global_batch", "2000000000", *layout, "--json")
            self.assertEqual(p.returncode, 0, p.stderr)
            self.assertLess(time.monotonic() - start, 10)
            self.assertEqual(json.loads(p.stdout)["effective_batch"]["accum"], 2000000000)

    def test_search_table_shows_every_term_of_the_step(self):
        moe = SMALL + ["--model.arch", "llama", "--model.kv_heads", "2", "--model.experts", "4", "--parallel.ep", "2",
                       "--world", "4", "--search", "--cluster", "h100-sxm-8"]
        plans = json.loads(self.plan(*moe, "--json").stdout)
        table = self.plan(*moe).stdout.splitlines()
        header = next(line for line in table if "compute" in line)
        self.assertIn("ep comm", header)
        # An MoE model splits over cp too (its routers' counts summed over the group).
        self.assertTrue(any(p["layout"]["cp"] > 1 for p in plans), [p["layout"] for p in plans])
        self.assertIn("cp comm", header)
        rows = [line for line in table if line.rstrip().endswith(("yes", "no"))]
        self.assertEqual(len(rows), len(plans))

        def seconds_text(s):
            return f"{s:.3f} s" if s >= 1 else f"{s * 1e3:.3f} ms" if s >= 1e-3 else f"{s * 1e6:.3f} µs"

        for row, plan in zip(rows, plans):
            st = plan["step_time"]
            self.assertGreater(st["ep_comm_s"], 0)
            self.assertIn(seconds_text(st["ep_comm_s"]), row)
            self.assertAlmostEqual(sum(st[k] for k in ("compute_s", "tp_comm_s", "pp_comm_s", "dp_comm_s",
                                                       "ep_comm_s", "cp_comm_s", "bubble_s")) - st["hidden_s"],
                                   st["total_s"],
                                   delta=1e-12 * st["total_s"])
        dense = self.plan(*SMALL, "--world", "4", "--search").stdout
        self.assertNotIn("ep comm", dense)

    def test_bad_input_under_mpiexec_is_reported_once(self):
        if MPIEXEC is None:
            self.skipTest("no mpiexec")
        p = self.assert_bad_input(SMALL + ["--world", "3"], "train.global_batch", launcher=[MPIEXEC, "-n", "2"])
        self.assertEqual(p.stderr.count("error:"), 1, p.stderr)

    def test_help(self):
        p = self.plan("--help")
        self.assertEqual(p.returncode, 0, p.stderr)
        for option in ["--world", "--cluster", "--json", "--search", "--ranks-per-node", "--peak-tflops",
                       "--intra-bw-gbs", "--inter-latency-us", "model.layers", "parallel.zero", "h200-sxm-8"]:
            self.assertIn(option, p.stdout)

    def test_table(self):
        p = self.plan(*SMALL, "--world", "4", "--parallel.tp", "2")
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("effective batch = micro_batch 2 × dp 2 × accum 4 = 16 sequences (512 tokens)\n", p.stdout)
        self.assertIn("layout: dp 2 × tp 2 × pp 1 = 4 ranks", p.stdout)
        for word in CATEGORIES + ["peak_rss", "compute", "tp comm", "pp comm", "dp comm", "bubble", "total", "fits: "]:
            self.assertIn(word, p.stdout)
        # Host ranks: nothing overlapped, no hidden line; a GPU cluster's device hides some of dp's reduction.
        self.assertIn("nothing overlapped", p.stdout)
        self.assertNotIn("hidden", p.stdout)
        gpu = self.plan(*SMALL, "--world", "4", "--parallel.tp", "2", "--cluster", "h100-sxm-8",
                        "--parallel.bucket_mb", "0.01")
        self.assertEqual(gpu.returncode, 0, gpu.stderr)
        hidden = next(line for line in gpu.stdout.splitlines() if line.strip().startswith("hidden"))
        self.assertIn("-", hidden)

    def test_json(self):
        p = self.plan(*SMALL, "--world", "8", "--parallel.tp", "2", "--parallel.pp", "2", "--json",
                      "--cluster", "h100-sxm-8", "--ranks-per-node", "4")
        self.assertEqual(p.returncode, 0, p.stderr)
        plan = json.loads(p.stdout)
        self.assertEqual({k: plan["layout"][k] for k in ("world", "dp", "tp", "pp", "zero")},
                         {"world": 8, "dp": 2, "tp": 2, "pp": 2, "zero": 0})
        eb = plan["effective_batch"]
        self.assertEqual((eb["micro_batch"], eb["dp"], eb["accum"], eb["sequences"], eb["tokens"]), (2, 2, 4, 16, 512))
        self.assertEqual(plan["cluster"]["ranks_per_node"], 4)
        self.assertEqual(plan["cluster"]["nodes"], 2)
        ranks = plan["per_rank"]
        self.assertEqual([r["rank"] for r in ranks], list(range(8)))
        for r in ranks:
            # tp fastest, then dp, then pp
            self.assertEqual(r["rank"], r["tp_rank"] + 2 * (r["dp_rank"] + 2 * r["pp_rank"]))
            self.assertEqual(sorted(r["memory"]), sorted(CATEGORIES))
            self.assertGreater(r["peak_rss"], 0)
            self.assertEqual(r["device_bytes"], sum(r["memory"].values()) + 2**30)
        st = plan["step_time"]
        parts = ["compute_s", "tp_comm_s", "pp_comm_s", "dp_comm_s", "ep_comm_s", "bubble_s"]
        self.assertAlmostEqual(sum(st[k] for k in parts) - st["hidden_s"], st["total_s"], delta=1e-12 * st["total_s"])
        self.assertGreater(st["tp_comm_s"], 0)
        self.assertGreater(st["bubble_s"], 0)
        # pp 2 under ZeRO 0 never arms the reduction: what hides is the pipeline's sends, at most all of them.
        self.assertGreater(st["hidden_s"], 0)
        self.assertLessEqual(st["hidden_s"], st["pp_comm_s"])
        self.assertAlmostEqual(plan["tokens_per_s"], 512 / st["total_s"], delta=1e-9 * plan["tokens_per_s"])
        self.assertIs(plan["fits"], True)

        tight = json.loads(self.plan(*SMALL, "--world", "8", "--parallel.tp", "2", "--json", "--cluster",
                                     "h100-sxm-8", "--device-memory-gib", "0.5").stdout)
        self.assertIs(tight["fits"], False)

    def test_sequence_parallel_max_seq_len(self):
        # One sequence a micro-batch over tp 4: only lengths that 4 divides are the layout's, and the longest
        # fits beyond the one without sequence parallelism (the residual stream and the norms split 4 ways).
        keys = [*SMALL, "--world", "4", "--parallel.tp", "4", "--train.micro_batch", "1", "--train.global_batch",
                "1", "--cluster", "h100-sxm-8", "--device-memory-gib", "2", "--json"]
        plain = json.loads(self.plan(*keys).stdout)
        split = json.loads(self.plan(*keys, "--parallel.sequence_parallel", "true").stdout)
        self.assertIs(split["layout"]["sequence_parallel"], True)
        self.assertEqual(split["max_seq_len"] % 4, 0)
        self.assertGreater(split["max_seq_len"], plain["max_seq_len"])
        self.assertLess(split["needed_bytes"], plain["needed_bytes"])

    def test_search(self):
        p = self.plan(*SMALL, "--world", "8", "--search", "--json")
        self.assertEqual(p.returncode, 0, p.stderr)
        plans = json.loads(p.stdout)
        self.assertIsInstance(plans, list)
        # heads 4 → tp ∈ {1, 2, 4}; pp ≤ 4; 16 % (2·dp) == 0 → dp ∈ {1, 2, 4, 8}; 32 positions in 2·cp chunks → cp ∈
        # {1, 2, 4, 8}; tp > 1 with and without sequence parallelism (tp divides a rank's micro-batch rows); pp > 1
        # under 1F1B and ZB-H1
        expected = {(dp, cp, tp, pp, sp, schedule) for dp in (1, 2, 4, 8) for cp in (1, 2, 4, 8) for tp in (1, 2, 4)
                    for pp in (1, 2, 4) for sp in ((False, True) if tp > 1 else (False,))
                    for schedule in (("1f1b", "zb-h1") if pp > 1 else ("1f1b",)) if dp * cp * tp * pp == 8}
        key = ("dp", "cp", "tp", "pp", "sequence_parallel", "schedule")
        self.assertEqual({tuple(x["layout"][k] for k in key) for x in plans}, expected)
        # ZB-H1: a smaller bubble (the deferred weight gradients fill the cool-down), more activations
        by_key = {tuple(x["layout"][k] for k in key): x for x in plans}
        for (dp, cp, tp, pp, sp, schedule), x in by_key.items():
            if schedule == "zb-h1":
                classic = by_key[(dp, cp, tp, pp, sp, "1f1b")]
                self.assertLess(x["step_time"]["bubble_s"], classic["step_time"]["bubble_s"])
                self.assertGreater(x["needed_bytes"], classic["needed_bytes"])
        # sequence parallelism keeps the bytes over tp and takes activations off every rank; context parallelism
        # takes them off every rank of the cp group
        by_layout = {tuple(x["layout"][k] for k in key[:-1]): x for x in plans if x["layout"]["schedule"] == "1f1b"}
        for (dp, cp, tp, pp, sp), x in by_layout.items():
            if sp:
                self.assertLess(x["needed_bytes"], by_layout[(dp, cp, tp, pp, False)]["needed_bytes"], (dp, tp, pp))
                self.assertGreaterEqual(x["max_seq_len"], by_layout[(dp, cp, tp, pp, False)]["max_seq_len"])
            if cp == 2 and dp % 2 == 0 and (dp // 2, 4, tp, pp, sp) in by_layout:  # the same dp·cp, cp doubled
                self.assertGreaterEqual(by_layout[(dp // 2, 4, tp, pp, sp)]["max_seq_len"], x["max_seq_len"])
        totals = [x["step_time"]["total_s"] for x in plans]
        self.assertEqual(totals, sorted(totals))
        table = self.plan(*SMALL, "--world", "8", "--search")
        self.assertEqual(table.returncode, 0, table.stderr)
        self.assertEqual(sum(1 for line in table.stdout.splitlines() if line.rstrip().endswith(("yes", "no"))),
                         len(expected))


def main():
    global MESHTRAIN, MPIEXEC, WORKDIR
    ap = argparse.ArgumentParser()
    ap.add_argument("--meshtrain", required=True)
    ap.add_argument("--workdir", required=True)
    ap.add_argument("--mpiexec", default=shutil.which("mpiexec"))
    ap.add_argument("-k", dest="pattern")
    ap.add_argument("-v", action="store_true")
    opts = ap.parse_args()
    MESHTRAIN, MPIEXEC, WORKDIR = os.path.abspath(opts.meshtrain), opts.mpiexec, os.path.abspath(opts.workdir)
    loader = unittest.TestLoader()
    if opts.pattern:
        loader.testNamePatterns = [f"*{opts.pattern}*"]
    suite = loader.loadTestsFromTestCase(PlanCli)
    result = unittest.TextTestRunner(verbosity=2 if opts.v else 1).run(suite)
    return 0 if result.wasSuccessful() and result.testsRun > 0 else 1


if __name__ == "__main__":
    sys.exit(main())
