#!/usr/bin/env python3
"""slurm/train.sbatch, slurm/chain.sh and slurm/local_cluster.sh on a real one-node Slurm.

Four groups, one ctest entry each:

  requeue  `sbatch -n 4 train.sbatch CONFIG --train.stop_after 5` on a 16-step run requeues itself
           three times (runs of 5, 5, 5, 1 steps) and completes; its metrics equal one uninterrupted
           `mpiexec -n 4` run's bit for bit (loss, grad_norm, lr, tokens per step), so do the final
           checkpoints. Control: the same job with MESHTRAIN_REQUEUE=0 ends after 5 steps with exit 3.
  signal   SIGUSR1 delivered to the batch script alone (`scancel --signal=USR1 --batch`) mid-run: the
           script passes it on, the ranks save and exit 3, the job requeues once, resumes and
           completes with the uninterrupted run's metrics; under srun, under srun with SIGTERM
           instead, and under mpiexec (MESHTRAIN_LAUNCHER=mpiexec).
  chain    slurm/chain.sh: 4 jobs chained with afterany (stop_after 6: 6, 12, 16 steps, then "nothing
           to do"), and 3 jobs chained by --singleton under mpiexec; they run one after another,
           never requeue, and together equal the uninterrupted run.
  guards   the requeue decision with a stand-in binary (one task): no progress (exit 3, latest
           unmoved) is not requeued; a launcher that reports 0 short of train.steps (what Hydra's
           mpiexec may do when the ranks exit 3) is requeued until the steps are done; bad input
           (exit 2) is not requeued; a collective timeout (exit 5) is requeued after progress and
           not without; a job ended by scancel stays ended though its ranks exit 3;
           one GPU per rank (a stand-in nvidia-smi and binary: the node's GPUs under srun, GPUs
           granted in CUDA_VISIBLE_DEVICES under mpiexec, MESHTRAIN_GPU_BIND=none); OPENBLAS_CORETYPE
           on every rank as a stand-in binary's `blas --openblas-coretype` names it, unless set;
           local_cluster.sh start and status are idempotent.

    test_slurm.py --meshtrain BIN --workdir DIR [--mpiexec MPIEXEC] [--group {requeue,signal,chain,guards,all}]
                  [-k PATTERN] [-v]

Needs root: starts the local cluster (slurm/local_cluster.sh start, config under MESHTRAIN_SLURM_DIR)
when it is not up, and leaves it running. Without root it says so and exits 77 (ctest: Skipped).
Jobs are waited for by polling `scontrol show job` (no accounting needed) with timeouts; a job that
overruns is cancelled and its output shown. Each case works in <workdir>/<group>/<case>; the job
output is job.out there. Uses test_cli.py's helpers by import.
"""

import os
import re
import shlex
import shutil
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "cli"))
import test_cli as cli  # noqa: E402  (its globals are set in main())
from test_cli import describe, random_shard, read_latest, read_metrics  # noqa: E402

SKIP = 77  # ctest SKIP_RETURN_CODE
REPO = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
SBATCH_SCRIPT = os.path.join(REPO, "slurm", "train.sbatch")
CHAIN = os.path.join(REPO, "slurm", "chain.sh")
CLUSTER = os.path.join(REPO, "slurm", "local_cluster.sh")
STUDY = os.path.join(REPO, "slurm", "scaling", "study.py")
sys.path.insert(0, os.path.join(REPO, "tests", "scaling"))  # the scaling study's checks

MPIEXEC = None
SLURM_ENV = None  # the environment for Slurm commands: SLURM_CONF of the local cluster, no SLURM_* of an outer job

# The task's tiny model: a 16-step run of 4 data-parallel ranks takes about 2 s here.
CONFIG = """\
[model]
layers = 2
d_model = 32
heads = 2
vocab = 256
seq_len = 16

[train]
micro_batch = 2
global_batch = 8
steps = 16

[data]
train = shard.bin

[checkpoint]
dir = ck

[log]
metrics = m.jsonl
"""
STEPS = 16
SIGNAL_STEPS = 1000  # long enough that a signal sent after 3 steps lands mid-run (a few ms a step here; 150 ran out)

