"""The device check's two short runs after the throughput run, on its data, shape and micro-batch:
  nondeterministic  train.deterministic = false (attention's backward on cuDNN where the build has it): its
                    step time beside the deterministic run's, so that the price of reproducibility is a figure
  kernel_profile    under the kernel timer (kernel_timer.cpp, a Kokkos Tools library): per step, each kernel's
                    launches and time, and the fences inside the step (each one the host waiting for the
                    device: the host waits the issue counts), beside the step time
  communication_stream  MESHTRAIN_NCCL_ON_COMPUTE_STREAM=1 (every collective on the compute stream, in its
                    order, as before issue 42): its step time beside the throughput run's, whose collectives
                    ran on their own streams ordered by events, with the host waits a step kernel_profile
                    counted
Each runs WARMUP_STEPS uncounted steps and SHORT_STEPS counted ones (train.stop_after), and stays within a
share of what the budget has left, so that the resume still fits."""
import json
import os
import shutil
import statistics

from check_runner import StepFailure
from check_runs import WARMUP_STEPS, throughput_keys

SHORT_STEPS = 4
TOP_KERNELS = 15
TOOL_FENCE = "Kokkos Profile Tool Fence"  # Kokkos' own, around a tool's callbacks: not the code's


class ProfileSteps:
    """Mixed into DeviceCheck after ThroughputSteps: uses its throughput_run, train() and metrics()."""

    def short_run(self, name, *keys, env=None):
        straight = self.throughput_run
        if straight is None:
            raise StepFailure("the throughput run did not finish, so there is no shape to run again")
        run_dir = os.path.join(self.work, name)
        shutil.rmtree(run_dir, ignore_errors=True)
        steps = WARMUP_STEPS + SHORT_STEPS
        limit_s = min(straight["overhead_s"] + 3 * steps * straight["step_s"] + 30, self.check.clock.left() * 0.25)
        args = throughput_keys(straight["config"], straight["shard"], run_dir, straight["micro"]) + self.memory_keys()
        result = self.train(name, limit_s, *args, *keys, "--train.stop_after", steps, env=env)
        if result.rc not in (0, 3):
            raise StepFailure(f"the {name} run exited {result.rc}" + (" (timed out)" if result.timed_out else "") +
                              f": {result.tail(2000)}")
        records = self.metrics(os.path.join(run_dir, "metrics.jsonl"))
        counted = records[WARMUP_STEPS:] or records
        return result, records, statistics.median(r["step_time_s"] for r in counted)

    def nondeterministic(self):
        result, records, step_s = self.short_run("nondeterministic", "--train.deterministic", "false")
        deterministic_s = self.throughput_run["step_s"]
        figures = {"step_time_s_median": step_s, "deterministic_step_time_s_median": deterministic_s,
                   "deterministic_over_nondeterministic": deterministic_s / step_s if step_s else None,
                   "steps": len(records), "losses": [r["loss"] for r in records], "compute": result.compute,
                   "wall_s": round(result.wall_s, 2)}
        print(f"step time {step_s:.4f} s with train.deterministic = false, {deterministic_s:.4f} s with true "
              f"({figures['deterministic_over_nondeterministic']:.2f}x)")
        if problem := self.gpu_compute_problem(result):
            raise StepFailure(problem, **figures)
        return figures

    def kernel_profile(self):
        library = os.path.join(self.programs.lib, "libmeshtrain_kernel_timer.so")
        if not os.path.exists(library):
            raise StepFailure(f"{library} is not in the folder: assemble it from a build with meshtrain_kernel_timer")
        report = os.path.join(self.work, "kernel_times.json")
        env = dict(self.programs.env)
        # KOKKOS_TOOLS_LIBS for Kokkos 4, KOKKOS_PROFILE_LIBRARY for 3.4; the warm-up steps not counted.
        env.update(KOKKOS_TOOLS_LIBS=library, KOKKOS_PROFILE_LIBRARY=library, MESHTRAIN_KERNEL_TIMES=report,
                   MESHTRAIN_KERNEL_TIMER_SKIP_STEPS=str(WARMUP_STEPS))
        result, records, step_s = self.short_run("kernel_profile", env=env)
        try:
            with open(report) as f:
                times = json.load(f)
        except (OSError, ValueError) as e:
            raise StepFailure(f"the kernel timer wrote no report ({e}): {result.tail(1500)}")
        steps = times["steps"]
        if steps < 1:
            raise StepFailure("the kernel timer saw no counted step (its region meshtrain::training_step)")
        kernels = sorted(times["kernels"].items(), key=lambda kv: -kv[1]["seconds"])
        kernel_s = sum(k["seconds"] for _, k in kernels) / steps
        fences = {n: c / steps for n, c in times["fences"].items() if n != TOOL_FENCE}
        figures = {
            "counted_steps": steps, "step_time_s_median_under_the_timer": step_s,
            "step_time_s_median_without": self.throughput_run["step_s"],
            "kernel_time_s_per_step": kernel_s,
            "launches_per_step": sum(k["launches"] for _, k in kernels) / steps,
            "fences_reported": times["fence_callbacks"],
            "host_waits_per_step": sum(fences.values()) if times["fence_callbacks"] else None,
            "fences_per_step": fences,
            "top_kernels": [{"kernel": n, "launches_per_step": k["launches"] / steps,
                             "seconds_per_step": k["seconds"] / steps} for n, k in kernels[:TOP_KERNELS]],
            "wall_s": round(result.wall_s, 2)}
        print(f"{steps} steps profiled: {figures['launches_per_step']:.0f} launches and {kernel_s:.4f} s of kernels a "
              f"step (step {step_s:.4f} s under the timer, {self.throughput_run['step_s']:.4f} s without); host waits "
              f"a step: " + (f"{figures['host_waits_per_step']:.1f} {fences}" if times["fence_callbacks"]
                             else "not reported (this Kokkos calls no fence callback)"))
        for row in figures["top_kernels"]:
            print(f"  {row['seconds_per_step'] * 1e3:9.3f} ms  {row['launches_per_step']:6.1f}x  {row['kernel']}")
        self.host_waits_per_step = figures["host_waits_per_step"]
        if problem := self.gpu_compute_problem(result):
            raise StepFailure(problem, **figures)
        return figures

    def communication_stream(self):
        env = dict(self.programs.env)
        env["MESHTRAIN_NCCL_ON_COMPUTE_STREAM"] = "1"
        result, records, step_s = self.short_run("communication_stream", env=env)
        own_streams_s = self.throughput_run["step_s"]
        waits = getattr(self, "host_waits_per_step", None)
        figures = {"step_time_s_median_on_the_compute_stream": step_s,
                   "step_time_s_median_on_own_streams": own_streams_s,
                   "compute_stream_over_own_streams": step_s / own_streams_s if own_streams_s else None,
                   "host_waits_per_step": waits, "steps": len(records), "losses": [r["loss"] for r in records],
                   "compute": result.compute, "wall_s": round(result.wall_s, 2)}
        print(f"step time {own_streams_s:.4f} s with the collectives on their own streams, {step_s:.4f} s on the "
              f"compute stream ({figures['compute_stream_over_own_streams']:.2f}x); host waits a step: "
              + (f"{waits:.1f}" if waits is not None else "not reported (kernel_profile did not count them)"))
        if problem := self.gpu_compute_problem(result):
            raise StepFailure(problem, **figures)
        return figures
