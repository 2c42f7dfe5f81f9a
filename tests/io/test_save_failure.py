#!/usr/bin/env python3
"""Saves that fail cleanly, and checkpoint.dir checked at start (share/docs/usage.md, A full disk
during a save), end to end with real processes on real, size-limited tmpfs mounts (needs root).

Two groups, one ctest entry each:

  full_disk   a tmpfs sized so that the first checkpoint fits and the next one does not. At 1 and 4
              ranks (MPICH), synchronous and background saves, independent and collective I/O, with
              the space reserved up front (fallocate) and without (the fault switch unreserved_save,
              as on a file system without fallocate: a write then meets the full disk). Each run must
              end within seconds (a subprocess timeout), with exit 4 when the job's last save or two
              saves in a row fail and after a warning when one periodic save fails (training goes
              on: every step is in the metrics); one message naming the file, the bytes a checkpoint
              needs (the same number the start check reports, no less than the real file) and the
              free space; no .tmp left; `latest` still naming the earlier checkpoint, equal bit for
              bit to a clean run's; and resuming from it with room reproduces the clean run's
              metrics bit for bit.
  dir_checks  before the first step, exit 2 naming the directory for: a read-only mount, a file in
              place of the directory, less room than one checkpoint (the message's byte counts
              against the checkpoint's real size and statvfs); `resume never` into a directory
              holding another run's step file or `latest` (untouched); init weights with a
              checkpoint's name in the directory. A warning, and a normal run, with room for fewer
              than checkpoint.keep + 1 checkpoints.

  logs        at 2 ranks: log.metrics on a tmpfs that fills mid-run, log.traffic on one full at the
              end: exit 7 after the step's checkpoint is saved, the metrics file ending on a complete
              record, the record it lacks on stderr, and a resume that continues bit for bit; log.traffic
              on a read-only mount: exit 2 before the first step.

How long each fault took to end is printed (and the clean run's time beside it).

usage: test_save_failure.py --meshtrain BIN --workdir DIR [--mpiexec MPIEXEC] [--group G] [-k PATTERN]
Exits 77 (ctest: skipped) where tmpfs cannot be mounted (not root).
"""

import contextlib
import json
import os
import re
import shutil
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "cli"))
import test_cli as cli  # noqa: E402
from test_cli import describe, read_latest, read_metrics, train_args, tree_digest  # noqa: E402

import h5py  # noqa: E402

SKIP = 77
RUN_TIMEOUT = 60  # seconds: a save that hangs fails the case instead of the whole ctest entry
NEEDS = re.compile(r"needs (\d+) bytes")
FREE = re.compile(r"reports (\d+) bytes \([\d.]+ MiB\) free")


def mount_tmpfs(path, size, read_only=False):
    os.makedirs(path, exist_ok=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", path], check=True, timeout=10,
                   capture_output=True)
    if read_only:
        subprocess.run(["mount", "-o", "remount,ro", path], check=True, timeout=10, capture_output=True)


@contextlib.contextmanager
def tmpfs(path, size, read_only=False):
    mount_tmpfs(path, size, read_only)
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", path], timeout=10, capture_output=True)


def tmpfs_available(workdir):
    probe = os.path.join(workdir, "tmpfs_probe")
    try:
        with tmpfs(probe, 1 << 20):
            return True
    except (subprocess.CalledProcessError, OSError):
        return False


def launcher(ranks):
    return [cli.MPIEXEC, "-n", str(ranks)] if ranks > 1 else []


# One layer of width 96: the float32 data (1.6 MB) outweigh HDF5's metadata, so that the tmpfs can
# hold one checkpoint and one reservation but not two checkpoints, and without the reservation
# the second checkpoint's own writes meet the full disk. dp = ranks (1 or 4), one sequence each.
MODEL = {"model.layers": 1, "model.d_model": 96, "train.micro_batch": 1, "train.global_batch": 4,
         "checkpoint.keep": 1}


def data_bytes(path):
    """The float32 bytes of every dataset of a checkpoint, counted by h5py."""
    total = []
    with h5py.File(path, "r") as f:
        f.visititems(lambda name, obj: total.append(obj.size * 4) if isinstance(obj, h5py.Dataset) else None)
    return sum(total)


