"""What watches a training run while it goes: when to ask it to leave so that the check keeps its budget,
and the GPU's peak memory."""
import json
import re
import signal
import statistics
import subprocess
import time

from check_runs import WARMUP_STEPS


class LeaveInTime:
    """Asks the trainer to leave (SIGUSR1: it saves at the next step boundary and exits 3) once the
    steps still to run, at the median step time so far, would not finish within allowed_s."""

    def __init__(self, metrics_path, steps, allowed_s):
        self.metrics_path, self.steps = metrics_path, steps
        self.deadline = time.monotonic() + allowed_s
        self.signalled_at = None

    def __call__(self, proc):
        if self.signalled_at is not None:
            return
        try:
            with open(self.metrics_path) as f:
                times = [json.loads(line)["step_time_s"] for line in f if line.endswith("\n")]
        except (OSError, ValueError, KeyError):
            times = []
        now = time.monotonic()
        # The warm-up steps (first allocations, cuBLAS' heuristics) say little about the rest.
        counted = times[WARMUP_STEPS:]
        finish = now + (self.steps - len(times)) * statistics.median(counted) + 10 if counted else now
        if finish > self.deadline or now > self.deadline:
            proc.send_signal(signal.SIGUSR1)
            self.signalled_at = len(times)
            print(f"the run would not finish in time: asked it to save and leave after step {len(times)}",
                  flush=True)


class GpuMemoryWatch:
    """The GPU's peak memory in use while a run goes on (nvidia-smi every half second)."""

    def __init__(self):
        self.proc = None
        try:
            self.proc = subprocess.Popen(["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits",
                                          "-lms", "500"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        except OSError:
            pass

    def stop(self):
        if self.proc is None:
            return None
        self.proc.terminate()
        out, _ = self.proc.communicate()
        values = [float(v) for v in out.split() if re.fullmatch(r"[0-9.]+", v)]
        return max(values) if values else None
