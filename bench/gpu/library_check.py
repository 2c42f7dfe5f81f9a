"""The device check's first look at the machine: the CUDA libraries left to it (cuBLAS, cuBLASLt, NCCL,
cuDNN, nvrtc: what the build linked, by soname, in the manifest) against the versions the build was linked
with, and the driver against the CUDA runtime the folder carries. A CUDA 13 build needs the .so.13 of
cuBLAS and nvrtc (cuDNN's .so.9, NCCL's .so.2) at least as new as its own, and a driver that runs CUDA 13;
anything else fails here, naming the library and both versions, before a step would fail on it later in
a way that says less."""
import os
import re
import subprocess


def so_version(path):
    """(13, 0, 2, 14) of .../libcublas.so.13.0.2.14; None where the name carries no version."""
    found = re.search(r"\.so\.(\d+(?:\.\d+)*)$", os.path.basename(path or ""))
    return tuple(int(x) for x in found.group(1).split(".")) if found else None


def dotted(version):
    return ".".join(map(str, version)) if version else None


def driver_cuda_version():
    """The CUDA version the driver runs (nvidia-smi's "CUDA Version: 13.0"), or None without nvidia-smi."""
    try:
        out = subprocess.run(["nvidia-smi"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired):
        return None
    found = re.search(r"CUDA Version:\s*(\d+)\.(\d+)", out)
    return (int(found.group(1)), int(found.group(2))) if found else None


def compare(manifest, found, driver_cuda):
    """(figures, problems): each device library's version on the build machine and here; the driver's
    CUDA version against the carried runtime's."""
    libraries, problems = {}, []
    for kind, name, source in manifest:
        if kind != "device":
            continue
        built, here = so_version(source), so_version(found.get(name))
        libraries[name] = {"built_with": dotted(built), "here": dotted(here), "path": found.get(name)}
        if name not in found:
            problems.append(f"{name}: not on this machine")
        elif built and here and here[0] != built[0]:
            problems.append(f"{name}: version {dotted(here)} here, the build linked {dotted(built)} (another major)")
        elif built and here and here < built[:len(here)]:
            problems.append(f"{name}: version {dotted(here)} here is older than the build's {dotted(built)}")
    runtime = next((so_version("x.so." + name) for kind, name, _ in manifest if kind == "cuda_runtime"
                    and name not in ("", "-")), None)
    figures = {"libraries": libraries, "cuda_runtime": dotted(runtime), "driver_cuda": dotted(driver_cuda)}
    if runtime and driver_cuda and driver_cuda[0] < runtime[0]:
        problems.append(f"the driver runs CUDA {dotted(driver_cuda)}, the folder's runtime is CUDA {dotted(runtime)}: "
                        f"a driver for CUDA {runtime[0]} is needed")
    return figures, problems
