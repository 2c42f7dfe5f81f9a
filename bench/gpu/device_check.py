#!/usr/bin/env python3
"""The GPU check: one command on a machine with one NVIDIA GPU, a driver, a CUDA runtime and a
Python, and nothing else meshtrain needs — the binaries and their libraries come in the folder that
bench/gpu/assemble.sh packs from a build (build/cuda there, build/release for the dry run here).

Steps, each timed, each passing or failing on its own; a failed step does not stop the next:
  setup         unpack the folder, find the CUDA libraries it leaves to the machine (cuBLAS, NCCL:
                its CUDA install or PyTorch's wheels), check that every program's libraries resolve
                and how MPI starts (a plain process, else the carried mpiexec -n 1)
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
  throughput    bench/gpu/gpt2_124m.ini (--cpu: gpt2_124m_cpu.ini) with the largest micro-batch
                `meshtrain plan --max-micro-batch` fits in train.memory_gib (the GPU's free memory; the
                trainer checks the same rule), halved while the GPU runs out of memory: tokens/s, model
                FLOP/s (6N + 6·L·C·T per token) and MFU against the peak, beside llm.c's published
                MFU; it saves every few steps, and is asked to save and leave early (SIGUSR1) when
                its remaining steps would not fit in --throughput-s
  resume        the same run resumed from its last checkpoint before its last step: its losses and
                gradient norms bitwise the straight run's
  audit         (--audit only) every shared object the carried programs loaded came from the folder,
                but for glibc and the CUDA libraries left to the machine
Every program runs with NCCL_CHECK_POINTERS=1: NCCL refuses a host pointer even on one rank.
Figures go to OUT/device_check.json (OUT: --out, else $OUT, else out/gpu-check), rewritten after
every step; each command's output to OUT/logs.tar.gz. Every command is bounded by the step's own limit
and by --budget-s for the whole check. Exit code: 0 when no step failed.

usage: device_check.py [--cpu] [--carry DIR] [--out DIR] [--work DIR] [--budget-s S] [--throughput-s S]
                       [--carried-glibc] [--audit DIR] [--keep-work]
"""
import argparse
import glob
import importlib.util
import itertools
import json
import os
import re
import shutil
import tarfile
import signal
import site
import statistics
import subprocess
import sys
import tarfile
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
import token_data  # noqa: E402  (beside this file)

# H200 SXM, dense bf16 (NVIDIA's datasheet; the h200-sxm-8 preset of meshtrain plan has the same).
H200_BF16_PEAK_FLOPS = 989e12
LLMC_REFERENCE = ("llm.c (karpathy/llm.c, GPT-2 124M-1.5B reproductions on 8xH100 SXM, bf16): "
                  "about 38-50 % MFU")
TOLERANCE = {"fp32": 1e-4, "bf16": 2e-3}
WARMUP_STEPS = 3  # not counted in the throughput medians (cuBLAS heuristics, first allocations)
OOM = re.compile(r"out of memory|cudaErrorMemoryAllocation|Kokkos failed to allocate|Allocation of .* failed",
                 re.IGNORECASE)


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


# --------------------------------------------------------------------------------------------
# The carried programs and how to start them.

def glibc_version():
    found = re.search(r"(\d+)\.(\d+)", os.confstr("CS_GNU_LIBC_VERSION") or "")
    return (int(found.group(1)), int(found.group(2))) if found else (0, 0)


def version_tuple(text):
    return tuple(int(x) for x in text.split("."))


def device_library_dirs():
    """Where a CUDA machine keeps cuBLAS and NCCL: its CUDA install, then PyTorch's pip wheels."""
    dirs = []
    for var in ("CUDA_HOME", "CUDA_PATH"):
        if os.environ.get(var):
            dirs += [os.path.join(os.environ[var], d) for d in ("lib64", "lib")]
    for root in sorted(glob.glob("/usr/local/cuda*")):
        dirs += [os.path.join(root, d) for d in ("lib64", "lib", "targets/x86_64-linux/lib")]
    packages = site.getsitepackages() + [site.getusersitepackages()]
    torch = importlib.util.find_spec("torch")  # found, not imported
    if torch and torch.origin:
        packages.append(os.path.dirname(os.path.dirname(torch.origin)))
    for sp in dict.fromkeys(packages):
        dirs += sorted(glob.glob(os.path.join(sp, "nvidia", "*", "lib")))
        dirs += [os.path.join(sp, "torch", "lib")]
    return [d for d in dirs if os.path.isdir(d)]


