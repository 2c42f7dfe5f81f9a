"""The device check's machinery: steps that pass or fail on their own, each command bounded by its step's
limit and by the whole check's budget, its output kept in a log, and the JSON rewritten after every step."""
import json
import os
import signal
import subprocess
import tarfile
import threading
import time


class StepFailure(Exception):
    def __init__(self, message, **figures):
        super().__init__(message)
        self.figures = figures


class Clock:
    def __init__(self, budget_s):
        self.start = time.monotonic()
        self.budget_s = budget_s

    def elapsed(self):
        return time.monotonic() - self.start

    def left(self):
        return self.budget_s - self.elapsed()


def watch_until_done(proc, watch):
    while proc.poll() is None:
        watch(proc)
        time.sleep(1.0)


class Result:
    def __init__(self, rc, output, wall_s, timed_out):
        self.rc, self.output, self.wall_s, self.timed_out = rc, output, wall_s, timed_out

    def tail(self, chars=3000):
        return self.output[-chars:]


class Check:
    """The steps' outcomes, the clock and the logs; writes the JSON after every step."""

    def __init__(self, args):
        self.args = args
        self.clock = Clock(args.budget_s)
        self.out = args.out
        # The logs are packed into OUT/logs.tar.gz after every step: the device returns at most 8
        # files from OUT, and the check writes a log per command.
        self.logs = os.path.join(args.work, "logs")
        os.makedirs(self.logs, exist_ok=True)
        os.makedirs(self.out, exist_ok=True)
        self.report = {"check": "meshtrain GPU device check (bench/gpu/device_check.py)",
                       "mode": "cpu" if args.cpu else "gpu", "budget_s": args.budget_s,
                       "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "steps": {}}

    def run(self, argv, log, timeout_s, env=None, cwd=None, watch=None):
        """Runs argv with its output in the scratch logs/LOG.log; never longer than timeout_s or the budget.
        watch(proc), if given, is called about once a second while it runs."""
        timeout_s = max(1.0, min(timeout_s, self.clock.left() - 5))
        path = os.path.join(self.logs, log + ".log")
        start = time.monotonic()
        with open(path, "w") as f:
            f.write("$ " + " ".join(argv) + "\n")
            f.flush()
            proc = subprocess.Popen(argv, stdout=f, stderr=subprocess.STDOUT, env=env, cwd=cwd,
                                    start_new_session=True)
            timed_out = False
            if watch:
                threading.Thread(target=watch_until_done, args=(proc, watch), daemon=True).start()
            try:
                rc = proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                timed_out = True
                os.killpg(proc.pid, signal.SIGKILL)
                rc = proc.wait()
                f.write(f"\n[device_check: killed after {timeout_s:.0f} s]\n")
        with open(path, errors="replace") as f:
            output = f.read()
        if len(output) > 200_000:  # what comes back from the device is limited: keep the end
            with open(path, "w") as f:
                f.write(output[:20_000] + "\n[... cut ...]\n" + output[-150_000:])
        return Result(rc, output, time.monotonic() - start, timed_out)

    def step(self, name, needs_s, fn):
        print(f"\n== {name} (at {self.clock.elapsed():.0f} s of {self.clock.budget_s:.0f} s)", flush=True)
        start = time.monotonic()
        if self.clock.left() < needs_s:
            entry = {"status": "skipped", "message": f"not enough time left ({self.clock.left():.0f} s; the step "
                                                     f"needs at least {needs_s} s)"}
        else:
            try:
                entry = {"status": "pass", **(fn() or {})}
            except StepFailure as e:
                entry = {"status": "fail", "message": str(e), **e.figures}
            except Exception as e:  # a bug or a surprise in this script: the step fails, the check goes on
                entry = {"status": "fail", "message": f"{type(e).__name__}: {e}"}
        entry["elapsed_s"] = round(time.monotonic() - start, 2)
        self.report["steps"][name] = entry
        message = f": {entry['message']}" if entry.get("message") else ""
        print(f"-- {name}: {entry['status'].upper()} in {entry['elapsed_s']:.1f} s{message}", flush=True)
        self.write()
        return entry

    def write(self):
        self.report["elapsed_s"] = round(self.clock.elapsed(), 2)
        statuses = [s["status"] for s in self.report["steps"].values()]
        self.report["passed"] = bool(statuses) and "fail" not in statuses
        path = os.path.join(self.out, "device_check.json")
        with open(path + ".tmp", "w") as f:
            json.dump(self.report, f, indent=1)
        os.replace(path + ".tmp", path)
        archive = os.path.join(self.out, "logs.tar.gz")
        with tarfile.open(archive + ".tmp", "w:gz") as tar:
            tar.add(self.logs, arcname="logs")
        os.replace(archive + ".tmp", archive)
