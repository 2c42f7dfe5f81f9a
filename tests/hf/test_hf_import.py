#!/usr/bin/python3
"""`meshtrain import` and `meshtrain export --format hf` against the independent Hugging Face
reference (tests/oracle/hf_reference.py, written from transformers' definitions) and its
safetensors reader and writer (tests/oracle/safetensors_io.py, written from the format's).

  round_trip     each architecture (Llama tied with llama3 rope and head_dim ≠ C/H; Qwen2 with its
                 biases; Mistral; Mixtral; GPT-2), written sharded in float32: the imported file
                 holds exactly the directory's tensors under meshtrain's names (the name map below is
                 this test's own, from the transformers definitions); export → read by the reference
                 reader gives the same tensors and config fields; import of the export is bitwise the
                 first import
  bf16           a bfloat16 directory imports as its values widened exactly; an export in bf16 rounds
                 to nearest even (torch's rounding)
  training       ten steps of meshtrain from the imported weights against the reference's ten steps
                 on the same tokens (fp32 against float64: loss to 1e-4 relative): Llama on one rank and
                 under dp2·tp2·pp2, Qwen2 under dp2·tp2, Mixtral under dp2·ep2 with a stop after 5 steps
                 and a resume, GPT-2
  bad_input      a missing shard, a wrong shape, a truncated file, a header lying about its offsets, an
                 unknown tensor, an unsupported config value, a full file system under --out: exit 2
                 naming the file and the tensor or key, and neither output written
  tokenizers     the tokenizer written into the INI is the directory's file train reads: a byte-level
                 tokenizer.json before a tokenizer.model; a byte-fallback tokenizer.json (Llama 2's) passed
                 over, with a note, for the tokenizer.model beside it; a Unigram or byte-fallback
                 tokenizer.json alone, and ids past config.json's vocab_size, refused

usage: test_hf_import.py --meshtrain BIN --workdir DIR [--mpiexec MPIEXEC] [--group files|training] [-k PATTERN]
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import unittest

import h5py
import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "oracle"))
sys.path.insert(0, os.path.join(HERE, "..", "cli"))
import hf_reference  # noqa: E402
import test_tokenizer_json as tokjson  # noqa: E402
import safetensors_io  # noqa: E402
from case_runner import run_cases, write_shard  # noqa: E402

MESHTRAIN = WORKDIR = MPIEXEC = None

# Each architecture's config: shapes no other test uses, with what its published models carry.
CONFIGS = {
    "llama": {"vocab_size": 61, "hidden_size": 24, "intermediate_size": 40, "num_hidden_layers": 2,
              "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 8, "tie_word_embeddings": True,
              "rope_theta": 100.0, "max_position_embeddings": 32,
              "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                               "high_freq_factor": 4.0, "original_max_position_embeddings": 16}},
    "qwen2": {"vocab_size": 53, "hidden_size": 32, "intermediate_size": 36, "num_hidden_layers": 2,
              "num_attention_heads": 4, "num_key_value_heads": 1, "tie_word_embeddings": False,
              "max_position_embeddings": 32, "rms_norm_eps": 1e-6},
    "mistral": {"vocab_size": 47, "hidden_size": 32, "intermediate_size": 44, "num_hidden_layers": 2,
                "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 32,
                "sliding_window": None},
    "mixtral": {"vocab_size": 59, "hidden_size": 32, "intermediate_size": 20, "num_hidden_layers": 2,
                "num_attention_heads": 4, "num_key_value_heads": 2, "num_local_experts": 4,
                "num_experts_per_tok": 2, "max_position_embeddings": 32, "sliding_window": None},
    "gpt2": {"vocab_size": 57, "n_embd": 24, "n_head": 3, "n_layer": 2, "n_positions": 32},
}
SEQ_LEN = 16
# config.json fields no meshtrain key carries, which an export writes as what meshtrain trained with:
# dropout (none), Qwen2's sliding_window and max_window_layers (unused: no window), and router_aux_loss_coef where transformers
# adds no aux loss (output_router_logits false).
NOT_CARRIED = {"attn_pdrop", "embd_pdrop", "resid_pdrop", "max_window_layers", "sliding_window"}


def meshtrain_name(arch, hf_name):
    """meshtrain's name of a Hugging Face tensor, from the transformers module paths: the llama-like
    models' `model.` prefix dropped (lm_head has none), Mixtral's block_sparse_moe as the MoE's mlp
    with w1 = gate_proj, w3 = up_proj, w2 = down_proj; GPT-2's `transformer.` prefix dropped."""
    if arch == "gpt2":
        return hf_name.removeprefix("transformer.")
    name = hf_name.removeprefix("model.")
    if arch == "mixtral" and ".block_sparse_moe." in name:
        name = name.replace(".block_sparse_moe.", ".mlp.")
        for theirs, ours in ((".w1.", ".gate_proj."), (".w3.", ".up_proj."), (".w2.", ".down_proj.")):
            name = name.replace(theirs, ours)
    return name


