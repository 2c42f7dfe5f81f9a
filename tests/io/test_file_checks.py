#!/usr/bin/env python3
"""Files checked for what they are before they are used, and commands that never destroy their input
(share/docs/usage.md: Files checked before they are used; Outputs that never destroy a file).

Each case builds a real bad file — an HDF5 file made with h5py declaring 10^11 elements in a few
hundred bytes, a checkpoint with a NaN written into a tensor and its checksum recomputed here (by
test_crash_safety.py's independent meshtrain-sum64, so only the finiteness check can refuse it), a
checkpoint claiming format version 99, a deeper model's weights — and runs the real commands on it
(inspect, export, sample, a named resume, checkpoint.init_weights) — and a mixture-of-experts checkpoint
with an expert tensor deleted or reshaped (its checksum still valid), a model_family its stored config
contradicts, a stored config that is not INI, one that claims a 11 GB model over 16-wide tensors (sample
under a 4 GB address-space limit), which the tools must refuse with the loader's own checks. Each must exit 2 with a message
naming the culprit, and every file in the case directory must be byte for byte as before (sha256),
with nothing added. export and prepare are pointed at their own inputs (by name, through a symlink
and through a hard link), at a directory and at another checkpoint.

usage: test_file_checks.py --meshtrain BIN --workdir DIR [-k PATTERN] [-v]
"""

import os
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "cli"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import test_cli as cli  # noqa: E402
from test_cli import describe, run, train_args, tree_digest  # noqa: E402
from test_crash_safety import add_reference_checksums, sum64, verify_checkpoint  # noqa: E402

import h5py  # noqa: E402
import numpy as np  # noqa: E402

CHECKPOINT = os.path.join("ck", "step_00000002.h5")


# The TINY model as a llama whose block is a mixture of 2 experts, each token routed to 1.
MOE = {**cli.LLAMA, "model.experts": 2, "model.experts_per_token": 1}
MOE_CHECKPOINT = os.path.join("moe", "step_00000002.h5")
EXPERT = "model/layers.0.mlp.experts.1.up_proj.weight"  # [24, 16]: [SwiGLU width, d_model]


def make_fixture(group):
    """Three 2-step runs: ck/ of the 1-layer TINY model, deep/ of the same model with 2 layers, moe/ of MOE."""
    d = cli.make_fixture(group)
    for keys in ({"checkpoint.dir": "deep", "model.layers": 2}, {**MOE, "checkpoint.dir": "moe"}):
        p = run(train_args({"data.train": "shard.bin", "train.steps": 2, **keys}), d)
        if p.returncode != 0:
            raise RuntimeError(f"fixture run failed: {describe(p)}")
    return d


def built_with_asan():
    """Whether the meshtrain under test links AddressSanitizer's runtime (the debug-asan preset)."""
    p = subprocess.run(["ldd", cli.MESHTRAIN], capture_output=True, text=True)
    return "libasan" in p.stdout


