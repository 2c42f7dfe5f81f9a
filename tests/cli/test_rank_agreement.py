#!/usr/bin/env python3
"""Ranks that were given different configurations (share/docs/usage.md, Faults: Ranks that disagree).

MPMD launches (`mpiexec -n 1 meshtrain train A : -n 1 meshtrain train B`) hand the ranks different
options. A difference is exit 2 on every rank, one message naming the first differing key with both
values and their ranks, and nothing written; the same options on both sides train as usual.

usage: test_rank_agreement.py --meshtrain BIN --workdir DIR [--mpiexec MPIEXEC] [-k PATTERN]
"""
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import test_cli as cli  # noqa: E402
from test_cli import CliCase, describe, train_args  # noqa: E402

KEYS = {"data.train": "shard.bin", "checkpoint.dir": "ck", "train.steps": 2, "parallel.dp": 2}


class Disagreement(CliCase):
    group = "rank_agreement"

    def setUp(self):
        super().setUp()
        cli.random_shard(self.path("shard.bin"), 2000, seed=2)

    def mpmd(self, *per_program):
        """One `-n COUNT meshtrain train KEYS` program per (count, extra keys), joined with ':'."""
        command = cli.MPIEXEC.split()
        for count, extra in per_program:
            command += [":"] if len(command) > 1 else []
            command += ["-n", str(count), cli.MESHTRAIN] + train_args({**KEYS, **extra})
        try:
            p = subprocess.run(command, cwd=self.dir, capture_output=True, text=True, timeout=60)
        except subprocess.TimeoutExpired as e:
            raise AssertionError(f"{' '.join(command)} hung") from e
        return p

    def assert_refused(self, p, message):
        self.assertEqual(p.returncode, 2, describe(p))
        self.assertEqual(p.stderr.count(message), 1, f"stderr should say {message!r} once\n{describe(p)}")
        self.assert_no_crash_text(p)
        self.assertFalse(os.path.exists(self.path("ck")), "a refused run wrote a checkpoint directory")

    def test_zero_stage_differs(self):
        p = self.mpmd((1, {"parallel.zero": 1}), (1, {"parallel.zero": 2}))
        self.assert_refused(p, "parallel.zero is 2 on rank 1 but 1 on rank 0")

    def test_the_first_differing_key_is_named_on_four_ranks(self):
        # Rank 3 differs in two keys; the message names the first in the resolved INI's order
        # (sections sorted: optim before train).
        p = self.mpmd((3, {"parallel.dp": 4, "train.global_batch": 8}),
                      (1, {"parallel.dp": 4, "train.global_batch": 8, "optim.lr": 0.001, "train.seed": 7}))
        self.assert_refused(p, "optim.lr is 0.001 on rank 3 but 0.0003 on rank 0")

    def test_the_same_keys_train(self):
        p = self.mpmd((1, {"parallel.zero": 2}), (1, {"parallel.zero": 2}))
        self.assertEqual(p.returncode, 0, describe(p))
        self.assertTrue(os.path.exists(self.path("ck", "step_00000002.h5")), describe(p))


GROUPS = {"rank_agreement": Disagreement}


def main():
    opts = cli.take_common_options(cli.group_parser(__doc__, GROUPS).parse_args())
    return cli.run_groups(GROUPS, opts, cli.WORKDIR)


if __name__ == "__main__":
    sys.exit(main())
