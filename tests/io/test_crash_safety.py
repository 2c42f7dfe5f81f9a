#!/usr/bin/env python3
"""Checkpoint integrity and crash safety (share/docs/usage.md, Checkpoints and Exit codes), end to end.

Three groups, one ctest entry each:

  checksum    the test's own reference for the checkpoint checksum ("meshtrain-sum64") and
              verify_checkpoint(): hand-worked values, a pure-Python cross-check, and proof that the
              verifier rejects a flipped element, a missing dataset and a wrong format.
  corruption  a bit flipped inside one dataset, a truncated file, a text file in place of a
              checkpoint, a `latest` naming a missing file: `meshtrain inspect` exits 2 naming the
              dataset or the file; `--checkpoint.resume FILE` exits 2 and touches nothing;
              `--checkpoint.resume auto` falls back to the newest step_*.h5 that verifies and
              continues bit for bit; with nothing usable it exits 2.
  crash_kill  2-rank training (ZeRO-1, a checkpoint every step) killed with SIGKILL, 5 times per
              variant: one rank (a), or every rank, proxy and mpiexec (b). One kill in five comes at
              a random instant; the others in a checkpoint's commit, found by polling the directory:
              as a step_*.h5.tmp appears, a random part of its lifetime later, as it is renamed, or
              as `latest` changes next. After each kill `latest` (and every step_*.h5) must verify
              with its `step` attribute matching its name; the next job resumes from `latest` and
              its metrics continue from that step; the last job completes, and every metrics record
              of every job equals an uninterrupted run's bit for bit, with no .tmp left.

The checksum of a dataset (uint64 attribute `checksum`, root attribute checksum_algorithm =
"meshtrain-sum64"): sum over the row-major flat index i of the global tensor of
fmix64((i * 0x9E3779B97F4A7C15) XOR bits_i) mod 2^64, bits_i the float32 bit pattern of element i
zero-extended to 64 bits, fmix64 MurmurHash3's 64-bit finalizer. fmix64 is a bijection, so changing
any one element always changes the sum.

usage: test_crash_safety.py --meshtrain BIN --workdir DIR [--mpiexec MPIEXEC]
           [--group {checksum,corruption,crash_kill,all}] [--no-checksums] [--kills N] [--steps N]
           [--seed S] [-k PATTERN] [-v]

--no-checksums: verify_checkpoint() accepts datasets without a `checksum` attribute (it still checks
the format, every dataset's presence, shape and dtype, reads every byte, and checks any checksum that
is present). This lets crash_kill run against a binary that does not write checksums yet; the
corruption group needs them regardless. --seed fixes the kill schedule (the instants still depend on
timing). Every subprocess has a timeout; tearDown SIGKILLs whatever of a case's jobs is left.
Uses test_cli.py's helpers (run, train_args, tree_digest, read_metrics, CliCase, ...) by import.
Each job of a crash_kill case writes its own metrics file (m00.jsonl ...; final.jsonl), since a job
killed mid-line would leave a partial line for the next job to append to.
"""

import configparser
import json
import os
import random
import re
import shutil
import signal
import struct
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "cli"))
import test_cli as cli  # noqa: E402  (sets nothing until main() fills in its globals)
from test_cli import describe, read_latest, read_metrics, run, train_args, tree_digest  # noqa: E402

import h5py  # noqa: E402  (test_cli has already failed loudly if these are missing)
import numpy as np  # noqa: E402

MPIEXEC = None
REQUIRE_CHECKSUMS = True  # --no-checksums clears it
KILLS_PER_VARIANT = 5
KILL_STEPS = 60
SEED = None

# A tiny model (2 ranks, dp 2, ZeRO-1): small enough that a kill lands mid-save.
MODEL = {"model.layers": 2, "model.d_model": 32, "model.heads": 2, "model.vocab": 256, "model.seq_len": 16,
         "train.micro_batch": 2, "train.global_batch": 4, "parallel.zero": 1}
CHECKSUM_ALGORITHM = "meshtrain-sum64"
FORMAT = "meshtrain-checkpoint"
GROUPS_3 = ("model", "optim/exp_avg", "optim/exp_avg_sq")
CHECKPOINT_NAME = re.compile(r"^step_(\d{8})\.h5$")

# --- the reference checksum ------------------------------------------------------------------------

MASK64 = (1 << 64) - 1
GOLDEN = 0x9E3779B97F4A7C15
FMIX_C1 = 0xFF51AFD7ED558CCD
FMIX_C2 = 0xC4CEB93FE53EC4E3


def fmix64_int(k):
    """MurmurHash3's 64-bit finalizer on a Python int (the plain-integer reference)."""
    k &= MASK64
    k ^= k >> 33
    k = (k * FMIX_C1) & MASK64
    k ^= k >> 33
    k = (k * FMIX_C2) & MASK64
    k ^= k >> 33
    return k


def fmix64(k):
    """fmix64 on a uint64 numpy array, wrapping mod 2^64."""
    k = np.array(k, dtype=np.uint64, copy=True)
    s = np.uint64(33)
    with np.errstate(over="ignore"):
        k ^= k >> s
        k *= np.uint64(FMIX_C1)
        k ^= k >> s
        k *= np.uint64(FMIX_C2)
        k ^= k >> s
    return k


def sum64(array, chunk=1 << 20):
    """The meshtrain-sum64 checksum of a float32 array (row-major flat index), as a Python int."""
    a = np.asarray(array)
    if a.dtype != np.float32:
        raise TypeError(f"sum64 wants float32 (its bit pattern is hashed), got {a.dtype}")
    flat = np.ascontiguousarray(a).reshape(-1)
    bits = flat.view(np.uint32)
    total = 0
    with np.errstate(over="ignore"):
        for start in range(0, bits.size, chunk):
            b = bits[start:start + chunk].astype(np.uint64)
            i = np.arange(start, start + b.size, dtype=np.uint64) * np.uint64(GOLDEN)  # wraps
            total = (total + int(fmix64(i ^ b).sum(dtype=np.uint64))) & MASK64  # the sum wraps too
    return total


def sum64_int(array):
    """The same checksum element by element with Python ints: slow, independent of numpy's arithmetic."""
    total = 0
    for i, x in enumerate(np.asarray(array, dtype=np.float32).reshape(-1).tolist()):
        bits = struct.unpack("<I", struct.pack("<f", x))[0]
        total = (total + fmix64_int(((i * GOLDEN) & MASK64) ^ bits)) & MASK64
    return total