TERMINAL = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "BOOT_FAIL", "DEADLINE",
            "SPECIAL_EXIT", "REQUEUE_HOLD"}


# --- Slurm helpers ---------------------------------------------------------------------------------

def slurm(args, timeout=30, check=True):
    p = subprocess.run(args, env=SLURM_ENV, capture_output=True, text=True, timeout=timeout)
    if check and p.returncode != 0:
        raise AssertionError(f"{' '.join(args)}: exit {p.returncode}\n{p.stdout}\n{p.stderr}")
    return p


def job_info(jobid):
    """scontrol show job as {key: value}; None once Slurm has forgotten the job."""
    p = slurm(["scontrol", "show", "job", "-o", str(jobid)], check=False)
    if p.returncode != 0:
        return None
    return dict(re.findall(r"(\S+?)=(\S*)", p.stdout))


def read_text(path):
    try:
        with open(path, errors="replace") as f:
            return f.read()
    except FileNotFoundError:
        return f"({path} does not exist)"


def ensure_cluster():
    """Starts slurm/local_cluster.sh unless it is up; returns the environment for Slurm commands."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "SBATCH_", "SRUN_", "SALLOC_"))}
    status = subprocess.run([CLUSTER, "status"], env=env, capture_output=True, text=True, timeout=60)
    if status.returncode != 0:
        start = subprocess.run([CLUSTER, "start"], env=env, capture_output=True, text=True, timeout=120)
        if start.returncode != 0:
            sys.exit(f"test_slurm.py: slurm/local_cluster.sh start failed (exit {start.returncode}):\n"
                     f"{start.stdout}{start.stderr}")
        print(start.stdout, end="", flush=True)
    line = subprocess.run([CLUSTER, "env"], env=env, capture_output=True, text=True, check=True).stdout.strip()
    env["SLURM_CONF"] = line.split("=", 1)[1]
    return env


class SlurmCase(cli.CliCase):
    """A case directory with the tiny config and its shard, and jobs to submit and wait for."""

    group = None

    def setUp(self):
        super().setUp()
        self.jobs = []
        random_shard(self.path("shard.bin"), 20000, seed=3)
        with open(self.path("cfg.ini"), "w") as f:
            f.write(CONFIG)

    def tearDown(self):
        # Nothing of a failed case keeps running into the next one.
        for jobid in self.jobs:
            info = job_info(jobid)
            if info and info.get("JobState") not in TERMINAL:
                slurm(["scancel", str(jobid)], check=False)

    def env(self, **extra):
        env = dict(SLURM_ENV, MESHTRAIN_BIN=cli.MESHTRAIN)
        env.update(extra)
        return env

    def straight(self, steps=STEPS):
        """The uninterrupted run to compare with: `mpiexec -n 4` outside Slurm on the same config and
        shard, once per group and step count, in <workdir>/<group>/_straight<steps>/."""
        d = os.path.join(cli.WORKDIR, self.group, f"_straight{steps}")
        if not os.path.exists(os.path.join(d, "done")):
            shutil.rmtree(d, ignore_errors=True)
            os.makedirs(d)
            for name in ("shard.bin", "cfg.ini"):
                shutil.copy(self.path(name), d)
            p = cli.run(["train", "--config", "cfg.ini", "--train.steps", steps, "--checkpoint.dir", "ck"], d,
                        timeout=120, launcher=[MPIEXEC, "-n", "4"])
            self.assertEqual(p.returncode, 0, describe(p))
            open(os.path.join(d, "done"), "w").close()
        self.straight_dir = d
        records = read_metrics(os.path.join(d, "m.jsonl"))
        self.assertEqual([r["step"] for r in records], list(range(1, steps + 1)))
        return records

    def sbatch(self, train_args, sbatch_args=("-n", "4"), env=None, out="job.out"):
        p = subprocess.run(["sbatch", "--parsable", "--job-name", f"mt-test-{self._testMethodName}", "--time", "10",
                            "--chdir", self.dir, "--output", self.path(out), *sbatch_args, SBATCH_SCRIPT, "cfg.ini",
                            *map(str, train_args)], env=env or self.env(), capture_output=True, text=True, timeout=30)
        self.assertEqual(p.returncode, 0, f"sbatch: exit {p.returncode}\n{p.stdout}\n{p.stderr}")
        jobid = p.stdout.strip().split(";")[0]
        self.jobs.append(jobid)
        return jobid

    def wait_job(self, jobid, timeout=150, out="job.out"):
        """Polls until the job is in a terminal state; returns its scontrol record."""
        deadline = time.monotonic() + timeout
        info = None
        while time.monotonic() < deadline:
            info = job_info(jobid)
            if info is None:
                self.fail(f"Slurm forgot job {jobid} (MinJobAge?)\n{read_text(self.path(out))[-4000:]}")
            if info["JobState"] in TERMINAL:
                return info
            time.sleep(0.5)
        slurm(["scancel", str(jobid)], check=False)
        self.fail(f"job {jobid} still {info and info.get('JobState')} after {timeout} s: cancelled\n"
                  f"{read_text(self.path(out))[-4000:]}")

    def wait_for_metrics(self, jobid, n, timeout=90):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if os.path.exists(self.path("m.jsonl")) and len(read_metrics(self.path("m.jsonl"))) >= n:
                return
            info = job_info(jobid)
            if info is None or info["JobState"] in TERMINAL:
                self.fail(f"job {jobid} ended before {n} steps\n{read_text(self.path('job.out'))[-4000:]}")
            time.sleep(0.05)
        self.fail(f"job {jobid}: no {n} steps in {timeout} s\n{read_text(self.path('job.out'))[-4000:]}")

    def assert_job(self, info, state, exit_code, restarts, out="job.out"):
        log = read_text(self.path(out))
        what = f"job {info['JobId']}\n--- {out} ---\n{log[-6000:]}"
        self.assertEqual(info["JobState"], state, what)
        self.assertEqual(info["ExitCode"], f"{exit_code}:0", what)
        self.assertEqual(int(info["Restarts"]), restarts, what)
        return log

    def assert_same_run(self, straight, steps=STEPS, ranks=4, logs=()):
        """Metrics and final checkpoint equal the straight run's bit for bit; every run used `ranks` ranks."""
        got = read_metrics(self.path("m.jsonl"))
        self.assertEqual([r["step"] for r in got], list(range(1, steps + 1)), "steps of the metrics file")
        self.assert_same_records(got, straight)
        name = f"step_{steps:08d}.h5"
        self.assertEqual(read_latest(self.path("ck")), name)
        self.assert_checkpoints_equal(os.path.join(self.straight_dir, "ck", name), self.path("ck", name))
        for log in logs:
            batches = re.findall(r"effective batch = .*", log)
            self.assertTrue(batches, "no run printed its effective batch")
            for line in batches:
                self.assertIn(f"× dp {ranks} ×", line, "a run did not span every task of the job")

    def assert_in_log(self, log, text):
        self.assertTrue(text in log, f"{text!r} not in the job output\n--- job output ---\n{log[-6000:]}")

    def assert_line(self, log, pattern):
        self.assertTrue(re.search(pattern, log, re.M),
                        f"no line matches {pattern!r}\n--- job output ---\n{log[-6000:]}")

    def left_at(self, log):
        """The steps at which the runs of a job left early, from meshtrain's own lines."""
        return [int(s) for s in re.findall(r"^leaving at step (\d+) of", log, re.M)]


