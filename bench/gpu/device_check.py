#!/usr/bin/env python3
"""The GPU check: one command on a machine with one NVIDIA GPU, a driver, a CUDA runtime and a
Python, and nothing else meshtrain needs — the binaries and their libraries come in the folder that
bench/gpu/assemble.sh packs from a build (build/cuda there, build/release for the dry run here).

Steps, each timed, each passing or failing on its own; a failed step does not stop the next (but for
setup, and libraries on the GPU):
  setup         unpack the folder, find the CUDA libraries it leaves to the machine (cuBLAS, NCCL:
                its CUDA install or PyTorch's wheels), check that every program's libraries resolve
                and how MPI starts (a plain process, else the carried mpiexec -n 1)
  libraries     those libraries' versions against the ones the build linked (cuBLAS, cuBLASLt and nvrtc
                .so.13, cuDNN .so.9, NCCL .so.2: the same major, not older), and the driver's CUDA
                against the carried runtime's (library_check.py)
  unit_tests    test_kernels, test_model, test_cublas_gemm and test_cudnn_attention where built (gtest;
                on the GPU no cuBLAS case may be skipped)
  small_vs_cpu  bench/gpu/small.ini, 10 steps from bench/gpu/init_weights_small.h5 in fp32 and bf16,
                each under model.attention fused (bf16: cuDNN's forward where built) and materialized,
                and bf16 fused once more with train.deterministic = false (cuDNN's backward too),
                losses against the CPU build's (reference_small.json): fp32 to 1e-4 relative, bf16 to
                2e-3 (tests/train/test_mixed_precision.py's bound for sums in another order)
  mpi_ranks     test_comm's MPI cases on 2 ranks under the carried mpiexec (the launcher works)
  nccl          test_comm's NCCL cases on one rank: the backend initialises and every collective runs
                (--cpu: skipped, there is no GPU)
  throughput    bench/gpu/gpt2_124m.ini (--cpu: gpt2_124m_cpu.ini) at --micro-batch (16 on the GPU) or,
                --cpu or where that does not fit, the largest micro-batch `meshtrain plan
                --max-micro-batch` fits in train.memory_gib (the GPU's free memory; the trainer checks the
                same rule), halved while the GPU runs out of memory, train.deterministic = true: tokens/s, model
                FLOP/s (6N + 6·L·C·T per token) and MFU against the peak, beside llm.c's published
                MFU; it saves every few steps, and is asked to save and leave early (SIGUSR1) when
                its remaining steps would not fit in --throughput-s
  nondeterministic  the same shape for a few steps with train.deterministic = false: its step time beside
                the deterministic one (profile_steps.py)
  kernel_profile  the same for a few steps under the kernel timer (kernel_timer.cpp, a Kokkos Tools
                library): each kernel's launches and time a step, and the fences inside a step (the host
                waiting for the device), beside the step time
  communication_stream  the same for a few steps with every collective on the compute stream
                (MESHTRAIN_NCCL_ON_COMPUTE_STREAM=1): its step time beside the throughput run's, whose
                collectives ran on their own streams, and the host waits a step (profile_steps.py)
  resume        the same run resumed from its last checkpoint before its last step, when its estimate
                (the straight run's start-up and step times) fits what is left: its losses and
                gradient norms bitwise the straight run's
  audit         (--audit only) every shared object the carried programs loaded came from the folder,
                but for glibc and the CUDA libraries left to the machine
Every program runs with NCCL_CHECK_POINTERS=1: NCCL refuses a host pointer even on one rank.
The parts: check_runner.py (steps, commands, the JSON), carried_programs.py (the folder and its loader),
check_runs.py (keys and figures shared with make_reference.py), run_watchers.py, library_check.py,
throughput_steps.py and profile_steps.py (the steps on GPT-2 124M's shape).
Figures go to OUT/device_check.json (OUT: --out, else $OUT, else out/gpu-check), rewritten after
every step; each command's output to OUT/logs.tar.gz. Every command is bounded by the step's own limit
and by --budget-s for the whole check. Exit code: 0 when no step failed.

usage: device_check.py [--cpu] [--carry DIR] [--out DIR] [--work DIR] [--budget-s S] [--throughput-s S]
                       [--micro-batch N] [--carried-glibc] [--audit DIR] [--keep-work]
"""
import argparse
import glob
import itertools
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
# The check's other modules, beside this file.
from carried_programs import (Programs, device_library_dirs, glibc_version, ldconfig_paths, read_manifest,  # noqa: E402
                              search_file_system, unpack, version_tuple)