class SaveCase(cli.CliCase):
    """Shared steps: a clean run per layout, the checkpoint size, the run under a full disk."""

    clean_runs = {}  # (ranks, steps) -> (dir, seconds)

    def keys(self, ranks, extra):
        k = {"data.train": self.shard, "log.metrics": None}
        k.update(MODEL)
        k.update(extra)
        return k

    def setUp(self):
        super().setUp()
        self.shard = os.path.join(cli.WORKDIR, "shard.bin")
        if not os.path.exists(self.shard):
            cli.random_shard(self.shard, 4000)

    def launch(self, ranks, keys, env=None, timeout=RUN_TIMEOUT):
        start = time.monotonic()
        # One BLAS thread a rank: 4 ranks share this machine's cores (the same in every run compared).
        p = cli.run(train_args(keys), self.dir, timeout=timeout, launcher=launcher(ranks),
                    env={"OPENBLAS_NUM_THREADS": "1", **(env or {})})
        p.seconds = time.monotonic() - start
        return p

    def clean(self, ranks, steps):
        """A run of `steps` steps with plenty of room that keeps every checkpoint."""
        key = (ranks, steps)
        if key not in SaveCase.clean_runs:
            d = os.path.join(cli.WORKDIR, f"clean_np{ranks}_s{steps}")
            shutil.rmtree(d, ignore_errors=True)
            os.makedirs(d)
            keys = self.keys(ranks, {"train.steps": steps, "checkpoint.every": 2, "checkpoint.keep": 0,
                                     "checkpoint.dir": os.path.join(d, "ck"),
                                     "log.metrics": os.path.join(d, "metrics.jsonl")})
            p = self.launch(ranks, keys)
            self.assertEqual(p.returncode, 0, describe(p))
            SaveCase.clean_runs[key] = (d, p.seconds)
        return SaveCase.clean_runs[key]

    def checkpoint_bytes(self):
        """The bytes meshtrain says a checkpoint needs (any layout: the file is the same): read from
        its refusal of a 64 KiB tmpfs."""
        mnt = self.path("tiny")
        with tmpfs(mnt, 64 * 1024):
            p = self.launch(1, self.keys(1, {"train.steps": 1, "checkpoint.dir": mnt}))
        self.assert_bad_input(p, mnt, "needs", "free")
        return int(NEEDS.search(p.stderr).group(1))


