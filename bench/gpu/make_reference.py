#!/usr/bin/python3
"""Makes what the GPU check compares the GPU with, here, with the CPU build: the initial weights
bench/gpu/init_weights_small.h5 and the losses of bench/gpu/small.ini started from them,
bench/gpu/reference_small.json (fp32 and bf16). Needs h5py and numpy; run it again when the model's
math changes on purpose, and commit both files.

The weights are drawn here with numpy, not by meshtrain's initialiser, in GPT-2's scales but with
non-zero biases and LayerNorm parameters away from 1, so that every tensor reaches the loss.

usage: bench/gpu/make_reference.py [--build build/release]
"""
import argparse
import glob
import json
import os
import re
import subprocess
import sys
import tempfile

import h5py
import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import check_runs  # noqa: E402
from check_runner import Result  # noqa: E402
from device_check import DeviceCheck  # noqa: E402

INIT = os.path.join(HERE, "init_weights_small.h5")
REFERENCE = os.path.join(HERE, "reference_small.json")


class Direct:
    """Runs a build's programs as they are (no folder, no loader)."""

    def __init__(self, build):
        self.bin = os.path.join(build, "bin")

    def argv(self, name, *args):
        return [os.path.join(self.bin, name), *map(str, args)]

    def run(self, argv, log):
        done = subprocess.run(argv, capture_output=True, text=True, timeout=600)
        result = Result(done.returncode, done.stdout + done.stderr, 0.0, False)
        if result.rc != 0:
            sys.exit(f"{log}: {' '.join(argv)} exited {result.rc}\n{result.tail()}")
        return result


def tensor_shapes(direct, shard, work):
    """Names and shapes of the model's tensors, from a checkpoint of one step."""
    keys = check_runs.small_run_keys("fp32", shard, os.path.join(work, "shapes"), init_weights=None)
    direct.run(direct.argv("meshtrain", "train", *keys, "--train.steps", "1"), "shapes")
    path = glob.glob(os.path.join(work, "shapes", "ck", "step_*.h5"))[0]
    with h5py.File(path, "r") as f:
        return {name: f["model"][name].shape for name in f["model"]}


def write_initial_weights(shapes, layers):
    rng = np.random.default_rng(11)
    with h5py.File(INIT, "w", track_order=True) as f:
        group = f.create_group("model")
        for name, shape in sorted(shapes.items()):
            if name.endswith("c_proj.weight"):
                values = rng.normal(0, 0.02 / np.sqrt(2 * layers), shape)
            elif name.startswith("ln") or ".ln_" in name:
                values = rng.normal(1.0 if name.endswith("weight") else 0.0, 0.1, shape)
            elif name.endswith("bias"):
                values = rng.normal(0, 0.02, shape)
            else:
                values = rng.normal(0, 0.02, shape)
            group.create_dataset(name, data=values.astype(np.float32), track_times=False)


def cpu_model():
    with open("/proc/cpuinfo") as f:
        found = re.search(r"^model name\s*:\s*(.*)$", f.read(), re.MULTILINE)
    return found.group(1) if found else "an unknown CPU"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", default=os.path.join(check_runs.REPO, "build", "release"))
    args = ap.parse_args()
    direct = Direct(os.path.abspath(args.build))
    layers = int(check_runs.read_ini(os.path.join(HERE, "small.ini"))["model"]["layers"])
    with tempfile.TemporaryDirectory(prefix="meshtrain-reference-") as work:
        shard = check_runs.make_small_shard(work, direct.run, direct.argv)
        write_initial_weights(tensor_shapes(direct, shard, work), layers)
        source = subprocess.run(["git", "-C", HERE, "rev-parse", "--short", "HEAD"], capture_output=True,
                                text=True).stdout.strip()
        build = os.path.relpath(os.path.abspath(args.build), check_runs.REPO)
        reference = {"made_by": f"bench/gpu/make_reference.py, {build} at {source or 'unknown'} on "
                                f"{cpu_model()}",
                     "config": "bench/gpu/small.ini", "init_weights": "bench/gpu/init_weights_small.h5"}
        for precision in ("fp32", "bf16"):
            out = os.path.join(work, precision)
            direct.run(direct.argv("meshtrain", "train", *check_runs.small_run_keys(precision, shard, out)),
                       precision)
            records = DeviceCheck.metrics(os.path.join(out, "metrics.jsonl"))
            reference[precision] = {"loss": [r["loss"] for r in records],
                                    "grad_norm": [r["grad_norm"] for r in records]}
            print(f"{precision}: {[round(x, 4) for x in reference[precision]['loss']]}")
    diff = check_runs.max_relative_difference(reference["bf16"]["loss"], reference["fp32"]["loss"])
    print(f"bf16 against fp32: worst relative loss difference {diff:.2e}")
    with open(REFERENCE, "w") as f:
        json.dump(reference, f, indent=1)
        f.write("\n")
    print(f"wrote {INIT} ({os.path.getsize(INIT)} bytes) and {REFERENCE}")


if __name__ == "__main__":
    main()