from check_runner import Check, StepFailure  # noqa: E402
from check_runs import (REPO, TOLERANCE, gtest_counts, make_small_shard, max_relative_difference,  # noqa: E402
                        skip_reasons, small_run_keys)
import library_check  # noqa: E402
from profile_steps import ProfileSteps  # noqa: E402
from throughput_steps import ThroughputSteps  # noqa: E402


class DeviceCheck(ThroughputSteps, ProfileSteps):
    def __init__(self, args):
        self.args = args
        self.check = Check(args)
        self.gpu = not args.cpu
        self.work = args.work
        self.programs = None
        self.launcher = None  # how a one-rank program starts: "plain" or "mpiexec" (-n 1)
        self.gpu_memory_free_gib = None
        self.gpu_shared = not self.gpu  # whether several processes may use the GPU at once
        self.build = {}
        self.manifest = []
        self.device_libraries = {}  # soname: the file found on this machine
        self.throughput_run = None

    # -- helpers ----------------------------------------------------------------------------------
    def one_rank(self, name, *args):
        if self.launcher == "mpiexec":
            return self.programs.mpiexec(1, name, *args)
        return self.programs.argv(name, *args)

    def run(self, argv, log, timeout_s):
        return self.check.run(argv, log, timeout_s, env=self.programs.env, cwd=self.work)

    def train(self, log, timeout_s, *keys, watch=None, env=None):
        argv = self.one_rank("meshtrain", "train", *keys)
        result = self.check.run(argv, log, timeout_s, env=env or self.programs.env, cwd=self.work, watch=watch)
        compute = re.search(r"^compute: (.*)$", result.output, re.MULTILINE)
        result.compute = compute.group(1) if compute else None
        return result

    def gpu_compute_problem(self, result):
        """On the GPU a run must say it ran there: a host build would pass the comparisons silently."""
        if not self.gpu or (result.compute and "Cuda" in result.compute):
            return None
        if result.compute is None:
            return ("the trainer printed no 'compute:' line (a build from before that line was added), so it "
                    "cannot be told to have run on the GPU")
        return f"the trainer did not run on the GPU: it reports '{result.compute}' (a CUDA build: 'Kokkos Cuda')"

    @staticmethod
    def metrics(path):
        with open(path) as f:
            return [json.loads(line) for line in f if line.strip()]

    # -- setup ------------------------------------------------------------------------------------
    def setup(self):
        bundle = os.path.join(self.args.carry, "bundle.tar.xz")
        if not os.path.exists(bundle):
            raise StepFailure(f"{bundle} is missing: run bench/gpu/assemble.sh BUILD_DIR {self.args.carry} first")
        root = os.path.join(self.work, "carry")
        shutil.rmtree(root, ignore_errors=True)
        start = time.monotonic()
        unpack(bundle, root)
        unpack_s = time.monotonic() - start
        manifest = read_manifest(os.path.join(root, "manifest.tsv"))
        info = {kind: name for kind, name, _ in manifest if kind in ("glibc_needed", "build", "cuda", "nccl", "source")}
        self.build = info

        # The CUDA libraries left to this machine, linked into one directory.
        devlibs = os.path.join(self.work, "devlibs")
        os.makedirs(devlibs, exist_ok=True)
        system, dirs = ldconfig_paths(), device_library_dirs()
        found, missing = {}, []
        for kind, name, _ in manifest:
            if kind != "device":
                continue
            candidates = ([system[name]] if name in system else []) + [os.path.join(d, name) for d in dirs]
            path = next((c for c in candidates if os.path.exists(c)), None)
            if path is None:
                missing.append(name)
            else:
                found[name] = os.path.realpath(path)
        if missing:
            print(f"not in the usual places: {missing}; searching the file system")
            found.update({n: os.path.realpath(p) for n, p in search_file_system(missing).items()})
            missing = [n for n in missing if n not in found]
        self.manifest, self.device_libraries = manifest, found
        for name, path in found.items():
            link = os.path.join(devlibs, name)
            if os.path.lexists(link):
                os.remove(link)
            os.symlink(path, link)

        host = glibc_version()
        needed = version_tuple(info.get("glibc_needed") or "0.0")
        carried_glibc = self.args.carried_glibc or host < needed
        self.programs = Programs(root, self.work, devlibs, carried_glibc, self.args.audit)
        figures = {"unpack_s": round(unpack_s, 2), "build": info, "device_libraries": found,
                   "device_library_dirs_searched": dirs, "host_glibc": ".".join(map(str, host)),
                   "glibc_needed": info.get("glibc_needed"),
                   "loader": "carried glibc (ld-linux --library-path)" if carried_glibc else "host glibc",
                   "nccl_check_pointers": self.programs.env.get("NCCL_CHECK_POINTERS")}
        print(f"unpacked in {unpack_s:.1f} s; build {info}; device libraries {found}; host glibc "
              f"{figures['host_glibc']} (needed {figures['glibc_needed']}): {figures['loader']}")
        problems = [f"not found on this machine: {', '.join(missing)} (searched {', '.join(dirs) or 'nothing'})"
                    ] if missing else []

        unresolved = {p: u for p in sorted(os.listdir(self.programs.bin)) if (u := self.programs.unresolved(p))}
        if unresolved:
            problems.append(f"unresolved libraries: {unresolved}")

        if self.gpu:
            figures["gpu"] = self.gpu_info()
            print(f"GPU: {figures['gpu']}")

        # How MPI starts: as a singleton, else under the carried mpiexec.
        probe = self.check.run(self.programs.argv("test_kernels", "--gtest_list_tests"), "setup_probe_plain", 60,
                               env=self.programs.env, cwd=self.work)
        if probe.rc == 0:
            self.launcher = "plain"
        else:
            under = self.check.run(self.programs.mpiexec(1, "test_kernels", "--gtest_list_tests"),
                                   "setup_probe_mpiexec", 60, env=self.programs.env, cwd=self.work)
            if under.rc == 0:
                self.launcher = "mpiexec"
            else:
                problems.append(f"test_kernels --gtest_list_tests starts neither as a plain process (exit {probe.rc}: "
                                f"{probe.tail(800)}) nor under mpiexec -n 1 (exit {under.rc}: {under.tail(800)})")
        figures["one_rank_launch"] = {"plain": "plain process (MPI singleton)", "mpiexec": "mpiexec -n 1"}.get(
            self.launcher, "none works")
        if problems:
            raise StepFailure("; ".join(problems), **figures)
        return figures

    def gpu_info(self):
        query = "name,memory.total,memory.free,driver_version,compute_mode"
        try:
            done = subprocess.run(["nvidia-smi", f"--query-gpu={query}", "--format=csv,noheader,nounits"],
                                  capture_output=True, text=True, timeout=30)
            name, total, free, driver, mode = [x.strip() for x in done.stdout.splitlines()[0].split(",")]
            self.gpu_memory_free_gib = float(free) / 1024
            self.gpu_shared = mode == "Default"
            return {"name": name, "memory_total_mib": float(total), "memory_free_mib": float(free),
                    "driver": driver, "compute_mode": mode, "source": "nvidia-smi",
                    "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES")}
        except (OSError, IndexError, ValueError, subprocess.TimeoutExpired) as e:
            return {"error": f"nvidia-smi: {e}", "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES")}

    # -- libraries --------------------------------------------------------------------------------
    def libraries(self):
        driver = library_check.driver_cuda_version() if self.gpu else None
        figures, problems = library_check.compare(self.manifest, self.device_libraries, driver)
        for name, row in figures["libraries"].items():
            print(f"{name}: {row['here']} here (the build linked {row['built_with']}) {row['path'] or ''}")
        print(f"CUDA runtime carried {figures['cuda_runtime']}; the driver runs CUDA {figures['driver_cuda']}")
        if problems:
            raise StepFailure("; ".join(problems), **figures)
        return figures

    # -- unit tests -------------------------------------------------------------------------------
    def unit_tests(self):
        names = [n for n in ("test_kernels", "test_model", "test_cublas_gemm", "test_cudnn_attention")
                 if self.programs.has(n)]
        results, threads = {}, []

        def one(name):
            report = os.path.join(self.work, f"{name}.json")
            results[name] = (self.run(self.one_rank(name, f"--gtest_output=json:{report}"), name, 150), report)

        for name in names:  # independent processes: side by side, unless the GPU takes one at a time
            threads.append(threading.Thread(target=one, args=(name,)))
            threads[-1].start()
            if not self.gpu_shared:
                threads[-1].join()
        for t in threads:
            t.join()
        figures, failures = {}, []
        for name in names:
            result, report = results[name]
            entry = {"rc": result.rc, "wall_s": round(result.wall_s, 2)}
            try:
                with open(report) as f:
                    suites = json.load(f)
                cases = [c for s in suites["testsuites"] for c in s["testsuite"]]
                entry.update(tests=len(cases), failures=suites["failures"],
                             skipped=[f"{c['classname']}.{c['name']}" for c in cases if c.get("result") == "SKIPPED"])
            except (OSError, ValueError, KeyError):
                entry["error"] = "no gtest report"
            figures[name] = entry
            if result.rc != 0 or entry.get("failures") or "error" in entry:
                failures.append(f"{name} exited {result.rc}" + (" (timed out)" if result.timed_out else "") +
                                f", {entry.get('failures', '?')} failed: {result.tail(1200)}")
            elif self.gpu and name == "test_cublas_gemm" and entry["skipped"]:
                failures.append(f"test_cublas_gemm skipped {entry['skipped']}: the binary sees no GPU")
            print(f"{name}: {entry}")
        if self.gpu and "test_cublas_gemm" not in names:
            failures.append("test_cublas_gemm is not in the folder (the build has no cuBLAS)")
        if failures:
            raise StepFailure("; ".join(failures), **figures)
        return figures

    # -- CPU against GPU on a small model ---------------------------------------------------------
    def small_vs_cpu(self):
        with open(os.path.join(HERE, "reference_small.json")) as f:
            reference = json.load(f)
        shard = make_small_shard(self.work, lambda argv, log: self.run(argv, log, 60), self.one_rank)
        figures, failures = {"reference_made_by": reference["made_by"]}, []
        # The last run takes attention's backward off the deterministic kernel: cuDNN's, where built.
        runs = [(precision, attention, True) for precision, attention
                in itertools.product(("fp32", "bf16"), ("fused", "materialized"))] + [("bf16", "fused", False)]
        for precision, attention, deterministic in runs:
            run = f"{precision}_{attention}" + ("" if deterministic else "_nondeterministic")
            out = os.path.join(self.work, f"small_{run}")
            result = self.train(f"small_{run}", 90, *small_run_keys(precision, shard, out),
                                "--model.attention", attention,
                                "--train.deterministic", "true" if deterministic else "false")
            if result.rc != 0:
                failures.append(f"{run} run exited {result.rc}: {result.tail(1500)}")
                continue
            if problem := self.gpu_compute_problem(result):
                failures.append(f"{run}: {problem}")
            if "initial weights from" not in result.output:
                failures.append(f"{run}: the trainer did not say it loaded the initial weights")
            got = self.metrics(os.path.join(out, "metrics.jsonl"))
            want = reference[precision]
            loss_diff = max_relative_difference([r["loss"] for r in got], want["loss"])
            norm_diff = max_relative_difference([r["grad_norm"] for r in got], want["grad_norm"])
            tolerance = TOLERANCE[precision]
            figures[run] = {"loss": [r["loss"] for r in got], "reference_loss": want["loss"],
                                  "max_relative_loss_difference": loss_diff, "tolerance": tolerance,
                                  "max_relative_grad_norm_difference": norm_diff, "compute": result.compute,
                                  "wall_s": round(result.wall_s, 2)}
            print(f"{run}: losses {[round(r['loss'], 5) for r in got]}\n  worst relative difference "
                  f"{loss_diff:.2e} (allowed {tolerance:g}); grad norms {norm_diff:.2e}; {result.compute}")
            if len(got) != len(want["loss"]) or not loss_diff <= tolerance:  # NaN fails too
                failures.append(f"{run}: losses differ from the CPU build's by {loss_diff:.2e} relative "
                                f"(allowed {tolerance:g}) over {len(got)} of {len(want['loss'])} steps")
        if failures:
            raise StepFailure("; ".join(failures), **figures)
        return figures

    # -- MPI and NCCL -----------------------------------------------------------------------------
    def mpi_ranks(self):
        # Both ranks would write one gtest report; rank 0 prints, and the exit code is the worst rank's.
        result = self.run(self.programs.mpiexec(2, "test_comm", "--gtest_filter=MpiComm.*"), "mpi_ranks", 90)
        passed = re.search(r"^\[  PASSED  \] (\d+) tests?", result.output, re.MULTILINE)
        figures = {"ranks": 2, "rc": result.rc, "wall_s": round(result.wall_s, 2),
                   "passed": int(passed.group(1)) if passed else 0}
        if result.rc != 0 or not passed or "[  FAILED  ]" in result.output:
            raise StepFailure(f"test_comm's MPI cases on 2 ranks exited {result.rc}" +
                              (" (timed out)" if result.timed_out else "") + f": {result.tail(1500)}", **figures)
        return figures

    def nccl(self):
        if not self.gpu:
            return {"status": "skipped", "message": "--cpu: no GPU here, so the NCCL backend is not exercised "
                                                    "(the device run initialises it and runs every collective)"}
        listing = self.run(self.one_rank("test_comm", "--gtest_list_tests"), "nccl_list", 60)
        if listing.rc != 0:
            raise StepFailure(f"test_comm --gtest_list_tests exited {listing.rc}: {listing.tail(1500)}")
        if "RejectsBadArgumentsWithTheNumbers" not in listing.output.split("NcclComm.", 1)[-1]:
            raise StepFailure(f"test_comm was built without NCCL (its NcclComm cases are the stub): assemble with a "
                              f"build configured with -DMESHTRAIN_ENABLE_NCCL=ON (manifest: nccl = "
                              f"{self.build.get('nccl')})")
        report = os.path.join(self.work, "test_comm_nccl.json")
        result = self.run(self.one_rank("test_comm", "--gtest_filter=NcclComm.*", f"--gtest_output=json:{report}"),
                          "nccl", 120)
        figures = {"ranks": 1, "rc": result.rc, "wall_s": round(result.wall_s, 2), **gtest_counts(report)}
        ran = "NcclComm.CollectivesAndMessagesMatchClosedForms" not in figures.get("skipped", ["?"])
        if result.rc != 0 or figures.get("failures", 1) != 0 or not ran:
            why = skip_reasons(result.output) if not ran else result.tail(1500)
            raise StepFailure(f"NCCL collectives did not pass (rc {result.rc}): {why}", **figures)
        return figures

    # -- what the carried programs loaded (--audit) ------------------------------------------------
    def audit(self):
        """Every shared object the carried programs loaded, from the loader's own log (LD_DEBUG): all
        from the folder, but for the host's glibc and the machine's CUDA libraries."""
        root, devlibs = self.programs.root + os.sep, os.path.join(self.work, "devlibs") + os.sep
        loaded, programs = {}, set()
        for path in glob.glob(os.path.join(self.args.audit, "ld.*")):
            tried = {}
            with open(path, errors="replace") as f:
                for line in f:
                    found = re.search(r"trying file=(\S+)", line)
                    if found:
                        tried[os.path.basename(found.group(1))] = found.group(1)
                        continue
                    found = re.search(r"file=(\S+) \[\d+\];\s+generating link map", line)
                    if found:
                        name = found.group(1)
                        where = name if "/" in name else tried.get(name, "(the loader's cache)")
                        loaded.setdefault(where, 0)
                        loaded[where] += 1
                    programs.update(re.findall(r"(?:needed|loaded) by (\S+)", line))
        host_re = re.compile(r"^(libc|libm|libmvec|libpthread|libdl|librt|libresolv|libutil|libanl|libnsl|"
                             r"libnss_[a-z]+)\.so|^ld-linux")
        kinds = {"carried": [], "device": [], "host glibc": [], "outside": []}
        for where in sorted(loaded):
            if where.startswith(root):
                kinds["carried"].append(where[len(root):])
            elif where.startswith(devlibs):
                kinds["device"].append(f"{os.path.basename(where)} -> {os.path.realpath(where)}")
            elif host_re.match(os.path.basename(where)):
                kinds["host glibc"].append(where)
            else:
                kinds["outside"].append(where)
        ours = [root, devlibs] + ([self.programs.wrappers + os.sep] if self.programs.wrappers else [])
        # Under the carried glibc the wrapper scripts run in the host's shell.
        shells = ("/bin/sh", "/usr/bin/sh", "/bin/dash", "/usr/bin/dash") if self.programs.wrappers else ()
        strangers = sorted(p for p in programs if not p.startswith(tuple(ours)) and p not in shells
                           and not host_re.match(os.path.basename(p)))
        figures = {"objects": {k: v for k, v in kinds.items()}, "programs_outside": strangers,
                   "processes": len(glob.glob(os.path.join(self.args.audit, "ld.*")))}
        print(f"{figures['processes']} processes loaded {len(kinds['carried'])} objects from the folder, "
              f"{len(kinds['device'])} CUDA libraries of this machine, glibc {kinds['host glibc']}")
        if not figures["processes"]:
            raise StepFailure("no loader log was written: the audit saw nothing", **figures)
        if kinds["outside"] or strangers:
            raise StepFailure(f"loaded from outside the folder: {kinds['outside'] + strangers}", **figures)
        return figures

    def main(self):
        c = self.check
        c.step("setup", 0, self.setup)
        if self.programs is None:
            c.write()
            return 1
        # First, as the steps after it would fail on another library's version, and say less.
        if c.step("libraries", 0, self.libraries)["status"] == "fail" and self.gpu:
            c.write()
            return 1
        c.step("unit_tests", 20, self.unit_tests)
        c.step("small_vs_cpu", 20, self.small_vs_cpu)
        c.step("mpi_ranks", 10, self.mpi_ranks)
        c.step("nccl", 10, self.nccl)
        c.step("throughput", 60, self.throughput)
        c.step("nondeterministic", 20, self.nondeterministic)
        c.step("kernel_profile", 20, self.kernel_profile)
        c.step("communication_stream", 15, self.communication_stream)
        c.step("resume", 30, self.resume)
        if self.args.audit:
            c.step("audit", 0, self.audit)
        summary = {n: s["status"] for n, s in c.report["steps"].items()}
        print(f"\nsteps: {summary}\nfigures: {os.path.join(c.out, 'device_check.json')} "
              f"({c.clock.elapsed():.0f} s)")
        return 0 if c.report["passed"] else 1