class FullDisk(SaveCase):
    group = "full_disk"

    def run_full(self, ranks, extra, expect_code, failed_steps, steps, env=None):
        """Runs `steps` steps saving every 2 into a tmpfs with room for one checkpoint and one
        reservation; checks the failed run's end and files, then resumes it with room. Returns the
        failed run."""
        clean_dir, clean_s = self.clean(ranks, steps)
        needed = self.checkpoint_bytes()
        first = os.path.join(clean_dir, "ck", "step_00000002.h5")
        actual = os.path.getsize(first)
        self.assertGreaterEqual(needed, actual, "the planned size must bound the real file's")
        self.assertGreaterEqual(needed, data_bytes(first))
        mnt = self.path("ck")
        metrics = self.path("metrics.jsonl")
        # Room for one checkpoint's reservation, not for a second beside the first.
        size = needed + actual // 2
        with tmpfs(mnt, size):
            keys = self.keys(ranks, {"train.steps": steps, "checkpoint.every": 2, "checkpoint.dir": mnt,
                                     "log.metrics": metrics, **extra})
            p = failed_run = self.launch(ranks, keys, env=env)
            print(f"\n    {self._testMethodName}: ended in {p.seconds:.1f} s with code {p.returncode} "
                  f"(a clean run: {clean_s:.1f} s)", end="", flush=True)
            self.assertEqual(p.returncode, expect_code, describe(p))
            self.assert_no_crash_text(p)
            for step in failed_steps:
                name = os.path.join(mnt, f"step_{step:08d}.h5")
                self.assertIn(f"cannot write checkpoint {name}", p.stderr, describe(p))
                self.assertEqual(p.stderr.count(f"cannot write checkpoint {name}"), 1, "one message per failure")
            self.assertIn(f"needs {needed} bytes", p.stderr)
            free = [int(x) for x in FREE.findall(p.stderr)]
            self.assertTrue(free and all(f < needed for f in free), f"free space reported: {free}\n{describe(p)}")
            left = sorted(os.listdir(mnt))
            self.assertFalse([n for n in left if n.endswith(".tmp")], f".tmp left behind: {left}")
            self.assertEqual(read_latest(mnt), "step_00000002.h5")
            self.assert_checkpoints_equal(os.path.join(mnt, "step_00000002.h5"), first)
            shutil.copytree(mnt, self.path("roomy"))
        got = read_metrics(metrics)
        self.assertGreaterEqual(len(got), 4, "training must go on past a failed save")
        self.assert_same_records(got, read_metrics(os.path.join(clean_dir, "metrics.jsonl"))[:len(got)])
        # Resume from the earlier checkpoint with room: the clean run's steps, bit for bit.
        resumed = self.path("resumed.jsonl")
        keys = self.keys(ranks, {"train.steps": steps, "checkpoint.every": 2, "checkpoint.dir": self.path("roomy"),
                                 "log.metrics": resumed, "checkpoint.async": None, "train.stop_after": None})
        p = self.launch(ranks, keys)
        self.assertEqual(p.returncode, 0, describe(p))
        self.assertIn("resumed from", p.stdout)
        self.assert_same_records(read_metrics(resumed), read_metrics(os.path.join(clean_dir, "metrics.jsonl"))[2:])
        return failed_run

    def test_np1_sync_independent_warns_then_ends(self):
        # Step 4's save fails: a warning, training goes on; step 6's (the last, the second in a row): exit 4.
        p = self.run_full(1, {"checkpoint.io": "independent"}, 4, failed_steps=[4, 6], steps=6)
        self.assertIn("training goes on, and the next save tries again", p.stderr)
        self.assertIn("the job's last save failed: the job ends (exit code 4)", p.stderr)

    def test_np1_unreserved_write_fails(self):
        # No reservation at step 4: HDF5's own write meets the full disk (the path without fallocate).
        p = self.run_full(1, {}, 4, failed_steps=[4], steps=4, env={"MESHTRAIN_INJECT_FAULT": "unreserved_save@4"})
        self.assertIn("No space left on device", p.stderr)
        self.assertIn("writing /", p.stderr, "the write, not the reservation, must be what failed")

    def test_np1_background_collective_leaving(self):
        # train.stop_after: the save made when leaving (synchronous) fails: exit 4, not 3.
        self.run_full(1, {"checkpoint.async": "true", "checkpoint.io": "collective", "train.stop_after": 4}, 4,
                      failed_steps=[4], steps=6)

    def test_np4_unreserved_collective(self):
        p = self.run_full(4, {"checkpoint.io": "collective"}, 4, failed_steps=[4], steps=4,
                          env={"MESHTRAIN_INJECT_FAULT": "unreserved_save@4"})
        self.assertIn("writing /", p.stderr)

    def test_np4_background_two_in_a_row(self):
        # Background saves at 4 and 6 fail; once the training thread learns of the second, the job
        # ends (exit 4) without trying step 8's.
        p = self.run_full(4, {"checkpoint.async": "true", "checkpoint.io": "independent"}, 4, failed_steps=[4, 6],
                          steps=10)
        self.assertIn("two saves in a row failed: the job ends (exit code 4)", p.stderr)
        self.assertNotIn("step_00000008.h5", p.stderr + p.stdout)