def search_file_system(names, seconds=20.0):
    """The last resort for libraries in no usual place: a walk of /usr, /opt, /root and /home, bounded in time."""
    found, deadline = {}, time.monotonic() + seconds
    for top in ("/usr", "/opt", "/root", "/home"):
        for path, dirs, files in os.walk(top):
            for name in names:
                if name in files and name not in found:
                    found[name] = os.path.join(path, name)
            if len(found) == len(names) or time.monotonic() > deadline:
                return found
    return found


def ldconfig_paths():
    try:
        listing = subprocess.run(["ldconfig", "-p"], capture_output=True, text=True, timeout=20).stdout
    except (OSError, subprocess.TimeoutExpired):
        return {}
    paths = {}
    for line in listing.splitlines():
        found = re.match(r"\s*(\S+) \(([^)]*)\) => (\S+)", line)
        if found and "x86-64" in found.group(2):
            paths.setdefault(found.group(1), found.group(3))
    return paths


class Programs:
    """The carried binaries, run with the carried libraries first; under the carried glibc's loader
    when the host's glibc is older than they need (or --carried-glibc)."""

    def __init__(self, root, work, devlibs, use_carried_glibc, audit_dir=None):
        self.root = root
        self.bin = os.path.join(root, "bin")
        self.lib = os.path.join(root, "lib")
        self.glibc = os.path.join(root, "glibc")
        # The carried glibc only ever through its own loader: a host program (the wrappers' /bin/sh)
        # must not find it on LD_LIBRARY_PATH.
        inherited = [os.environ["LD_LIBRARY_PATH"]] if os.environ.get("LD_LIBRARY_PATH") else []
        self.library_path = ":".join(([self.glibc] if use_carried_glibc else []) + [self.lib, devlibs] + inherited)
        self.loader = os.path.join(self.glibc, "ld-linux-x86-64.so.2") if use_carried_glibc else None
        self.env = dict(os.environ)
        self.env["LD_LIBRARY_PATH"] = ":".join([self.lib, devlibs] + inherited)
        self.env["UCX_MODULE_DIR"] = os.path.join(self.lib, "ucx")
        self.env["HYDRA_LAUNCHER"] = "fork"  # one node: no ssh, no Slurm
        # NCCL checks every buffer it is handed and refuses host memory, even on one rank (where it
        # would otherwise copy it without looking): a host scalar handed to a collective fails here.
        self.env["NCCL_CHECK_POINTERS"] = "1"
        if audit_dir:
            os.makedirs(audit_dir, exist_ok=True)
            self.env["LD_DEBUG"] = "libs,files"
            self.env["LD_DEBUG_OUTPUT"] = os.path.join(audit_dir, "ld")
        self.wrappers = None
        if self.loader:
            # What Hydra starts must go through the same loader: a wrapper script per program, named
            # as it is. Hydra runs hydra_pmi_proxy from its own directory: the wrappers', or the
            # loader's if it goes by /proc/self/exe, so that one gets a wrapper too.
            self.wrappers = os.path.join(work, "wrappers")
            os.makedirs(self.wrappers, exist_ok=True)
            for name in os.listdir(self.bin):
                self.write_wrapper(os.path.join(self.wrappers, name), name)
            self.write_wrapper(os.path.join(self.glibc, "hydra_pmi_proxy"), "hydra_pmi_proxy")

    def write_wrapper(self, path, name):
        with open(path, "w") as f:
            f.write(f'#!/bin/sh\nexec "{self.loader}" --library-path "{self.library_path}" --argv0 "$0" '
                    f'"{os.path.join(self.bin, name)}" "$@"\n')
        os.chmod(path, 0o755)

    def path(self, name):
        return os.path.join(self.wrappers or self.bin, name)

    def has(self, name):
        return os.path.exists(os.path.join(self.bin, name))

    def argv(self, name, *args):
        return [self.path(name), *map(str, args)]

    def mpiexec(self, ranks, name, *args):
        return [self.path("mpiexec.hydra"), "-launcher", "fork", "-n", str(ranks), self.path(name), *map(str, args)]

    def unresolved(self, name):
        """Libraries of a carried program that the loader cannot find."""
        target = os.path.join(self.bin, name)
        argv = [self.loader, "--list", "--library-path", self.library_path, target] if self.loader else ["ldd", target]
        env = {k: v for k, v in self.env.items() if not k.startswith("LD_DEBUG")}
        try:
            listing = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=60)
        except (OSError, subprocess.TimeoutExpired) as e:
            return [f"(cannot list: {e})"]
        return [line.split()[0] for line in listing.stdout.splitlines() if "not found" in line]