# --- requeue -----------------------------------------------------------------------------------------

class Requeue(SlurmCase):
    group = "requeue"

    def test_stop_after_requeues_until_done(self):
        straight = self.straight()
        start = time.monotonic()
        jobid = self.sbatch(["--train.stop_after", 5])
        info = self.wait_job(jobid)
        log = self.assert_job(info, "COMPLETED", 0, restarts=3)
        print(f"\n  job {jobid}: 3 requeues, {time.monotonic() - start:.0f} s", end=" ", flush=True)
        self.assertEqual(self.left_at(log), [5, 10, 15])
        self.assertEqual(len(re.findall(r"^train\.sbatch: left at step \d+ of 16: requeueing", log, re.M)), 3,
                         log[-6000:])
        self.assertEqual(re.findall(r"^train\.sbatch: job \d+ run (\d+)", log, re.M), ["1", "2", "3", "4"])
        self.assert_in_log(log, "train.sbatch: training finished: step 16 of 16")
        self.assert_same_run(straight, logs=[log])

    def test_control_without_requeue_stops_after_the_first_run(self):
        # What test_stop_after_requeues_until_done would see if the script did not requeue.
        jobid = self.sbatch(["--train.stop_after", 5], env=self.env(MESHTRAIN_REQUEUE="0"))
        log = self.assert_job(self.wait_job(jobid), "FAILED", 3, restarts=0)
        self.assertEqual(self.left_at(log), [5])
        self.assert_in_log(log, "MESHTRAIN_REQUEUE=0: not requeued")
        self.assertEqual(len(read_metrics(self.path("m.jsonl"))), 5)
        self.assertEqual(read_latest(self.path("ck")), "step_00000005.h5")