# --- the reference verifier ------------------------------------------------------------------------

def expected_shapes(layers, d_model, vocab, seq_len):
    """{name: shape} of /model per share/docs/usage.md, Checkpoints (the same under /optim/exp_avg[_sq])."""
    C, V, T = d_model, vocab, seq_len
    shapes = {"wte.weight": (V, C), "wpe.weight": (T, C)}
    for l in range(layers):
        p = f"h.{l}."
        shapes.update({
            p + "ln_1.weight": (C,), p + "ln_1.bias": (C,),
            p + "attn.c_attn.weight": (C, 3 * C), p + "attn.c_attn.bias": (3 * C,),
            p + "attn.c_proj.weight": (C, C), p + "attn.c_proj.bias": (C,),
            p + "ln_2.weight": (C,), p + "ln_2.bias": (C,),
            p + "mlp.c_fc.weight": (C, 4 * C), p + "mlp.c_fc.bias": (4 * C,),
            p + "mlp.c_proj.weight": (4 * C, C), p + "mlp.c_proj.bias": (C,),
        })
    shapes.update({"ln_f.weight": (C,), "ln_f.bias": (C,)})
    return shapes


def _text(v):
    if isinstance(v, bytes):
        return v.decode("utf-8", "replace")
    if isinstance(v, np.ndarray) and v.size == 1:
        return _text(v.reshape(()).item())
    return v if isinstance(v, str) else None


def _uint64_attr(v):
    """A uint64 scalar (or 1-element array) attribute as an int; None if it is not one."""
    a = np.asarray(v)
    if a.dtype != np.uint64 or a.size != 1:
        return None
    return int(a.reshape(()))


def verify_checkpoint(path, require_checksums=None, model=None):
    """Problems found in checkpoint `path` (empty list: it verifies). Checks with h5py that the file
    opens, is a meshtrain checkpoint, holds every dataset the model needs under /model,
    /optim/exp_avg and /optim/exp_avg_sq as float32 of the right shape, that every dataset reads
    completely, and (unless checksums are not required: --no-checksums) that every dataset's uint64
    `checksum` attribute equals sum64 of its data and checksum_algorithm = "meshtrain-sum64".
    model: {"layers", "d_model", "vocab", "seq_len"}; default: the file's own `config` attribute."""
    require = REQUIRE_CHECKSUMS if require_checksums is None else require_checksums
    problems = []
    try:
        f = h5py.File(path, "r")
    except Exception as e:  # truncated, not HDF5, missing
        return [f"{path}: does not open as HDF5: {e}"]
    with f:
        fmt = _text(f.attrs.get("format"))
        if fmt != FORMAT:
            problems.append(f"{path}: root attribute format = {fmt!r}, expected {FORMAT!r}")
        if require:
            alg = _text(f.attrs.get("checksum_algorithm"))
            if alg != CHECKSUM_ALGORITHM:
                problems.append(f"{path}: root attribute checksum_algorithm = {alg!r}, expected {CHECKSUM_ALGORITHM!r}")
        if model is None:
            cfg = configparser.ConfigParser(interpolation=None)
            try:
                cfg.read_string(_text(f.attrs.get("config")) or "")
                model = {k: cfg.getint("model", k) for k in ("layers", "d_model", "vocab", "seq_len")}
            except (configparser.Error, ValueError) as e:
                return problems + [f"{path}: no usable [model] in the config attribute: {e}"]
        shapes = expected_shapes(model["layers"], model["d_model"], model["vocab"], model["seq_len"])
        for group in GROUPS_3:
            present = set(f[group].keys()) if isinstance(f.get(group), h5py.Group) else set()
            for name in sorted(set(shapes) - present):
                problems.append(f"{path}: /{group}/{name} is missing")
            for name in sorted(present):
                full = f"/{group}/{name}"
                d = f[group][name]
                if not isinstance(d, h5py.Dataset):
                    problems.append(f"{path}: {full} is not a dataset")
                    continue
                if name in shapes and d.shape != shapes[name]:
                    problems.append(f"{path}: {full} has shape {d.shape}, expected {shapes[name]}")
                if d.dtype != np.float32:
                    problems.append(f"{path}: {full} is {d.dtype}, expected float32")
                    continue
                try:
                    data = d[()]
                except Exception as e:
                    problems.append(f"{path}: {full} does not read: {e}")
                    continue
                if "checksum" not in d.attrs:
                    if require:
                        problems.append(f"{path}: {full} has no checksum attribute")
                    continue
                stored = _uint64_attr(d.attrs["checksum"])
                if stored is None:
                    problems.append(f"{path}: {full}: checksum attribute is {d.attrs['checksum']!r} "
                                    f"({np.asarray(d.attrs['checksum']).dtype}), expected one uint64")
                    continue
                computed = sum64(data)
                if stored != computed:
                    problems.append(f"{path}: {full}: checksum attribute {stored:#018x} != {computed:#018x} "
                                    f"computed from its data")
    return problems


def summary(problems, n=6):
    """The first n problems, one a line, and how many more."""
    more = f"\n  ... and {len(problems) - n} more" if len(problems) > n else ""
    return "\n  " + "\n  ".join(problems[:n]) + more


def add_reference_checksums(path):
    """Writes checksum attributes computed here into a checkpoint (for testing the verifier itself)."""
    with h5py.File(path, "r+") as f:
        f.attrs["checksum_algorithm"] = CHECKSUM_ALGORITHM
        for group in GROUPS_3:
            for name, d in f[group].items():
                d.attrs.create("checksum", np.uint64(sum64(d[()])), dtype=np.uint64)