def unpack(bundle, root):
    """The bundle is an xz tarball: Python's lzma where it has one, else tar -xJ."""
    os.makedirs(root)
    try:
        import lzma
    except ImportError:
        subprocess.run(["tar", "-C", root, "-xJf", bundle], check=True)
        return
    # Our own archive, trusted as it is (Python 3.12 warns unless a filter is named).
    trusted = {"filter": "fully_trusted"} if hasattr(tarfile, "fully_trusted_filter") else {}
    with lzma.open(bundle) as xz, tarfile.open(fileobj=xz) as tar:
        tar.extractall(root, **trusted)


def read_manifest(path):
    rows = []
    with open(path) as f:
        for line in f:
            kind, name, source = (line.rstrip("\n").split("\t") + ["", ""])[:3]
            rows.append((kind, name, source))
    return rows


# --------------------------------------------------------------------------------------------
# Steps

class DeviceCheck:
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
        self.throughput_run = None

    # -- helpers ----------------------------------------------------------------------------------
    def one_rank(self, name, *args):
        if self.launcher == "mpiexec":
            return self.programs.mpiexec(1, name, *args)
        return self.programs.argv(name, *args)

    def run(self, argv, log, timeout_s):
        return self.check.run(argv, log, timeout_s, env=self.programs.env, cwd=self.work)

    def train(self, log, timeout_s, *keys, watch=None):
        argv = self.one_rank("meshtrain", "train", *keys)
        result = self.check.run(argv, log, timeout_s, env=self.programs.env, cwd=self.work, watch=watch)
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

    # -- throughput and resume --------------------------------------------------------------------
    def throughput(self):
        config = os.path.join(HERE, "gpt2_124m_cpu.ini" if not self.gpu else "gpt2_124m.ini")
        ini = read_ini(config)
        T, V, steps = int(ini["model"]["seq_len"]), int(ini["model"]["vocab"]), int(ini["train"]["steps"])
        shard = os.path.join(self.work, "random_tokens.bin")
        token_data.write_random_shard(shard, (1 << 20) + 1 if self.gpu else 200_001, V, seed=1234)
        plan = self.largest_micro_batch(config, shard)
        micro = plan["effective_batch"]["micro_batch"]
        run_dir = os.path.join(self.work, "straight")
        memory = GpuMemoryWatch() if self.gpu else None
        # Leave time for the resumed run (a third of the steps) and the JSON.
        allowed_s = min(self.args.throughput_s, self.check.clock.left() * 0.7)
        while True:
            shutil.rmtree(run_dir, ignore_errors=True)
            keys = throughput_keys(config, shard, run_dir, micro) + self.memory_keys()
            leave = LeaveInTime(os.path.join(run_dir, "metrics.jsonl"), steps, allowed_s)
            result = self.train(f"throughput_b{micro}", allowed_s + 60, *keys, watch=leave)
            if result.rc == 0 or not OOM.search(result.output) or micro == 1:
                break
            print(f"micro_batch {micro} ran out of memory; trying {micro // 2}")
            micro //= 2
            allowed_s = min(allowed_s, self.check.clock.left() * 0.7)
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
        self.throughput_run = {"config": config, "shard": shard, "micro": micro, "dir": run_dir, "records": records}
        figures = {
            "config": os.path.relpath(config, REPO), "micro_batch": micro, "global_batch": micro, "seq_len": T,
            "tokens_per_step": micro * T, "steps": len(records), "counted_steps": len(counted),
            "left_early": f"at step {len(records)} of {steps}: the steps would not fit in {allowed_s:.0f} s"
                          if left_early else None,
            "step_time_s_median": statistics.median(r["step_time_s"] for r in counted),
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
        run_dir = os.path.join(self.work, "resumed")
        shutil.rmtree(run_dir, ignore_errors=True)
        keys = throughput_keys(straight["config"], straight["shard"], run_dir, straight["micro"]) + self.memory_keys()
        result = self.train("resume", 240, *keys, "--checkpoint.resume", checkpoint, "--train.stop_after", last - mid)
        if result.rc not in (0, 3):
            raise StepFailure(f"the resumed run exited {result.rc}: {result.tail(2000)}")
        resumed = self.metrics(os.path.join(run_dir, "metrics.jsonl"))
        want = [(r["step"], r["loss"], r["grad_norm"]) for r in straight["records"] if r["step"] > mid]
        got = [(r["step"], r["loss"], r["grad_norm"]) for r in resumed]
        figures = {"resumed_from_step": mid, "steps": len(got), "bitwise_equal": got == want,
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
        c.step("unit_tests", 20, self.unit_tests)
        c.step("small_vs_cpu", 20, self.small_vs_cpu)
        c.step("mpi_ranks", 10, self.mpi_ranks)
        c.step("nccl", 10, self.nccl)
        c.step("throughput", 60, self.throughput)
        c.step("resume", 30, self.resume)
        if self.args.audit:
            c.step("audit", 0, self.audit)
        summary = {n: s["status"] for n, s in c.report["steps"].items()}
        print(f"\nsteps: {summary}\nfigures: {os.path.join(c.out, 'device_check.json')} "
              f"({c.clock.elapsed():.0f} s)")
        return 0 if c.report["passed"] else 1


# --------------------------------------------------------------------------------------------
# Runs and figures shared with make_reference.py

def small_text_path(work):
    return os.path.join(work, "small_text.txt")


def make_small_shard(work, run, argv_of):
    """English-like text (the same bytes everywhere) through `meshtrain prepare`."""
    text, shard = small_text_path(work), os.path.join(work, "small.bin")
    with open(text, "w") as f:
        f.write(token_data.english_like_text(40_000, seed=2024))
    result = run(argv_of("meshtrain", "prepare", "--text", text, "--out", shard), "small_prepare")
    if result.rc != 0:
        raise StepFailure(f"meshtrain prepare exited {result.rc}: {result.tail(1500)}")
    return shard


def small_run_keys(precision, shard, out, init_weights=os.path.join(HERE, "init_weights_small.h5")):
    return ["--config", os.path.join(HERE, "small.ini"), "--train.precision", precision, "--data.train", shard,
            "--checkpoint.dir", os.path.join(out, "ck"), "--log.metrics", os.path.join(out, "metrics.jsonl")] + (
            ["--checkpoint.init_weights", init_weights] if init_weights else [])


def throughput_keys(config, shard, out, micro):
    return ["--config", config, "--train.micro_batch", str(micro), "--train.global_batch", str(micro),
            "--data.train", shard, "--checkpoint.dir", os.path.join(out, "ck"),
            "--log.metrics", os.path.join(out, "metrics.jsonl")]


def max_relative_difference(got, want):
    if len(got) != len(want) or not got:
        return float("inf")
    return max(abs(a - b) / abs(b) for a, b in zip(got, want))


def model_flops_per_token(ini):
    """llm.c's count: 6N + 6·L·C·T, N the parameters with wte counted once."""
    m = {k: int(v) for k, v in ini["model"].items()}
    L, C, T, V = m["layers"], m["d_model"], m["seq_len"], m["vocab"]
    n = V * C + T * C + L * (12 * C * C + 13 * C) + 2 * C
    return 6 * n + 6 * L * C * T


def read_ini(path):
    import configparser
    parser = configparser.ConfigParser(inline_comment_prefixes=("#",))
    parser.read(path)
    return {s: dict(parser[s]) for s in parser.sections()}


def gtest_counts(report):
    try:
        with open(report) as f:
            suites = json.load(f)
    except (OSError, ValueError):
        return {"error": "no gtest report"}
    cases = [c for s in suites["testsuites"] for c in s["testsuite"]]
    return {"tests": len(cases), "failures": suites["failures"],
            "skipped": [f"{c['classname']}.{c['name']}" for c in cases if c.get("result") == "SKIPPED"]}


def skip_reasons(output):
    return "; ".join(m.strip() for m in re.findall(r"Skipped\n(.*)", output)) or output[-1500:]


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
    ap.add_argument("--carried-glibc", action="store_true",
                    help="run the programs under the carried glibc's loader even where the host's would do")
    ap.add_argument("--audit", help="record every shared object the carried programs load (LD_DEBUG) in DIR")
    ap.add_argument("--keep-work", action="store_true", help="keep the scratch directory")
    args = ap.parse_args(argv)
    if args.budget_s is None:
        args.budget_s = 900.0 if args.cpu else 450.0
    if args.throughput_s is None:
        args.throughput_s = 120.0 if args.cpu else 240.0
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