# --- signals ---------------------------------------------------------------------------------------

class Signals(SlurmCase):
    group = "signal"

    def interrupt(self, signal_name, launcher):
        straight = self.straight(SIGNAL_STEPS)
        jobid = self.sbatch(["--train.steps", SIGNAL_STEPS], env=self.env(MESHTRAIN_LAUNCHER=launcher))
        self.wait_for_metrics(jobid, 3)
        # --batch: only the batch shell gets it, as with #SBATCH --signal=B:USR1@...
        slurm(["scancel", f"--signal={signal_name}", "--batch", jobid])
        info = self.wait_job(jobid)
        log = self.assert_job(info, "COMPLETED", 0, restarts=1)
        self.assert_in_log(log, f"train.sbatch: received SIG{signal_name}")
        left = self.left_at(log)
        self.assertEqual(len(left), 1, log[-6000:])
        self.assertTrue(3 <= left[0] < SIGNAL_STEPS, f"left at step {left}")
        # Rank 0 names the signal, or says another rank saw it first at the step boundary.
        self.assert_line(log, rf"leaving at step {left[0]} of {SIGNAL_STEPS}: "
                              r"(received signal 10|another rank asked to leave)")
        self.assert_line(log, rf"resumed from ck/step_{left[0]:08d}\.h5 at step {left[0]}")
        self.assert_in_log(log, f"train.sbatch: {launcher} ")
        print(f"\n  SIG{signal_name} via {launcher}: left at step {left[0]} of {SIGNAL_STEPS}", end=" ", flush=True)
        self.assert_same_run(straight, SIGNAL_STEPS, logs=[log])

    def test_usr1_to_batch_script_srun(self):
        self.interrupt("USR1", "srun")

    def test_term_to_batch_script_srun(self):
        # Passed on as SIGUSR1: srun would answer SIGTERM by killing the step.
        self.interrupt("TERM", "srun")

    def test_usr1_to_batch_script_mpiexec(self):
        self.interrupt("USR1", "mpiexec")


# --- chain.sh ----------------------------------------------------------------------------------------

class Chain(SlurmCase):
    group = "chain"

    def chain(self, jobs, chain_args, env):
        p = subprocess.run([CHAIN, "-j", str(jobs), *chain_args, "-n", "4", "--time", "10", "--chdir", self.dir,
                            "--output", self.path("job-%j.out"), "--", "cfg.ini", "--train.stop_after", "6"],
                           env=env, capture_output=True, text=True, timeout=60)
        self.assertEqual(p.returncode, 0, f"chain.sh: exit {p.returncode}\n{p.stdout}\n{p.stderr}")
        ids = p.stdout.split()
        self.assertEqual(len(ids), jobs, p.stdout)
        self.jobs += ids
        infos = [self.wait_job(j, timeout=150, out=f"job-{j}.out") for j in ids]
        logs = [read_text(self.path(f"job-{j}.out")) for j in ids]
        for prev, info in zip(infos, infos[1:]):
            self.assertGreaterEqual(info["StartTime"], prev["EndTime"], "chained jobs overlapped")
        return ids, infos, logs

    def check(self, ids, infos, logs, straight):
        for j, info, expected in zip(ids, infos, [3, 3, 0, 0]):
            self.assert_job(info, "FAILED" if expected else "COMPLETED", expected, restarts=0, out=f"job-{j}.out")
        self.assertEqual([self.left_at(log) for log in logs[:2]], [[6], [12]])
        self.assert_same_run(straight, logs=logs)

    def test_afterany_four_jobs(self):
        straight = self.straight()
        ids, infos, logs = self.chain(4, [], self.env())
        for j, info in zip(ids[1:], infos[1:]):
            self.assertEqual(info["Dependency"], "(null)", f"job {j}: dependency left unsatisfied")
        self.check(ids, infos, logs, straight)
        self.assert_in_log(logs[3], "nothing to do: the checkpoint is at step 16 of train.steps = 16")
        self.assert_in_log(logs[3], "train.sbatch: training finished: step 16 of 16")

    def test_singleton_three_jobs_mpiexec(self):
        straight = self.straight()
        name = f"mt-test-singleton-{os.getpid()}"
        ids, infos, logs = self.chain(3, ["--singleton", "--job-name", name], self.env(MESHTRAIN_LAUNCHER="mpiexec"))
        self.assertEqual({info["JobName"] for info in infos}, {name})
        self.check(ids, infos, logs, straight)
        for log in logs:
            self.assert_in_log(log, "train.sbatch: mpiexec -n 4 ")