def flip_bit(path, dataset, element=None, bit=0):
    """Flips one bit of one element of `dataset` in the file on disk (not through HDF5), found from
    the dataset's byte offset; returns the element's flat index."""
    with h5py.File(path, "r") as f:
        d = f[dataset]
        offset = d.id.get_offset()
        if offset is None:  # chunked: the first chunk's address
            if d.id.get_num_chunks() == 0:
                raise RuntimeError(f"{path}: {dataset} has no storage to flip")
            info = d.id.get_chunk_info(0)
            offset, n = info.byte_offset, info.size // 4
        else:
            n = d.size
        if d.dtype.byteorder == ">":
            raise RuntimeError("big-endian dataset")
    element = n // 2 if element is None else element
    with open(path, "r+b") as fh:
        fh.seek(offset + 4 * element + bit // 8)
        b = fh.read(1)[0]
        fh.seek(offset + 4 * element + bit // 8)
        fh.write(bytes([b ^ (1 << (bit % 8))]))
    return element


def truncate_half(path):
    with open(path, "r+b") as f:
        f.truncate(os.path.getsize(path) // 2)


def write_text(path):
    with open(path, "w") as f:
        f.write("this is not a checkpoint\n" * 40)


def checkpoint_names(d):
    return sorted(n for n in os.listdir(d) if CHECKPOINT_NAME.match(n)) if os.path.isdir(d) else []


def tmp_names(d):
    try:
        return sorted(n for n in os.listdir(d) if n.endswith(".tmp"))
    except FileNotFoundError:
        return []


def read_complete_metrics(path):
    """Records of the complete lines of a metrics file a killed job may have left mid-line."""
    if not os.path.exists(path):
        return []
    with open(path) as f:
        text = f.read()
    lines = text.split("\n")
    return [json.loads(line) for line in lines[:-1] if line.strip()]  # lines[-1]: '' or a partial line


class Case(cli.CliCase):
    """test_cli's CliCase (own directory, run_ok, assert_bad_input, assert_same_records, ...) plus."""

    def assert_verifies(self, path, **kw):
        problems = verify_checkpoint(path, **kw)
        self.assertTrue(not problems, f"{path} does not verify:" + summary(problems))

    def mpi(self):
        if not MPIEXEC:
            self.fail("no mpiexec: pass --mpiexec (these cases need 2 ranks)")
        return [MPIEXEC, "-n", "2"]

    def assert_mentions(self, p, needle, what):
        self.assertIn(needle, p.stderr, f"stderr should name {what} {needle!r}\n{describe(p)}")


# --- 1. checksum: the test's own reference ---------------------------------------------------------

class Checksum(Case):
    group = "checksum"

    def test_fmix64_hand_worked(self):
        # fmix64(1): k ^= k>>33 leaves 1; k *= C1 gives C1 = 0xff51afd7ed558ccd; k>>33 = 0xff51afd7 >> 1
        # = 0x7fa8d7eb, and 0xed558ccd ^ 0x7fa8d7eb = 0x92fd5b26, so k = 0xff51afd792fd5b26; then
        # k *= C2 (mod 2^64) = 0x108e18f061a4eab2; k ^= k>>33 (0x108e18f0 >> 1 = 0x08470c78,
        # 0x61a4eab2 ^ 0x08470c78 = 0x69e3e6ca) = 0x108e18f069e3e6ca.
        k = 1
        k ^= k >> 33
        self.assertEqual(k, 1)
        k = (k * FMIX_C1) & MASK64
        self.assertEqual(k, 0xFF51AFD7ED558CCD)
        k ^= k >> 33
        self.assertEqual(k, 0xFF51AFD792FD5B26)
        k = (k * FMIX_C2) & MASK64
        self.assertEqual(k, 0x108E18F061A4EAB2)
        k ^= k >> 33
        self.assertEqual(k, 0x108E18F069E3E6CA)
        self.assertEqual(fmix64_int(1), 0x108E18F069E3E6CA)
        self.assertEqual(int(fmix64(np.array([1], np.uint64))[0]), 0x108E18F069E3E6CA)
        self.assertEqual(fmix64_int(0), 0)  # 0 is a fixed point
        self.assertEqual(int(fmix64(np.array([0x3F800000], np.uint64))[0]), 0xA60DC6E3BAAAF893)
        self.assertEqual(int(fmix64(np.array([GOLDEN], np.uint64))[0]), 0x5C153C3A9B2E20EF)

    def test_tiny_tensors(self):
        # [1.0]: i = 0, bits 0x3f800000, so the sum is fmix64(0x3f800000).
        self.assertEqual(sum64(np.array([1.0], np.float32)), 0xA60DC6E3BAAAF893)
        # [0, 0]: fmix64(0 ^ 0) + fmix64(GOLDEN ^ 0) = 0 + 0x5c153c3a9b2e20ef.
        self.assertEqual(sum64(np.zeros(2, np.float32)), 0x5C153C3A9B2E20EF)
        # [0, 0, 0]: adds fmix64(2 * GOLDEN mod 2^64); the sum wraps past 2^64.
        three = (0x5C153C3A9B2E20EF + fmix64_int((2 * GOLDEN) & MASK64)) & MASK64
        self.assertEqual(sum64(np.zeros(3, np.float32)), three)
        self.assertEqual(sum64(np.zeros(0, np.float32)), 0)

    def test_numpy_equals_python_ints(self):
        rng = np.random.default_rng(5)
        a = rng.standard_normal(3000).astype(np.float32)
        a[:6] = [0.0, -0.0, np.inf, -np.inf, np.nan, 1e-45]  # signed zero, infinities, NaN, subnormal
        want = sum64_int(a)
        self.assertEqual(sum64(a), want)
        self.assertEqual(sum64(a, chunk=7), want, "chunked accumulation differs")  # chunk edges, wrapping
        self.assertEqual(sum64(a.reshape(30, 100)), want, "row-major flat index of a 2-D tensor")
        self.assertNotEqual(sum64(np.asfortranarray(a.reshape(30, 100)).T.copy()), want)
        with self.assertRaises(TypeError):
            sum64(a.astype(np.float64))

    def test_any_change_is_seen(self):
        rng = np.random.default_rng(6)
        a = rng.standard_normal((32, 96)).astype(np.float32)
        base = sum64(a)
        for flat, bit in ((0, 0), (1500, 0), (3071, 31), (777, 22)):
            b = a.copy().reshape(-1)
            b.view(np.uint32)[flat] ^= np.uint32(1 << bit)
            self.assertNotEqual(sum64(b.reshape(a.shape)), base, f"flip of bit {bit} of element {flat} unseen")
        b = a.copy().reshape(-1)
        b[[10, 20]] = b[[20, 10]]  # same values, other places
        self.assertNotEqual(sum64(b), base, "swapping two elements is unseen")
        self.assertNotEqual(sum64(np.array([0.0], np.float32)), sum64(np.array([-0.0], np.float32)))

    def test_verifier_on_a_file(self):
        """verify_checkpoint accepts a checkpoint with correct checksums (written here) and names what
        is wrong otherwise; works against any binary that writes checkpoints."""
        random_shard = cli.random_shard
        random_shard(self.path("shard.bin"), 2000, seed=3)
        self.run_ok(train_args({**MODEL, "parallel.zero": None, "data.train": "shard.bin",
                                "checkpoint.dir": "ck", "train.steps": 2}))
        good = self.path("good.h5")
        shutil.copy(self.path("ck", "step_00000002.h5"), good)
        self.assertEqual(verify_checkpoint(good, require_checksums=False), [])
        with h5py.File(good, "r") as f:
            has_checksums = "checksum" in f["model/wte.weight"].attrs
        if not has_checksums:
            # the binary writes no checksums: required, their absence is an error naming each dataset
            problems = verify_checkpoint(good, require_checksums=True)
            self.assertTrue(any("/model/wte.weight has no checksum" in p for p in problems), problems)
            self.assertTrue(any("checksum_algorithm" in p for p in problems), problems)
            add_reference_checksums(good)
        self.assertEqual(verify_checkpoint(good, require_checksums=True), [])

        for dataset in ("model/h.0.attn.c_attn.weight", "optim/exp_avg_sq/wpe.weight", "model/ln_f.bias"):
            bad = self.path(dataset.replace("/", "_") + ".h5")
            shutil.copy(good, bad)
            before = cli.h5_tensors(bad)[dataset]
            flat = flip_bit(bad, dataset, bit=0)
            after = cli.h5_tensors(bad)[dataset]
            changed = np.flatnonzero(before.reshape(-1).view(np.uint32) != after.reshape(-1).view(np.uint32))
            self.assertEqual(changed.tolist(), [flat], "the flip should change exactly one element")
            problems = verify_checkpoint(bad, require_checksums=True)
            self.assertEqual(len(problems), 1, problems)
            self.assertIn(f"/{dataset}: checksum", problems[0])
            # a checksum that is present is checked even when checksums are not required
            self.assertEqual(verify_checkpoint(bad, require_checksums=False), problems)

        wrong_type = self.path("int64.h5")
        shutil.copy(good, wrong_type)
        with h5py.File(wrong_type, "r+") as f:
            d = f["model/wpe.weight"]
            d.attrs.create("checksum", np.int64(sum64(d[()]) & 0x7FFFFFFFFFFFFFFF), dtype=np.int64)
        self.assertTrue(any("/model/wpe.weight: checksum attribute" in p for p in verify_checkpoint(wrong_type)))

        missing = self.path("missing.h5")
        shutil.copy(good, missing)
        with h5py.File(missing, "r+") as f:
            del f["optim/exp_avg/h.1.mlp.c_proj.bias"]
        self.assertIn(f"{missing}: /optim/exp_avg/h.1.mlp.c_proj.bias is missing", verify_checkpoint(missing))

        other = self.path("format.h5")
        shutil.copy(good, other)
        with h5py.File(other, "r+") as f:
            f.attrs["format"] = "something-else"
        self.assertTrue(any("format" in p for p in verify_checkpoint(other)))

        half = self.path("half.h5")
        shutil.copy(good, half)
        truncate_half(half)
        self.assertNotEqual(verify_checkpoint(half, require_checksums=False), [])
        text = self.path("text.h5")
        write_text(text)
        self.assertIn("does not open as HDF5", verify_checkpoint(text, require_checksums=False)[0])


# --- 2. corruption: inspect, explicit resume, auto fallback ----------------------------------------

INSPECT_OK = re.compile(r"(?im)^.*\bchecksums?\b.*\b(ok|verif\w*|match\w*|pass\w*|valid|good|correct)\b.*$")
FALLING_BACK = re.compile(r"(?i)falling back")


class Corruption(Case):
    """A 6-step 2-rank run (a checkpoint every step, all kept) is the fixture; each case copies the
    first `upto` checkpoints into its own ck/, points `latest` at the last, and damages some."""

    group = "corruption"
    STEPS = 6

    @classmethod
    def setUpClass(cls):
        d = os.path.join(cli.WORKDIR, cls.group, "_fixture")
        shutil.rmtree(d, ignore_errors=True)
        os.makedirs(d)
        cli.random_shard(os.path.join(d, "shard.bin"), 2000, seed=3)
        if not MPIEXEC:
            raise RuntimeError("no mpiexec: pass --mpiexec")
        p = run(train_args({**MODEL, "data.train": "shard.bin", "checkpoint.dir": "ck", "train.steps": cls.STEPS,
                            "checkpoint.every": 1, "checkpoint.keep": 0, "log.metrics": "straight.jsonl"}),
                d, timeout=300, launcher=[MPIEXEC, "-n", "2"])
        if p.returncode != 0:
            raise RuntimeError(f"fixture run failed: {describe(p)}")
        cls.fixture = d
        cls.straight = read_metrics(os.path.join(d, "straight.jsonl"))
        if [r["step"] for r in cls.straight] != list(range(1, cls.STEPS + 1)):
            raise RuntimeError(f"fixture metrics: {cls.straight}")

    def setUp(self):
        super().setUp()
        shutil.copy(os.path.join(self.fixture, "shard.bin"), self.path("shard.bin"))

    def ck(self, upto, latest=None):
        os.makedirs(self.path("ck"))
        for s in range(1, upto + 1):
            shutil.copy(os.path.join(self.fixture, "ck", f"step_{s:08d}.h5"), self.path("ck", f"step_{s:08d}.h5"))
        with open(self.path("ck", "latest"), "w") as f:
            f.write((latest or f"step_{upto:08d}.h5") + "\n")
        return self.path("ck")

    def keys(self, **extra):
        return {**MODEL, "data.train": "shard.bin", "checkpoint.dir": "ck", "train.steps": self.STEPS,
                "checkpoint.every": 1, "checkpoint.keep": 0, "log.metrics": "m.jsonl", **extra}

    def inspect_rejects(self, name, needle, what):
        p = run(["inspect", os.path.join("ck", name)], self.dir)
        self.assert_bad_input(p)
        self.assert_mentions(p, needle, what)

    def explicit_resume_rejects(self, name, needle, what):
        before = tree_digest(self.path("ck"))
        p = run(train_args(self.keys(**{"checkpoint.resume": f"ck/{name}"})), self.dir, timeout=300,
                launcher=self.mpi())
        self.assertEqual(p.returncode, 2, describe(p))
        self.assert_mentions(p, needle, what)
        self.assert_no_crash_text(p, allow=("Aborted",))
        self.assertEqual(tree_digest(self.path("ck")), before, "a rejected resume modified checkpoint.dir")
        self.assertFalse(os.path.exists(self.path("m.jsonl")), "a rejected resume wrote metrics")

    def auto_falls_back_to(self, step):
        """resume auto: a 'falling back' line, training continues from `step` bit for bit to the end."""
        p = self.run_ok(train_args(self.keys()), timeout=300, launcher=self.mpi())
        self.assertRegex(p.stdout + p.stderr, FALLING_BACK, f"no 'falling back' line\n{describe(p)}")
        self.assert_no_crash_text(p)
        got = read_metrics(self.path("m.jsonl"))
        self.assertEqual([r["step"] for r in got], list(range(step + 1, self.STEPS + 1)),
                         f"should resume from step {step}")
        self.assert_same_records(got, self.straight[step:])
        last = f"step_{self.STEPS:08d}.h5"
        self.assertEqual(read_latest(self.path("ck")), last)
        self.assert_checkpoints_equal(os.path.join(self.fixture, "ck", last), self.path("ck", last))
        for name in checkpoint_names(self.path("ck")):
            self.assert_verifies(self.path("ck", name))  # the damaged one has been written again
        self.assertEqual(tmp_names(self.path("ck")), [])

    # --- cases

    def test_intact_checkpoints_verify(self):
        for name in checkpoint_names(os.path.join(self.fixture, "ck")):
            self.assert_verifies(os.path.join(self.fixture, "ck", name))
        path = os.path.join(self.fixture, "ck", f"step_{self.STEPS:08d}.h5")
        with h5py.File(path, "r") as f:
            self.assertEqual(_text(f.attrs.get("checksum_algorithm")), CHECKSUM_ALGORITHM)
            for group in GROUPS_3:
                for name, d in f[group].items():
                    self.assertEqual(np.asarray(d.attrs["checksum"]).dtype, np.uint64, f"/{group}/{name}")
        p = self.run_ok(["inspect", path])
        self.assertRegex(p.stdout, INSPECT_OK, "inspect should print a line saying the checksums verify")

    def test_bit_flip_in_model_dataset(self):
        self.ck(4)
        flip_bit(self.path("ck", "step_00000004.h5"), "model/h.0.attn.c_attn.weight")
        self.inspect_rejects("step_00000004.h5", "model/h.0.attn.c_attn.weight", "the dataset")
        problems = verify_checkpoint(self.path("ck", "step_00000004.h5"))
        self.assertTrue(any("/model/h.0.attn.c_attn.weight: checksum" in p for p in problems), summary(problems))
        self.explicit_resume_rejects("step_00000004.h5", "model/h.0.attn.c_attn.weight", "the dataset")
        self.auto_falls_back_to(3)

    def test_bit_flip_in_optimizer_dataset(self):
        self.ck(4)
        flip_bit(self.path("ck", "step_00000004.h5"), "optim/exp_avg_sq/h.1.mlp.c_fc.weight", bit=3)
        self.inspect_rejects("step_00000004.h5", "optim/exp_avg_sq/h.1.mlp.c_fc.weight", "the dataset")
        self.explicit_resume_rejects("step_00000004.h5", "optim/exp_avg_sq/h.1.mlp.c_fc.weight", "the dataset")

    def test_inspect_and_resume_share_one_verifier(self):
        """inspect (one rank reading tensors whole) and a named resume (2 ranks adding their pieces'
        sums) refuse a flipped bit with the same line, whose stored and read sums are the file's
        attribute and this test's own sum64 of the damaged data."""
        self.ck(3)
        name = "model/h.0.mlp.c_proj.weight"
        path = self.path("ck", "step_00000003.h5")
        flip_bit(path, name, bit=5)
        with h5py.File(path, "r") as f:
            stored, read = _uint64_attr(f[name].attrs["checksum"]), sum64(np.asarray(f[name]))
        self.assertNotEqual(stored, read, "the flip did not change the data")
        verdict = re.compile(rf"checkpoint '[^']*' is corrupt: /{re.escape(name)} does not match its checksum.*$", re.M)
        p = run(["inspect", os.path.join("ck", "step_00000003.h5")], self.dir)
        self.assert_bad_input(p)
        by_inspect = verdict.findall(p.stderr)
        p = run(train_args(self.keys(**{"checkpoint.resume": "ck/step_00000003.h5"})), self.dir, timeout=300,
                launcher=self.mpi())
        self.assertEqual(p.returncode, 2, describe(p))
        by_resume = verdict.findall(p.stderr)
        self.assertEqual(len(by_inspect), 1, f"inspect's verdict\n{describe(p)}")
        self.assertEqual(by_inspect, by_resume, "inspect and resume report the damage differently")
        self.assertIn(f"stored {stored:016x}, read {read:016x}", by_inspect[0])

    def unreadable_file_is_refused(self, damage):
        """damage(path) leaves no HDF5 file to read: the error names the file, not a dataset."""
        self.ck(4)
        damage(self.path("ck", "step_00000004.h5"))
        self.inspect_rejects("step_00000004.h5", "step_00000004.h5", "the file")
        self.explicit_resume_rejects("step_00000004.h5", "step_00000004.h5", "the file")
        self.auto_falls_back_to(3)

    def test_truncated_file(self):
        self.unreadable_file_is_refused(truncate_half)

    def test_text_file_in_place_of_checkpoint(self):
        self.unreadable_file_is_refused(write_text)

    def test_latest_names_missing_file(self):
        self.ck(4, latest="step_00000009.h5")
        self.auto_falls_back_to(4)

    def test_newest_that_verifies_is_chosen(self):
        self.ck(4)
        truncate_half(self.path("ck", "step_00000004.h5"))
        flip_bit(self.path("ck", "step_00000003.h5"), "model/wte.weight", bit=31)  # a sign bit
        self.auto_falls_back_to(2)

    def test_no_usable_checkpoint(self):
        self.ck(2)
        truncate_half(self.path("ck", "step_00000002.h5"))
        flip_bit(self.path("ck", "step_00000001.h5"), "optim/exp_avg/ln_f.weight")
        for latest in ("step_00000002.h5", "step_00000007.h5"):  # names a corrupt file; a missing one
            with open(self.path("ck", "latest"), "w") as f:
                f.write(latest + "\n")
            before = tree_digest(self.path("ck"))
            p = run(train_args(self.keys()), self.dir, timeout=300, launcher=self.mpi())
            self.assertEqual(p.returncode, 2, f"latest = {latest}, nothing verifies\n{describe(p)}")
            self.assertTrue(p.stderr.strip(), "exit 2 needs a message on stderr")
            self.assert_no_crash_text(p, allow=("Aborted",))
            self.assertEqual(tree_digest(self.path("ck")), before, "checkpoint.dir modified")
            self.assertFalse(os.path.exists(self.path("m.jsonl")), "metrics written")
        # only `latest`, naming a missing file, and no step_*.h5 at all: nothing to fall back to either
        for name in checkpoint_names(self.path("ck")):
            os.remove(self.path("ck", name))
        p = run(train_args(self.keys()), self.dir, timeout=300, launcher=self.mpi())
        self.assertEqual(p.returncode, 2, describe(p))
        self.assertFalse(os.path.exists(self.path("m.jsonl")), "metrics written")


# --- 3. kill -9 -------------------------------------------------------------------------------------

def proc_table():
    """{pid: (ppid, starttime, state)} for every process in /proc."""
    table = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as f:
                s = f.read()
        except OSError:
            continue
        rest = s[s.rindex(")") + 2:].split()  # fields 3.. : state, ppid, ..., starttime (22)
        table[int(name)] = (int(rest[1]), int(rest[19]), rest[0])
    return table


def descendants(root, table):
    children = {}
    for pid, (ppid, _, _) in table.items():
        children.setdefault(ppid, []).append(pid)
    out, todo = [], [root]
    while todo:
        for c in children.get(todo.pop(), []):
            out.append(c)
            todo.append(c)
    return out


def alive(ident):
    """ident = (pid, starttime): that very process exists and is not a zombie."""
    pid, start = ident
    try:
        with open(f"/proc/{pid}/stat") as f:
            rest = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return False
    return int(rest[19]) == start and rest[0] not in ("Z", "X")


def exe_of(pid):
    try:
        return os.readlink(f"/proc/{pid}/exe")
    except OSError:
        return ""


def sigkill(pid):
    try:
        os.kill(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


class Job:
    """One `mpiexec -n 2 meshtrain train ...`, its process tree known (hydra starts each proxy and rank in
    a session of its own, so the tree is found through parent pids, not a process group)."""

    def __init__(self, args, cwd, log):
        with open(log, "wb") as out:
            self.proc = subprocess.Popen([MPIEXEC, "-n", "2", cli.MESHTRAIN] + [str(a) for a in args], cwd=cwd,
                                         stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT)
        self.log = log
        self.ranks, self.others = [], []  # (pid, starttime): meshtrain processes; mpiexec and proxies

    def find_ranks(self, timeout=60):
        """Waits until both rank processes run meshtrain; records the whole tree."""
        exe = os.path.realpath(cli.MESHTRAIN)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and self.proc.poll() is None:
            table = proc_table()
            tree = descendants(self.proc.pid, table)
            ranks = [p for p in tree if exe_of(p).startswith(exe)]
            if len(ranks) == 2:
                self.ranks = [(p, table[p][1]) for p in ranks]
                self.others = [(p, table[p][1]) for p in tree if p not in ranks]
                if self.proc.pid in table:
                    self.others.append((self.proc.pid, table[self.proc.pid][1]))
                return True
            time.sleep(0.01)
        return False

    def idents(self):
        return self.ranks + self.others

    def output(self):
        with open(self.log, "rb") as f:
            return f.read().decode("utf-8", "replace")[-4000:]


class CrashKill(Case):
    """SIGKILL at random instants; `latest` always names a verifying checkpoint; resuming completes
    the run bit for bit."""

    group = "crash_kill"

    @classmethod
    def setUpClass(cls):
        if not MPIEXEC:
            raise RuntimeError("no mpiexec: pass --mpiexec")
        d = os.path.join(cli.WORKDIR, cls.group, "_straight")
        shutil.rmtree(d, ignore_errors=True)
        os.makedirs(d)
        cli.random_shard(os.path.join(d, "shard.bin"), 4000, seed=4)
        start = time.monotonic()
        # Saving does not change training: the uninterrupted run saves only at its end.
        straight = {**cls.keys_for("straight.jsonl"), "checkpoint.every": 0}
        p = run(train_args(straight), d, timeout=300, launcher=[MPIEXEC, "-n", "2"])
        if p.returncode != 0:
            raise RuntimeError(f"straight run failed: {describe(p)}")
        cls.straight_seconds = time.monotonic() - start
        cls.straight_dir = d
        cls.straight = read_metrics(os.path.join(d, "straight.jsonl"))
        if [r["step"] for r in cls.straight] != list(range(1, KILL_STEPS + 1)):
            raise RuntimeError("straight run metrics do not cover every step")

    @staticmethod
    def keys_for(metrics, extra=None):
        return {**MODEL, "data.train": "shard.bin", "checkpoint.dir": "ck", "train.steps": KILL_STEPS,
                "checkpoint.every": 1, "checkpoint.resume": "auto", "log.metrics": metrics, "log.every": 1,
                **(extra or {})}

    def setUp(self):
        super().setUp()
        shutil.copy(os.path.join(self.straight_dir, "shard.bin"), self.path("shard.bin"))
        self.jobs = []
        self.tmp_lives = []  # seconds each .h5.tmp was seen to exist

    def tearDown(self):
        # Nothing of ours survives a case: every process of every job, and anything running in the case dir.
        for job in self.jobs:
            for ident in job.idents():
                if alive(ident):
                    sigkill(ident[0])
            if job.proc.poll() is None:
                job.proc.kill()
            try:
                job.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
        for pid in proc_table():
            if pid == os.getpid():
                continue
            try:
                cwd = os.readlink(f"/proc/{pid}/cwd")
            except OSError:
                continue
            if cwd == self.dir or cwd.startswith(self.dir + os.sep):
                sigkill(pid)

    def latest_step(self):
        """The step `resume auto` continues from: the one `latest` names, or — where a kill came
        between the first rename and the first `latest` — the newest complete checkpoint (a renamed
        file is complete: it was fsynced first)."""
        ck = self.path("ck")
        if not os.path.exists(os.path.join(ck, "latest")):
            steps = [int(CHECKPOINT_NAME.match(n).group(1)) for n in checkpoint_names(ck)]
            return max(steps, default=0)
        return int(CHECKPOINT_NAME.match(read_latest(ck)).group(1))

    def tmp_versions(self):
        """{name: mtime_ns} of the step_*.h5.tmp files in ck."""
        out = {}
        for e in self.scan_tmp(self.path("ck")):
            try:
                out[e.name] = e.stat().st_mtime_ns
            except FileNotFoundError:
                pass
        return out

    def latest_version(self):
        """What identifies the current `latest` and latest.tmp (inode, mtime, size), None where absent."""
        out = []
        for name in ("latest", "latest.tmp"):
            try:
                st = os.stat(self.path("ck", name))
                out.append((st.st_ino, st.st_mtime_ns, st.st_size))
            except FileNotFoundError:
                out.append(None)
        return tuple(out)

    @staticmethod
    def scan_tmp(ck):
        try:
            return [e for e in os.scandir(ck) if e.name.endswith(".h5.tmp")]
        except FileNotFoundError:
            return []

    def wait_for_instant(self, job, mode, rng, metrics):
        """mode: "random", or where in a checkpoint's commit to kill: "start", "inside", "end", "latest"."""
        # Returns when it is time to kill (and what the instant was), polling the checkpoint dir.
        ck = self.path("ck")
        deadline = time.monotonic() + 120
        if mode != "random":
            # The (skip+1)-th .h5.tmp this job creates is the target; the kill comes as it appears
            # ("start"), a random fraction of a .tmp's observed lifetime later ("inside": HDF5 writes,
            # close, fsync, rename), as it vanishes ("end": renamed, `latest` not yet replaced), or at
            # the first change to `latest` after that ("latest": latest.tmp written or renamed; pruning).
            skip, phase = rng.randint(0, 2), mode
            lives = sorted(self.tmp_lives[-9:])
            delay = rng.uniform(0, 1.2 * (lives[len(lives) // 2] if lives else 0.005))
            # A previous kill may have left a .tmp: it counts only once this job writes it again.
            stale = {name: v for name, v in self.tmp_versions().items()}
            live, seen, target, lines_checked, latest_then, vanished = {}, 0, None, 0.0, None, None
            while time.monotonic() < deadline and job.proc.poll() is None:
                t = time.monotonic()
                entries = self.scan_tmp(ck)
                now = {e.name for e in entries}
                for name in [n for n in stale if n not in now]:
                    del stale[name]  # gone (renamed or removed): a reappearance is new
                for e in entries:
                    if e.name in live:
                        continue
                    if e.name in stale:
                        try:
                            if e.stat().st_mtime_ns == stale[e.name]:
                                continue
                        except FileNotFoundError:
                            continue
                        del stale[e.name]  # written again by this job
                    live[e.name] = t
                    seen += 1
                    if target is None and seen > skip:
                        target = (e.name, t)
                        if phase == "start":
                            return f"at .tmp #{seen} appearing"
                for name in [n for n in live if n not in now]:
                    self.tmp_lives.append(t - live.pop(name))
                    if target and target[0] == name:
                        if phase != "latest":
                            return f"at .tmp #{seen} vanishing ({phase}, {1e3 * (t - target[1]):.1f} ms old)"
                        latest_then, vanished = self.latest_version(), t
                if phase == "latest" and latest_then is not None:
                    if self.latest_version() != latest_then:
                        return f"at .tmp #{seen}: `latest` changing {1e3 * (t - vanished):.1f} ms after the rename"
                if target and phase == "inside" and t - target[1] >= delay:
                    return f"at .tmp #{seen}, {1e3 * (t - target[1]):.1f} ms after it appeared"
                if t - lines_checked > 0.02:
                    lines_checked = t
                    if len(read_complete_metrics(metrics)) >= 8:  # no .tmp caught: kill before the run gets far
                        return "tmp missed, after 8 steps"
            return "deadline"
        # random instant: after k steps of this job, a random fraction of a step later (k = 0: start-up)
        k = rng.randint(0, 3)
        if k == 0:  # within start-up (reading `latest`, resuming) or at the latest when the first step is done
            until = time.monotonic() + rng.uniform(0, 0.3)
            while time.monotonic() < until and not read_complete_metrics(metrics) and job.proc.poll() is None:
                time.sleep(0.001)
            return "start-up"
        times = []
        while time.monotonic() < deadline and job.proc.poll() is None:
            n = len(read_complete_metrics(metrics))
            if n > len(times):
                times += [time.monotonic()] * (n - len(times))
            if n >= k:
                step = (times[-1] - times[0]) / (len(times) - 1) if len(times) > 1 else 0.02
                time.sleep(rng.uniform(0, max(step, 0.001)))
                return f"random, after {k} steps"
            time.sleep(0.001)
        return "deadline"

    def check_after_kill(self, i, before_step, note):
        ck = self.path("ck")
        names = os.listdir(ck) if os.path.isdir(ck) else []
        step = before_step
        if "latest" in names:
            latest = read_latest(ck)
            m = CHECKPOINT_NAME.match(latest)
            self.assertIsNotNone(m, f"kill {i} ({note}): latest = {latest!r}")
            self.assertIn(latest, names, f"kill {i} ({note}): latest names {latest}, not in {sorted(names)}")
            self.assert_verifies(os.path.join(ck, latest))
            step = int(m.group(1))
            self.assertEqual(cli.h5_attr(os.path.join(ck, latest), "step"), step, f"{latest}: step attribute")
            p = run(["inspect", os.path.join("ck", latest)], self.dir, timeout=120)
            self.assertEqual(p.returncode, 0, f"kill {i}: inspect {latest}\n{describe(p)}")
            self.assertGreaterEqual(step, before_step, f"kill {i}: latest went back from step {before_step}")
        else:
            # No `latest` yet: a kill came between the first checkpoint's rename and the first
            # `latest` (this job's or an earlier one's). Resume falls back to the newest complete file.
            self.assertFalse(self.latest_seen, f"kill {i} ({note}): latest disappeared")
            step = max((int(CHECKPOINT_NAME.match(n).group(1)) for n in checkpoint_names(ck)), default=0)
            self.assertGreaterEqual(step, before_step, f"kill {i}: newest checkpoint went back from step {before_step}")
        self.latest_seen |= "latest" in names
        for name in checkpoint_names(ck):  # never visible under its name until complete
            self.assert_verifies(os.path.join(ck, name))
        return step

    def check_job_metrics(self, path, first_step, complete=False):
        got = read_complete_metrics(path)
        steps = [r["step"] for r in got]
        self.assertEqual(steps, list(range(first_step, first_step + len(got))),
                         f"{os.path.basename(path)}: should continue from step {first_step - 1}")
        if complete:
            self.assertEqual(steps[-1] if steps else first_step - 1, KILL_STEPS, "the last job ran to the end")
        self.assert_same_records(got, self.straight[first_step - 1: first_step - 1 + len(got)])
        return got

    def kill_and_resume(self, variant, extra=None):
        """extra: keys for every job of the case (checkpoint.async: the kills land while a background
        thread writes and training goes on)."""
        rng = random.Random(f"{SEED}-{variant}-{sorted((extra or {}).items())}")
        # One kill in five at a random instant, the others in a checkpoint's commit, every phase of it.
        n_random = max(1, KILLS_PER_VARIANT // 5) if KILLS_PER_VARIANT > 1 else 0
        modes = (["start", "inside", "end", "latest"] * KILLS_PER_VARIANT)[:KILLS_PER_VARIANT - n_random]
        modes += ["random"] * n_random
        rng.shuffle(modes)
        caught, log, merged = 0, [], {}
        self.latest_seen = False
        start = time.monotonic()
        for i, mode in enumerate(modes):
            before = self.latest_step()
            self.assertLess(before, KILL_STEPS - 10, f"kill {i}: the run got too far; raise --steps")
            metrics = self.path(f"m{i:02d}.jsonl")
            stale = self.tmp_versions()  # a .tmp a previous kill left: proof of nothing about this kill
            job = Job(train_args(self.keys_for(os.path.basename(metrics), extra)), self.dir,
                      self.path(f"job{i:02d}.out"))
            self.jobs.append(job)
            self.assertTrue(job.find_ranks(), f"job {i}: two rank processes never appeared\n{job.output()}")
            note = self.wait_for_instant(job, mode, rng, metrics)
            self.assertIsNone(job.proc.poll(), f"job {i} exited ({job.proc.returncode}) before the kill ({note})\n"
                                               f"{job.output()}")
            self.assertNotEqual(note, "deadline", f"job {i}: no kill instant within 120 s\n{job.output()}")
            if variant == "one_rank":
                victim = rng.choice(job.ranks)
                sigkill(victim[0])
                note += f", rank pid {victim[0]}"
            else:
                for pid, _ in job.ranks + job.others:  # ranks first: no rank may see a launcher's SIGTERM
                    sigkill(pid)
            tmp_left = [n for n, v in self.tmp_versions().items() if stale.get(n) != v]
            try:
                job.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.fail(f"job {i}: mpiexec still running 60 s after the kill ({variant})\n{job.output()}")
            deadline = time.monotonic() + 30
            while any(alive(x) for x in job.idents()) and time.monotonic() < deadline:
                time.sleep(0.05)
            left = [x for x in job.idents() if alive(x)]
            self.assertEqual(left, [], f"job {i}: processes alive 30 s after the kill ({variant})")
            caught += bool(tmp_left)
            after = self.check_after_kill(i, before, note)
            got = self.check_job_metrics(metrics, before + 1)
            for r in got:
                merged[r["step"]] = r
            log.append(f"kill {i}: {note}; latest step {before} -> {after}, job ran to step "
                       f"{got[-1]['step'] if got else before}; .h5.tmp this job left: {tmp_left or 'none'}")

        before = self.latest_step()
        p = run(train_args(self.keys_for("final.jsonl", extra)), self.dir, timeout=300, launcher=self.mpi())
        self.assertEqual(p.returncode, 0, describe(p))
        for r in self.check_job_metrics(self.path("final.jsonl"), before + 1, complete=True):
            merged[r["step"]] = r
        # The final metrics, later jobs' records superseding earlier ones: every step, bit for bit.
        self.assert_same_records([merged[s] for s in sorted(merged)], self.straight)
        last = f"step_{KILL_STEPS:08d}.h5"
        self.assertEqual(read_latest(self.path("ck")), last)
        self.assert_verifies(self.path("ck", last))
        self.assert_checkpoints_equal(os.path.join(self.straight_dir, "ck", last), self.path("ck", last))
        self.assertEqual(tmp_names(self.path("ck")), [], "a completed run leaves no .tmp behind")
        print(f"\n  {variant}: {len(modes)} kills, {caught} with a step_*.h5.tmp present, "
              f"{time.monotonic() - start:.1f} s (straight run {self.straight_seconds:.1f} s)\n    " +
              "\n    ".join(log), end=" ", flush=True)
        # The point of the bias: a kill landed while a checkpoint was being written (the "start" kill
        # comes as a step_*.h5.tmp appears, milliseconds before it can be renamed).
        self.assertGreater(caught, 0, "no kill happened while a step_*.h5.tmp existed")

    def test_kill_one_rank(self):
        self.kill_and_resume("one_rank")

    def test_kill_whole_job(self):
        self.kill_and_resume("whole_job")

    def test_kill_whole_job_saving_in_background(self):
        self.kill_and_resume("whole_job", {"checkpoint.async": "true"})


GROUPS = {"checksum": Checksum, "corruption": Corruption, "crash_kill": CrashKill}


def main():
    global MPIEXEC, REQUIRE_CHECKSUMS, KILLS_PER_VARIANT, KILL_STEPS, SEED
    ap = cli.group_parser(__doc__, GROUPS)
    ap.add_argument("--no-checksums", action="store_true",
                    help="verify_checkpoint accepts datasets without a checksum attribute")
    ap.add_argument("--kills", type=int, default=5, help="kills per variant (one rank; whole job)")
    ap.add_argument("--steps", type=int, default=60, help="train.steps of the kill runs")
    ap.add_argument("--seed", default=None, help="seed of the kill schedule (default: random, printed)")
    opts = cli.take_common_options(ap.parse_args())
    WORKDIR, MPIEXEC = cli.WORKDIR, cli.MPIEXEC
    REQUIRE_CHECKSUMS = not opts.no_checksums
    KILLS_PER_VARIANT, KILL_STEPS = max(1, opts.kills), opts.steps
    SEED = opts.seed if opts.seed is not None else str(random.SystemRandom().randrange(10**6))

    preamble = f"seed {SEED}; checksums {'required' if REQUIRE_CHECKSUMS else 'not required (--no-checksums)'}"
    return cli.run_groups(GROUPS, opts, WORKDIR, preamble)


if __name__ == "__main__":
    sys.exit(main())