class FileChecks(cli.CliCase):
    """Exit 2 naming the culprit; the case directory unchanged file for file."""

    group = "files"

    @classmethod
    def setUpClass(cls):
        cls.fixture = make_fixture(cls.group)

    def setUp(self):
        super().setUp()
        for name in ("shard.bin", "ck", "deep", "moe"):
            src = os.path.join(self.fixture, name)
            (shutil.copytree if os.path.isdir(src) else shutil.copy)(src, self.path(name))

    def refused(self, args, *needles, launcher=()):
        """Runs args in the case directory: exit 2, every needle on stderr, no file added or changed."""
        before = tree_digest(self.dir)
        p = run(args, self.dir, launcher=launcher)
        self.assert_bad_input(p, *needles)
        self.assertEqual(tree_digest(self.dir), before, f"meshtrain {' '.join(args)} wrote or changed files")
        return p

    def refused_by_every_reader(self, name, *needles, model=None):
        """inspect, export, sample, a named resume and init_weights (of a run of `model`'s keys) all refuse `name`."""
        self.refused(["inspect", name], *needles)
        self.refused(["export", name, "--format", "safetensors", "--out", "out.safetensors"], *needles)
        p = self.refused(["sample", "--checkpoint", name, "--prompt", "hi", "--tokens", "4"], *needles)
        self.assertEqual(p.stdout, "", "sample printed text from a checkpoint it should refuse")
        keys = {**(model or {}), "data.train": "shard.bin", "checkpoint.dir": "new", "train.steps": 4,
                "log.metrics": "m.jsonl"}
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

    # --- the tools check what the loader checks: the tensors, family and config the file stores

    def assert_checksums_hold(self, path):
        """Every dataset's stored checksum is sum64 of its data: checksum verification alone passes the file."""
        with h5py.File(self.path(path), "r") as f:
            datasets = []
            f.visititems(lambda name, obj: datasets.append(obj) if isinstance(obj, h5py.Dataset) else None)
            for d in datasets:
                self.assertEqual(int(d.attrs["checksum"]), sum64(d[()]), d.name)

    def edit(self, path, change):
        """change(h5py file) applied to `path` in place."""
        with h5py.File(self.path(path), "r+") as f:
            change(f)

    def test_an_expert_tensor_missing(self):
        self.edit(MOE_CHECKPOINT, lambda f: f.__delitem__(EXPERT))
        self.assert_checksums_hold(MOE_CHECKPOINT)
        self.refused_by_every_reader(MOE_CHECKPOINT, MOE_CHECKPOINT, f"has no dataset /{EXPERT}", "[24, 16]",
                                     "needs", model=MOE)

    def test_an_expert_tensor_reshaped(self):
        def reshape(f):
            a, checksum = f[EXPERT][()], f[EXPERT].attrs["checksum"]
            del f[EXPERT]
            f[EXPERT] = a.reshape(16, 24)  # the same elements in the same order: the same checksum
            f[EXPERT].attrs["checksum"] = checksum
        self.edit(MOE_CHECKPOINT, reshape)
        self.assert_checksums_hold(MOE_CHECKPOINT)
        self.refused_by_every_reader(MOE_CHECKPOINT, MOE_CHECKPOINT, f"/{EXPERT} has shape [16, 24]", "needs [24, 16]",
                                     model=MOE)

    def test_a_family_that_contradicts_the_stored_config(self):
        self.edit(MOE_CHECKPOINT, lambda f: f.attrs.__setitem__("model_family", "gpt2"))
        self.refused_by_every_reader(MOE_CHECKPOINT, MOE_CHECKPOINT, "inconsistent", "model_family = 'gpt2'",
                                     "model.arch = llama", model=MOE)

    def test_a_stored_config_that_is_not_ini(self):
        self.edit(CHECKPOINT, lambda f: f.attrs.__setitem__("config", '{"model": {"layers": 1, "d_model": 16}}'))
        self.refused_by_every_reader(CHECKPOINT, CHECKPOINT, "attribute config", "invalid line", "INI")

    def test_a_checkpoint_without_its_stored_config(self):
        """The tools take the model's shape from the stored config: without it a meshtrain checkpoint is damaged.
        (Resume refuses it too; init_weights checks the tensors against the run's model and needs none.)"""
        self.edit(CHECKPOINT, lambda f: f.attrs.__delitem__("config"))
        for args in (["inspect", CHECKPOINT], ["export", CHECKPOINT, "--format", "safetensors", "--out", "o.st"],
                     ["sample", "--checkpoint", CHECKPOINT, "--prompt", "hi", "--tokens", "4"]):
            self.refused(args, CHECKPOINT, "no config attribute")

    def test_sample_checks_shapes_before_allocating_the_stored_model(self):
        """A stored config of d_model 30000 (2.7e9 parameters, 11 GB, every tensor within the 2^31 - 1 elements one
        tensor may hold) over the 16-wide tensors: refused naming the first tensor, under a 4 GB address-space limit
        that the model's allocation would break."""
        self.edit(MOE_CHECKPOINT, lambda f: f.attrs.__setitem__(
            "config", f.attrs["config"].replace("d_model = 16", "d_model = 30000")))
        # AddressSanitizer reserves terabytes of address space for its shadow and cannot start under the
        # limit: a sanitized build runs the same refusal without it.
        limited = () if built_with_asan() else ("sh", "-c", 'ulimit -v 4000000 && exec "$@"', "sh")
        needles = (MOE_CHECKPOINT, "/model/embed_tokens.weight has shape [256, 16]", "needs [256, 30000]")
        p = self.refused(["sample", "--checkpoint", MOE_CHECKPOINT, "--prompt", "hi", "--tokens", "4"], *needles,
                         launcher=limited)
        self.assertEqual(p.stdout, "")
        self.refused(["inspect", MOE_CHECKPOINT], *needles)
        self.refused(["export", MOE_CHECKPOINT, "--format", "safetensors", "--out", "out.safetensors"], *needles)

    def test_stored_config_with_a_tensor_too_large_is_refused_naming_the_file(self):
        """The size checks of the keys (core/model_sizes.hpp) run on a stored config too, and the refusal names
        the checkpoint: d_model 65536 makes q|k|v [131072, 65536], past the 2^31 - 1 elements of one tensor."""
        self.edit(MOE_CHECKPOINT, lambda f: f.attrs.__setitem__(
            "config", f.attrs["config"].replace("d_model = 16", "d_model = 65536")))
        needles = (MOE_CHECKPOINT, "q_proj|k_proj|v_proj.weight [131072, 65536]", "model.d_model 65536")
        self.refused(["sample", "--checkpoint", MOE_CHECKPOINT, "--prompt", "hi", "--tokens", "4"], *needles)
        self.refused(["inspect", MOE_CHECKPOINT], *needles)

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