# --- guards ------------------------------------------------------------------------------------------

# The stand-ins below train nothing; `meshtrain config` (the keys train.sbatch reads before it
# launches) is the real binary's, REAL_MESHTRAIN, which stand_in() fills in.
FAKE_MESHTRAIN = """#!/usr/bin/env bash
# Stands in for meshtrain: moves ck/latest on by ADVANCE steps (none if 0) and exits with CODE;
# `blas` (asked before each rank starts) names no OPENBLAS_CORETYPE.
set -euo pipefail
[[ ${1-} == config ]] && exec REAL_MESHTRAIN "$@"
[[ ${1-} == blas ]] && exit 0
step=0
if [[ -r ck/latest && $(<ck/latest) =~ ^step_([0-9]+)\\.h5$ ]]; then
  step=$((10#${BASH_REMATCH[1]}))
fi
mkdir -p ck
if ((ADVANCE > 0)); then
  printf 'step_%08d.h5\\n' $((step + ADVANCE)) > ck/latest
fi
echo "fake meshtrain: from step $step"
exit CODE
"""


# Stands in for meshtrain on every rank: says which GPUs it sees, and leaves training done; `blas`
# names no OPENBLAS_CORETYPE.
FAKE_RANK = """#!/usr/bin/env bash
[[ ${1-} == config ]] && exec REAL_MESHTRAIN "$@"
[[ ${1-} == blas ]] && exit 0
local=${MPI_LOCALRANKID:-${SLURM_LOCALID:-?}}
echo "rank with local index $local sees CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES-unset}"
mkdir -p ck
echo step_00000016.h5 > ck/latest
"""
# A node with four GPUs, as nvidia-smi -L lists them.
FAKE_NVIDIA_SMI = """#!/bin/sh
for i in 0 1 2 3; do echo "GPU $i: Fake GPU (UUID: GPU-0000000$i)"; done
"""


# Stands in for meshtrain on every rank: `blas --openblas-coretype` names a kernel set for this node,
# train says which one the rank runs with, and leaves training done.
FAKE_BLAS_RANK = """#!/usr/bin/env bash
[[ ${1-} == config ]] && exec REAL_MESHTRAIN "$@"
if [[ ${1-} == blas ]]; then
  echo Haswell
  exit 0
fi
echo "rank ${SLURM_PROCID:-${PMI_RANK:-?}} runs with OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE-unset}"
mkdir -p ck
echo step_00000016.h5 > ck/latest
"""


def stand_in(text):
    """A stand-in script's text with the real binary for `config`."""
    return text.replace("REAL_MESHTRAIN", shlex.quote(cli.MESHTRAIN))


