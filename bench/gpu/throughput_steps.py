"""The device check's throughput and resume steps: GPT-2 124M's shape at a fixed micro-batch (--micro-batch,
16 on the GPU) or the largest that fits, attention's backward deterministic (the default), then the same
run resumed from its last checkpoint before its last step, bitwise. The runs between them
(profile_steps.py) reuse this one's data and keys."""
import json
import os
import re
import shutil
import statistics

import token_data
from check_runner import StepFailure
from check_runs import (H200_BF16_PEAK_FLOPS, HERE, LLMC_REFERENCE, OOM, REPO, WARMUP_STEPS, model_flops_per_token,
                        read_ini, throughput_keys)
from run_watchers import GpuMemoryWatch, LeaveInTime


class ThroughputSteps:
    """Mixed into DeviceCheck: uses its check, programs, train(), run(), one_rank() and metrics()."""

    def throughput(self):
        config = os.path.join(HERE, "gpt2_124m_cpu.ini" if not self.gpu else "gpt2_124m.ini")
        ini = read_ini(config)
        T, V, steps = int(ini["model"]["seq_len"]), int(ini["model"]["vocab"]), int(ini["train"]["steps"])
        shard = os.path.join(self.work, "random_tokens.bin")
        token_data.write_random_shard(shard, (1 << 20) + 1 if self.gpu else 200_001, V, seed=1234)
        plan = self.largest_micro_batch(config, shard)
        largest = plan["effective_batch"]["micro_batch"]
        # A fixed micro-batch measures the same work on every GPU and leaves time for the runs after
        # this one; the planner's largest when none is asked for, or when the one asked for does not fit.
        micro = min(self.args.micro_batch, largest) if self.args.micro_batch else largest
        run_dir = os.path.join(self.work, "straight")
        memory = GpuMemoryWatch() if self.gpu else None
        # Leave time for the two short runs, the resumed run (a third of the steps) and the JSON.
        allowed_s = min(self.args.throughput_s, self.check.clock.left() * 0.5)
        while True:
            shutil.rmtree(run_dir, ignore_errors=True)
            keys = throughput_keys(config, shard, run_dir, micro) + self.memory_keys() + [
                "--train.deterministic", "true"]
            leave = LeaveInTime(os.path.join(run_dir, "metrics.jsonl"), steps, allowed_s)
            result = self.train(f"throughput_b{micro}", allowed_s + 60, *keys, watch=leave)
            if result.rc == 0 or not OOM.search(result.output) or micro == 1:
                break
            print(f"micro_batch {micro} ran out of memory; trying {micro // 2}")
            micro //= 2
            allowed_s = min(allowed_s, self.check.clock.left() * 0.5)
        peak_used_mib = memory.stop() if memory else None
        left_early = result.rc == 3 and leave.signalled_at is not None
        if result.rc != 0 and not left_early:
            raise StepFailure(f"training exited {result.rc}" + (" (timed out)" if result.timed_out else "") +
                              f": {result.tail(2000)}", micro_batch=micro)
        records = self.metrics(os.path.join(run_dir, "metrics.jsonl"))
        counted = records[WARMUP_STEPS:] or records
        tokens_per_s = statistics.median(r["tokens_per_s"] for r in counted)
        flops_per_token = model_flops_per_token(ini)
        peak = H200_BF16_PEAK_FLOPS if self.gpu else plan["cluster"]["peak_flops"]
        model_flops = tokens_per_s * flops_per_token
        saves = [(int(m.group(1)), float(m.group(2))) for m in re.finditer(r"^saved \S*step_(\d+)\.h5 \(([0-9.]+)s\)",
                                                                           result.output, re.MULTILINE)]
        step_s = statistics.median(r["step_time_s"] for r in counted)
        # What a run of this shape costs besides its steps (start, load, saves): the resumed run's estimate.
        overhead_s = max(0.0, result.wall_s - sum(r["step_time_s"] for r in records))
        self.throughput_run = {"config": config, "shard": shard, "micro": micro, "dir": run_dir, "records": records,
                               "step_s": step_s, "overhead_s": overhead_s}
        figures = {
            "config": os.path.relpath(config, REPO), "micro_batch": micro, "global_batch": micro, "seq_len": T,
            "tokens_per_step": micro * T, "steps": len(records), "counted_steps": len(counted),
            "left_early": f"at step {len(records)} of {steps}: the steps would not fit in {allowed_s:.0f} s"
                          if left_early else None,
            "deterministic": True, "step_time_s_median": step_s, "overhead_s": round(overhead_s, 2),
            "tokens_per_s": tokens_per_s, "model_flops_per_token": flops_per_token,
            "model_flops_per_s": model_flops, "peak_flops": peak,
            "peak_source": "H200 SXM dense bf16" if self.gpu else f"meshtrain plan preset {plan['cluster']['preset']}",
            "mfu": model_flops / peak,
            "trainer_model_flops_per_s_median": statistics.median(r["model_flops_per_s"] for r in counted),
            "losses": [r["loss"] for r in records], "saves_s": saves, "compute": result.compute,
            "plan": {"cluster": plan["cluster"]["preset"], "device_memory_gib": self.gpu_memory_free_gib,
                     "largest_micro_batch": plan["effective_batch"]["micro_batch"],
                     "needed_bytes": plan["needed_bytes"], "capacity_bytes": plan["capacity_bytes"],
                     "predicted_step_time_s": plan["step_time"]["total_s"],
                     "predicted_tokens_per_s": plan["tokens_per_s"]},
            "counted_memory_bytes": records[-1].get("memory"), "gpu_memory_used_peak_mib": peak_used_mib,
            "llm_c": LLMC_REFERENCE, "wall_s": round(result.wall_s, 2)}
        print(f"micro-batch {micro} × {T} tokens, {len(counted)} of {len(records)} steps counted: "
              f"{tokens_per_s:,.0f} tokens/s, {model_flops / 1e12:.3g} TFLOP/s model FLOPs, MFU "
              f"{100 * model_flops / peak:.1f} % of {peak / 1e12:g} TFLOP/s ({figures['peak_source']})\n"
              f"  beside {LLMC_REFERENCE}\n  plan predicted {plan['tokens_per_s']:,.0f} tokens/s; "
              f"saves {saves}; GPU memory peak {peak_used_mib} MiB" + (f"; left early {figures['left_early']}"
                                                                       if left_early else ""))
        if problem := self.gpu_compute_problem(result):
            raise StepFailure(problem, **figures)
        return figures

    def memory_keys(self):
        """The memory the run may use, as the key both `meshtrain plan` and the trainer read
        (train.memory_gib): the GPU's free memory; none on --cpu, where the config sets it."""
        if self.gpu and self.gpu_memory_free_gib:
            return ["--train.memory_gib", f"{self.gpu_memory_free_gib:.1f}"]
        return []

    def largest_micro_batch(self, config, shard):
        """The largest micro-batch that fits, as `meshtrain plan --max-micro-batch` finds it: the
        rule the trainer's own fit check applies (src/plan/fit.hpp), not computed again here."""
        cluster = "h200-sxm-8" if self.gpu else "local"
        result = self.run(self.one_rank("meshtrain", "plan", "--config", config, "--world", 1, "--cluster", cluster,
                                        *self.memory_keys(), "--train.micro_batch", 1, "--train.global_batch", 1,
                                        "--data.train", shard, "--max-micro-batch", "--json"), "plan_max_micro_batch", 120)
        if result.rc != 0 or "{" not in result.output:
            raise StepFailure(f"meshtrain plan --max-micro-batch exited {result.rc}: {result.tail(1500)}")
        plan = json.loads(result.output[result.output.index("{"):result.output.rindex("}") + 1])
        print(f"plan: the largest micro_batch that fits is {plan['effective_batch']['micro_batch']}, needing "
              f"{plan['needed_bytes'] / 2**30:.1f} GiB of {plan['capacity_bytes'] / 2**30:.1f} GiB")
        return plan

    def resume(self):
        straight = self.throughput_run
        if straight is None:
            raise StepFailure("the throughput run did not finish, so there is nothing to resume")
        last = straight["records"][-1]["step"]
        saved = sorted(int(m.group(1)) for m in (re.fullmatch(r"step_(\d+)\.h5", f)
                                                  for f in os.listdir(os.path.join(straight["dir"], "ck"))) if m)
        earlier = [s for s in saved if s < last]
        if not earlier:
            raise StepFailure(f"the straight run saved no checkpoint before its last step {last} (saved {saved})")
        mid = earlier[-1]
        checkpoint = os.path.join(straight["dir"], "ck", f"step_{mid:08d}.h5")
        # Its time from the straight run's: it must end within the budget, with room for the JSON.
        estimate_s = straight["overhead_s"] + (last - mid) * straight["step_s"]
        if estimate_s > self.check.clock.left() - 10:
            raise StepFailure(f"resuming {last - mid} steps from step {mid} would take about {estimate_s:.0f} s, "
                              f"{self.check.clock.left():.0f} s are left: give the check a larger --budget-s or a "
                              f"smaller --throughput-s")
        run_dir = os.path.join(self.work, "resumed")
        shutil.rmtree(run_dir, ignore_errors=True)
        keys = throughput_keys(straight["config"], straight["shard"], run_dir, straight["micro"]) + self.memory_keys()
        result = self.train("resume", max(60.0, 2 * estimate_s), *keys, "--train.deterministic", "true",
                            "--checkpoint.resume", checkpoint, "--train.stop_after", last - mid)
        if result.rc not in (0, 3):
            raise StepFailure(f"the resumed run exited {result.rc}: {result.tail(2000)}")
        resumed = self.metrics(os.path.join(run_dir, "metrics.jsonl"))
        want = [(r["step"], r["loss"], r["grad_norm"]) for r in straight["records"] if r["step"] > mid]
        got = [(r["step"], r["loss"], r["grad_norm"]) for r in resumed]
        figures = {"resumed_from_step": mid, "steps": len(got), "bitwise_equal": got == want,
                   "estimate_s": round(estimate_s, 2),
                   "resumed_losses": [g[1] for g in got], "straight_losses": [w[1] for w in want],
                   "wall_s": round(result.wall_s, 2)}
        if f"resumed from {checkpoint} at step {mid}" not in result.output:
            raise StepFailure(f"the run did not say it resumed from {checkpoint} at step {mid}", **figures)
        if got != want:
            first = next((i for i, (g, w) in enumerate(zip(got, want)) if g != w), min(len(got), len(want)))
            raise StepFailure(f"resumed run differs from the straight run from step {mid + 1 + first} on "
                              f"(resumed {got[first:first + 1]}, straight {want[first:first + 1]})", **figures)
        print(f"steps {mid + 1}-{last} resumed from step {mid}: losses and gradient norms bitwise equal")
        return figures