def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cpu", action="store_true", help="dry run against a CPU build's folder (no GPU, no NCCL)")
    ap.add_argument("--carry", default=os.path.join(REPO, "build", "gpu-carry"),
                    help="the folder assemble.sh wrote (default build/gpu-carry)")
    ap.add_argument("--out", default=os.environ.get("OUT") or os.path.join(REPO, "out", "gpu-check"),
                    help="where device_check.json and logs.tar.gz go (default $OUT, else out/gpu-check)")
    ap.add_argument("--work", help="scratch directory for the unpacked folder, data and checkpoints (default: a "
                                   "new one under $TMPDIR, or build/ if that has under 16 GiB free; removed at the end)")
    ap.add_argument("--budget-s", type=float, help="seconds for the whole check (default 450 on the GPU, 900 --cpu)")
    ap.add_argument("--throughput-s", type=float,
                    help="seconds the throughput run may take; it saves and leaves early when its remaining steps "
                         "would not fit (default 240 on the GPU, 120 --cpu)")
    ap.add_argument("--micro-batch", type=int,
                    help="the throughput runs' micro-batch (default 16 on the GPU; the largest that fits --cpu, or "
                         "when this one does not fit)")
    ap.add_argument("--carried-glibc", action="store_true",
                    help="run the programs under the carried glibc's loader even where the host's would do")
    ap.add_argument("--audit", help="record every shared object the carried programs load (LD_DEBUG) in DIR")
    ap.add_argument("--keep-work", action="store_true", help="keep the scratch directory")
    args = ap.parse_args(argv)
    if args.budget_s is None:
        args.budget_s = 900.0 if args.cpu else 450.0
    if args.throughput_s is None:
        args.throughput_s = 120.0 if args.cpu else 240.0
    if args.micro_batch is None and not args.cpu:
        args.micro_batch = 16
    args.carry, args.out = os.path.abspath(args.carry), os.path.abspath(args.out)
    return args


def scratch_directory():
    """A new directory under $TMPDIR, or under build/ when that has too little room for 124M's
    checkpoints (four of 1.5 GB) and data."""
    base = tempfile.gettempdir()
    if shutil.disk_usage(base).free < 16 * 2**30:
        base = os.path.join(REPO, "build")
        os.makedirs(base, exist_ok=True)
    return tempfile.mkdtemp(prefix="meshtrain-gpu-check-", dir=base)


def main(argv):
    args = parse_args(argv)
    own_work = args.work is None
    args.work = os.path.abspath(args.work or scratch_directory())
    os.makedirs(args.work, exist_ok=True)
    try:
        return DeviceCheck(args).main()
    finally:
        if own_work and not args.keep_work:
            shutil.rmtree(args.work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