class Guards(SlurmCase):
    group = "guards"

    def openblas_coretype(self, **env):
        path = self.path("blas-meshtrain")
        with open(path, "w") as f:
            f.write(stand_in(FAKE_BLAS_RANK))
        os.chmod(path, 0o755)
        log = self.assert_job(self.wait_job(self.sbatch([], env=self.env(MESHTRAIN_BIN=path, **env))), "COMPLETED", 0,
                              restarts=0)
        return log, re.findall(r"^rank \S+ runs with OPENBLAS_CORETYPE=(\S+)$", log, re.M)

    def test_openblas_coretype_set_per_rank_where_unset(self):
        # Each rank asks the binary on its node, and runs with the kernel set it names.
        if "OPENBLAS_CORETYPE" in SLURM_ENV:
            self.skipTest(f"OPENBLAS_CORETYPE={SLURM_ENV['OPENBLAS_CORETYPE']} is set for this run: not changed")
        log, seen = self.openblas_coretype()
        self.assertEqual(seen, ["Haswell"] * 4, log[-3000:])

    def test_openblas_coretype_kept_where_set(self):
        kept = SLURM_ENV.get("OPENBLAS_CORETYPE", "Zen")
        log, seen = self.openblas_coretype(OPENBLAS_CORETYPE=kept)
        self.assertEqual(seen, [kept] * 4, log[-3000:])

    def gpu_binding(self, launcher, **env):
        bindir = self.path("bin")
        os.makedirs(bindir)
        for name, text in (("meshtrain", FAKE_RANK), ("nvidia-smi", FAKE_NVIDIA_SMI)):
            with open(os.path.join(bindir, name), "w") as f:
                f.write(stand_in(text))
            os.chmod(os.path.join(bindir, name), 0o755)
        env = self.env(MESHTRAIN_BIN=os.path.join(bindir, "meshtrain"), MESHTRAIN_LAUNCHER=launcher,
                       PATH=bindir + os.pathsep + SLURM_ENV["PATH"], **env)
        log = self.assert_job(self.wait_job(self.sbatch([], env=env)), "COMPLETED", 0, restarts=0)
        seen = re.findall(r"^rank with local index (\d+) sees CUDA_VISIBLE_DEVICES=(\S+)$", log, re.M)
        return log, sorted((int(i), gpu) for i, gpu in seen)

    def test_one_gpu_per_rank_srun(self):
        # The node's GPUs (nvidia-smi), none granted by Slurm: local rank r takes GPU r.
        log, seen = self.gpu_binding("srun")
        self.assertEqual(seen, [(0, "0"), (1, "1"), (2, "2"), (3, "3")], log[-3000:])
        self.assert_in_log(log, "4 ranks, 4 GPUs per node")

    def test_granted_gpus_shared_mpiexec(self):
        # Two GPUs granted (CUDA_VISIBLE_DEVICES=5,7) to four Hydra ranks: r takes entry r mod 2.
        log, seen = self.gpu_binding("mpiexec", CUDA_VISIBLE_DEVICES="5,7")
        self.assertEqual(seen, [(0, "5"), (1, "7"), (2, "5"), (3, "7")], log[-3000:])
        self.assert_in_log(log, "warning: up to 4 ranks per node share 2 GPUs")

    def test_gpu_bind_none(self):
        log, seen = self.gpu_binding("srun", MESHTRAIN_GPU_BIND="none")
        self.assertEqual(seen, [(0, "unset"), (1, "unset"), (2, "unset"), (3, "unset")], log[-3000:])

    def fake(self, advance, code):
        path = self.path("fake-meshtrain")
        with open(path, "w") as f:
            f.write(stand_in(FAKE_MESHTRAIN).replace("ADVANCE", str(advance)).replace("CODE", str(code)))
        os.chmod(path, 0o755)
        return self.env(MESHTRAIN_BIN=path)

    def test_no_progress_is_not_requeued(self):
        jobid = self.sbatch([], ("-n", "1"), env=self.fake(0, 3))
        log = self.assert_job(self.wait_job(jobid), "FAILED", 1, restarts=0)
        self.assert_in_log(log, "left early without progress (step 0 before this run, 0 after): not requeued")

    def test_launcher_exit_0_short_of_the_steps_is_requeued(self):
        jobid = self.sbatch([], ("-n", "1"), env=self.fake(8, 0))
        log = self.assert_job(self.wait_job(jobid), "COMPLETED", 0, restarts=1)
        self.assertEqual(re.findall(r"fake meshtrain: from step (\d+)", log), ["0", "8"])
        self.assert_in_log(log, "train.sbatch: left at step 8 of 16: requeueing")
        self.assert_in_log(log, "train.sbatch: training finished: step 16 of 16")

    def test_timeout_after_progress_is_requeued(self):
        # Exit 5 (the watchdog) with latest moved on: requeued, and the next run finishes.
        jobid = self.sbatch([], ("-n", "1"), env=self.fake(8, 5))
        log = self.assert_job(self.wait_job(jobid), "COMPLETED", 0, restarts=1)
        self.assert_in_log(log, "train.sbatch: a collective timed out (exit 5) after progress to step 8: requeued")
        self.assert_in_log(log, "train.sbatch: training finished: step 16 of 16")

    def test_timeout_without_progress_is_not_requeued(self):
        jobid = self.sbatch([], ("-n", "1"), env=self.fake(0, 5))
        log = self.assert_job(self.wait_job(jobid), "FAILED", 5, restarts=0)
        self.assert_in_log(log, "a collective timed out (exit 5) without progress (step 0 before this run, 0 after): "
                                "not requeued")

    def test_real_timeout_under_srun_is_exit_5(self):
        # A real watchdog fire under srun (rank 1 stalled in step 2, nothing saved): srun reports the
        # MPI_Abort as killed tasks (137); the watchdog's report file turns it into exit 5, not requeued.
        jobid = self.sbatch(["--train.steps", "6", "--parallel.timeout", "2"],
                            env=self.env(MESHTRAIN_INJECT_FAULT="stall@2:1"))
        log = self.assert_job(self.wait_job(jobid), "FAILED", 5, restarts=0)
        self.assert_line(log, r"^meshtrain: watchdog: rank 0 waited [\d.]+ s \(parallel\.timeout 2 s\) in ")
        self.assert_line(log, r"^train\.sbatch: the collective watchdog ended the run \(launcher exit \d+\): treated as "
                              r"exit 5$")
        self.assert_in_log(log, "a collective timed out (exit 5) without progress")
        self.assertFalse(os.path.exists(self.path(f".meshtrain-watchdog-{jobid}")), "the report file was left behind")

    def test_bad_input_is_not_requeued(self):
        jobid = self.sbatch(["--model.layerz", 2], ("-n", "1"))
        log = self.assert_job(self.wait_job(jobid), "FAILED", 2, restarts=0)
        self.assert_in_log(log, "model.layerz")
        self.assert_in_log(log, "train.sbatch: training failed (exit 2): not requeued")
        self.assertFalse(os.path.exists(self.path("ck")), "bad input wrote a checkpoint directory")

    def test_scancel_is_final(self):
        # The ranks save and exit 3 on scancel's SIGTERM; `scontrol requeue` would revive the job.
        jobid = self.sbatch(["--train.steps", SIGNAL_STEPS])
        self.wait_for_metrics(jobid, 3)
        slurm(["scancel", jobid])
        log = self.assert_job(self.wait_job(jobid), "CANCELLED", 3, restarts=0)
        self.assert_line(log, rf"^train\.sbatch: left at step \d+ of {SIGNAL_STEPS}; the job is ending "
                              r"\(JobState=\w+: cancelled, or at its time limit\): not requeued")

    def test_local_cluster_start_and_status_are_idempotent(self):
        p = subprocess.run([CLUSTER, "start"], env=SLURM_ENV, capture_output=True, text=True, timeout=60)
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        self.assertIn("already running", p.stdout)
        self.assertIn(f"export SLURM_CONF={SLURM_ENV['SLURM_CONF']}", p.stdout)
        p = subprocess.run([CLUSTER, "status"], env=SLURM_ENV, capture_output=True, text=True, timeout=60)
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        self.assertRegex(p.stdout, r"node: +\S+ (idle|mixed|allocated|completing)")