def run(args, launcher=(), timeout=300):
    return subprocess.run(list(launcher) + [MESHTRAIN] + [str(a) for a in args], capture_output=True, text=True,
                          timeout=timeout)


def h5_model(path):
    with h5py.File(path, "r") as f:
        return {name: f["model"][name][()] for name in f["model"]}


class HfCase(unittest.TestCase):
    def setUp(self):
        self.dir = os.path.join(WORKDIR, self.id().split(".")[-1])
        shutil.rmtree(self.dir, ignore_errors=True)
        os.makedirs(self.dir)

    def path(self, *parts):
        return os.path.join(self.dir, *parts)

    def write(self, arch, name="hf", dtype="float32", shard_bytes=2048, seed=3, **overrides):
        out = self.path(name)
        hf_reference.write_hf_dir(out, arch, {**CONFIGS[arch], **overrides}, seed=seed, dtype=dtype,
                                  shard_bytes=shard_bytes, std=0.1)
        return out

    def import_ok(self, directory, stem, seq_len=None):
        args = ["import", directory, "--out", self.path(stem + ".h5"), "--ini", self.path(stem + ".ini")]
        if seq_len:
            args += ["--seq-len", seq_len]
        p = run(args)
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        return self.path(stem + ".h5"), self.path(stem + ".ini")

    def assert_refused(self, p, *needles):
        self.assertEqual(p.returncode, 2, p.stdout + p.stderr)
        for needle in needles:
            self.assertIn(needle, p.stderr, f"the message should name {needle!r}")
        for marker in ("Traceback", "terminate called", "Segmentation fault", "HDF5-DIAG"):
            self.assertNotIn(marker, p.stderr)

    def refused(self, directory, *needles, extra=()):
        p = run(["import", directory, "--out", self.path("w.h5"), "--ini", self.path("w.ini"), *extra])
        self.assert_refused(p, *needles)
        self.assertFalse(os.path.exists(self.path("w.h5")), "weights written")
        self.assertFalse(os.path.exists(self.path("w.ini")), "INI written")
        return p


class RoundTrip(HfCase):
    def check(self, arch):
        source = self.write(arch)
        tensors = safetensors_io.read_weights(source)
        config = json.load(open(os.path.join(source, "config.json")))
        self.assertGreater(len(os.listdir(source)), 3, "the directory should be sharded")
        weights, ini = self.import_ok(source, "first")
        imported = h5_model(weights)
        self.assertEqual(sorted(imported), sorted(meshtrain_name(arch, n) for n in tensors))
        for name, t in tensors.items():
            got = imported[meshtrain_name(arch, name)]
            self.assertEqual(got.dtype, np.float32, name)
            self.assertEqual(got.tobytes(), t.numpy().astype(np.float32).tobytes(), name)
        self.assertIn(f"init_weights = {os.path.abspath(weights)}", open(ini).read())

        exported = self.path("exported")
        p = run(["export", weights, "--format", "hf", "--out", exported])
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        back = safetensors_io.read_weights(exported)
        self.assertEqual(sorted(back), sorted(tensors))
        for name, t in tensors.items():
            self.assertEqual(back[name].numpy().tobytes(), t.numpy().tobytes(), name)
        written = json.load(open(os.path.join(exported, "config.json")))
        for key, value in config.items():
            if key in ("architectures", "torch_dtype", "transformers_version", "bos_token_id", "eos_token_id",
                       "pad_token_id") or value is None:
                continue
            if arch == "mistral" and key in ("model_type",):
                continue  # a Mistral without a window is written as the Llama it is
            if key in NOT_CARRIED or (key == "router_aux_loss_coef" and not config.get("output_router_logits")):
                continue
            if key in written:
                self.assertEqual(written[key], value, f"config.json {key}")
        hf_reference.load_hf_dir(exported)  # the reference builds the model the export describes

        again, _ = self.import_ok(exported, "again")
        second = h5_model(again)
        for name, values in imported.items():
            self.assertEqual(second[name].tobytes(), values.tobytes(), name)

    def test_llama_tied_llama3_rope_head_dim(self):
        self.check("llama")

    def test_qwen2_biases(self):
        self.check("qwen2")

    def test_mistral(self):
        self.check("mistral")

    def test_mixtral(self):
        self.check("mixtral")

    def test_gpt2(self):
        self.check("gpt2")


