#!/usr/bin/env python3
"""The checkpoint checksum as share/docs/usage.md states it, against real checkpoints.

The algorithm is read from usage.md's **Checksums.** paragraph alone — the index multiplier, the
steps of fmix64 with their shifts and multipliers, the algorithm's name, the attribute's type —
and recomputed here with numpy for every dataset of checkpoints trained in the test (one rank in
fp32; two ranks, dp 2 under ZeRO 2 in bf16, whose checksums are sums of the ranks' pieces). Each
stored `checksum` attribute must equal it. So that a wrong constant in the docs cannot pass, each
constant is also flipped by one bit, and every flip must break the agreement.

usage: test_checksum_docs.py --meshtrain BIN --workdir DIR [--mpiexec MPIEXEC] [--usage USAGE.md]
"""
import argparse
import os
import re
import shutil
import subprocess
import sys

import h5py
import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
USAGE = os.path.join(HERE, "..", "..", "share", "docs", "usage.md")
MODEL = ["--model.layers", "2", "--model.heads", "2", "--model.d_model", "16", "--model.seq_len", "16",
         "--train.micro_batch", "2", "--train.global_batch", "4", "--train.steps", "3"]


class DocumentedChecksum:
    """The algorithm of usage.md's Checksums paragraph."""

    def __init__(self, usage_text):
        start = usage_text.index("**Checksums.**")
        paragraph = usage_text[start:usage_text.index("\n**", start + 1)]
        code = "\n".join(line[4:] for line in paragraph.splitlines() if line.startswith("    "))
        self.algorithm = self.find(r"`checksum_algorithm` names the algorithm, `([^`]+)`", paragraph)
        self.attribute_type = self.find(r"HDF5 type `(H5T_[A-Z0-9_]+)`", paragraph)
        self.index_multiplier = int(self.find(r"\(i \* (0x[0-9A-Fa-f]+)\) \^ bits\(x_i\)", code), 16)
        fmix = code[code.index("fmix64(k) ="):]
        # The steps in order: ("shift", n) for k ^= k >> n, ("multiply", c) for k *= c.
        self.fmix_steps = [("shift", int(s)) if s else ("multiply", int(m, 16))
                           for s, m in re.findall(r"k \^= k >> (\d+)|k \*= (0x[0-9A-Fa-f]+)", fmix)]
        if [kind for kind, _ in self.fmix_steps] != ["shift", "multiply", "shift", "multiply", "shift"]:
            sys.exit(f"FAIL: usage.md's fmix64 is not three shifts around two multiplies: {self.fmix_steps}")

    @staticmethod
    def find(pattern, text):
        m = re.search(pattern, text)
        if m is None:
            sys.exit(f"FAIL: usage.md's Checksums paragraph does not state {pattern!r}")
        return m.group(1)

    def constants(self):
        """(name, value) of every constant, for the one-bit flips."""
        yield "index multiplier", self.index_multiplier
        for n, (kind, value) in enumerate(self.fmix_steps):
            yield f"fmix64 step {n + 1} ({kind})", value

    def with_constant(self, name, value):
        changed = DocumentedChecksum.__new__(DocumentedChecksum)
        changed.__dict__.update(self.__dict__)
        if name == "index multiplier":
            changed.index_multiplier = value
        else:
            n = int(name.split()[2]) - 1
            changed.fmix_steps = list(self.fmix_steps)
            changed.fmix_steps[n] = (self.fmix_steps[n][0], value)
        return changed

    def __call__(self, array):
        """The checksum of a float32 array, as an int: numpy's uint64 arithmetic wraps mod 2^64."""
        values = np.ascontiguousarray(array, dtype="<f4").ravel(order="C")
        bits = values.view("<u4").astype(np.uint64)
        k = (np.arange(values.size, dtype=np.uint64) * np.uint64(self.index_multiplier)) ^ bits
        for kind, value in self.fmix_steps:
            k = k ^ (k >> np.uint64(value)) if kind == "shift" else k * np.uint64(value)
        return int(k.sum(dtype=np.uint64))


