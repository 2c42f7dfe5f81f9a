#!/usr/bin/python3
"""The collective watchdog on real faults (share/docs/usage.md, The collective watchdog).

Each case runs `mpiexec -n N meshtrain train` on a tiny model with a short parallel.timeout and a
real fault, and checks the exit code, how long the job took to end after the fault, and the
watchdog's report line against what the fault must produce, counted by hand:
  sigstop   rank 3 of 4 is stopped with SIGSTOP after a few steps: the others report that it did
            not answer, and the job ends with exit 5 within the timeout plus a few seconds
  skip      world rank 1 skips step 2's loss all-reduce over dp (MESHTRAIN_INJECT_FAULT=
            skip_collective@2:1) and waits in the gradient norm's all-reduce over the world. dp has
            two collectives per step here (the one gradient bucket, then the loss), so the others
            wait in allreduce #4 of group dp, and rank 1's last dp collective is #3
  off       parallel.timeout = 0 with rank 1 stalled 4 s in step 2 (stall@2:1): the run finishes
            (exit 0) and step 2 took at least the stall; control: the same stall with timeout 2
            ends with exit 5
  pipeline  pp 2, the last stage stalled (stall@2:1): the first stage's point-to-point wait on it
            times out and the report names the recv from rank 1
  save      2 ranks, rank 1 asleep inside step 2's save after the file is created
            (stall_in_save@2:1): rank 0 waits in the writer's first tensor, `checkpoint write #2
            of group checkpoint`, and rank 1 is in no wait since it left `checkpoint create #1`

Every job runs in its own session under a timeout; in a finally its whole process tree is killed
(Hydra puts each rank in a session of its own, so the process group alone would miss them), so no
stopped rank stays behind.

usage: test_watchdog.py --meshtrain BIN --mpiexec MPIEXEC --workdir DIR --case sigstop|skip|off|pipeline|save
"""
import argparse
import glob
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time

TIMEOUT_EXIT = 5  # exit_code::collective_timeout
GRACE_S = 2.0  # Watchdog::grace_s: waiting for answers, then answering the others
MODEL = ["--model.layers", "2", "--model.heads", "2", "--model.d_model", "32", "--model.vocab", "256",
         "--model.seq_len", "32", "--train.micro_batch", "2", "--train.global_batch", "8",
         "--checkpoint.resume", "never"]
REPORT = re.compile(r"^meshtrain: watchdog: rank (\d+) waited ([\d.]+) s \(parallel\.timeout ([\d.]+) s\) in (.*?); "
                    r"not arrived: (.*)$", re.M)


