#!/usr/bin/env python3
"""End-to-end tests of the meshtrain command line (share/docs/usage.md: Commands, Keys, Checkpoints, Token shards, Exit codes).

Run one group per ctest entry:
    test_cli.py --meshtrain BIN --workdir DIR --group {bad_input,resume,signals,commands,all} [-k PATTERN] [-v]

Every case runs in its own directory <workdir>/<group>/<case>, wiped when the group starts and left
behind afterwards for inspection. Models are tiny (1 layer, d_model 16, T 16), so a run takes a
fraction of a second. Needs numpy and h5py (Debian: python3-numpy, python3-h5py).
"""

import argparse
import fcntl
import hashlib
import json
import os
import re
import select
import shutil
import signal
import subprocess
import sys
import time
import unittest

try:
    import h5py
    import numpy as np
except ImportError as e:  # a missing test dependency is a failure, never a silent skip
    sys.exit(f"test_cli.py needs numpy and h5py for {sys.executable}: {e}")

MESHTRAIN = None  # set from --meshtrain
MPIEXEC = None  # set from --mpiexec or PATH
WORKDIR = None  # set from --workdir

SHARD_MAGIC = 20240520
SHARD_VERSION = 1
HEADER_INTS = 256

# share/docs/usage.md, Keys: every key `meshtrain train --help` must list.
INTERFACE_KEYS = [
    "model.layers", "model.heads", "model.d_model", "model.vocab", "model.seq_len",
    "train.micro_batch", "train.global_batch", "train.steps", "train.stop_after", "train.time_limit",
    "train.seed", "train.precision", "train.recompute", "train.eval_every", "train.eval_tokens",
    "optim.lr", "optim.min_lr", "optim.warmup_steps", "optim.decay",
    "optim.weight_decay", "optim.beta1", "optim.beta2", "optim.eps", "optim.grad_clip",
    "parallel.dp", "parallel.tp", "parallel.pp", "parallel.zero", "parallel.schedule", "parallel.backend",
    "data.train", "data.order", "data.overlong", "data.valid",
    "checkpoint.dir", "checkpoint.every", "checkpoint.keep", "checkpoint.init_weights", "checkpoint.resume",
    "log.metrics",
]

# A tiny byte-level model: one step takes well under a millisecond.
TINY = {
    "model.layers": "1", "model.heads": "2", "model.d_model": "16", "model.seq_len": "16",
    "train.micro_batch": "2", "train.global_batch": "4",
}

# The tiny model as a llama: grouped-query attention (2 query heads over 1 kv head), SwiGLU width 24.
LLAMA = {"model.arch": "llama", "model.kv_heads": "1", "model.ffn_hidden": "24"}

# Text that means the program crashed or leaked an internal failure instead of reporting bad input.
CRASH_MARKERS = ["Traceback", "terminate called", "what():", "Segmentation fault", "core dumped", "Aborted",
                 "HDF5-DIAG", "Assertion", "Sanitizer", "failure on rank", "Kokkos::abort", "std::"]


# --- helpers -------------------------------------------------------------------------------------

def write_shard(path, tokens, count=None, magic=SHARD_MAGIC, version=SHARD_VERSION):
    """A token shard in the format of share/docs/usage.md, Token shards; count overrides the header's token count."""
    tokens = np.asarray(tokens, dtype="<u2")
    header = np.zeros(HEADER_INTS, dtype="<i4")
    header[0], header[1] = magic, version
    header[2] = len(tokens) if count is None else count
    with open(path, "wb") as f:
        f.write(header.tobytes() + tokens.tobytes())
    return path


def random_shard(path, n, seed=0):
    return write_shard(path, np.random.default_rng(seed).integers(0, 256, size=n))


def train_args(overrides=None, raw=()):
    """`train` arguments from TINY plus overrides (a value of None drops the key), then raw arguments."""
    keys = dict(TINY)
    keys.update(overrides or {})
    args = ["train"]
    for k, v in keys.items():
        if v is not None:
            args += [f"--{k}", str(v)]
    return args + list(raw)


def run(args, cwd, timeout=60, launcher=(), env=None):
    """Runs meshtrain with args in cwd (env: variables to add to the environment); stdout and stderr as text."""
    try:
        p = subprocess.run(list(launcher) + [MESHTRAIN] + [str(a) for a in args], cwd=cwd, capture_output=True,
                           timeout=timeout, env=None if env is None else {**os.environ, **env})
    except subprocess.TimeoutExpired as e:
        raise AssertionError(f"meshtrain {' '.join(map(str, args))} hung: no exit after {timeout} s") from e
    p.stdout_bytes = p.stdout
    p.stdout = p.stdout.decode("utf-8", "replace")
    p.stderr = p.stderr.decode("utf-8", "replace")
    return p


def describe(p):
    return f"exit {p.returncode}\n--- stdout ---\n{p.stdout[-3000:]}\n--- stderr ---\n{p.stderr[-3000:]}"


def tree_digest(path):
    """{relative path: sha256} of every file under path (empty if path does not exist); a FIFO or other
    special file, which reading would block on, is recorded by its kind."""
    digest = {}
    for root, dirs, files in os.walk(path):
        dirs.sort()
        for name in sorted(files):
            full = os.path.join(root, name)
            if not os.path.isfile(full):
                digest[os.path.relpath(full, path)] = f"special file, mode {os.stat(full).st_mode:o}"
                continue
            with open(full, "rb") as f:
                digest[os.path.relpath(full, path)] = hashlib.sha256(f.read()).hexdigest()
    return digest


