#!/usr/bin/env python3
"""Files checked for what they are before they are used, and commands that never destroy their input
(share/docs/usage.md: Files checked before they are used; Outputs that never destroy a file).

Each case builds a real bad file — an HDF5 file made with h5py declaring 10^11 elements in a few
hundred bytes, a checkpoint with a NaN written into a tensor and its checksum recomputed here (by
test_crash_safety.py's independent meshtrain-sum64, so only the finiteness check can refuse it), a
checkpoint claiming format version 99, a deeper model's weights — and runs the real commands on it
(inspect, export, sample, a named resume, checkpoint.init_weights). Each must exit 2 with a message
naming the culprit, and every file in the case directory must be byte for byte as before (sha256),
with nothing added. export and prepare are pointed at their own inputs (by name, through a symlink
and through a hard link), at a directory and at another checkpoint.

usage: test_file_checks.py --meshtrain BIN --workdir DIR [-k PATTERN] [-v]
"""

import os
import shutil
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "cli"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import test_cli as cli  # noqa: E402
from test_cli import describe, run, train_args, tree_digest  # noqa: E402
from test_crash_safety import add_reference_checksums, verify_checkpoint  # noqa: E402

import h5py  # noqa: E402
import numpy as np  # noqa: E402

CHECKPOINT = os.path.join("ck", "step_00000002.h5")


def make_fixture(group):
    """Two 2-step runs: ck/ of the 1-layer TINY model, deep/ of the same model with 2 layers."""
    d = cli.make_fixture(group)
    p = run(train_args({"data.train": "shard.bin", "checkpoint.dir": "deep", "train.steps": 2, "model.layers": 2}), d)
    if p.returncode != 0:
        raise RuntimeError(f"fixture run failed: {describe(p)}")
    return d