class Bf16(HfCase):
    def test_widened_exactly_and_rounded_back(self):
        source = self.write("qwen2", dtype="bfloat16", shard_bytes=None)
        tensors = safetensors_io.read_weights(source)
        weights, _ = self.import_ok(source, "w")
        imported = h5_model(weights)
        for name, t in tensors.items():
            want = t.to(torch.float32).numpy()
            self.assertEqual(imported[meshtrain_name("qwen2", name)].tobytes(), want.tobytes(), name)
        p = run(["export", weights, "--format", "hf", "--out", self.path("bf16"), "--dtype", "bf16"])
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        back = safetensors_io.read_weights(self.path("bf16"))
        for name, t in tensors.items():
            self.assertEqual(back[name].dtype, torch.bfloat16, name)
            self.assertTrue(torch.equal(back[name], t), name)


class Training(HfCase):
    """Ten steps from the imported weights against the reference's ten steps."""

    KEYS = {"train.micro_batch": 2, "train.global_batch": 4, "train.steps": 10, "train.precision": "fp32",
            "optim.lr": 1e-3, "optim.min_lr": 1e-4, "optim.warmup_steps": 2, "data.order": "sequential"}

    def compare(self, arch, launcher=(), layout=(), stop_after=None, **overrides):
        source = self.write(arch, shard_bytes=None, **overrides)
        vocab = CONFIGS[arch]["vocab_size"]
        tokens = np.random.default_rng(5).integers(0, vocab, 700)
        write_shard(self.path("data.bin"), tokens)
        _, ini = self.import_ok(source, "w", seq_len=SEQ_LEN)
        args = ["train", "--config", ini, "--data.train", self.path("data.bin"), "--checkpoint.dir", self.path("ck"),
                "--checkpoint.every", 0, "--log.metrics", self.path("m.jsonl"), "--data.tokenizer", ""]
        for key, value in {**self.KEYS, **dict(layout)}.items():
            args += [f"--{key}", value]
        if stop_after:
            p = run(args + ["--train.stop_after", stop_after], launcher)
            self.assertEqual(p.returncode, 3, p.stdout + p.stderr)
        p = run(args, launcher)
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        got = [json.loads(line) for line in open(self.path("m.jsonl")) if line.strip()]
        self.assertEqual([r["step"] for r in got], list(range(1, 11)))

        cfg = hf_reference.train_config(SEQ_LEN, **{k.replace(".", "_"): v for k, v in self.KEYS.items()
                                                    if not k.startswith("data.") and k != "train.precision"})
        want = hf_reference.train_steps(hf_reference.load_hf_dir(source), tokens, cfg)
        for step, (r, loss) in enumerate(zip(got, want["loss"]), 1):
            self.assertLess(abs(r["loss"] - loss) / loss, 1e-4, f"step {step}: {r['loss']} vs reference {loss}")

    def test_llama_one_rank(self):
        self.compare("llama")

    def test_llama_dp2_tp2_pp2(self):
        self.compare("llama", [MPIEXEC, "-n", "8"], {"parallel.tp": 2, "parallel.pp": 2})

    def test_qwen2_dp2_tp2(self):  # the q|k|v biases split with their columns
        self.compare("qwen2", [MPIEXEC, "-n", "4"], {"parallel.tp": 2}, num_key_value_heads=2)

    def test_mixtral_dp2_ep2_resumed(self):
        self.compare("mixtral", [MPIEXEC, "-n", "2"], {"parallel.ep": 2}, stop_after=5)

    def test_gpt2(self):
        self.compare("gpt2")