def stored_checksums(path):
    """{dataset: (data, stored checksum, attribute dtype)} and the root checksum_algorithm."""
    out = {}
    with h5py.File(path, "r") as f:
        def visit(name, obj):
            if isinstance(obj, h5py.Dataset):
                attr = obj.attrs.get_id("checksum")
                out[name] = (obj[()], int(obj.attrs["checksum"]), attr.dtype, obj.dtype)
        f.visititems(visit)
        algorithm = f.attrs["checksum_algorithm"]
    return out, algorithm.decode() if isinstance(algorithm, bytes) else str(algorithm)


def train(args, work, name, extra, ranks=1):
    out = os.path.join(work, name)
    os.makedirs(out)
    launcher = args.mpiexec.split() + ["-n", str(ranks)] if ranks > 1 else []
    done = subprocess.run(launcher + [args.meshtrain, "train"] + MODEL + extra +
                          ["--data.train", args.shard, "--checkpoint.dir", os.path.join(out, "ck"),
                           "--checkpoint.resume", "never"], capture_output=True, text=True, timeout=120)
    if done.returncode != 0:
        sys.exit(f"FAIL: training {name} exited {done.returncode}\n{done.stdout}\n{done.stderr}")
    return os.path.join(out, "ck", "step_00000003.h5")


def check(doc, path):
    """The problems of one checkpoint against the documented algorithm; the datasets checked."""
    datasets, algorithm = stored_checksums(path)
    problems = []
    if algorithm != doc.algorithm:
        problems.append(f"{path}: checksum_algorithm {algorithm!r}, usage.md says {doc.algorithm!r}")
    documented_type = {"H5T_STD_U64LE": np.dtype("<u8")}.get(doc.attribute_type)
    for name, (data, stored, attr_dtype, dtype) in sorted(datasets.items()):
        if dtype != np.dtype("<f4"):
            problems.append(f"{path}: {name} is {dtype}, usage.md says every dataset is float32")
        if attr_dtype != documented_type:
            problems.append(f"{path}: {name}'s checksum attribute is {attr_dtype}, usage.md says {doc.attribute_type}")
        if doc(data) != stored:
            problems.append(f"{path}: {name}: stored {stored:#018x}, usage.md's algorithm gives {doc(data):#018x}")
    return problems, datasets


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--meshtrain", required=True)
    ap.add_argument("--workdir", required=True)
    ap.add_argument("--mpiexec", default="mpiexec")
    ap.add_argument("--usage", default=USAGE, help="the usage.md whose algorithm is checked")
    args = ap.parse_args()
    with open(args.usage, encoding="utf-8") as f:
        doc = DocumentedChecksum(f.read())
    work = os.path.abspath(args.workdir)
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    args.shard = os.path.join(work, "shard.bin")
    header = np.zeros(256, dtype="<i4")
    header[:3] = [20240520, 1, 3000]
    with open(args.shard, "wb") as f:
        f.write(header.tobytes() + np.random.default_rng(5).integers(0, 256, 3000).astype("<u2").tobytes())

    checkpoints = [train(args, work, "one_rank_fp32", []),
                   train(args, work, "dp2_zero2_bf16", ["--parallel.dp", "2", "--parallel.zero", "2",
                                                        "--train.precision", "bf16"], ranks=2)]
    problems = []
    for path in checkpoints:
        found, datasets = check(doc, path)
        problems += found
        print(f"{os.path.relpath(path, work)}: {len(datasets)} datasets against usage.md's checksum")
        if not any(name.startswith("optim/") for name in datasets):
            problems.append(f"{path}: no /optim datasets")
        # Every constant matters: with any one of them a bit off, some dataset must disagree.
        for name, value in doc.constants():
            wrong = doc.with_constant(name, value ^ (1 << 7))
            if not any(wrong(data) != stored for data, stored, _, _ in datasets.values()):
                problems.append(f"{path}: the {name} with a bit flipped still matches every dataset")
    if problems:
        print("FAIL:\n  " + "\n  ".join(problems[:20]))
        return 1
    print("OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())