class FileChecks(cli.CliCase):
    """Exit 2 naming the culprit; the case directory unchanged file for file."""

    group = "files"

    @classmethod
    def setUpClass(cls):
        cls.fixture = make_fixture(cls.group)

    def setUp(self):
        super().setUp()
        for name in ("shard.bin", "ck", "deep"):
            src = os.path.join(self.fixture, name)
            (shutil.copytree if os.path.isdir(src) else shutil.copy)(src, self.path(name))

    def refused(self, args, *needles, launcher=()):
        """Runs args in the case directory: exit 2, every needle on stderr, no file added or changed."""
        before = tree_digest(self.dir)
        p = run(args, self.dir, launcher=launcher)
        self.assert_bad_input(p, *needles)
        self.assertEqual(tree_digest(self.dir), before, f"meshtrain {' '.join(args)} wrote or changed files")
        return p

    def refused_by_every_reader(self, name, *needles):
        """inspect, export, sample, a named resume and init_weights all refuse `name`."""
        self.refused(["inspect", name], *needles)
        self.refused(["export", name, "--format", "safetensors", "--out", "out.safetensors"], *needles)
        p = self.refused(["sample", "--checkpoint", name, "--prompt", "hi", "--tokens", "4"], *needles)
        self.assertEqual(p.stdout, "", "sample printed text from a checkpoint it should refuse")
        keys = {"data.train": "shard.bin", "checkpoint.dir": "new", "train.steps": 4, "log.metrics": "m.jsonl"}
        self.refused(train_args({**keys, "checkpoint.resume": name}), *needles)
        self.refused(train_args({**keys, "checkpoint.resume": "never", "checkpoint.init_weights": name}), *needles)

    # --- declared shapes against what the file stores

    def test_tiny_file_declaring_a_huge_dataset(self):
        with h5py.File(self.path("huge.h5"), "w") as f:
            f.create_dataset("model/wte.weight", shape=(10**11,), dtype="f4")  # never written: no storage
        self.assertLess(os.path.getsize(self.path("huge.h5")), 10000)
        self.refused(["inspect", "huge.h5"], "/model/wte.weight", "[100000000000]", "400000000000 bytes")
        self.refused(["export", "huge.h5", "--format", "safetensors", "--out", "out.safetensors"],
                     "/model/wte.weight", "[100000000000]")

    # --- not a checkpoint, unknown versions, another model's tensors

    def test_inspect_hdf5_file_without_model(self):
        with h5py.File(self.path("plain.h5"), "w") as f:
            f["x"] = np.zeros(3, "f4")
        self.refused(["inspect", "plain.h5"], "plain.h5", "/model")

    def test_unknown_format_version(self):
        with h5py.File(self.path(CHECKPOINT), "r+") as f:
            f.attrs["version"] = np.int64(99)
        self.refused_by_every_reader(CHECKPOINT, "version 99", "versions 1 to 2")

    def test_init_weights_from_a_deeper_model(self):
        keys = {"data.train": "shard.bin", "checkpoint.dir": "new", "train.steps": 4, "log.metrics": "m.jsonl",
                "checkpoint.resume": "never"}
        # Control: the same model's weights load.
        self.run_ok(train_args({**keys, "checkpoint.dir": "ok", "log.metrics": None,
                                "checkpoint.init_weights": CHECKPOINT}))
        shutil.rmtree(self.path("ok"))
        deep = os.path.join("deep", "step_00000002.h5")
        self.refused(train_args({**keys, "checkpoint.init_weights": deep}), deep, "/model/h.1.")

    # --- non-finite tensors with valid checksums

    def put_value(self, dataset, index, value):
        """Writes value at flat `index` of dataset and recomputes every checksum with this test's own sum64."""
        with h5py.File(self.path(CHECKPOINT), "r+") as f:
            a = f[dataset][()]
            a.reshape(-1)[index] = value
            f[dataset][...] = a
        add_reference_checksums(self.path(CHECKPOINT))
        self.assertEqual(verify_checkpoint(self.path(CHECKPOINT)), [], "the checksums should verify")

    def test_nan_in_weights(self):
        self.put_value("model/h.0.attn.c_attn.weight", 37, np.nan)
        self.refused_by_every_reader(CHECKPOINT, "/model/h.0.attn.c_attn.weight", "nan", "element 37")

    def test_inf_in_optimizer_state(self):
        self.put_value("optim/exp_avg_sq/h.0.mlp.c_fc.weight", 5, -np.inf)
        keys = {"data.train": "shard.bin", "checkpoint.dir": "new", "train.steps": 4, "log.metrics": "m.jsonl"}
        self.refused(train_args({**keys, "checkpoint.resume": CHECKPOINT}),
                     "/optim/exp_avg_sq/h.0.mlp.c_fc.weight", "-inf", "element 5")
        self.refused(["inspect", CHECKPOINT], "/optim/exp_avg_sq/h.0.mlp.c_fc.weight", "-inf")

    # --- export and prepare never write over their inputs

    def export(self, out, *needles):
        self.refused(["export", CHECKPOINT, "--format", "safetensors", "--out", out], *needles)

    def test_export_over_its_own_checkpoint(self):
        self.export(CHECKPOINT, CHECKPOINT, "same file")
        os.symlink("step_00000002.h5", self.path("ck", "link.h5"))
        self.export(os.path.join("ck", "link.h5"), "link.h5", "same file")
        os.link(self.path(CHECKPOINT), self.path("hard.h5"))
        self.export("hard.h5", "hard.h5", "same file")

    def test_export_over_a_directory_or_another_checkpoint(self):
        os.mkdir(self.path("out.safetensors"))
        self.export("out.safetensors", "out.safetensors", "directory")
        self.export(os.path.join("deep", "step_00000002.h5"), "deep/step_00000002.h5", "HDF5")

    def test_export_of_a_corrupt_checkpoint(self):
        with h5py.File(self.path(CHECKPOINT), "r+") as f:
            d = f["model/wte.weight"]
            a = d[()]
            a[3, 1] += 1.0  # the stored checksum no longer matches
            d[...] = a
        self.export("out.safetensors", "/model/wte.weight", "does not match its checksum")

    def test_prepare_over_its_own_input(self):
        for name, text in (("a.txt", "first\n"), ("b.txt", "second\n")):
            with open(self.path(name), "w") as f:
                f.write(text)
        os.symlink("b.txt", self.path("link.txt"))
        os.mkdir(self.path("dir.bin"))
        for out, needle in (("b.txt", "same file"), ("link.txt", "same file"), ("dir.bin", "directory"),
                            (CHECKPOINT, "HDF5")):
            self.refused(["prepare", "--text", "a.txt", "b.txt", "--out", out], out, needle)

    # --- every command's --out replaces only a file of its own kind

    def test_out_never_replaces_a_file_of_another_kind(self):
        words = ["alpha", "beta", "gamma", "delta", "omega", "sigma", "kappa", "lambda"]
        rng = np.random.default_rng(0)
        with open(self.path("a.txt"), "w") as f:
            for _ in range(400):
                f.write(" ".join(rng.choice(words, 8)) + "\n")
        tokenizer = ["tokenizer", "train", "--text", "a.txt", "--vocab", "300", "--out"]
        self.run_ok(tokenizer + ["tok.model"])
        self.run_ok(["export", CHECKPOINT, "--format", "safetensors", "--out", "model.safetensors"])
        with open(self.path("m.jsonl"), "w") as f:
            f.write('{"step": 1, "loss": 5.5}\n')
        shard = "shard.bin"
        for args, out, what in (
                (["prepare", "--text", "a.txt", "--out"], "model.safetensors", "a safetensors file"),
                (["prepare", "--text", "a.txt", "--out"], "tok.model", "a SentencePiece tokenizer model"),
                (["prepare", "--text", "a.txt", "--out"], "m.jsonl", "a metrics file"),
                (["export", CHECKPOINT, "--format", "safetensors", "--out"], shard, "a token shard"),
                (["export", CHECKPOINT, "--format", "safetensors", "--out"], "tok.model", "a SentencePiece"),
                (["export", CHECKPOINT, "--format", "safetensors", "--out"], "a.txt", "a file of another kind"),
                (tokenizer, shard, "a token shard"),
                (tokenizer, "model.safetensors", "a safetensors file")):
            with self.subTest(command=args[0], out=out):
                self.refused(args + [out], f"--out '{out}'", what)
        # Its own kind, or an empty file, is replaced as before.
        open(self.path("empty.bin"), "w").close()
        for args, out in ((["prepare", "--text", "a.txt", "--out"], shard),
                          (["prepare", "--text", "a.txt", "--out"], "empty.bin"),
                          (["export", CHECKPOINT, "--format", "safetensors", "--out"], "model.safetensors"),
                          (tokenizer, "tok.model")):
            self.run_ok(args + [out])


def main():
    opts = cli.take_common_options(cli.group_parser(__doc__, {"files": FileChecks}).parse_args())
    return cli.run_groups({"files": FileChecks}, opts, cli.WORKDIR)


if __name__ == "__main__":
    sys.exit(main())