class BadInput(HfCase):
    def test_ini_through_the_output_guard(self):
        # --ini replaced any file, an unrelated text included, and exited 0.
        source = self.write("llama")
        os.makedirs(self.path("a_dir"))
        with open(self.path("notes.txt"), "w") as f:
            f.write("my notes\n")
        for ini, needles in ((self.path("notes.txt"), ("--ini", "notes.txt", "replaces only its own kind")),
                             (self.path("a_dir"), ("--ini", "a_dir", "is a directory")),
                             (os.path.join(source, "config.json"), ("--ini", "the same file as config.json"))):
            with self.subTest(ini=ini):
                p = run(["import", source, "--out", self.path("w.h5"), "--ini", ini])
                self.assert_refused(p, *needles)
                self.assertFalse(os.path.exists(self.path("w.h5")), "weights written")
        self.assertEqual(open(self.path("notes.txt")).read(), "my notes\n")
        # Its own kind again: an earlier import's INI, and a config written by hand, are replaced.
        with open(self.path("mine.ini"), "w") as f:
            f.write("[train]\nsteps = 3\n")
        for _ in range(2):
            p = run(["import", source, "--out", self.path("w.h5"), "--ini", self.path("mine.ini")])
            self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
            self.assertIn("[model]", open(self.path("mine.ini")).read())

    def test_full_disk(self):
        # The weights on a file system too small for them: exit 1 with the writer's text, now 2 naming --out.
        mount = self.path("full")
        os.makedirs(mount)
        if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16k", "tmpfs", mount], capture_output=True,
                          timeout=10).returncode != 0:
            self.skipTest("tmpfs cannot be mounted here (not root)")
        self.addCleanup(subprocess.run, ["umount", "-l", mount], capture_output=True, timeout=10)
        out = os.path.join(mount, "w.h5")
        p = run(["import", self.write("llama"), "--out", out, "--ini", os.path.join(mount, "w.ini")])
        self.assert_refused(p, out, "No space left on device")
        self.assertEqual(os.listdir(mount), [], "files left on the full file system")

    def test_seq_len_zero(self):
        # 0 silently meant the default.
        self.refused(self.write("llama"), "--seq-len = 0", "must be >= 1", extra=["--seq-len", "0"])

    def test_missing_shard(self):
        source = self.write("llama")
        index = json.load(open(os.path.join(source, "model.safetensors.index.json")))
        shard = sorted(set(index["weight_map"].values()))[1]
        os.remove(os.path.join(source, shard))
        self.refused(source, shard)

    def test_wrong_shape(self):
        source = self.write("qwen2", shard_bytes=None)
        config = json.load(open(os.path.join(source, "config.json")))
        config["intermediate_size"] += 2  # the file's MLP matrices are now the wrong shape
        json.dump(config, open(os.path.join(source, "config.json"), "w"))
        self.refused(source, "mlp.", "model.safetensors")

    def test_truncated_file(self):
        source = self.write("mistral", shard_bytes=None)
        path = os.path.join(source, "model.safetensors")
        os.truncate(path, os.path.getsize(path) - 100)
        self.refused(source, "model.safetensors")

    def test_header_lying_about_offsets(self):
        source = self.write("gpt2", shard_bytes=None)
        path = os.path.join(source, "model.safetensors")
        raw = open(path, "rb").read()
        n = int.from_bytes(raw[:8], "little")
        header = json.loads(raw[8:8 + n])
        name = next(k for k in header if k != "__metadata__")
        begin, end = header[name]["data_offsets"]
        header[name]["data_offsets"] = [begin, end + 4]
        text = json.dumps(header).encode()
        text += b" " * (-len(text) % 8)
        open(path, "wb").write(len(text).to_bytes(8, "little") + text + raw[8 + n:])
        self.refused(source, name)

    def test_unknown_tensor(self):
        source = self.write("llama", shard_bytes=None)
        tensors = safetensors_io.read_weights(source)
        tensors["model.layers.0.self_attn.o_proj.bias"] = torch.zeros(24)  # Llama's attention_bias, not set
        os.remove(os.path.join(source, "model.safetensors"))
        safetensors_io.write_weights(source, tensors)
        self.refused(source, "model.layers.0.self_attn.o_proj.bias")

    def test_unsupported_config(self):
        self.refused(self.write("mistral", sliding_window=8), "sliding_window", extra=["--seq-len", 16])
        self.refused(self.write("llama", name="bias", attention_bias=True), "attention_bias")