def read_metrics(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def read_latest(ckdir):
    with open(os.path.join(ckdir, "latest")) as f:
        return f.read().strip()


def h5_tensors(path, groups=("model", "optim")):
    """{dataset path: numpy array} of every dataset under the given root groups."""
    out = {}
    with h5py.File(path, "r") as f:
        def visit(name, obj):
            if isinstance(obj, h5py.Dataset):
                out[name] = obj[()]
        for g in groups:
            if g in f:
                f[g].visititems(lambda n, o, g=g: visit(f"{g}/{n}", o))
    return out


def h5_attr(path, name):
    with h5py.File(path, "r") as f:
        v = f.attrs[name]
    if isinstance(v, bytes):
        v = v.decode()
    if isinstance(v, np.ndarray) and v.size == 1:
        v = v.reshape(()).item()
    if isinstance(v, np.generic):
        v = v.item()
    return v


class CliCase(unittest.TestCase):
    """Gives each case its own directory, and common assertions."""

    group = None

    def setUp(self):
        self.dir = os.path.join(WORKDIR, self.group, self._testMethodName)
        shutil.rmtree(self.dir, ignore_errors=True)
        os.makedirs(self.dir)

    def path(self, *parts):
        return os.path.join(self.dir, *parts)

    def run_ok(self, args, codes=(0,), **kw):
        p = run(args, self.dir, **kw)
        self.assertIn(p.returncode, codes, describe(p))
        return p

    def assert_no_crash_text(self, p, allow=()):
        for marker in CRASH_MARKERS:
            if marker in allow:
                continue
            self.assertNotIn(marker, p.stderr + p.stdout, f"crash/internal text {marker!r}\n{describe(p)}")

    def assert_bad_input(self, p, *needles):
        """Exit 2, every needle on stderr, no crash text."""
        self.assertEqual(p.returncode, 2, describe(p))
        for needle in needles:
            self.assertIn(str(needle), p.stderr, f"stderr should name {needle!r}\n{describe(p)}")
        self.assert_no_crash_text(p)

    def assert_same_records(self, got, want, keys=("step", "loss", "lr", "grad_norm", "tokens")):
        """The metrics records agree exactly (bitwise for floats) on keys."""
        self.assertEqual(len(got), len(want), f"{len(got)} records vs {len(want)}")
        for g, w in zip(got, want):
            for k in keys:
                self.assertIn(k, g, f"metrics record lacks {k}: {g}")
                # repr() tells apart values == would equate (0.0 / -0.0) and fails on NaN
                self.assertEqual(repr(g[k]), repr(w[k]), f"step {w.get('step')}: {k} {g[k]!r} != {w[k]!r}")

    def assert_checkpoints_equal(self, a, b):
        ta, tb = h5_tensors(a), h5_tensors(b)
        self.assertTrue(any(k.startswith("model/") for k in ta), f"{a} has no /model tensors")
        self.assertTrue(any(k.startswith("optim/") for k in ta), f"{a} has no /optim tensors")
        self.assertEqual(sorted(ta), sorted(tb), f"tensor names differ between {a} and {b}")
        for name in ta:
            self.assertEqual(ta[name].dtype, np.float32, f"{a}: {name} is {ta[name].dtype}, expected float32")
            self.assertEqual(ta[name].shape, tb[name].shape, name)
            self.assertEqual(ta[name].tobytes(), tb[name].tobytes(), f"{name} differs bitwise between {a} and {b}")
        for attr in ("step", "tokens"):
            self.assertEqual(h5_attr(a, attr), h5_attr(b, attr), attr)


def make_fixture(group):
    """A tiny 2-step run: <workdir>/<group>/_fixture/{shard.bin, ck/step_00000002.h5, ck/latest}."""
    d = os.path.join(WORKDIR, group, "_fixture")
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    random_shard(os.path.join(d, "shard.bin"), 2000)
    p = run(train_args({"data.train": "shard.bin", "checkpoint.dir": "ck", "train.steps": 2}), d)
    if p.returncode != 0 or not os.path.exists(os.path.join(d, "ck", "step_00000002.h5")):
        raise RuntimeError(f"fixture run failed: {describe(p)}")
    return d


# --- 1. bad input ----------------------------------------------------------------------------------

class BadInput(CliCase):
    """Exit 2, a message naming the culprit, nothing written, the existing checkpoint dir untouched."""

    group = "bad_input"

    @classmethod
    def setUpClass(cls):
        cls.fixture = make_fixture(cls.group)

    def setUp(self):
        super().setUp()
        shutil.copy(os.path.join(self.fixture, "shard.bin"), self.path("shard.bin"))
        shutil.copytree(os.path.join(self.fixture, "ck"), self.path("ck"))
        self.ck_before = tree_digest(self.path("ck"))
        self.assertEqual(read_latest(self.path("ck")), "step_00000002.h5")

    def rejects(self, overrides=None, raw=(), needles=(), launcher=(), timeout=60):
        """Trains with the case dir's shard and populated ck (4 steps, past the fixture's 2) and expects
        bad input: had the input been accepted, ck would gain a checkpoint and m.jsonl would appear."""
        keys = {"data.train": "shard.bin", "checkpoint.dir": "ck", "log.metrics": "m.jsonl", "train.steps": 4}
        keys.update(overrides or {})
        p = run(train_args(keys, raw), self.dir, launcher=launcher, timeout=timeout)
        if launcher:
            self.assertNotEqual(p.returncode, 0, describe(p))
            for needle in needles:
                self.assertIn(str(needle), p.stderr, f"stderr should name {needle!r}\n{describe(p)}")
            self.assert_no_crash_text(p, allow=("Aborted",))
        else:
            self.assert_bad_input(p, *needles)
        self.assert_untouched()
        return p

    def assert_untouched(self):
        self.assertEqual(tree_digest(self.path("ck")), self.ck_before, "the checkpoint dir was modified")
        self.assertFalse(os.path.exists(self.path("m.jsonl")), "a metrics file was written")

    def write_ini(self, text):
        with open(self.path("cfg.ini"), "w") as f:
            f.write(text)
        return "cfg.ini"

    # --- keys and values

    def test_unknown_key_cli(self):
        self.rejects(raw=["--model.layerz", "2"], needles=["model.layerz"])

    def test_unknown_key_ini(self):
        ini = self.write_ini("[model]\nlayers = 1\nlayerz = 2\n")
        self.rejects(raw=["--config", ini], needles=["layerz", ini])

    def test_ini_section_typo(self):
        ini = self.write_ini("[modle]\nlayers = 1\n")
        self.rejects(raw=["--config", ini], needles=["modle", ini])

    def test_config_file_absent(self):
        self.rejects(raw=["--config", "absent.ini"], needles=["absent.ini"])

    def test_wrong_type(self):
        self.rejects({"model.layers": "abc"}, needles=["model.layers", "abc"])

    def test_deterministic_not_a_boolean(self):
        self.rejects({"train.deterministic": "sometimes"}, needles=["train.deterministic", "sometimes"])

    def test_heads_do_not_divide_d_model(self):
        self.rejects({"model.heads": 3}, needles=["model.heads", "3", "16"])

    def test_global_batch_not_multiple_of_micro_batch(self):
        self.rejects({"train.global_batch": 5}, needles=["train.global_batch", "5"])

    def test_lr_nan(self):
        self.rejects({"optim.lr": "nan"}, needles=["optim.lr"])

    def test_lr_negative(self):
        self.rejects({"optim.lr": None}, raw=["--optim.lr=-0.1"], needles=["optim.lr", "-0.1"])

    def test_beta1_one(self):
        self.rejects({"optim.beta1": 1}, needles=["optim.beta1"])

    def test_precision_unknown(self):
        self.rejects({"train.precision": "fp8"}, needles=["train.precision", "fp8", "fp32", "bf16", "fp16"])

    def test_loss_scale_below_one(self):
        self.rejects({"train.precision": "fp16", "train.loss_scale": 0.5}, needles=["train.loss_scale", "0.5"])

    def test_recompute_unknown_mode(self):
        self.rejects({"train.recompute": "partial"},
                     needles=["train.recompute", "partial", "none", "selective", "full"])

    def test_tensor_parallel(self):
        self.rejects({"parallel.tp": 2}, needles=["parallel.tp"])

    def test_stray_positional_argument(self):
        # `meshtrain train run.ini` (forgetting --config) must not train with the defaults.
        with open(self.path("run.ini"), "w") as f:
            f.write("[train]\nsteps = 4\n")
        self.rejects(raw=["run.ini"], needles=["run.ini"])

    def test_checkpoint_dir_is_a_file(self):
        # Found before training, not at the first save: no metrics, no wasted steps.
        with open(self.path("notadir"), "w") as f:
            f.write("x\n")
        self.rejects({"checkpoint.dir": "notadir"}, needles=["notadir"])

    # --- logs that would destroy an input (share/docs/usage.md, Outputs that never destroy a file)

    def test_logs_never_write_over_an_input(self):
        # Each was appended to (log.metrics) or replaced (log.traffic) after training, exit 0.
        self.write_ini("[train]\nseed = 7\n")
        os.link(self.path("shard.bin"), self.path("hard.bin"))
        os.symlink(os.path.join("ck", "step_00000002.h5"), self.path("link.h5"))
        shutil.copy(self.path("ck", "step_00000002.h5"), self.path("init.h5"))
        with open(self.path("notes.txt"), "w") as f:
            f.write("not a log\n")
        before = tree_digest(self.dir)
        for keys, raw, needles in (
                ({"log.metrics": "shard.bin"}, (), ["log.metrics 'shard.bin'", "same file as data.train"]),
                ({"log.metrics": "hard.bin"}, (), ["log.metrics 'hard.bin'", "same file as data.train 'shard.bin'"]),
                ({"log.traffic": "cfg.ini"}, ("--config", "cfg.ini"), ["log.traffic 'cfg.ini'", "same file as --config"]),
                ({"log.traffic": "link.h5"}, (), ["log.traffic 'link.h5'", "checkpoint.dir ck"]),
                ({"log.metrics": os.path.join("ck", "latest")}, (), ["log.metrics 'ck/latest'", "checkpoint.dir ck"]),
                ({"log.traffic": "init.h5", "checkpoint.init_weights": "init.h5"}, (),
                 ["log.traffic 'init.h5'", "same file as checkpoint.init_weights"]),
                ({"log.metrics": "logs.json", "log.traffic": "logs.json"}, (), ["same file as log.traffic"]),
                ({"log.traffic": "ck"}, (), ["log.traffic 'ck'", "is a directory"]),
                ({"log.metrics": "notes.txt"}, (), ["log.metrics 'notes.txt'", "not a metrics file"]),
                ({"log.traffic": "shard.bin/t.json"}, (), ["log.traffic", "shard.bin exists but is not a directory"]),
                ({"data.train": "*.bin", "log.metrics": "m.bin"}, (), ["log.metrics 'm.bin'", "data.train glob '*.bin'"])):
            with self.subTest(keys=keys):
                self.rejects(keys, raw, needles)
                self.assertEqual(tree_digest(self.dir), before, "a file of the case changed")

    def test_logs_checked_on_every_rank(self):
        if not MPIEXEC:
            self.skipTest("no mpiexec")
        p = self.rejects({"log.metrics": "shard.bin"}, needles=["log.metrics 'shard.bin'", "same file"],
                         launcher=[MPIEXEC, "-n", "2"])
        self.assertEqual(p.returncode, 2, describe(p))
        self.assertEqual(p.stderr.count("error:"), 1, "the message is printed once\n" + describe(p))

    def test_layout_that_does_not_fit_the_ranks(self):
        if not MPIEXEC:
            self.skipTest("no mpiexec")
        # tp 2 cannot divide 3 ranks: every rank agrees on the error, one prints it, all exit 2.
        p = self.rejects({"parallel.tp": "2"}, needles=["parallel.tp", "world size 3"], launcher=[MPIEXEC, "-n", "3"])
        self.assertEqual(p.returncode, 2, describe(p))
        self.assertEqual(p.stderr.count("error:"), 1, "the message is printed once\n" + describe(p))

    # --- llama's keys and the tensor-parallel split they allow (share/docs/usage.md, Model families)

    def test_llama_key_under_gpt2(self):
        self.rejects({"model.kv_heads": 1}, needles=["model.kv_heads", "model.arch = llama"])

    def test_llama_kv_heads_do_not_divide_heads(self):
        self.rejects({"model.arch": "llama", "model.heads": 4, "model.kv_heads": 3},
                     needles=["model.kv_heads = 3", "model.heads = 4"])

    def test_llama_odd_head_size(self):
        self.rejects({"model.arch": "llama", "model.d_model": 18}, needles=["= 9 is odd", "even"])

    def test_llama_tp_does_not_divide_kv_heads(self):
        self.rejects({"model.arch": "llama", "model.heads": 4, "model.kv_heads": 2, "parallel.tp": 4},
                     needles=["parallel.tp = 4", "model.kv_heads = 2"])

    def test_llama_tp_does_not_divide_the_swiglu_width(self):
        self.rejects({"model.arch": "llama", "model.ffn_hidden": 45, "parallel.tp": 2},
                     needles=["parallel.tp = 2", "SwiGLU hidden size 45"])

    # --- sequence parallelism (share/docs/usage.md, Parallelism)

    def test_sequence_parallel_without_tp(self):
        self.rejects({"parallel.sequence_parallel": "true"},
                     needles=["parallel.sequence_parallel = true", "parallel.tp > 1"])

    def test_sequence_parallel_rows_tp_does_not_divide(self):
        self.rejects({"parallel.sequence_parallel": "true", "parallel.tp": 2, "train.micro_batch": 1,
                      "model.seq_len": 15},
                     needles=["15 token rows", "train.micro_batch 1", "parallel.tp = 2"])

    # --- context parallelism (share/docs/usage.md, Parallel runs)

    def test_context_parallel_world_the_degrees_do_not_make(self):
        self.rejects({"parallel.cp": 2}, needles=["parallel.cp 2 × parallel.tp 1 × parallel.pp 1 = 2", "world size 1"])

    def test_context_parallel_chunks_that_do_not_divide_the_sequence(self):
        self.rejects({"parallel.cp": 3}, needles=["parallel.cp = 3", "model.seq_len = 16", "2 × cp = 6",
                                                 "among 1, 2, 4, 8"])

    def test_context_parallel_with_materialized_attention(self):
        self.rejects({"parallel.cp": 2, "model.attention": "materialized"},
                     needles=["parallel.cp = 2", "model.attention = fused"])

    # --- zero-bubble pipelines (share/docs/usage.md, Pipeline schedules): what does not split its weight gradients

    def test_zero_bubble_with_experts(self):
        self.rejects({**LLAMA, "model.experts": 4, "parallel.schedule": "zb-h1"},
                     needles=["parallel.schedule = zb-h1", "model.experts = 4", "parallel.schedule = 1f1b"])

    def test_moe_key_under_gpt2(self):
        self.rejects({"model.experts": 4}, needles=["model.experts", "model.arch = llama"])

    def test_moe_key_without_experts(self):
        self.rejects({**LLAMA, "model.capacity_factor": 1.5},
                     needles=["model.capacity_factor", "model.experts > 0"])

    def test_moe_more_choices_than_experts(self):
        self.rejects({**LLAMA, "model.experts": 3, "model.experts_per_token": 4},
                     needles=["model.experts_per_token = 4", "model.experts = 3"])

    def test_moe_negative_capacity(self):
        self.rejects({**LLAMA, "model.experts": 3, "model.capacity_factor": -1},
                     needles=["model.capacity_factor = -1", ">= 0"])

    def test_moe_padding_without_a_capacity(self):
        self.rejects({**LLAMA, "model.experts": 3, "model.pad_to_capacity": "true"},
                     needles=["model.pad_to_capacity = true", "model.capacity_factor > 0"])

    def test_moe_tp_does_not_divide_the_expert_width(self):
        self.rejects({**LLAMA, "model.kv_heads": 2, "model.experts": 3, "model.expert_hidden": 15, "parallel.tp": 2},
                     needles=["parallel.tp = 2", "expert SwiGLU width 15"])

    def test_ep_does_not_divide_dp(self):
        self.rejects({**LLAMA, "model.experts": 6, "parallel.ep": 3}, needles=["parallel.ep = 3", "dp"])

    def test_ep_without_experts(self):
        self.rejects({**LLAMA, "parallel.ep": 2, "parallel.dp": 2},
                     needles=["parallel.ep = 2", "model.experts"])

    def test_llama_key_at_its_default_under_gpt2(self):
        # Given at all, a llama key says the run is not the model its author meant; an MoE key under gpt2
        # was not checked at all.
        self.rejects({"model.multiple_of": 256}, needles=["model.multiple_of is a llama key", "model.arch = llama"])
        self.rejects({"model.capacity_factor": 1.5}, needles=["model.capacity_factor is a llama key"])

    def test_lora_key_without_rank(self):
        # A [lora] key without lora.rank trained the full model and said nothing.
        for key, value in (("lora.alpha", 16), ("lora.targets", "c_attn"), ("lora.dropout", 0),
                           ("lora.rslora", "false")):
            self.rejects({key: value}, needles=[f"{key} is a LoRA key", "lora.rank = 0", "set lora.rank > 0"])

    def test_lora_targets_with_a_blank_entry(self):
        for targets, entry in (("c_attn,,c_fc", 2), ("c_attn,", 2), (",c_attn", 1), ("c_attn, ,c_fc", 2)):
            self.rejects({"lora.rank": 2, "lora.targets": targets, "checkpoint.init_weights": "base.h5"},
                         needles=["lora.targets", f"entry {entry} is empty"])

    # --- sizes in 64 bits, checked once (share/docs/usage.md, Faults: Sizes that do not fit). Each case wrapped an
    # int before: a short timeout turns a regression that hangs into a failure.

    def rejects_size(self, overrides, needles):
        # A checkpoint dir of its own: a llama config would otherwise be refused for ck's gpt2 checkpoint.
        start = time.monotonic()
        p = self.rejects({"checkpoint.dir": "ck_size", **overrides}, needles=needles, timeout=20)
        self.assertLess(time.monotonic() - start, 10, "a size refusal takes seconds at most")
        self.assertFalse(os.path.exists(self.path("ck_size")), "a refused run created its checkpoint dir")
        self.assertNotRegex(p.stderr, r"e\+\d\d|-\d+ elements|\b0 elements", "overflow garbage\n" + describe(p))

    def test_size_llama_rule_round_up(self):
        # ⌊8·16/3⌋ = 42 rounded up to a multiple of 2^31 − 1: 42 + 2^31 − 2 wrapped, to a zero SwiGLU width.
        self.rejects_size({**LLAMA, "model.ffn_hidden": 0, "model.multiple_of": 2147483647},
                          ["layers.*.mlp.gate_proj|up_proj.weight [4294967294, 16]", "model.multiple_of = 2147483647"])

    def test_size_shared_experts_wrapping_to_zero(self):
        # 65536 × 65536 = 2^32 wrapped to 0: a model with zero-width shared experts trained.
        self.rejects_size({**LLAMA, "model.experts": 2, "model.shared_experts": 65536, "model.expert_hidden": 65536},
                          ["4294967296", "model.shared_experts 65536 × model.expert_hidden 65536"])

    def test_size_shared_experts_wrapping_negative(self):
        # (2^31 − 1) × 32 wrapped to −32: the weights' initialisation failed (exit 1), or ran for ever.
        self.rejects_size({**LLAMA, "model.experts": 2, "model.shared_experts": 2**31 - 1, "model.expert_hidden": 32},
                          ["68719476704", "model.shared_experts 2147483647 × model.expert_hidden 32"])

    def test_size_names_the_keys_and_the_tensor(self):
        self.rejects_size({"model.d_model": 65536, "model.vocab": 65536, "model.heads": 1},
                          ["wte.weight [65536, 65536]", "4294967296 elements", "model.d_model or model.vocab"])
        # Activations may pass 2^31 elements; one team per attention row keeps their count an int.
        self.rejects_size({"model.seq_len": 65536, "train.micro_batch": 16384, "train.global_batch": 16384},
                          ["the attention rows would be 2147483648", "model.heads, model.seq_len or train.micro_batch"])

    # --- a checkpoint of the other model family, as resume or initial weights

    def llama_checkpoint(self):
        """A 1-step llama checkpoint, written outside ck."""
        p = run(train_args({**LLAMA, "data.train": "shard.bin", "checkpoint.dir": "llama", "train.steps": 1}), self.dir)
        self.assertEqual(p.returncode, 0, describe(p))
        return os.path.join("llama", "step_00000001.h5")

    def gpt2_checkpoint(self, family="gpt2"):
        """A copy of the fixture's gpt2 checkpoint outside ck, its model_family set to `family` (None: removed,
        as in files written before the attribute)."""
        path = self.path("gpt2.h5")
        shutil.copy(self.path("ck", "step_00000002.h5"), path)
        with h5py.File(path, "r+") as f:
            self.assertEqual(f.attrs["model_family"], "gpt2", "the writer records the family")
            if family is None:
                del f.attrs["model_family"]
            else:
                f.attrs["model_family"] = family
        return "gpt2.h5"

    def test_gpt2_checkpoint_under_llama(self):
        gpt2 = self.gpt2_checkpoint()
        for source in ({"checkpoint.resume": gpt2}, {"checkpoint.init_weights": gpt2, "checkpoint.resume": "never"}):
            self.rejects({**LLAMA, **source}, needles=[gpt2, "holds a gpt2 model", "model.arch = llama"])

    def test_llama_checkpoint_under_gpt2(self):
        llama = self.llama_checkpoint()
        for source in ({"checkpoint.resume": llama}, {"checkpoint.init_weights": llama, "checkpoint.resume": "never"}):
            self.rejects(source, needles=[llama, "holds a llama model", "model.arch = gpt2"])

    def test_checkpoint_without_family_reads_as_gpt2(self):
        self.rejects({**LLAMA, "checkpoint.resume": self.gpt2_checkpoint(None)}, needles=["holds a gpt2 model"])

    def test_checkpoint_family_against_its_stored_config(self):
        self.rejects({**LLAMA, "checkpoint.resume": self.gpt2_checkpoint("llama")},
                     needles=["inconsistent", "model_family = 'llama'", "model.arch = gpt2"])
        self.rejects({"checkpoint.resume": self.gpt2_checkpoint("mamba")}, needles=["'mamba'", "gpt2, llama"])

    # --- token shards

    def test_shard_missing(self):
        self.rejects({"data.train": "missing.bin"}, needles=["missing.bin"])

    def test_shard_shorter_than_header(self):
        with open(self.path("short.bin"), "wb") as f:
            f.write(np.array([SHARD_MAGIC, SHARD_VERSION, 10], "<i4").tobytes() + bytes(88))  # 100 bytes
        self.rejects({"data.train": "short.bin"}, needles=["short.bin"])

    def test_shard_wrong_magic(self):
        write_shard(self.path("magic.bin"), range(200), magic=12345)
        self.rejects({"data.train": "magic.bin"}, needles=["magic.bin"])

    def test_shard_count_larger_than_file(self):
        write_shard(self.path("lying.bin"), np.arange(500) % 256, count=700)
        self.rejects({"data.train": "lying.bin"}, needles=["lying.bin", "700"])

    def test_shard_count_smaller_than_file(self):
        write_shard(self.path("lying.bin"), np.arange(500) % 256, count=300)
        self.rejects({"data.train": "lying.bin"}, needles=["lying.bin", "300"])

    def test_glob_matches_nothing(self):
        self.rejects({"data.train": "nothing_*.bin"}, needles=["nothing_*.bin"])

    def test_token_outside_vocab(self):
        tokens = np.arange(500) % 256
        tokens[123] = 300
        write_shard(self.path("big.bin"), tokens)
        self.rejects({"data.train": "big.bin", "model.vocab": 256}, needles=["big.bin", "300", "256"])

    def test_seq_len_longer_than_data(self):
        write_shard(self.path("ten.bin"), range(10))
        self.rejects({"data.train": "ten.bin", "model.seq_len": 16}, needles=["seq_len", "10"])

    # --- files that are not regular files (share/docs/usage.md, Files checked before they are used).
    # A FIFO blocks open(2) for ever: each run has a short timeout, so a regression fails, not hangs.

    def fifo(self, name):
        os.mkfifo(self.path(name))
        return name

    def test_fifo_as_shard(self):
        self.rejects({"data.train": self.fifo("fifo.bin")}, needles=["fifo.bin", "FIFO"])

    def test_fifo_matched_by_a_shard_glob(self):
        shutil.copy(self.path("shard.bin"), self.path("train_0.bin"))
        self.fifo("train_1.bin")
        self.rejects({"data.train": "train_*.bin"}, needles=["train_1.bin", "FIFO"])

    def test_fifo_as_config(self):
        self.rejects(raw=["--config", self.fifo("cfg.ini")], needles=["cfg.ini", "FIFO"])

    def test_directory_as_config(self):
        os.mkdir(self.path("cfg.ini"))
        self.rejects(raw=["--config", "cfg.ini"], needles=["cfg.ini", "directory"])

    def test_fifo_as_init_weights(self):
        self.rejects({"checkpoint.init_weights": self.fifo("w.h5"), "checkpoint.resume": "never"},
                     needles=["w.h5", "FIFO"])

    def test_fifo_as_resume_checkpoint(self):
        self.rejects({"checkpoint.resume": self.fifo("r.h5")}, needles=["r.h5", "FIFO"])

    def test_fifo_as_sample_checkpoint(self):
        p = run(["sample", "--checkpoint", self.fifo("s.h5"), "--prompt", "hi", "--tokens", "4"], self.dir)
        self.assert_bad_input(p, "s.h5", "FIFO")
        self.assertEqual(p.stdout, "", "sample printed text without a checkpoint")

    def test_fifo_as_inspect_file(self):
        self.assert_bad_input(run(["inspect", self.fifo("i.h5")], self.dir), "i.h5", "FIFO")

    def test_fifo_and_directory_as_prepare_text(self):
        with open(self.path("a.txt"), "w") as f:
            f.write("hello\n")
        self.fifo("t.txt")
        os.mkdir(self.path("d.txt"))
        for bad, kind in (("t.txt", "FIFO"), ("d.txt", "directory")):
            before = tree_digest(self.dir)
            p = run(["prepare", "--text", "a.txt", bad, "--out", "out.bin"], self.dir)
            self.assert_bad_input(p, bad, kind)
            self.assertEqual(tree_digest(self.dir), before, "prepare wrote or changed files")

    def test_latest_is_a_directory(self):
        # resume auto falls back to the newest checkpoint (step 2, the last: nothing is saved), saying why.
        os.remove(self.path("ck", "latest"))
        os.mkdir(self.path("ck", "latest"))
        p = self.run_ok(train_args({"data.train": "shard.bin", "checkpoint.dir": "ck", "train.steps": 2}), timeout=60)
        self.assertIn("latest' is a directory", p.stdout, describe(p))
        self.assertNotIn("empty", p.stdout, describe(p))

    # --- initial weights (checkpoint.resume never, so that they are used)

    def weights_only(self, name, change=None):
        """A /model-only HDF5 file copied from the fixture checkpoint, with change(name, array) applied."""
        src = os.path.join(self.fixture, "ck", "step_00000002.h5")
        with h5py.File(src, "r") as f, h5py.File(self.path(name), "w") as out:
            for k, v in f["model"].items():
                a = v[()]
                out["model/" + k] = change(k, a) if change else a
        return name

    def test_init_weights_wrong_shape(self):
        # Control: the same construction with every shape right is accepted.
        good = self.weights_only("good.h5")
        self.run_ok(train_args({"data.train": "shard.bin", "checkpoint.dir": "ck_ok", "train.steps": 1,
                                "checkpoint.init_weights": good}))
        bad = self.weights_only("bad.h5", lambda k, a: np.zeros((16, 32), "f4") if k == "h.0.mlp.c_fc.weight" else a)
        self.rejects({"checkpoint.init_weights": bad, "checkpoint.resume": "never"},
                     needles=["bad.h5", "h.0.mlp.c_fc.weight"])

    def test_init_weights_truncated(self):
        with open(os.path.join(self.fixture, "ck", "step_00000002.h5"), "rb") as f:
            data = f.read()
        with open(self.path("half.h5"), "wb") as f:
            f.write(data[: len(data) // 2])
        self.rejects({"checkpoint.init_weights": "half.h5", "checkpoint.resume": "never"}, needles=["half.h5"])

    def test_init_weights_text_file(self):
        with open(self.path("weights.h5"), "w") as f:
            f.write("these are not weights\n" * 20)
        self.rejects({"checkpoint.init_weights": "weights.h5", "checkpoint.resume": "never"}, needles=["weights.h5"])

    # --- resumption

    def test_resume_missing_file(self):
        self.rejects({"checkpoint.resume": "ck/step_00000099.h5"}, needles=["step_00000099.h5"])

    def test_resume_not_a_checkpoint(self):
        with h5py.File(self.path("plain.h5"), "w") as f:
            f["x"] = np.zeros(3, "f4")
        self.rejects({"checkpoint.resume": "plain.h5"}, needles=["plain.h5"])

    def test_resume_model_shape_differs(self):
        # auto resumes ck/step_00000002.h5 (d_model 16) into a d_model 32 model
        self.rejects({"model.d_model": 32}, needles=["model.d_model", "32"])

    # --- other commands

    def test_sample_missing_checkpoint(self):
        p = run(["sample", "--checkpoint", "ck/step_00000077.h5", "--prompt", "hi", "--tokens", "4"], self.dir)
        self.assert_bad_input(p, "step_00000077.h5")
        self.assertEqual(p.stdout, "", "sample printed text without a checkpoint")

    def test_inspect_text_file(self):
        with open(self.path("notes.txt"), "w") as f:
            f.write("not a checkpoint\n")
        self.assert_bad_input(run(["inspect", "notes.txt"], self.dir), "notes.txt")

    def test_unknown_command(self):
        self.assert_bad_input(run(["frobnicate", "--x", "1"], self.dir), "frobnicate")

    def test_prepare_missing_text_file(self):
        with open(self.path("a.txt"), "w") as f:
            f.write("hello\n")
        before = sorted(os.listdir(self.dir))
        p = run(["prepare", "--text", "a.txt", "nothere.txt", "--out", "out.bin"], self.dir)
        self.assert_bad_input(p, "nothere.txt")
        self.assertEqual(sorted(os.listdir(self.dir)), before, "prepare left files behind")


# --- 2. resume -------------------------------------------------------------------------------------

class Resume(CliCase):
    """Stopping and resuming reproduces the uninterrupted run bit for bit."""

    group = "resume"

    def setUp(self):
        super().setUp()
        # 300 tokens: 18 windows of 16, so 12 steps of 4 sequences wrap around the data twice.
        random_shard(self.path("shard.bin"), 300, seed=1)

    def straight_vs_split(self, extra):
        base = {"data.train": "shard.bin", "train.steps": 12, "checkpoint.every": 0, **extra}
        self.run_ok(train_args({**base, "checkpoint.dir": "A", "log.metrics": "A.jsonl"}))
        straight = read_metrics(self.path("A.jsonl"))
        self.assertEqual([r["step"] for r in straight], list(range(1, 13)))
        self.assertEqual(sorted(os.listdir(self.path("A"))), ["latest", "step_00000012.h5"])

        split = train_args({**base, "checkpoint.dir": "B", "log.metrics": "B.jsonl", "train.stop_after": 6})
        p = run(split, self.dir)
        self.assertEqual(p.returncode, 3, describe(p))
        self.assertEqual(read_latest(self.path("B")), "step_00000006.h5")
        self.assertEqual(h5_attr(self.path("B", "step_00000006.h5"), "step"), 6)
        first = read_metrics(self.path("B.jsonl"))
        self.assertEqual([r["step"] for r in first], list(range(1, 7)))

        self.run_ok(split)  # the same job again: resume auto, steps 7..12
        both = read_metrics(self.path("B.jsonl"))
        self.assertEqual([r["step"] for r in both], list(range(1, 13)), "metrics of the two jobs")
        self.assert_same_records(both, straight)
        self.assertEqual(read_latest(self.path("B")), "step_00000012.h5")
        self.assert_checkpoints_equal(self.path("A", "step_00000012.h5"), self.path("B", "step_00000012.h5"))
        # the comparison is not vacuous: training moved the weights after the resume
        six, twelve = h5_tensors(self.path("B", "step_00000006.h5")), h5_tensors(self.path("B", "step_00000012.h5"))
        self.assertNotEqual(six["model/wte.weight"].tobytes(), twelve["model/wte.weight"].tobytes())
        return straight

    def test_sequential_no_accumulation(self):
        self.straight_vs_split({"train.micro_batch": 4, "train.global_batch": 4})

    def test_sequential_accumulation(self):
        self.straight_vs_split({"train.micro_batch": 2, "train.global_batch": 4, "data.order": "sequential"})

    def test_shuffle_accumulation(self):
        shuffled = self.straight_vs_split({"train.micro_batch": 2, "train.global_batch": 4, "data.order": "shuffle"})
        # shuffle must actually change which sequences the steps see
        self.run_ok(train_args({"data.train": "shard.bin", "train.steps": 12, "checkpoint.dir": "S",
                                "log.metrics": "S.jsonl", "data.order": "sequential"}))
        sequential = read_metrics(self.path("S.jsonl"))
        self.assertNotEqual([r["loss"] for r in shuffled[1:]], [r["loss"] for r in sequential[1:]],
                            "data.order shuffle gives the same losses as sequential")

    def test_keep_newest_two(self):
        self.run_ok(train_args({"data.train": "shard.bin", "train.steps": 8, "checkpoint.every": 2,
                                "checkpoint.keep": 2, "checkpoint.dir": "K"}))
        self.assertEqual(sorted(os.listdir(self.path("K"))), ["latest", "step_00000006.h5", "step_00000008.h5"])
        self.assertEqual(read_latest(self.path("K")), "step_00000008.h5")

    def test_resume_named_file(self):
        keys = {"data.train": "shard.bin", "train.steps": 8, "checkpoint.every": 2, "checkpoint.keep": 0}
        self.run_ok(train_args({**keys, "checkpoint.dir": "C", "log.metrics": "C.jsonl"}))
        self.assertEqual(sorted(os.listdir(self.path("C"))),
                         ["latest", "step_00000002.h5", "step_00000004.h5", "step_00000006.h5", "step_00000008.h5"])
        c_before = tree_digest(self.path("C"))
        self.run_ok(train_args({**keys, "checkpoint.dir": "D", "log.metrics": "D.jsonl",
                                "checkpoint.resume": "C/step_00000004.h5"}))
        resumed = read_metrics(self.path("D.jsonl"))
        self.assertEqual([r["step"] for r in resumed], [5, 6, 7, 8], "resumed from step 4, runs steps 5..8")
        self.assert_same_records(resumed, read_metrics(self.path("C.jsonl"))[4:])
        self.assertEqual(sorted(os.listdir(self.path("D"))), ["latest", "step_00000006.h5", "step_00000008.h5"])
        self.assert_checkpoints_equal(self.path("C", "step_00000008.h5"), self.path("D", "step_00000008.h5"))
        self.assertEqual(tree_digest(self.path("C")), c_before, "resuming from C modified C")


    def test_global_batch_changes_between_jobs(self):
        """A job resumed with a larger global batch continues the data order where the first job left
        it (samples seen, not step × batch). Oracle: the same checkpoint with samples_seen set to 0
        by h5py, trained on the shard with the samples already seen cut off, must give the same run
        bit for bit; a resume that placed the data at step × new batch would not."""
        import h5py
        T = int(TINY["model.seq_len"])
        # 2000 tokens: 124 windows of 16, enough that nothing wraps around.
        random_shard(self.path("long.bin"), 2000, seed=3)
        keys = {"data.train": "long.bin", "train.steps": 6, "train.micro_batch": 2, "checkpoint.every": 0,
                "data.order": "sequential"}
        p = run(train_args({**keys, "train.global_batch": 4, "train.stop_after": 3, "checkpoint.dir": "A",
                            "log.metrics": "A.jsonl"}), self.dir)
        self.assertEqual(p.returncode, 3, describe(p))
        self.assertEqual(h5_attr(self.path("A", "step_00000003.h5"), "samples_seen"), 12)
        shutil.copytree(self.path("A"), self.path("B"))

        p = self.run_ok(train_args({**keys, "train.global_batch": 8, "checkpoint.dir": "A", "log.metrics": "A.jsonl"}))
        self.assertIn("continues at sample 12", p.stdout)
        resumed = read_metrics(self.path("A.jsonl"))[3:]
        self.assertEqual([r["step"] for r in resumed], [4, 5, 6])
        self.assertEqual([r["tokens"] for r in resumed], [(12 + 8 * k) * T for k in (1, 2, 3)])
        self.assertEqual(h5_attr(self.path("A", "step_00000006.h5"), "samples_seen"), 12 + 3 * 8)

        # The oracle: the first 12 windows cut off the stream, and no samples seen.
        with open(self.path("long.bin"), "rb") as f:
            f.seek(1024)  # past the header
            tokens = np.frombuffer(f.read(), dtype="<u2")
        cut = tokens[12 * T:]
        write_shard(self.path("cut.bin"), cut)
        with h5py.File(self.path("B", "step_00000003.h5"), "r+") as f:
            f.attrs["samples_seen"] = np.int64(0)
        self.run_ok(train_args({**keys, "data.train": "cut.bin", "train.global_batch": 8, "checkpoint.dir": "B",
                                "log.metrics": "B.jsonl"}))
        oracle = read_metrics(self.path("B.jsonl"))
        self.assert_same_records(resumed, oracle, keys=("step", "loss", "lr", "grad_norm"))
        self.assert_checkpoints_equal(self.path("A", "step_00000006.h5"), self.path("B", "step_00000006.h5"))

    def test_nondeterministic_is_the_same_run_on_host_builds(self):
        """train.deterministic = false only frees CUDA builds with cuDNN to run attention's backward on
        cuDNN; a host build runs the same kernels, so the run is bitwise the default one."""
        keys = {"data.train": "shard.bin", "train.steps": 3}
        self.run_ok(train_args({**keys, "checkpoint.dir": "D", "log.metrics": "D.jsonl"}))
        self.run_ok(train_args({**keys, "checkpoint.dir": "N", "log.metrics": "N.jsonl",
                                "train.deterministic": "false"}))
        self.assert_same_records(read_metrics(self.path("N.jsonl")), read_metrics(self.path("D.jsonl")))

    def test_background_saves_write_what_synchronous_saves_write(self):
        """checkpoint.async: every checkpoint equals the synchronous run's, tensor for tensor, and the
        training is the same; a job that leaves early still leaves a complete checkpoint."""
        keys = {"data.train": "shard.bin", "train.steps": 8, "checkpoint.every": 2, "checkpoint.keep": 0}
        self.run_ok(train_args({**keys, "checkpoint.dir": "S", "log.metrics": "S.jsonl"}))
        p = run(train_args({**keys, "checkpoint.dir": "A", "log.metrics": "A.jsonl", "checkpoint.async": "true",
                            "train.stop_after": 5}), self.dir)
        self.assertEqual(p.returncode, 3, describe(p))
        self.assertIn("in the background", p.stdout)
        self.assertEqual(read_latest(self.path("A")), "step_00000005.h5")
        self.run_ok(train_args({**keys, "checkpoint.dir": "A", "log.metrics": "A.jsonl", "checkpoint.async": "true"}))
        self.assert_same_records(read_metrics(self.path("A.jsonl")), read_metrics(self.path("S.jsonl")))
        for step in (2, 4, 6, 8):
            name = f"step_{step:08d}.h5"
            self.assert_checkpoints_equal(self.path("S", name), self.path("A", name))


# --- 3. signals ------------------------------------------------------------------------------------

class Signals(CliCase):
    """SIGTERM/SIGUSR1 and train.time_limit: exit 3 with a checkpoint; resuming completes the run."""

    group = "signals"
    STEPS = 600

    def setUp(self):
        super().setUp()
        random_shard(self.path("shard.bin"), 2000, seed=2)

    def keys(self, name):
        return {"data.train": "shard.bin", "train.steps": self.STEPS, "checkpoint.dir": name,
                "log.metrics": f"{name}.jsonl", "log.every": 1}

    def wait_for_lines(self, proc, path, n, timeout=60):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                self.fail(f"training exited ({proc.returncode}) before {path} had {n} lines")
            if os.path.exists(path):
                with open(path) as f:
                    if sum(1 for line in f if line.endswith("\n")) >= n:
                        return
            time.sleep(0.005)
        self.fail(f"{path} did not reach {n} lines in {timeout} s")

    def drain(self, fd, proc, timeout=60):
        """Reads fd to EOF, then waits for proc."""
        deadline = time.monotonic() + timeout
        chunks = []
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                proc.kill()
                self.fail(f"training did not leave within {timeout} s of the signal")
            ready, _, _ = select.select([fd], [], [], left)
            if ready:
                chunk = os.read(fd, 65536)
                if not chunk:
                    break
                chunks.append(chunk)
        os.close(fd)
        return proc.wait(timeout=max(1, deadline - time.monotonic())), b"".join(chunks).decode("utf-8", "replace")

    def interrupt(self, sig, extra=None):
        """extra: keys of the interrupted job (background saves in flight when the signal lands)."""
        # The straight run to compare with.
        self.run_ok(train_args(self.keys("straight")))
        straight = read_metrics(self.path("straight.jsonl"))
        self.assertEqual(len(straight), self.STEPS)

        # The interrupted run writes its progress lines (log.every 1) into a 4 KiB pipe that this test
        # does not read until the signal is sent: it blocks after a few dozen steps, so however fast
        # or loaded the machine, the signal arrives long before the last step.
        args = train_args({**self.keys("ck"), **(extra or {})})
        r, w = os.pipe()
        fcntl.fcntl(w, fcntl.F_SETPIPE_SZ, 4096)
        with open(self.path("stderr1.txt"), "wb") as err:
            proc = subprocess.Popen([MESHTRAIN] + args, cwd=self.dir, stdout=w, stderr=err)
        os.close(w)
        try:
            self.wait_for_lines(proc, self.path("ck.jsonl"), 2)
            proc.send_signal(sig)
            code, out = self.drain(r, proc)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        with open(self.path("stderr1.txt")) as f:
            err_text = f.read()
        self.assertEqual(code, 3, f"exit {code} after {sig.name}\n{out[-2000:]}\n{err_text}")
        first = read_metrics(self.path("ck.jsonl"))
        k = len(first)
        self.assertTrue(2 <= k < self.STEPS, f"left at step {k}")
        print(f"\n  {sig.name}: left at step {k} of {self.STEPS}", end=" ", flush=True)
        self.assertEqual([r["step"] for r in first], list(range(1, k + 1)))
        name = f"step_{k:08d}.h5"
        self.assertEqual(read_latest(self.path("ck")), name, "latest names the step reached")
        if extra is None:
            self.assertEqual(sorted(os.listdir(self.path("ck"))), ["latest", name])
        else:
            self.assertNotIn(".tmp", "".join(os.listdir(self.path("ck"))), "a save left half-written")
        self.assertEqual(h5_attr(self.path("ck", name), "step"), k)
        self.assertEqual(h5_attr(self.path("ck", name), "tokens"), first[-1]["tokens"])

        # The same job again resumes and runs the remaining steps.
        self.run_ok(args)
        both = read_metrics(self.path("ck.jsonl"))
        self.assertEqual([r["step"] for r in both], list(range(1, self.STEPS + 1)))
        self.assert_same_records(both, straight)
        self.assertEqual(read_latest(self.path("ck")), f"step_{self.STEPS:08d}.h5")
        self.assert_checkpoints_equal(self.path("straight", f"step_{self.STEPS:08d}.h5"),
                                      self.path("ck", f"step_{self.STEPS:08d}.h5"))

    def test_sigterm(self):
        self.interrupt(signal.SIGTERM)

    def test_sigusr1(self):
        self.interrupt(signal.SIGUSR1)

    def test_sigterm_while_saving_in_background(self):
        self.interrupt(signal.SIGTERM, {"checkpoint.async": "true", "checkpoint.every": 3})

    def test_time_limit(self):
        limit_min = 0.05  # 3 s; 10^6 steps would take many minutes
        keys = {**self.keys("ck"), "train.steps": 1000000, "log.every": 100000, "train.time_limit": limit_min}
        start = time.monotonic()
        p = run(train_args(keys), self.dir, timeout=40)
        wall = time.monotonic() - start
        self.assertEqual(p.returncode, 3, describe(p))
        self.assertGreater(wall, 0.8 * limit_min * 60, "left long before the time limit")
        self.assertLess(wall, limit_min * 60 + 10, "overran the time limit")
        k = len(read_metrics(self.path("ck.jsonl")))
        self.assertTrue(1 <= k < 1000000)
        print(f"\n  time_limit {limit_min} min: left at step {k} after {wall:.1f} s", end=" ", flush=True)
        name = f"step_{k:08d}.h5"
        self.assertEqual(read_latest(self.path("ck")), name)
        self.assertEqual(sorted(os.listdir(self.path("ck"))), ["latest", name])
        self.assertEqual(h5_attr(self.path("ck", name), "step"), k)


# --- 4. commands -----------------------------------------------------------------------------------

def cpu_fitting_openblas_core():
    """The OPENBLAS_CORETYPE that fits this CPU by /proc/cpuinfo (SkylakeX with AVX-512, else Zen on AMD
    or Haswell with AVX2 and FMA), or None: written from the flags, not from the binary's cpuid test."""
    flags, vendor = set(), ""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key.strip() == "flags" and not flags:
                    flags = set(value.split())
                if key.strip() == "vendor_id" and not vendor:
                    vendor = value.strip()
    except OSError:
        return None
    if {"avx512f", "avx512cd", "avx512bw", "avx512dq", "avx512vl"} <= flags:
        return "SkylakeX"
    if {"avx2", "fma"} <= flags:
        return "Zen" if vendor == "AuthenticAMD" else "Haswell"
    return None


class Commands(CliCase):
    """prepare, inspect, sample, blas, config and train --help."""

    group = "commands"

    @classmethod
    def setUpClass(cls):
        cls.fixture = make_fixture(cls.group)
        cls.checkpoint = os.path.join(cls.fixture, "ck", "step_00000002.h5")

    def test_prepare_bytes_in_order(self):
        a = bytes(range(256)) + "héllo\n".encode()
        b = b"\x00\xff second file\r\n"
        for name, data in (("a.txt", a), ("b.txt", b)):
            with open(self.path(name), "wb") as f:
                f.write(data)
        for order, expected in ((["a.txt", "b.txt"], a + b), (["b.txt", "a.txt"], b + a)):
            out = "_".join(n[0] for n in order) + ".bin"
            self.run_ok(["prepare", "--text", *order, "--out", out])
            with open(self.path(out), "rb") as f:
                raw = f.read()
            self.assertEqual(len(raw), 4 * HEADER_INTS + 2 * len(expected), "file size")
            header = np.frombuffer(raw[: 4 * HEADER_INTS], "<i4")
            self.assertEqual(list(header[:3]), [SHARD_MAGIC, SHARD_VERSION, len(expected)])
            self.assertFalse(header[3:].any(), "header padding must be zeros")
            tokens = np.frombuffer(raw[4 * HEADER_INTS:], "<u2")
            self.assertEqual(tokens.tolist(), list(expected))
        self.assertEqual(sorted(os.listdir(self.dir)), ["a.txt", "a_b.bin", "b.txt", "b_a.bin"], "stray files")

    def test_moe_capacity_above_the_tokens_drops_nothing(self):
        # A capacity is at most the micro-batch's tokens (share/docs/usage.md, Mixture of experts): a factor of
        # 2e8 keeps every assignment, as dropless routing does, where the int it overflowed kept one per expert.
        random_shard(self.path("shard.bin"), 2000)
        records = {}
        for factor in ("2e8", "0"):
            keys = {**LLAMA, "model.experts": 4, "model.capacity_factor": factor, "data.train": "shard.bin",
                    "checkpoint.dir": f"ck_{factor}", "log.metrics": f"m_{factor}.jsonl", "train.steps": 2}
            self.run_ok(train_args(keys))
            records[factor] = read_metrics(self.path(f"m_{factor}.jsonl"))
        self.assertEqual([r["moe"]["dropped"] for r in records["2e8"]], [0, 0])
        self.assert_same_records(records["2e8"], records["0"])

    def test_inspect(self):
        p = self.run_ok(["inspect", self.checkpoint])
        self.assertRegex(p.stdout, r"(?im)^\s*step\s*[:=]\s*2\s*$", "inspect prints the step")
        layout = h5_attr(self.checkpoint, "layout")
        self.assertIn(str(layout), p.stdout, "inspect prints the layout")
        names = [k[len("model/"):] for k in h5_tensors(self.checkpoint, ("model",))]
        self.assertEqual(len(names), 16, names)  # 1 layer: 12 per block + wte, wpe, ln_f.weight, ln_f.bias
        missing = [n for n in names if not re.search(rf"(?<![\w.]){re.escape(n)}(?![\w.])", p.stdout)]
        self.assertEqual(missing, [], f"inspect does not list these /model tensors\n{p.stdout}")

    def test_inspect_and_sample_llama(self):
        """inspect prints a llama checkpoint's family and its Hugging Face Llama tensors, and a gpt2 file's
        family (recorded, or not recorded in a file from before the attribute); sample prints text from
        the llama's weights."""
        random_shard(self.path("shard.bin"), 2000)
        self.run_ok(train_args({**LLAMA, "data.train": "shard.bin", "checkpoint.dir": "ck", "train.steps": 2}))
        llama = self.path("ck", "step_00000002.h5")
        p = self.run_ok(["inspect", llama])
        self.assertRegex(p.stdout, r"(?m)^model_family: llama$")
        names = ["embed_tokens.weight", "norm.weight", "lm_head.weight"] + [
            f"layers.0.{n}.weight" for n in ("input_layernorm", "self_attn.q_proj", "self_attn.k_proj",
                                             "self_attn.v_proj", "self_attn.o_proj", "post_attention_layernorm",
                                             "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj")]
        self.assertEqual(sorted(names), sorted(k[len("model/"):] for k in h5_tensors(llama, ("model",))))
        for name, shape in (("self_attn.k_proj", "8, 16"), ("mlp.down_proj", "16, 24")):
            self.assertRegex(p.stdout, rf"(?m)^\s*layers\.0\.{re.escape(name)}\.weight\s+\[{shape}\]$")
        self.assertRegex(self.run_ok(["inspect", self.checkpoint]).stdout, r"(?m)^model_family: gpt2$")
        shutil.copy(self.checkpoint, self.path("old.h5"))
        with h5py.File(self.path("old.h5"), "r+") as f:
            del f.attrs["model_family"]
        self.assertRegex(self.run_ok(["inspect", "old.h5"]).stdout, r"(?m)^model_family: gpt2 \(not recorded")
        out = self.run_ok(["sample", "--checkpoint", llama, "--prompt", "The ", "--tokens", 24, "--seed", "1"])
        self.assertTrue(out.stdout_bytes.startswith(b"The ") and len(out.stdout_bytes) >= 28, out.stdout_bytes)

    def test_inspect_loss_scale(self):
        """inspect prints an fp16 checkpoint's loss scale and clean steps as the file stores them (h5py),
        and no loss scale for an fp32 checkpoint, which stores none."""
        random_shard(self.path("shard.bin"), 2000)
        # An initial scale of 1000.25 that doubles every 2 clean steps: after 3 steps the file holds
        # 2000.5 and 1 (unless a step overflowed), values inspect cannot print from the stored config.
        self.run_ok(train_args({"data.train": "shard.bin", "checkpoint.dir": "ck", "train.steps": 3,
                                "train.precision": "fp16", "train.loss_scale": 1000.25,
                                "train.loss_scale_window": 2}))
        fp16 = self.path("ck", "step_00000003.h5")
        stored_scale, stored_clean = h5_attr(fp16, "loss_scale"), h5_attr(fp16, "loss_scale_clean_steps")
        self.assertNotEqual(stored_scale, 1000.25, "the fixture's scale never moved: the test could not fail")
        p = self.run_ok(["inspect", fp16])
        scale = re.findall(r"(?m)^loss_scale:\s*(\S+)\s*$", p.stdout)
        clean = re.findall(r"(?m)^loss_scale_clean_steps:\s*(\S+)\s*$", p.stdout)
        self.assertEqual(len(scale), 1, f"inspect prints one loss_scale line\n{p.stdout}")
        self.assertEqual(float(scale[0]), stored_scale, "inspect's loss scale differs from the file's")
        self.assertEqual(len(clean), 1, f"inspect prints one loss_scale_clean_steps line\n{p.stdout}")
        self.assertEqual(int(clean[0]), stored_clean, "inspect's clean steps differ from the file's")
        with h5py.File(self.checkpoint, "r") as f:
            self.assertNotIn("loss_scale", f.attrs, "the fp32 fixture stores no loss scale")
        p = self.run_ok(["inspect", self.checkpoint])
        self.assertNotRegex(p.stdout, r"(?m)^loss_scale\w*:", "an fp32 checkpoint has no loss scale to print")

    def sample(self, prompt, n, *extra):
        p = self.run_ok(["sample", "--checkpoint", self.checkpoint, "--prompt", prompt, "--tokens", n, *extra])
        out = p.stdout_bytes
        self.assertTrue(out.startswith(prompt.encode()), f"output does not start with the prompt: {out[:80]!r}")
        self.assertIn(len(out), (len(prompt) + n, len(prompt) + n + 1), f"{len(out)} bytes: {out!r}")
        if len(out) == len(prompt) + n + 1:
            self.assertEqual(out[-1:], b"\n", "only a final newline may follow the N bytes")
        return out[len(prompt): len(prompt) + n]

    def test_sample_prompt_then_n_bytes(self):
        self.sample("Hello", 20, "--seed", "1")
        # longer than the context (seq_len 16): the model slides over the last 16 tokens
        self.sample("x" * 30, 40, "--seed", "1")

    def test_sample_seeds(self):
        a1 = self.sample("The ", 64, "--seed", "1")
        a2 = self.sample("The ", 64, "--seed", "1")
        b = self.sample("The ", 64, "--seed", "2")
        self.assertEqual(a1, a2, "same seed, different text")
        self.assertNotEqual(a1, b, "different seeds, same 64 bytes")

    def test_sample_greedy(self):
        g1 = self.sample("The ", 32, "--temperature", "0", "--seed", "1")
        g2 = self.sample("The ", 32, "--temperature", "0", "--seed", "99")
        self.assertEqual(g1, g2, "temperature 0 depends on the seed")

    def test_sample_from_a_parallel_layouts_checkpoint(self):
        """A checkpoint that four ranks wrote (dp2·tp2, ZeRO-1: owners wrote slices, tensor-parallel
        ranks pieces) samples exactly as one rank's file of the same weights does: one step at
        learning rate 1e-30 from it on one rank (an update far below every weight's last bit: AdamW
        leaves them as they are, as the bitwise comparison shows) re-saves them."""
        if not MPIEXEC:
            self.skipTest("no mpiexec")
        random_shard(self.path("shard.bin"), 2000)
        keys = {"data.train": "shard.bin", "checkpoint.dir": "P", "train.steps": 3}
        self.run_ok(train_args({**keys, "parallel.tp": 2, "parallel.zero": 1}), launcher=[MPIEXEC, "-n", "4"])
        shutil.copytree(self.path("P"), self.path("S"))
        self.run_ok(train_args({**keys, "checkpoint.dir": "S", "train.steps": 4, "optim.lr": 1e-30,
                                "optim.min_lr": 1e-30}))
        parallel, single = self.path("P", "step_00000003.h5"), self.path("S", "step_00000004.h5")
        a, b = h5_tensors(parallel, ("model",)), h5_tensors(single, ("model",))
        self.assertEqual(sorted(a), sorted(b))
        for name in a:
            self.assertEqual(a[name].tobytes(), b[name].tobytes(), name)
        args = ["--prompt", "The ", "--tokens", "48", "--seed", "5"]
        self.assertEqual(self.run_ok(["sample", "--checkpoint", parallel, *args]).stdout,
                         self.run_ok(["sample", "--checkpoint", single, *args]).stdout)

    def test_sample_from_a_padded_vocabulary(self):
        """A run whose vocabulary (300) is padded to 384 for the GEMMs (train.vocab_multiple 128) stores
        wte as [300, C], resumes unpadded (one step at learning rate 1e-30 re-saves the same weights,
        bitwise, as the other test above shows for layouts), and samples as the unpadded file does:
        `sample` builds the model its stored config asks for, so it reads logits rows 384 wide there
        and 300 wide here; a row read at the wrong width draws other tokens."""
        random_shard(self.path("shard.bin"), 2000)
        keys = {"data.train": "shard.bin", "checkpoint.dir": "P", "train.steps": 3, "model.vocab": 300,
                "train.vocab_multiple": 128}
        self.run_ok(train_args(keys))
        shutil.copytree(self.path("P"), self.path("S"))
        self.run_ok(train_args({**keys, "checkpoint.dir": "S", "train.steps": 4, "train.vocab_multiple": 1,
                                "optim.lr": 1e-30, "optim.min_lr": 1e-30}))
        padded, unpadded = self.path("P", "step_00000003.h5"), self.path("S", "step_00000004.h5")
        a, b = h5_tensors(padded), h5_tensors(unpadded, ("model",))
        self.assertEqual(a["model/wte.weight"].shape, (300, 16), "the stored vocabulary is the model's")
        self.assertEqual(a["optim/exp_avg/wte.weight"].shape, (300, 16))
        for name in b:
            self.assertEqual(a[name].tobytes(), b[name].tobytes(), name)
        args = ["--prompt", "The ", "--tokens", "48", "--seed", "5"]
        self.assertEqual(self.run_ok(["sample", "--checkpoint", padded, *args]).stdout,
                         self.run_ok(["sample", "--checkpoint", unpadded, *args]).stdout)

    def test_config_file_and_command_line(self):
        # INI keys apply; where the INI and the command line both set a key, the command line wins.
        random_shard(self.path("shard.bin"), 500)
        with open(self.path("run.ini"), "w") as f:
            f.write("[model]\nd_model = 32\n\n[train]\nsteps = 3\nglobal_batch = 8\n")
        p = self.run_ok(["train", "--config", "run.ini", "--model.d_model", "16", "--model.layers", "1",
                         "--model.heads", "2", "--model.seq_len", "16", "--train.micro_batch", "2",
                         "--data.train", "shard.bin", "--checkpoint.dir", "ck", "--log.metrics", "m.jsonl"])
        self.assertEqual([r["step"] for r in read_metrics(self.path("m.jsonl"))], [1, 2, 3], "train.steps from INI")
        wte = h5_tensors(self.path("ck", "step_00000003.h5"), ("model",))["model/wte.weight"]
        self.assertEqual(wte.shape, (256, 16), "model.d_model: the command line wins over the INI")
        self.assertIn("effective batch = micro_batch 2 × dp 1 × accum 4 = 8 sequences (128 tokens)", p.stdout)

    def test_blas_named_at_start(self):
        random_shard(self.path("shard.bin"), 500)
        p = self.run_ok(train_args({"data.train": "shard.bin", "checkpoint.dir": "ck", "train.steps": 1}))
        line = re.search(r"(?m)^BLAS: .+$", p.stdout)
        self.assertIsNotNone(line, f"no BLAS line at start\n{describe(p)}")
        if "OpenBLAS" in line.group(0):
            self.assertRegex(line.group(0), r"^BLAS: OpenBLAS [\d.]+, kernels \w+, \d+ threads?$")
        self.assertRegex(p.stdout, r"(?m)^start-up [\d.]+ s \(process start to the first step\): state allocated in "
                                   r"[\d.]+ s, weights initialised in [\d.]+ s$")

    def test_blas_warns_on_generic_kernels_with_the_fix(self):
        """OpenBLAS's generic Prescott kernels on a CPU with AVX2 or AVX-512: the trainer warns and names the
        OPENBLAS_CORETYPE that fits, `blas --openblas-coretype` prints it; with that core, neither."""
        if "OPENBLAS_CORETYPE" in os.environ:
            self.skipTest(f"OPENBLAS_CORETYPE={os.environ['OPENBLAS_CORETYPE']} is set for this run: not changed")
        fix = cpu_fitting_openblas_core()
        if fix is None:
            self.skipTest("this CPU has neither AVX2 with FMA nor AVX-512: Prescott's kernels are no worse here")
        if "OpenBLAS" not in self.run_ok(["blas"]).stdout:
            self.skipTest("this build's BLAS is not OpenBLAS")
        random_shard(self.path("shard.bin"), 500)
        keys = {"data.train": "shard.bin", "checkpoint.dir": "ck", "train.steps": 1, "checkpoint.resume": "never"}

        generic = {"OPENBLAS_CORETYPE": "Prescott"}
        p = self.run_ok(train_args(keys), env=generic)
        self.assertIn("BLAS: OpenBLAS", p.stdout)
        self.assertIn(", kernels Prescott,", p.stdout)
        self.assertIn("warning: OpenBLAS runs its Prescott kernels", p.stdout, describe(p))
        self.assertIn(f"HINT: export OPENBLAS_CORETYPE={fix} ", p.stdout, describe(p))
        self.assertEqual(self.run_ok(["blas", "--openblas-coretype"], env=generic).stdout, f"{fix}\n")
        self.assertIn(f"HINT: export OPENBLAS_CORETYPE={fix} ", self.run_ok(["blas"], env=generic).stdout)

        fitting = {"OPENBLAS_CORETYPE": fix}
        # A directory of its own: checkpoint.resume = never refuses one holding the first run's files.
        p = self.run_ok(train_args({**keys, "checkpoint.dir": "ck_fitting"}), env=fitting)
        self.assertIn(f", kernels {fix},", p.stdout, describe(p))
        self.assertNotIn("warning: OpenBLAS", p.stdout + p.stderr, describe(p))
        self.assertEqual(self.run_ok(["blas", "--openblas-coretype"], env=fitting).stdout, "")

    def test_blas_bad_option(self):
        self.assert_bad_input(run(["blas", "--core"], self.dir), "--core")

    def test_config_prints_the_keys_train_would_use(self):
        # A key from the INI, one the command line sets over the INI, defaults, in the order asked; the
        # same order of precedence as train (test_config_file_and_command_line).
        with open(self.path("run.ini"), "w") as f:
            f.write("[train]\nsteps = 7\nseed = 5\n[checkpoint]\ndir = from_ini\n")
        p = self.run_ok(["config", "--config", "run.ini", "--checkpoint.dir", "from cli", "--get", "train.steps",
                         "checkpoint.dir", "checkpoint.resume", "train.precision", "optim.lr"])
        self.assertEqual(p.stdout, "7\nfrom cli\nauto\nfp32\n0.0003\n")
        # --get anywhere; a key given twice takes its last value, as train does.
        p = self.run_ok(["config", "--get", "train.seed", "--config", "run.ini", "--train.seed", "9",
                         "--train.seed", "11"])
        self.assertEqual(p.stdout, "11\n")
        # Without --get: every key as INI, which config_from_ini reads back (train.steps among them).
        whole = self.run_ok(["config", "--config", "run.ini"]).stdout
        self.assertIn("[train]\n", whole)
        self.assertRegex(whole, r"(?m)^steps = 7$")
        self.assertRegex(whole, r"(?m)^dir = from_ini$")

    def test_config_refuses_what_train_refuses(self):
        # Bad input exits 2 naming the key, with nothing printed on stdout: a script reads no half answer.
        for args, needle in ((["--model.layerz", "2", "--get", "train.steps"], "model.layerz"),
                             (["--train.steps", "x", "--get", "train.steps"], "train.steps"),
                             (["--model.kv_heads", "2", "--get", "model.layers"], "model.arch = llama"),
                             (["--get", "train.steps", "train.stepz"], "train.stepz"),
                             (["--get"], "--get"),
                             (["--config", "missing.ini", "--get", "train.steps"], "missing.ini")):
            p = run(["config", *args], self.dir)
            self.assert_bad_input(p, needle)
            self.assertEqual(p.stdout, "", describe(p))

    def test_train_help_lists_interface_keys(self):
        p = self.run_ok(["train", "--help"])
        missing = [k for k in INTERFACE_KEYS if not re.search(rf"--{re.escape(k)}\b", p.stdout)]
        self.assertEqual(missing, [], f"train --help does not list\n{p.stdout}")


GROUPS = {"bad_input": BadInput, "resume": Resume, "signals": Signals, "commands": Commands}


def main():
    opts = take_common_options(group_parser(__doc__, GROUPS).parse_args())
    return run_groups(GROUPS, opts, WORKDIR)


def group_parser(doc, group_classes):
    """The options every command-line test script takes: the binary, a scratch directory, the MPI
    launcher, a group and a name filter (its own options are added by each script)."""
    ap = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--meshtrain", required=True, help="the meshtrain binary")
    ap.add_argument("--workdir", required=True, help="scratch directory (under the build tree)")
    ap.add_argument("--mpiexec", default=None, help="MPI launcher (default: mpiexec on PATH)")
    ap.add_argument("--group", default="all", choices=[*group_classes, "all"])
    ap.add_argument("-k", dest="pattern", default=None, help="only cases whose name contains this")
    ap.add_argument("-v", dest="verbose", action="store_true")
    return ap


def take_common_options(opts):
    """Sets this module's MESHTRAIN, WORKDIR and MPIEXEC from group_parser's options."""
    global MESHTRAIN, MPIEXEC, WORKDIR
    MESHTRAIN = os.path.abspath(opts.meshtrain)
    MPIEXEC = opts.mpiexec or shutil.which("mpiexec")
    WORKDIR = os.path.abspath(opts.workdir)
    if not os.access(MESHTRAIN, os.X_OK):
        sys.exit(f"--meshtrain {MESHTRAIN}: not an executable")
    return opts


def run_groups(group_classes, opts, workdir, preamble=None):
    """Runs the cases of opts.group (or all groups) whose name contains opts.pattern, each group in a
    fresh workdir/<group>; returns the exit code. Shared with the other command-line test scripts."""
    groups = list(group_classes) if opts.group == "all" else [opts.group]
    suite = unittest.TestSuite()
    loader = unittest.TestLoader()
    for g in groups:
        shutil.rmtree(os.path.join(workdir, g), ignore_errors=True)
        for case in loader.loadTestsFromTestCase(group_classes[g]):
            if opts.pattern is None or opts.pattern in case.id():
                suite.addTest(case)
    if suite.countTestCases() == 0:
        sys.exit("no test case selected")
    if preamble:
        print(preamble, flush=True)
    start = time.monotonic()
    result = unittest.TextTestRunner(verbosity=2 if opts.verbose else 1, stream=sys.stdout).run(suite)
    print(f"{'+'.join(groups)}: {suite.countTestCases()} cases in {time.monotonic() - start:.1f} s")
    return 0 if result.wasSuccessful() else 1


if __name__ == "__main__":
    sys.exit(main())
