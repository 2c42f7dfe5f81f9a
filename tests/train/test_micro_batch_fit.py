#!/usr/bin/env python3
"""The largest micro-batch (share/docs/usage.md, Faults: Sizes that do not fit; `meshtrain plan`).

Groups:
  fit           `plan --max-micro-batch` and the trainer's fit check apply one rule (src/plan/fit.hpp):
                under a train.memory_gib small enough for this machine, the trainer runs plan's
                largest micro-batch and refuses one more (exit 2, naming the largest), at 1 and 2 ranks;
                plan itself says fits at the largest and not at one more
  large_logits  a model whose logits hold more than 2^31 elements (d_model 16, vocab 65536, 32832
                tokens a micro-batch: 2.15e9 bf16 logits, 4 GiB) trains one step; its loss and gradient
                norm equal those of the same batch as 3 micro-batches of accumulation (same sums, other
                shapes, each micro-batch's logits under 2^31)

usage: test_micro_batch_fit.py --meshtrain BIN --workdir DIR [--mpiexec MPIEXEC] [--group NAME] [-k PATTERN]
"""
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "cli"))
import test_cli as cli  # noqa: E402
from test_cli import CliCase, describe, read_metrics, run, train_args  # noqa: E402

ONE_STEP = {"data.train": "shard.bin", "checkpoint.dir": "ck", "checkpoint.every": 0, "train.steps": 1,
            "log.metrics": "metrics.jsonl", "checkpoint.resume": "never"}


class Fit(CliCase):
    group = "fit"
    # 82 MiB: the runtime's ~35 MiB a rank, the rest for the tiny model's activations (logits 16 x 256
    # floats a sequence), so the largest micro-batch is some hundreds at one rank and fewer at two.
    MEMORY = {"train.memory_gib": "0.08", "model.seq_len": "16"}

    def setUp(self):
        super().setUp()
        cli.random_shard(self.path("shard.bin"), 60000, seed=3)

    def plan(self, world, *extra, micro=1):
        keys = {**cli.TINY, **self.MEMORY, "data.train": "shard.bin", "train.micro_batch": micro,
                "train.global_batch": micro * world}
        args = ["plan", "--world", world, "--json", *extra] + sum(([f"--{k}", str(v)] for k, v in keys.items()), [])
        p = run(args, self.dir)
        self.assertEqual(p.returncode, 0, describe(p))
        return json.loads(p.stdout)

    def train(self, world, micro):
        keys = {**ONE_STEP, **self.MEMORY, "train.micro_batch": micro, "train.global_batch": micro * world,
                "checkpoint.dir": f"ck_{world}", "log.metrics": f"metrics_{world}.jsonl"}
        launcher = cli.MPIEXEC.split() + ["-n", str(world)] if world > 1 else ()
        return run(train_args(keys), self.dir, timeout=120, launcher=launcher)

    def check_world(self, world):
        largest = self.plan(world, "--max-micro-batch")["effective_batch"]["micro_batch"]
        self.assertGreater(largest, 8, "the memory key should leave room for more than a few sequences")
        self.assertTrue(self.plan(world, micro=largest)["fits"])
        self.assertFalse(self.plan(world, micro=largest + 1)["fits"])
        p = self.train(world, largest)
        self.assertEqual(p.returncode, 0, f"the trainer refused plan's largest micro-batch {largest}\n{describe(p)}")
        self.assertEqual(read_metrics(self.path(f"metrics_{world}.jsonl"))[-1]["step"], 1)
        p = self.train(world, largest + 1)
        self.assertEqual(p.returncode, 2, f"the trainer accepted micro_batch {largest + 1}\n{describe(p)}")
        for needle in ("train.memory_gib = 0.08", f"the largest micro_batch that fits is {largest}",
                       f"micro_batch {largest + 1}"):
            self.assertIn(needle, p.stderr, describe(p))
        return largest

    def test_one_and_two_ranks_agree_with_plan(self):
        one = self.check_world(1)
        two = self.check_world(2)
        # Two ranks share the node's memory: each gets less room (plan counts the node's ranks together).
        self.assertLess(two, one)


class LargeLogits(CliCase):
    group = "large_logits"
    V, T, MICRO, ACCUM = 65536, 64, 513, 3
    MODEL = {"model.layers": 1, "model.heads": 1, "model.d_model": 16, "model.vocab": V, "model.seq_len": T,
             "train.precision": "bf16"}

    def setUp(self):
        super().setUp()
        tokens = np.random.default_rng(11).integers(0, self.V, size=(self.MICRO + 8) * (self.T + 1))
        cli.write_shard(self.path("shard.bin"), tokens)

    def one_step(self, micro, name):
        keys = {**ONE_STEP, **self.MODEL, "train.micro_batch": micro, "train.global_batch": self.MICRO,
                "checkpoint.dir": f"ck_{name}", "log.metrics": f"{name}.jsonl"}
        p = run(train_args(keys), self.dir, timeout=600)
        self.assertEqual(p.returncode, 0, describe(p))
        [record] = read_metrics(self.path(f"{name}.jsonl"))
        return record

    def test_logits_past_2_31_train_as_accumulated_micro_batches_do(self):
        self.assertGreater(self.MICRO * self.T * self.V, 2**31, "the logits must pass 2^31 elements")
        self.assertLess(self.MICRO // self.ACCUM * self.T * self.V, 2**31, "the reference's must not")
        whole = self.one_step(self.MICRO, "whole")
        parts = self.one_step(self.MICRO // self.ACCUM, "accumulated")
        # Each row's loss is the same computation in both; only the mean's order of additions differs.
        self.assertAlmostEqual(whole["loss"], parts["loss"], delta=1e-5 * parts["loss"], msg=(whole, parts))
        # The 16-bit gradients are rounded once per micro-batch: once here, three times there.
        self.assertAlmostEqual(whole["grad_norm"], parts["grad_norm"], delta=1e-2 * parts["grad_norm"],
                               msg=(whole, parts))
        # Not a tautology: a fresh model's loss is near ln V, and the tokens are uniform.
        self.assertAlmostEqual(whole["loss"], np.log(self.V), delta=0.5)


GROUPS = {"fit": Fit, "large_logits": LargeLogits}


def main():
    opts = cli.take_common_options(cli.group_parser(__doc__, GROUPS).parse_args())
    return cli.run_groups(GROUPS, opts, cli.WORKDIR)


if __name__ == "__main__":
    sys.exit(main())
