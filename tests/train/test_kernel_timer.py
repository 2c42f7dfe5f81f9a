#!/usr/bin/python3
"""The GPU check's measuring parts on this machine:
  - the kernel timer (bench/gpu/kernel_timer.cpp, a Kokkos Tools library) on real training runs: it counts
    exactly the steps after the skipped ones (the trainer's meshtrain::training_step region), and a step's
    launches are the same whatever the number of steps counted (3 and 5), kernel by kernel;
  - the libraries step's verdicts (bench/gpu/library_check.py) on manifests that should pass and fail.

usage: test_kernel_timer.py --meshtrain BIN --timer LIB --workdir DIR
"""
import argparse
import json
import os
import shutil
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
GPU = os.path.join(REPO, "bench", "gpu")
sys.path.insert(0, GPU)
import library_check  # noqa: E402
import token_data  # noqa: E402


def timed_run(args, steps, skip):
    work = os.path.join(args.workdir, f"steps_{steps}")
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    text, shard = os.path.join(work, "text.txt"), os.path.join(work, "small.bin")
    with open(text, "w") as f:
        f.write(token_data.english_like_text(20_000, seed=5))
    subprocess.run([args.meshtrain, "prepare", "--text", text, "--out", shard], check=True, capture_output=True,
                   timeout=120)
    report = os.path.join(work, "times.json")
    env = dict(os.environ, KOKKOS_TOOLS_LIBS=args.timer, KOKKOS_PROFILE_LIBRARY=args.timer,
               MESHTRAIN_KERNEL_TIMES=report, MESHTRAIN_KERNEL_TIMER_SKIP_STEPS=str(skip))
    done = subprocess.run([args.meshtrain, "train", "--config", os.path.join(GPU, "small.ini"), "--data.train", shard,
                           "--checkpoint.dir", os.path.join(work, "ck"), "--train.steps", str(steps + skip)],
                          env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    with open(report) as f:
        return json.load(f)


def test_timer(args):
    short, longer = timed_run(args, 3, 2), timed_run(args, 5, 1)
    assert short["steps"] == 3 and longer["steps"] == 5, (short["steps"], longer["steps"])
    per_step = [{name: k["launches"] / run["steps"] for name, k in run["kernels"].items()} for run in (short, longer)]
    assert per_step[0] == per_step[1], f"a step's launches differ: {per_step}"
    assert sum(per_step[0].values()) > 20, per_step[0]
    assert all(k["seconds"] > 0 for k in short["kernels"].values()), short["kernels"]
    print(f"kernel timer: {sum(per_step[0].values()):.0f} launches a step over {len(per_step[0])} kernels, "
          f"3 and 5 steps alike")


def test_library_verdicts():
    manifest = [("device", "libcublas.so.13", "/usr/local/cuda/lib64/libcublas.so.13.0.2.14"),
                ("device", "libcudnn.so.9", "/usr/lib/libcudnn.so.9.19.0"),
                ("cuda_runtime", "13.0.96", "/usr/local/cuda/lib64/libcudart.so.13")]
    good = {"libcublas.so.13": "/opt/cuda/libcublas.so.13.1.0.3", "libcudnn.so.9": "/opt/libcudnn.so.9.19.0"}
    figures, problems = library_check.compare(manifest, good, (13, 0))
    assert problems == [], problems
    assert figures["libraries"]["libcublas.so.13"] == {"built_with": "13.0.2.14", "here": "13.1.0.3",
                                                       "path": good["libcublas.so.13"]}, figures
    cases = {
        "older": ({**good, "libcudnn.so.9": "/opt/libcudnn.so.9.8.0"}, (13, 0), "older than the build's 9.19.0"),
        "major": ({**good, "libcublas.so.13": "/opt/libcublas.so.12.9.1.4"}, (13, 0), "another major"),
        "missing": ({"libcudnn.so.9": good["libcudnn.so.9"]}, (13, 0), "libcublas.so.13: not on this machine"),
        "driver": (good, (12, 8), "a driver for CUDA 13 is needed"),
    }
    for name, (found, driver, words) in cases.items():
        _, problems = library_check.compare(manifest, found, driver)
        assert len(problems) == 1 and words in problems[0], (name, problems)
    assert library_check.so_version("/x/libnccl.so.2.27.3") == (2, 27, 3)
    assert library_check.so_version("/x/libfoo.so") is None
    print("library verdicts: a good machine passes; older, another major, missing and an old driver are named")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--meshtrain", required=True)
    ap.add_argument("--timer", required=True)
    ap.add_argument("--workdir", required=True)
    args = ap.parse_args()
    test_library_verdicts()
    test_timer(args)


if __name__ == "__main__":
    main()