class DirChecks(SaveCase):
    group = "dir_checks"

    def test_read_only_mount(self):
        mnt = self.path("ro")
        with tmpfs(mnt, 1 << 20, read_only=True):
            p = self.launch(1, self.keys(1, {"train.steps": 1, "checkpoint.dir": mnt}))
        self.assert_bad_input(p, mnt, "not writable", "Read-only file system")

    def test_file_as_directory(self):
        with open(self.path("ck"), "w") as f:
            f.write("not a directory\n")
        p = self.launch(1, self.keys(1, {"train.steps": 1, "checkpoint.dir": self.path("ck")}))
        self.assert_bad_input(p, self.path("ck"), "not a directory")

    def test_too_little_room(self):
        mnt = self.path("small")
        clean_dir, _ = self.clean(1, 2)
        actual = os.path.getsize(os.path.join(clean_dir, "ck", "step_00000002.h5"))
        with tmpfs(mnt, 64 * 1024):
            free = os.statvfs(mnt).f_bavail * os.statvfs(mnt).f_frsize
            p = self.launch(1, self.keys(1, {"train.steps": 1, "checkpoint.dir": mnt}))
            self.assertEqual(os.listdir(mnt), [], "nothing may be written")
        self.assert_bad_input(p, mnt, f"reports {free} bytes")
        needed = int(NEEDS.search(p.stderr).group(1))
        self.assertGreaterEqual(needed, actual)
        self.assertLess(needed, 4 * actual + (1 << 20), "the planned size is a bound, not a guess far off")

    def test_fewer_than_keep_plus_one_warns(self):
        mnt = self.path("tight")
        needed = self.checkpoint_bytes()
        with tmpfs(mnt, 2 * needed + needed // 2):
            p = self.launch(1, self.keys(1, {"train.steps": 2, "checkpoint.dir": mnt, "checkpoint.keep": 3}))
            self.assertEqual(p.returncode, 0, describe(p))
            self.assertIn(f"warning: checkpoint.dir {mnt} has room for 2 checkpoint(s) of {needed} bytes", p.stdout)
            self.assertIn("checkpoint.keep + 1 = 4", p.stdout)
            self.assertEqual(read_latest(mnt), "step_00000002.h5")
        with tmpfs(mnt, 5 * needed):
            p = self.launch(1, self.keys(1, {"train.steps": 1, "checkpoint.dir": mnt, "checkpoint.keep": 3}))
            self.assertEqual(p.returncode, 0, describe(p))
            self.assertNotIn("warning: checkpoint.dir", p.stdout, "room for keep + 1: no warning")

    def test_resume_never_refuses_another_runs_checkpoints(self):
        clean_dir, _ = self.clean(1, 2)
        ck = self.path("ck")
        os.makedirs(ck)
        shutil.copy(os.path.join(clean_dir, "ck", "step_00000002.h5"), ck)
        before = tree_digest(ck)
        p = self.launch(1, self.keys(1, {"train.steps": 2, "checkpoint.dir": ck, "checkpoint.resume": "never"}))
        self.assert_bad_input(p, os.path.join(ck, "step_00000002.h5"), "checkpoint.resume = auto",
                              "its own checkpoint.dir")
        self.assertEqual(tree_digest(ck), before, "the other run's checkpoint must be untouched")
        only_latest = self.path("ck_latest")
        os.makedirs(only_latest)
        with open(os.path.join(only_latest, "latest"), "w") as f:
            f.write("step_00000002.h5\n")
        p = self.launch(1, self.keys(1, {"train.steps": 2, "checkpoint.dir": only_latest,
                                         "checkpoint.resume": "never"}))
        self.assert_bad_input(p, os.path.join(only_latest, "latest"))

    def test_init_weights_inside_checkpoint_dir(self):
        clean_dir, _ = self.clean(1, 2)
        ck = self.path("ck")
        os.makedirs(ck)
        init = os.path.join(ck, "step_00000002.h5")
        shutil.copy(os.path.join(clean_dir, "ck", "step_00000002.h5"), init)
        before = tree_digest(ck)
        p = self.launch(1, self.keys(1, {"train.steps": 4, "checkpoint.dir": ck, "checkpoint.init_weights": init}))
        self.assert_bad_input(p, init, "checkpoint.init_weights")
        self.assertEqual(tree_digest(ck), before)


class LogFailure(SaveCase):
    """log.metrics and log.traffic on file systems that fill or refuse writing (share/docs/usage.md,
    A log that cannot be written), at 2 ranks: every rank leaves together, after saving."""

    group = "logs"
    STEPS = 24

    def keys(self, ranks, extra):
        # The tiny model of test_cli.py (train_args' defaults): dp 2 with one micro-batch each.
        return {"data.train": self.shard, "log.metrics": None, "log.every": 100, **extra}

    def clean_metrics(self):
        d = self.path("clean")
        p = self.launch(2, self.keys(2, {"train.steps": self.STEPS, "checkpoint.dir": os.path.join(d, "ck"),
                                         "log.metrics": os.path.join(d, "m.jsonl")}))
        self.assertEqual(p.returncode, 0, describe(p))
        return read_metrics(os.path.join(d, "m.jsonl"))

    def test_np2_metrics_file_system_fills_mid_run(self):
        clean = self.clean_metrics()
        mnt, ck = self.path("logs"), self.path("ck")
        with tmpfs(mnt, 4096):  # room for about ten records
            metrics = os.path.join(mnt, "m.jsonl")
            p = self.launch(2, self.keys(2, {"train.steps": self.STEPS, "checkpoint.dir": ck,
                                             "log.metrics": metrics}))
            print(f"\n    {self._testMethodName}: ended in {p.seconds:.1f} s with code {p.returncode}", end="",
                  flush=True)
            self.assertEqual(p.returncode, 7, describe(p))
            self.assert_no_crash_text(p, allow=("Aborted",))
            self.assertIn(f"cannot write the metrics file {metrics} (log.metrics): No space left on device", p.stderr)
            with open(metrics) as f:
                text = f.read()
            self.assertTrue(text.endswith("\n"), "the file must end with its last complete record")
            written = read_metrics(metrics)
        failed = len(written) + 1
        self.assertLess(failed, self.STEPS, "the disk should fill before the end")
        self.assert_same_records(written, clean[:len(written)])
        # The step the file lacks is on stderr, and it is the step saved: nothing is lost.
        record = json.loads(re.search(r"the record of step \d+ that it lacks: (\{.*\})", p.stderr).group(1))
        self.assert_same_records([record], clean[failed - 1:failed])
        self.assertIn(f"leaving at step {failed} of {self.STEPS} with its checkpoint saved", p.stderr)
        self.assertEqual(read_latest(ck), f"step_{failed:08d}.h5")
        # Resuming with room continues bit for bit.
        resumed = self.path("resumed.jsonl")
        p = self.launch(2, self.keys(2, {"train.steps": self.STEPS, "checkpoint.dir": ck, "log.metrics": resumed}))
        self.assertEqual(p.returncode, 0, describe(p))
        self.assert_same_records(read_metrics(resumed), clean[failed:])

    def test_np2_traffic_file_system_full_at_the_end(self):
        mnt, ck = self.path("logs"), self.path("ck")
        with tmpfs(mnt, 8192):
            with open(os.path.join(mnt, "filler"), "wb") as f:  # every page taken; files can still be created
                with contextlib.suppress(OSError):
                    f.write(bytes(8192))
            p = self.launch(2, self.keys(2, {"train.steps": 3, "checkpoint.dir": ck,
                                             "log.traffic": os.path.join(mnt, "t.json")}))
            self.assertEqual(p.returncode, 7, describe(p))
            self.assert_no_crash_text(p, allow=("Aborted",))
            self.assertIn("log.traffic", p.stderr)
            self.assertIn("No space left on device", p.stderr)
            self.assertIn("training finished at step 3 of 3 with its checkpoint saved", p.stderr)
            self.assertEqual(sorted(os.listdir(mnt)), ["filler"], "no traffic file or temporary left")
        self.assertEqual(read_latest(ck), "step_00000003.h5")

    def test_traffic_on_a_read_only_mount_is_refused_at_start(self):
        mnt = self.path("ro")
        with tmpfs(mnt, 1 << 20, read_only=True):
            p = self.launch(2, self.keys(2, {"train.steps": 3, "checkpoint.dir": self.path("ck"),
                                             "log.traffic": os.path.join(mnt, "t.json")}))
        self.assert_bad_input(p, "log.traffic", mnt, "not writable", "Read-only file system")
        self.assertNotIn("step 1/", p.stdout, "refused before the first step")


GROUPS = {"full_disk": FullDisk, "dir_checks": DirChecks, "logs": LogFailure}


def main():
    opts = cli.take_common_options(cli.group_parser(__doc__, GROUPS).parse_args())
    os.makedirs(cli.WORKDIR, exist_ok=True)
    if not tmpfs_available(cli.WORKDIR):
        print("skipped: cannot mount a tmpfs here (needs root)")
        return SKIP
    return cli.run_groups(GROUPS, opts, cli.WORKDIR)


if __name__ == "__main__":
    sys.exit(main())