class Job:
    """One mpiexec in its own session; ended for good by kill() whatever state its ranks are in."""

    def __init__(self, args, work, ranks, extra, env=None):
        self.out_path = os.path.join(work, "out.txt")
        self.metrics = os.path.join(work, "metrics.jsonl")
        cmd = shlex.split(args.mpiexec) + ["-n", str(ranks), args.meshtrain, "train", "--data.train", args.shard,
                                           "--checkpoint.dir", os.path.join(work, "ck"), "--log.metrics",
                                           self.metrics] + MODEL + extra
        self.out = open(self.out_path, "w")
        self.proc = subprocess.Popen(cmd, cwd=work, stdout=self.out, stderr=subprocess.STDOUT, start_new_session=True,
                                     env={**os.environ, **(env or {})})

    def steps_done(self):
        try:
            with open(self.metrics) as f:
                return sum(1 for _ in f)
        except FileNotFoundError:
            return 0

    def processes(self):
        """mpiexec's descendants: Hydra starts every rank in a session of its own, so the job's
        process group alone does not hold them."""
        children = {}
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:
                with open(f"/proc/{pid}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(pid))
        found, todo = [], [self.proc.pid]
        while todo:
            for child in children.get(todo.pop(), []):
                found.append(child)
                todo.append(child)
        return found

    def rank_pid(self, rank):
        """The pid of world rank `rank`: the descendant named meshtrain whose PMI_RANK is it."""
        for pid in self.processes():
            try:
                with open(f"/proc/{pid}/environ", "rb") as f:
                    env = f.read().split(b"\0")
                with open(f"/proc/{pid}/comm") as f:
                    name = f.read().strip()
            except OSError:
                continue
            if name == "meshtrain" and f"PMI_RANK={rank}".encode() in env:
                return pid
        raise AssertionError(f"no process of world rank {rank} under mpiexec {self.proc.pid}")

    def wait(self, timeout):
        return self.proc.wait(timeout=timeout)

    def output(self):
        self.out.flush()
        with open(self.out_path) as f:
            return f.read()

    def kill(self):
        # SIGKILL ends stopped processes too; the ranks first, while mpiexec still links them.
        for pid in self.processes():
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait(timeout=30)
        self.out.close()


def reports(text):
    return [dict(rank=int(m[1]), waited=float(m[2]), timeout=float(m[3]), wait=m[4], missing=m[5])
            for m in REPORT.finditer(text)]


def check(condition, message, text=""):
    if not condition:
        raise AssertionError(f"{message}\n--- output ---\n{text[-4000:]}")


def run_to_end(args, work, ranks, extra, env, timeout):
    """Runs a job to its end; returns (exit code, seconds, output)."""
    job = Job(args, work, ranks, extra, env)
    start = time.monotonic()
    try:
        rc = job.wait(timeout)
        return rc, time.monotonic() - start, job.output()
    finally:
        job.kill()


def case_sigstop(args, work):
    timeout = 5
    job = Job(args, work, 4, ["--train.steps", "100000", "--parallel.timeout", str(timeout)])
    try:
        deadline = time.monotonic() + 60
        while job.steps_done() < 3:
            check(job.proc.poll() is None, "the job ended before its third step", job.output())
            check(time.monotonic() < deadline, "no third step within 60 s", job.output())
            time.sleep(0.05)
        pid = job.rank_pid(3)
        stopped = time.monotonic()
        os.kill(pid, signal.SIGSTOP)
        rc = job.wait(timeout + 4 * GRACE_S + 20)
        took = time.monotonic() - stopped
        text = job.output()
    finally:
        job.kill()
    check(rc == TIMEOUT_EXIT, f"exit {rc}, expected {TIMEOUT_EXIT}", text)
    # Each of the three waiting ranks reports once: the stopped one cannot, and answers nothing.
    found = reports(text)
    check(sorted(r["rank"] for r in found) == [0, 1, 2], f"report lines from ranks {[r['rank'] for r in found]}", text)
    for r in found:
        check("rank 3 did not answer" in r["missing"], f"rank {r['rank']}'s report does not name rank 3", text)
        check(re.search(r"of group (dp|world)", r["wait"]), f"rank {r['rank']}'s wait names no group", text)
        check(r["waited"] >= timeout, f"rank {r['rank']} reported after {r['waited']} s < timeout", text)
    limit = timeout + 2 * GRACE_S + 4
    check(took <= limit, f"the job took {took:.1f} s after SIGSTOP to end, over {limit} s", text)
    return took


def case_skip(args, work):
    rc, took, text = run_to_end(args, work, 4, ["--train.steps", "6", "--parallel.timeout", "2"],
                                {"MESHTRAIN_INJECT_FAULT": "skip_collective@2:1"}, 60)
    check(rc == TIMEOUT_EXIT, f"exit {rc}, expected {TIMEOUT_EXIT}", text)
    by_rank = {r["rank"]: r for r in reports(text)}
    for rank in (0, 2, 3):
        check(rank in by_rank, f"no report from rank {rank}", text)
        r = by_rank[rank]
        check(r["wait"] == "allreduce #4 of group dp (1 elements)", f"rank {rank} waits in {r['wait']}", text)
        # The step's values over the world: Σ g² and the non-finite losses (state/nonfinite_policy).
        check(re.fullmatch(r"rank 1 waits in allreduce #\d+ of group world \(2 elements\) for [\d.]+ s, "
                           r"its last collective of group dp is #3", r["missing"]),
              f"rank {rank}'s report: {r['missing']}", text)
    return took


def case_off(args, work):
    stall = {"MESHTRAIN_INJECT_FAULT": "stall@2:1"}
    os.makedirs(os.path.join(work, "off"))
    rc, took, text = run_to_end(args, os.path.join(work, "off"), 4,
                                ["--train.steps", "3", "--parallel.timeout", "0"], stall, 60)
    check(rc == 0, f"timeout 0: exit {rc}, expected 0", text)
    check(not reports(text), "timeout 0: the watchdog reported", text)
    with open(os.path.join(work, "off", "metrics.jsonl")) as f:
        step_times = [json.loads(line)["step_time_s"] for line in f]
    check(step_times[1] >= 4.0, f"step 2 took {step_times[1]} s: the stall did not happen", text)
    os.makedirs(os.path.join(work, "on"))
    rc_on, took_on, text_on = run_to_end(args, os.path.join(work, "on"), 4,
                                         ["--train.steps", "3", "--parallel.timeout", "2"], stall, 60)
    check(rc_on == TIMEOUT_EXIT, f"control, timeout 2: exit {rc_on}, expected {TIMEOUT_EXIT}", text_on)
    check(any("rank 1 is in no wait" in r["missing"] for r in reports(text_on)), "control: no report names rank 1",
          text_on)
    return took + took_on


def lone_report_on_rank0(args, work, extra, fault):
    """Runs 2 ranks with `fault` on rank 1 to exit 5; returns (seconds, rank 0's report, output),
    checking that rank 0 alone reported and that it names rank 1 as in no wait."""
    rc, took, text = run_to_end(args, work, 2, ["--train.steps", "6", "--parallel.timeout", "2"] + extra,
                                {"MESHTRAIN_INJECT_FAULT": fault}, 60)
    check(rc == TIMEOUT_EXIT, f"exit {rc}, expected {TIMEOUT_EXIT}", text)
    found = reports(text)
    check([r["rank"] for r in found] == [0], f"report lines from ranks {[r['rank'] for r in found]}", text)
    check(found[0]["missing"].startswith("rank 1 is in no wait"), f"report: {found[0]['missing']}", text)
    return took, found[0], text


def case_pipeline(args, work):
    took, report, text = lone_report_on_rank0(args, work, ["--parallel.pp", "2"], "stall@2:1")
    check(re.fullmatch(r"(recv|send) #\d+ of group pp \(\d+ elements\) (from|to) rank 1", report["wait"]),
          f"rank 0 waits in {report['wait']}", text)
    return took


def case_save(args, work):
    took, report, text = lone_report_on_rank0(args, work, ["--checkpoint.every", "2"], "stall_in_save@2:1")
    # The first save's first tensor: both ranks created the file (the group's collective #1), rank 1
    # sleeps before its first write, which would be #2.
    check(re.fullmatch(r"checkpoint write #2 of group checkpoint \(\d+ elements\)", report["wait"]),
          f"rank 0 waits in {report['wait']}", text)
    check("checkpoint create #1 of group checkpoint" in report["missing"], f"report: {report['missing']}", text)
    check(not glob.glob(os.path.join(work, "ck", "step_*.h5")), "a checkpoint was completed", text)
    return took


CASES = {"sigstop": case_sigstop, "skip": case_skip, "off": case_off, "pipeline": case_pipeline, "save": case_save}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--meshtrain", required=True)
    ap.add_argument("--mpiexec", required=True)
    ap.add_argument("--workdir", required=True)
    ap.add_argument("--case", required=True, choices=sorted(CASES))
    args = ap.parse_args()
    args.meshtrain = os.path.abspath(args.meshtrain)
    work = os.path.abspath(args.workdir)
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    text = os.path.join(work, "text.txt")
    with open(text, "w") as f:
        f.write(" ".join(["the cat sat on a mat", "a dog ran"] * 4000))
    args.shard = os.path.join(work, "shard.bin")
    subprocess.run([args.meshtrain, "prepare", "--text", text, "--out", args.shard], check=True, timeout=60,
                   capture_output=True)
    try:
        took = CASES[args.case](args, work)
    except AssertionError as e:
        print(f"FAIL: {args.case}: {e}")
        return 1
    print(f"ok: {args.case}: ended in {took:.1f} s (sigstop: counted from the SIGSTOP; off: both runs)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
