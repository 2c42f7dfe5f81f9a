#!/usr/bin/env python3
"""train.nonfinite on real runs (share/docs/usage.md, Faults: Non-finite values).

Faults are injected with MESHTRAIN_INJECT_FAULT (inf_loss: the step's loss becomes +Inf on the
ranks named; nan_gradient: a gradient element becomes NaN after backward there). Groups:
  stop   one rank: `stop` exits 6 naming the step and the value, saves nothing, and the checkpoint
         saved before still resumes to the same end as a run that never failed
  skip   one rank: `skip` leaves the weights and moments of a skipped step as they were (the
         checkpoints saved either side of it are equal bit for bit), counts the skips in the metrics,
         advances the step and the data; more skips in a row than train.nonfinite_skips exit 6
  ranks  2 and 4 ranks, the fault on one rank only: dp 2 under ZeRO 0–3, tp 2, pp 2 (the fault on the stage
         that holds no loss), dp 2 × pp 2: every rank reaches the same verdict (exit 6 once, or the
         same skip), none hangs

usage: test_nonfinite.py --meshtrain BIN --workdir DIR [--mpiexec MPIEXEC] [--group NAME] [-k PATTERN]
"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "cli"))
import test_cli as cli  # noqa: E402
from test_cli import CliCase, describe, h5_tensors, read_latest, read_metrics, run, train_args  # noqa: E402

STEPS = 5
# A tiny run that saves every step and keeps every checkpoint, so that the states on either side of
# a step can be compared.
RUN = {"data.train": "shard.bin", "checkpoint.dir": "ck", "checkpoint.every": 1, "checkpoint.keep": 0,
       "train.steps": STEPS, "log.metrics": "metrics.jsonl", "checkpoint.resume": "never"}
TWO_LAYERS = {"model.layers": 2}  # pp 2 needs a layer per stage


def checkpoint(case, step):
    return case.path("ck", f"step_{step:08d}.h5")


class NonfiniteCase(CliCase):
    timeout = 60  # a run that hangs fails the case

    def setUp(self):
        super().setUp()
        cli.random_shard(self.path("shard.bin"), 4000, seed=7)

    def train(self, keys, fault=None, ranks=1):
        launcher = cli.MPIEXEC.split() + ["-n", str(ranks)] if ranks > 1 else ()
        env = {"MESHTRAIN_INJECT_FAULT": fault} if fault else None
        return run(train_args({**RUN, **keys}), self.dir, timeout=self.timeout, launcher=launcher, env=env)

    def assert_stopped(self, p, step, value):
        """Exit 6, the step and the value named once, nothing saved at or after the step."""
        self.assertEqual(p.returncode, 6, describe(p))
        needle = f"step {step}: {value}"
        self.assertEqual(p.stderr.count(needle), 1, f"stderr should name {needle!r} once\n{describe(p)}")
        self.assertIn("stopping without saving", p.stderr, describe(p))
        self.assert_no_crash_text(p)
        self.assertNotIn("MPI_Abort", p.stdout + p.stderr, f"every rank must leave normally\n{describe(p)}")
        self.assertEqual(read_latest(self.path("ck")), os.path.basename(checkpoint(self, step - 1)), describe(p))
        for later in range(step, STEPS + 1):
            self.assertFalse(os.path.exists(checkpoint(self, later)), f"step {later} was saved\n{describe(p)}")
        record = read_metrics(self.path("metrics.jsonl"))[-1]
        self.assertEqual((record["step"], record.get("nonfinite")), (step, True), record)

    def assert_same_state(self, a, b):
        """The weights and the AdamW moments of two checkpoints, bit for bit."""
        ta, tb = h5_tensors(a), h5_tensors(b)
        self.assertEqual(sorted(ta), sorted(tb))
        self.assertTrue(any(k.startswith("optim/") for k in ta), f"{a} holds no moments")
        for name in ta:
            self.assertEqual(ta[name].tobytes(), tb[name].tobytes(), f"{name} differs between {a} and {b}")

    def assert_skipped(self, p, steps):
        """Exit 0; exactly `steps` skipped, each with a line and a metrics mark, the state unchanged
        across each, the step and the data position advanced."""
        self.assertEqual(p.returncode, 0, describe(p))
        records = read_metrics(self.path("metrics.jsonl"))
        self.assertEqual([r["step"] for r in records], list(range(1, STEPS + 1)))
        self.assertEqual([r["step"] for r in records if r.get("skipped")], steps, records)
        self.assertEqual([r["step"] for r in records if r.get("nonfinite")], steps, records)
        tokens_per_step = records[0]["tokens"]
        self.assertEqual([r["tokens"] for r in records], [tokens_per_step * s for s in range(1, STEPS + 1)])
        for s in steps:
            self.assertIn(f"step {s}: ", p.stdout, describe(p))
            self.assert_same_state(checkpoint(self, s - 1), checkpoint(self, s))
        for s in sorted(set(range(2, STEPS + 1)) - set(steps)):  # the other steps did update
            a, b = h5_tensors(checkpoint(self, s - 1)), h5_tensors(checkpoint(self, s))
            self.assertNotEqual(a["model/wte.weight"].tobytes(), b["model/wte.weight"].tobytes(), f"step {s} changed nothing")
        self.assertEqual(p.stdout.count("update skipped"), len(steps), describe(p))


# --- 1. stop ---------------------------------------------------------------------------------------

class Stop(NonfiniteCase):
    group = "stop"

    def test_inf_loss_stops_and_the_checkpoint_before_resumes(self):
        p = self.train({}, fault="inf_loss@3")
        self.assert_stopped(p, 3, "the loss is inf")
        # The checkpoint the stop left as latest resumes, to the same end as a run that never failed.
        resumed = self.train({"checkpoint.resume": "auto"})
        self.assertEqual(resumed.returncode, 0, describe(resumed))
        os.rename(self.path("ck"), self.path("ck_resumed"))
        straight = self.train({})
        self.assertEqual(straight.returncode, 0, describe(straight))
        self.assert_same_state(self.path("ck_resumed", f"step_{STEPS:08d}.h5"), checkpoint(self, STEPS))

    def test_nan_gradient_stops_bf16(self):
        p = self.train({"train.precision": "bf16"}, fault="nan_gradient@2")
        self.assert_stopped(p, 2, "the gradient norm is nan")

    def test_fp16_nonfinite_loss_stops(self):
        # fp16's loss scaler handles overflowing gradients; a non-finite loss is train.nonfinite's.
        p = self.train({"train.precision": "fp16"}, fault="inf_loss@2")
        self.assert_stopped(p, 2, "the loss is inf")


# --- 2. skip ---------------------------------------------------------------------------------------

class Skip(NonfiniteCase):
    group = "skip"

    def test_nan_gradient_skips_the_update(self):
        p = self.train({"train.nonfinite": "skip"}, fault="nan_gradient@3")
        self.assert_skipped(p, [3])
        self.assertIn("step 3: the gradient norm is nan: update skipped", p.stdout, describe(p))

    def test_inf_loss_skips_bf16(self):
        p = self.train({"train.nonfinite": "skip", "train.precision": "bf16"}, fault="inf_loss@2,inf_loss@4")
        self.assert_skipped(p, [2, 4])

    def test_skips_up_to_the_limit_in_a_row(self):
        faults = "inf_loss@2,inf_loss@3,nan_gradient@5"  # two in a row, then one more
        p = self.train({"train.nonfinite": "skip", "train.nonfinite_skips": 2}, fault=faults)
        self.assert_skipped(p, [2, 3, 5])

    def test_more_skips_in_a_row_than_allowed_stop(self):
        faults = "inf_loss@2,nan_gradient@3,inf_loss@4"
        p = self.train({"train.nonfinite": "skip", "train.nonfinite_skips": 2}, fault=faults)
        self.assert_stopped(p, 4, "the loss is inf (3 non-finite steps in a row, train.nonfinite_skips = 2)")
        self.assertEqual(p.stdout.count("update skipped"), 2, describe(p))


# --- 3. ranks --------------------------------------------------------------------------------------

class Ranks(NonfiniteCase):
    group = "ranks"

    def test_dp2_zero2_nan_gradient_on_rank_1_stops(self):
        p = self.train({"parallel.dp": 2, "parallel.zero": 2}, fault="nan_gradient@3:1", ranks=2)
        self.assert_stopped(p, 3, "the gradient norm is nan")

    def test_dp2_zero1_nan_gradient_on_rank_1_skips(self):
        keys = {"parallel.dp": 2, "parallel.zero": 1, "train.nonfinite": "skip"}
        self.assert_skipped(self.train(keys, fault="nan_gradient@3:1", ranks=2), [3])

    def test_dp2_replicas_nan_gradient_on_rank_1_skips(self):
        # ZeRO 0: rank 1 is a replica whose gradient norm the world does not add, so the NaN must
        # reach the norm through the data-parallel sum.
        keys = {"parallel.dp": 2, "parallel.zero": 0, "train.nonfinite": "skip"}
        self.assert_skipped(self.train(keys, fault="nan_gradient@2:1", ranks=2), [2])

    def test_dp2_zero3_bf16_nan_gradient_on_rank_1_skips(self):
        keys = {"parallel.dp": 2, "parallel.zero": 3, "train.precision": "bf16", "train.nonfinite": "skip"}
        self.assert_skipped(self.train(keys, fault="nan_gradient@2:1", ranks=2), [2])

    def test_tp2_nan_gradient_on_rank_1_stops(self):
        p = self.train({"parallel.tp": 2}, fault="nan_gradient@3:1", ranks=2)
        self.assert_stopped(p, 3, "the gradient norm is nan")

    def test_pp2_inf_loss_on_the_first_stage_stops(self):
        # Rank 0 is the first stage: it holds no loss, yet its fault must stop every rank.
        p = self.train({**TWO_LAYERS, "parallel.pp": 2}, fault="inf_loss@2:0", ranks=2)
        self.assert_stopped(p, 2, "the loss is inf")

    def test_pp2_nan_gradient_on_the_last_stage_skips(self):
        keys = {**TWO_LAYERS, "parallel.pp": 2, "train.nonfinite": "skip", "train.precision": "bf16"}
        self.assert_skipped(self.train(keys, fault="nan_gradient@4:1", ranks=2), [4])

    def test_dp2_pp2_inf_loss_on_one_rank_stops(self):
        keys = {**TWO_LAYERS, "parallel.pp": 2, "parallel.dp": 2, "parallel.zero": 1}
        p = self.train(keys, fault="inf_loss@2:3", ranks=4)
        self.assert_stopped(p, 2, "the loss is inf")


GROUPS = {"stop": Stop, "skip": Skip, "ranks": Ranks}


def main():
    opts = cli.take_common_options(cli.group_parser(__doc__, GROUPS).parse_args())
    return cli.run_groups(GROUPS, opts, cli.WORKDIR)


if __name__ == "__main__":
    sys.exit(main())
