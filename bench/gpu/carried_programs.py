"""The carried programs (the folder bench/gpu/assemble.sh packs) and how to start them: the CUDA
libraries left to the machine found and linked, the carried glibc's loader where the host's is too old."""
import glob
import importlib.util
import os
import re
import site
import subprocess
import tarfile
import time


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