# --- a scaling campaign through the real Slurm -----------------------------------------------------

class Campaign(SlurmCase):
    """slurm/scaling/study.py submits a 3-point study (1, 2, 4 ranks) as job arrays to the real Slurm;
    once they have run, collect writes the CSV and the PNGs, checked against the jobs' own files by
    the scaling tests' checks (tests/scaling/test_scaling.py)."""

    group = "campaign"
    SPEC = """[study]
name = slurm-campaign
ranks = 1 2 4
layouts = dp
scaling = strong
global_batch = 8
micro_batch = 2
steps = 8
warmup = 3
out = study
data = shard.bin

[keys]
model.layers = 2
model.heads = 2
model.d_model = 64
model.seq_len = 64

[slurm]
time = 00:05:00
{launcher}"""

    def test_three_point_study_runs_as_job_arrays(self):
        import test_scaling as scaling
        # The default launcher (a bare srun, which point.sbatch gives PMI-2 on this MpiDefault=none cluster)
        # unless the environment names another.
        launcher = os.environ.get("MESHTRAIN_TEST_SLURM_LAUNCHER")
        with open(self.path("study.ini"), "w") as f:
            f.write(self.SPEC.format(launcher=f"launcher = {launcher}\n" if launcher else ""))
        p = subprocess.run([sys.executable, STUDY, "submit", "study.ini", "--meshtrain", cli.MESHTRAIN], cwd=self.dir,
                           env=self.env(), capture_output=True, text=True, timeout=120)
        self.assertEqual(p.returncode, 0, f"submit: exit {p.returncode}\n{p.stdout}\n{p.stderr}")
        arrays = re.findall(r"^submitted job array (\d+) ", p.stdout, re.M)
        self.assertEqual(len(arrays), 3, f"one job array per rank count\n{p.stdout}")
        self.jobs += arrays
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            left = slurm(["squeue", "-h", "-j", ",".join(arrays)], check=False).stdout.strip()
            if not left:
                break
            time.sleep(1)
        self.assertFalse(left, f"jobs still queued or running after 300 s:\n{left}")
        out = self.path("study")
        plot_json = os.path.join(out, "plotted.json")
        c = subprocess.run([sys.executable, STUDY, "collect", out, "--plot-json", plot_json], cwd=self.dir,
                           capture_output=True, text=True, timeout=300)
        self.assertEqual(c.returncode, 0, f"collect: exit {c.returncode}\n{c.stdout}\n{c.stderr}")

        campaign = scaling.Campaign.__new__(scaling.Campaign)  # an already-run study: no --local submit
        campaign.out, campaign.plot_json = out, plot_json
        rows = campaign.rows()
        self.assertEqual(sorted(int(r["ranks"]) for r in rows), [1, 2, 4])
        for row in rows:
            with open(os.path.join(campaign.point_dir(row), "exit_code")) as f:
                self.assertEqual(f.read().strip(), "0", f"point {row['point']} failed")
        scaling.check_rows_against_jobs(self, campaign, warmup=3)
        scaling.check_efficiency(self, rows)
        for name in ("scaling_throughput.png", "scaling_breakdown.png"):
            scaling.check_png(self, os.path.join(out, name))
        scaling.check_plotted(self, rows, plot_json)
        print(f"\n  campaign: {open(os.path.join(out, 'scaling.csv')).read()}", end=" ", flush=True)


GROUPS = {"requeue": Requeue, "signal": Signals, "chain": Chain, "guards": Guards, "campaign": Campaign}


def main():
    global MPIEXEC, SLURM_ENV
    opts = cli.take_common_options(cli.group_parser(__doc__, GROUPS).parse_args())
    workdir, MPIEXEC = cli.WORKDIR, cli.MPIEXEC
    if os.geteuid() != 0:
        print("test_slurm.py: SKIPPED: needs root to start the local Slurm cluster (munged, slurmctld, slurmd "
              "through slurm/local_cluster.sh); run the tests as root, e.g. tests/run.sh under sudo", flush=True)
        return SKIP
    for tool in ("sbatch", "scontrol", "scancel", "slurmctld", "slurmd", "munged"):
        if not shutil.which(tool):
            sys.exit(f"test_slurm.py: {tool} not found: install slurm-wlm and munge (share/scripts/setup.sh)")
    SLURM_ENV = ensure_cluster()
    return cli.run_groups(GROUPS, opts, workdir, f"local cluster: SLURM_CONF={SLURM_ENV['SLURM_CONF']}")


if __name__ == "__main__":
    sys.exit(main())