class Tokenizers(HfCase):
    """The tokenizer import writes into the INI: the one of the directory's files that train reads, checked as
    train checks it; a file meshtrain does not read, alone, and ids past the model's vocabulary refused."""

    def byte_level_json(self, directory):
        tokenizer = tokjson.tokenizer_file([], tokjson.byte_level())  # the 256 byte pieces, no merges
        with open(os.path.join(directory, "tokenizer.json"), "w", encoding="utf-8") as f:
            json.dump(tokenizer, f, ensure_ascii=False)

    def unread_json(self, directory, model):
        """A tokenizer.json whose model meshtrain does not read (refused at its model's first key)."""
        with open(os.path.join(directory, "tokenizer.json"), "w") as f:
            json.dump({"version": "1.0", "truncation": None, "padding": None, "model": model}, f)

    def sentencepiece_model(self, directory):
        text = self.path("corpus.txt")
        with open(text, "w") as f:
            f.write("".join(f"line {i} of a small corpus, with words to merge\n" for i in range(200)))
        p = run(["tokenizer", "train", "--text", text, "--vocab", 300, "--out", os.path.join(directory,
                                                                                           "tokenizer.model")])
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)

    def data_tokenizer(self, ini):
        lines = open(ini).read().split("[data]\n")
        return lines[1].split("\n")[0].removeprefix("tokenizer = ") if len(lines) > 1 else None

    def test_the_file_train_reads(self):
        # A byte-level tokenizer.json: taken before a tokenizer.model beside it.
        source = self.write("llama", vocab_size=320)
        self.byte_level_json(source)
        self.sentencepiece_model(source)
        _, ini = self.import_ok(source, "both")
        self.assertEqual(self.data_tokenizer(ini), os.path.join(source, "tokenizer.json"))
        # Llama 2's directories: a byte-fallback BPE tokenizer.json (imported as data.tokenizer, which train
        # then refused) beside a tokenizer.model that meshtrain reads.
        self.unread_json(source, {"type": "BPE", "byte_fallback": True, "vocab": {}, "merges": []})
        p = run(["import", source, "--out", self.path("llama2.h5"), "--ini", self.path("llama2.ini")])
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        self.assertIn("model.byte_fallback", p.stdout)
        self.assertIn("importing " + os.path.join(source, "tokenizer.model") + " instead", p.stdout)
        self.assertEqual(self.data_tokenizer(self.path("llama2.ini")), os.path.join(source, "tokenizer.model"))
        # No tokenizer at all: none in the INI.
        os.remove(os.path.join(source, "tokenizer.json"))
        os.remove(os.path.join(source, "tokenizer.model"))
        _, ini = self.import_ok(source, "none")
        self.assertIsNone(self.data_tokenizer(ini))

    def test_unread_alone_and_ids_past_the_vocabulary_refused(self):
        source = self.write("llama", vocab_size=320)
        self.unread_json(source, {"type": "Unigram", "vocab": [["<unk>", 0.0]]})
        self.refused(source, "no tokenizer meshtrain reads", "tokenizer.json", "model.type", "Unigram")
        self.unread_json(source, {"type": "BPE", "byte_fallback": True, "vocab": {}, "merges": []})
        self.refused(source, "no tokenizer meshtrain reads", "model.byte_fallback")
        # 256 byte pieces (ids to 255) or 300 SentencePiece pieces for a model of 200 embeddings.
        small = self.write("llama", name="small", vocab_size=200)
        self.byte_level_json(small)
        self.refused(small, "tokenizer.json", "its ids reach 255", "vocab_size is 200")
        os.remove(os.path.join(small, "tokenizer.json"))
        self.sentencepiece_model(small)
        self.refused(small, "tokenizer.model", "its ids reach 299", "vocab_size is 200")


def main():
    global MESHTRAIN, WORKDIR, MPIEXEC
    ap = argparse.ArgumentParser()
    ap.add_argument("--meshtrain", required=True)
    ap.add_argument("--workdir", required=True)
    ap.add_argument("--mpiexec", default=shutil.which("mpiexec"))
    ap.add_argument("--group", choices=["files", "training", "all"], default="all",
                    help="files: round trips, bf16, bad input; training: the ten-step runs")
    ap.add_argument("-k", dest="pattern")
    args = ap.parse_args()
    MESHTRAIN, WORKDIR, MPIEXEC = os.path.abspath(args.meshtrain), os.path.abspath(args.workdir), args.mpiexec
    groups = {"files": (RoundTrip, Bf16, BadInput, Tokenizers), "training": (Training,)}
    run_cases(groups["files"] + groups["training"] if args.group == "all" else groups[args.group], args.pattern)


if __name__ == "__main__":
    main()
