#!/usr/bin/python3
"""LoRA adapters in and out of meshtrain (`import --adapter`, `export --format peft`, `export --format hf
--merge-lora`) against the independent PyTorch LoRA of tests/oracle/lora_reference.py (PEFT's
definitions) on small GQA llama models and a small GPT-2 of tests/oracle/hf_reference.py.

  RoundTrip   a PEFT adapter (B nonzero) on attention only, and on all linears under rsLoRA: the imported
              file holds the base and the adapter tensors bitwise, the INI the [lora] keys; the PEFT export
              gives the original tensors bitwise and its config fields; the merged Hugging Face export's
              logits equal the reference's adapter model's (float64, 1e-5), its other tensors are the base's
              bitwise; target_modules "all-linear" imports as every module; GPT-2 on c_attn, c_proj (both)
              and c_fc: its Conv1D [in, out] weights, PEFT's transformer. names and fan_in_fan_out true, the
              same checks (the merged logits test the transposed merge); fan_in_fan_out false imports too
  BaseIdentity  an adapter-only checkpoint as the trainer writes it (the contract of issue 28: adapters under
              /model, lora_base and lora_base_hash, checkpoint.init_weights the base file): exported as PEFT and
              merged from its base; lora_base_hash computed here from the spec (XXH64 written from its
              definition, over sorted (name, checksum) pairs of the base tensors) must be what meshtrain
              computes, adapters beside the base leave it unchanged, and a changed base is refused
  Mixtral     a small Mixtral (GQA, 4 experts, top 2) with PEFT's adapters on q_proj, v_proj, every routed
              expert's w1, w2, w3 and the routers (`gate`): imported bitwise under meshtrain's names (this test's
              own map), the [lora] targets in meshtrain's names; the PEFT export gives every tensor back bitwise
              and target_modules in Mixtral's names; the merged export equals the reference's merge (W + s·B A
              in float64, 1e-6) tensor by tensor and its logits the adapter model's; "all-linear" imports as
              every module and the router; `inspect` reads the file; refused: target_modules in meshtrain's
              names (gate_proj), tensors under meshtrain's names, and the PEFT and merged exports of a trained
              LoRA checkpoint of a mixture of experts with a shared expert (no Hugging Face architecture)
  Refusals    each adapter_config.json value this LoRA does not compute, a missing, extra or misshapen tensor,
              and exports asked of files without adapters: exit 2 naming the key, tensor or file, nothing written;
              an adapter_config.json nested 100,000 deep, or with a number beyond a double's range
  Exports     again into their own earlier directories (hf, bf16, merged, peft); full and read-only mounts
  OneWriterAtATime  a second export or import of an output whose lock another process holds (flock, taken by
              this test): exit 2 naming it, nothing written; a stale empty lock file no obstacle, somebody's
              file under its name refused and kept; two exports and two imports started at once: each ends 0
              or 2, the output equals a lone run's, no temporary or lock left

usage: test_lora_adapters.py --meshtrain BIN --workdir DIR [-k PATTERN]
"""
import argparse
import fcntl
import json
import os
import shutil
import struct
import subprocess
import sys
import unittest

import h5py
import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "oracle"))
import hf_reference  # noqa: E402
import lora_reference  # noqa: E402
import safetensors_io  # noqa: E402
from case_runner import run_cases, write_shard  # noqa: E402

MESHTRAIN = WORKDIR = None

# GQA (4 query heads over 2 key/value heads) with head_dim ≠ C/H and an MLP width of its own, so that
# every adapter's in and out differ.
CONFIG = {"vocab_size": 53, "hidden_size": 24, "intermediate_size": 36, "num_hidden_layers": 2,
          "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 8, "tie_word_embeddings": False,
          "max_position_embeddings": 32}
ATTENTION = ["q_proj", "k_proj", "v_proj", "o_proj"]
ALL_LINEAR = ATTENTION + ["gate_proj", "up_proj", "down_proj"]
GPT2_CONFIG = {"vocab_size": 57, "n_embd": 24, "n_head": 3, "n_layer": 2, "n_positions": 32}
GPT2_ALL_LINEAR = ["c_attn", "c_proj", "c_fc"]
# Mixtral: GQA, 4 experts of width 12, top 2; every adapter's in and out differ but for the experts' w1/w3.
MIXTRAL_CONFIG = {"vocab_size": 53, "hidden_size": 16, "intermediate_size": 12, "num_hidden_layers": 2,
                  "num_attention_heads": 4, "num_key_value_heads": 2, "num_local_experts": 4,
                  "num_experts_per_tok": 2, "tie_word_embeddings": False, "max_position_embeddings": 32}
MIXTRAL_TARGETS = ["q_proj", "v_proj", "w1", "w2", "w3", "gate"]
MIXTRAL_ALL_LINEAR = ["q_proj", "k_proj", "v_proj", "o_proj", "w1", "w2", "w3", "gate"]


def run(args):
    return subprocess.run([MESHTRAIN] + [str(a) for a in args], capture_output=True, text=True, timeout=120)


def h5_model(path):
    with h5py.File(path, "r") as f:
        return {name: f["model"][name][()] for name in f["model"]}


def meshtrain_adapter_name(peft_name):
    """This test's own map: PEFT's base_model.model.model.<path> is meshtrain's <path>."""
    return peft_name.removeprefix("base_model.model.model.")


def meshtrain_mixtral_name(hf_name):
    """This test's own map of Mixtral's names (a weight's, or PEFT's adapter's) to meshtrain's:
    model.layers.0.block_sparse_moe.experts.1.w1.weight -> layers.0.mlp.experts.1.gate_proj.weight."""
    name = hf_name.removeprefix("base_model.model.").removeprefix("model.")
    name = name.replace(".block_sparse_moe.", ".mlp.")
    for theirs, ours in ((".w1.", ".gate_proj."), (".w3.", ".up_proj."), (".w2.", ".down_proj.")):
        name = name.replace(theirs, ours)
    return name


# XXH64, written from its specification (github.com/Cyan4973/xxHash, doc/xxhash_spec.md), for the base
# identity: meshtrain's C++ uses the xxhash library.
P1, P2, P3, P4, P5 = (0x9E3779B185EBCA87, 0xC2B2AE3D27D4EB4F, 0x165667B19E3779F9, 0x85EBCA77C2B2AE63,
                      0x27D4EB2F165667C5)
MASK = (1 << 64) - 1


def rotl(x, r):
    return ((x << r) | (x >> (64 - r))) & MASK


def xxh64_round(acc, lane):
    return (rotl((acc + lane * P2) & MASK, 31) * P1) & MASK


def xxh64(data, seed=0):
    n, i = len(data), 0
    if n >= 32:
        v = [(seed + P1 + P2) & MASK, (seed + P2) & MASK, seed, (seed - P1) & MASK]
        while i + 32 <= n:
            v = [xxh64_round(v[j], struct.unpack_from("<Q", data, i + 8 * j)[0]) for j in range(4)]
            i += 32
        h = (rotl(v[0], 1) + rotl(v[1], 7) + rotl(v[2], 12) + rotl(v[3], 18)) & MASK
        for lane in v:
            h = ((h ^ xxh64_round(0, lane)) * P1 + P4) & MASK
    else:
        h = (seed + P5) & MASK
    h = (h + n) & MASK
    while i + 8 <= n:
        h = (rotl(h ^ xxh64_round(0, struct.unpack_from("<Q", data, i)[0]), 27) * P1 + P4) & MASK
        i += 8
    if i + 4 <= n:
        h = (rotl(h ^ (struct.unpack_from("<I", data, i)[0] * P1 & MASK), 23) * P2 + P3) & MASK
        i += 4
    while i < n:
        h = (rotl(h ^ (data[i] * P5 & MASK), 11) * P1) & MASK
        i += 1
    h = ((h ^ (h >> 33)) * P2) & MASK
    h = ((h ^ (h >> 29)) * P3) & MASK
    return h ^ (h >> 32)


def base_identity(path):
    """The base identity as share/docs/usage.md states it: XXH64 over the sorted base tensors' names, each
    with its terminating zero byte, and their stored checksums as 8 little-endian bytes."""
    data = b""
    with h5py.File(path, "r") as f:
        for name in sorted(f["model"]):
            if ".lora_A." in name or ".lora_B." in name:
                continue
            data += name.encode() + b"\0" + struct.pack("<Q", int(f["model"][name].attrs["checksum"]))
    return f"{xxh64(data):016x}"


class LoraCase(unittest.TestCase):
    def setUp(self):
        self.dir = os.path.join(WORKDIR, self.id().split(".")[-1])
        shutil.rmtree(self.dir, ignore_errors=True)
        os.makedirs(self.dir)

    def path(self, *parts):
        return os.path.join(self.dir, *parts)

    def base_dir(self, name="hf", seed=3):
        hf_reference.write_hf_dir(self.path(name), "llama", CONFIG, seed=seed, std=0.1)
        return self.path(name)

    def adapter(self, base, targets, r, alpha, name="adapter", dropout=0.0, rslora=False, config=None):
        """A PEFT adapter of `base` written by the reference, B drawn nonzero."""
        model = lora_reference.apply_lora(hf_reference.load_hf_dir(base), targets, r, alpha, dropout, rslora,
                                          seed=7, b_std=0.05)
        cfg, tensors = lora_reference.write_peft_adapter(model, self.path(name),
                                                         {"base_model_name_or_path": base, **(config or {})})
        return self.path(name), cfg, tensors

    def import_adapter(self, base, adapter, stem="w"):
        p = run(["import", base, "--adapter", adapter, "--out", self.path(stem + ".h5"), "--ini",
                 self.path(stem + ".ini")])
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        return self.path(stem + ".h5"), self.path(stem + ".ini")

    def export(self, *args):
        p = run(["export", *args])
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)

    def assert_refused(self, p, *needles):
        self.assertEqual(p.returncode, 2, p.stdout + p.stderr)
        for needle in needles:
            self.assertIn(needle, p.stderr, f"the message should name {needle!r}")
        for marker in ("Traceback", "terminate called", "Segmentation fault", "HDF5-DIAG"):
            self.assertNotIn(marker, p.stderr)

    def assert_same_adapter(self, exported, cfg, tensors, base_file):
        got_cfg, got = lora_reference.read_peft_adapter(exported)
        self.assertEqual(sorted(got), sorted(tensors))
        for name, t in tensors.items():
            self.assertEqual(got[name].dtype, torch.float32, name)
            self.assertEqual(got[name].numpy().tobytes(), t.numpy().tobytes(), name)
        for key in ("r", "lora_alpha", "lora_dropout", "target_modules", "use_rslora", "bias", "fan_in_fan_out",
                    "peft_type", "task_type", "use_dora", "rank_pattern", "alpha_pattern", "modules_to_save",
                    "inference_mode", "init_lora_weights", "layers_to_transform"):
            self.assertEqual(got_cfg[key], cfg[key], f"adapter_config.json {key}")
        self.assertEqual(got_cfg["base_model_name_or_path"], os.path.abspath(base_file))

    def assert_merged_logits(self, merged_dir, base, adapter, base_tensors, vocab=CONFIG["vocab_size"]):
        """The merged export against the reference's adapter model on the same tokens."""
        tokens = torch.from_numpy(np.random.default_rng(2).integers(0, vocab, (2, 13)))
        inputs, targets = tokens[:, :-1], tokens[:, 1:]
        # Inference: the adapter model in eval mode, its lora_dropout the identity.
        adapted = lora_reference.load_peft_adapter(hf_reference.load_hf_dir(base), adapter).eval()
        want = hf_reference.forward_loss(adapted, inputs, targets)["logits"]
        got = hf_reference.forward_loss(hf_reference.load_hf_dir(merged_dir), inputs, targets)["logits"]
        base_only = hf_reference.forward_loss(hf_reference.load_hf_dir(base), inputs, targets)["logits"]
        self.assertGreater(float((want - base_only).abs().max()), 1e-3, "the adapter should change the logits")
        self.assertLess(float((got - want).abs().max()), 1e-5)
        merged = safetensors_io.read_weights(merged_dir)
        self.assertEqual(sorted(merged), sorted(base_tensors))
        _, adapted = lora_reference.read_peft_adapter(adapter)
        for name, t in base_tensors.items():
            lora_a = "base_model.model." + name.removesuffix(".weight") + ".lora_A.weight"
            if lora_a not in adapted:
                self.assertEqual(merged[name].numpy().tobytes(), t.numpy().tobytes(), name)


class RoundTrip(LoraCase):
    def check(self, targets, r, alpha, dropout=0.0, rslora=False):
        base = self.base_dir()
        base_tensors = safetensors_io.read_weights(base)
        adapter, cfg, tensors = self.adapter(base, targets, r, alpha, dropout=dropout, rslora=rslora)
        weights, ini = self.import_adapter(base, adapter)

        held = h5_model(weights)
        names = {hf_reference_name.removeprefix("model."): t for hf_reference_name, t in base_tensors.items()}
        names.update({meshtrain_adapter_name(n): t for n, t in tensors.items()})
        self.assertEqual(sorted(held), sorted(names))
        for name, t in names.items():
            self.assertEqual(held[name].tobytes(), t.numpy().astype(np.float32).tobytes(), name)
        text = open(ini).read()
        lora = text[text.index("[lora]\n"):].split("\n[")[0] + "\n"
        self.assertIn(f"rank = {r}\n", lora)
        self.assertIn(f"targets = {','.join(t for t in ALL_LINEAR if t in targets)}\n", lora)
        self.assertIn(f"rslora = {'true' if rslora else 'false'}\n", lora)
        self.assertEqual(float(lora.split("alpha = ")[1].split("\n")[0]), alpha)
        self.assertEqual(float(lora.split("dropout = ")[1].split("\n")[0]), dropout)
        self.assertIn(f"init_weights = {os.path.abspath(weights)}", text)

        self.export(weights, "--format", "peft", "--out", self.path("peft"))
        self.assert_same_adapter(self.path("peft"), cfg, tensors, weights)
        self.export(weights, "--format", "hf", "--merge-lora", "--out", self.path("merged"))
        self.assert_merged_logits(self.path("merged"), base, adapter, base_tensors)

    def test_attention_only(self):
        self.check(ATTENTION, r=4, alpha=8, dropout=0.1)

    def test_all_linear_rslora(self):
        self.check(ALL_LINEAR, r=3, alpha=5.5, rslora=True)

    def test_all_linear_by_name(self):
        base = self.base_dir()
        adapter, _, _ = self.adapter(base, ALL_LINEAR, 2, 4, config={"target_modules": "all-linear"})
        _, ini = self.import_adapter(base, adapter)
        self.assertIn(f"targets = {','.join(ALL_LINEAR)}\n", open(ini).read())


    def test_gpt2_conv1d(self):
        base = self.path("gpt2")
        hf_reference.write_hf_dir(base, "gpt2", GPT2_CONFIG, seed=3, std=0.1)
        base_tensors = safetensors_io.read_weights(base)
        adapter, cfg, tensors = self.adapter(base, GPT2_ALL_LINEAR, 3, 6)
        self.assertTrue(cfg["fan_in_fan_out"], "PEFT writes fan_in_fan_out true for Conv1D")
        self.assertEqual(len(tensors), 2 * 4 * GPT2_CONFIG["n_layer"], "c_proj names the attention's and the MLP's")
        weights, ini = self.import_adapter(base, adapter)
        held = h5_model(weights)
        names = {name.removeprefix("transformer."): t for name, t in base_tensors.items()}
        names.update({name.removeprefix("base_model.model.transformer."): t for name, t in tensors.items()})
        self.assertEqual(sorted(held), sorted(names))
        for name, t in names.items():
            self.assertEqual(held[name].tobytes(), t.numpy().astype(np.float32).tobytes(), name)
        self.assertIn(f"targets = {','.join(GPT2_ALL_LINEAR)}\n", open(ini).read())
        self.export(weights, "--format", "peft", "--out", self.path("peft"))
        self.assert_same_adapter(self.path("peft"), cfg, tensors, weights)
        self.export(weights, "--format", "hf", "--merge-lora", "--out", self.path("merged"))
        self.assert_merged_logits(self.path("merged"), base, adapter, base_tensors, GPT2_CONFIG["vocab_size"])


class Mixtral(LoraCase):
    def base_dir(self, name="hf", seed=3):
        hf_reference.write_hf_dir(self.path(name), "mixtral", MIXTRAL_CONFIG, seed=seed, std=0.1)
        return self.path(name)

    def test_round_trip_and_merge(self):
        base = self.base_dir()
        base_tensors = safetensors_io.read_weights(base)
        adapter, cfg, tensors = self.adapter(base, MIXTRAL_TARGETS, 3, 6)
        experts = MIXTRAL_CONFIG["num_local_experts"] * MIXTRAL_CONFIG["num_hidden_layers"]
        self.assertEqual(len(tensors), 2 * (3 * experts + 3 * MIXTRAL_CONFIG["num_hidden_layers"]))
        weights, ini = self.import_adapter(base, adapter)

        held = h5_model(weights)
        names = {meshtrain_mixtral_name(n): t for n, t in {**base_tensors, **tensors}.items()}
        self.assertIn("layers.1.mlp.experts.3.down_proj.lora_B.weight", names)
        self.assertIn("layers.0.mlp.gate.lora_B.weight", names)
        self.assertEqual(sorted(held), sorted(names))
        for name, t in names.items():
            self.assertEqual(held[name].tobytes(), t.numpy().astype(np.float32).tobytes(), name)
        self.assertIn("targets = q_proj,v_proj,gate_proj,up_proj,down_proj,gate\n", open(ini).read())
        p = run(["inspect", weights])
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        self.assertIn("layers.1.mlp.experts.3.up_proj.lora_A.weight", p.stdout)

        self.export(weights, "--format", "peft", "--out", self.path("peft"))
        self.assertEqual(cfg["target_modules"], sorted(MIXTRAL_TARGETS))
        self.assert_same_adapter(self.path("peft"), cfg, tensors, weights)

        self.export(weights, "--format", "hf", "--merge-lora", "--out", self.path("merged"))
        self.assert_merged_logits(self.path("merged"), base, adapter, base_tensors, MIXTRAL_CONFIG["vocab_size"])
        reference = lora_reference.merge_lora(lora_reference.load_peft_adapter(hf_reference.load_hf_dir(base),
                                                                               adapter))
        want = dict(reference.named_parameters())
        merged = safetensors_io.read_weights(self.path("merged"))
        self.assertEqual(sorted(merged), sorted(want))
        changed = 0
        for name, t in merged.items():
            self.assertLess(float((t.to(torch.float64) - want[name]).abs().max()), 1e-6, name)
            changed += not torch.equal(t, base_tensors[name])
        self.assertEqual(changed, len(tensors) // 2, "every adapted weight merged, no other")

    def test_all_linear_by_name(self):
        base = self.base_dir()
        adapter, _, tensors = self.adapter(base, MIXTRAL_ALL_LINEAR, 2, 4, config={"target_modules": "all-linear"})
        self.assertIn("base_model.model.model.layers.1.block_sparse_moe.gate.lora_A.weight", tensors)
        weights, ini = self.import_adapter(base, adapter)
        self.assertIn("targets = q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj,gate\n", open(ini).read())
        self.export(weights, "--format", "peft", "--out", self.path("peft"))
        got_cfg, got = lora_reference.read_peft_adapter(self.path("peft"))
        self.assertEqual(got_cfg["target_modules"], sorted(MIXTRAL_ALL_LINEAR))
        self.assertEqual(sorted(got), sorted(tensors))

    def test_dropout_on_experts(self):
        # An adapter trained with lora_dropout on the experts (w2) imports with it, and trains on with it; its
        # export says it again. (The masks' layout independence: test_lora_training.py's MoE layouts.)
        base = self.base_dir()
        adapter, _, _ = self.adapter(base, ["q_proj", "w2"], 2, 4, dropout=0.05)
        p = run(["import", base, "--adapter", adapter, "--out", self.path("w.h5"), "--ini", self.path("w.ini")])
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        self.assertIn("dropout = 0.05\n", open(self.path("w.ini")).read())
        shard = self.path("data.bin")
        write_shard(shard, np.arange(200) % MIXTRAL_CONFIG["vocab_size"])
        p = run(["train", "--config", self.path("w.ini"), "--data.train", shard, "--data.tokenizer", "",
                 "--checkpoint.dir", self.path("ck"), "--train.steps", 1, "--model.seq_len", 16])
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        ck = os.path.join(self.path("ck"), open(os.path.join(self.path("ck"), "latest")).read().strip())
        self.export(ck, "--format", "peft", "--out", self.path("peft"))
        got_cfg, _ = lora_reference.read_peft_adapter(self.path("peft"))
        self.assertEqual(got_cfg["lora_dropout"], 0.05)

    def test_refusals(self):
        base = self.base_dir()
        adapter, cfg, tensors = self.adapter(base, ["q_proj", "w1"], 2, 4)
        for needles, variant_cfg, variant_tensors in (
                (("'gate_proj'", "MixtralForCausalLM", "'w1'"), {**cfg, "target_modules": ["gate_proj", "q_proj"]},
                 tensors),
                (("layers.0.block_sparse_moe.experts.0.gate_proj.lora_A.weight", "MixtralForCausalLM"), cfg,
                 {n.replace(".w1.", ".gate_proj."): t for n, t in tensors.items()}),
                (("layers.0.mlp.experts.0.w1.lora_A.weight", "target_modules"), cfg,
                 {n.replace(".block_sparse_moe.", ".mlp."): t for n, t in tensors.items()})):
            out = self.path("variant")
            shutil.rmtree(out, ignore_errors=True)
            os.makedirs(out)
            safetensors_io.write_json(os.path.join(out, "adapter_config.json"), variant_cfg)
            safetensors_io.write_safetensors(os.path.join(out, "adapter_model.safetensors"), variant_tensors,
                                             {"format": "pt"})
            with self.subTest(needles=needles):
                self.assert_refused(run(["import", base, "--adapter", out, "--out", self.path("w.h5"), "--ini",
                                         self.path("w.ini")]), *needles)
                self.assertFalse(os.path.exists(self.path("w.h5")))

    def test_shared_experts_refused(self):
        """A LoRA checkpoint the trainer writes for a mixture of experts with a shared expert: no Hugging Face
        architecture computes it, so neither PEFT nor the merged export has names for it."""
        base = self.base_dir()
        p = run(["import", base, "--out", self.path("base.h5"), "--ini", self.path("base.ini"), "--seq-len", 8])
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        write_shard(self.path("data.bin"), np.random.default_rng(5).integers(0, MIXTRAL_CONFIG["vocab_size"], 200))
        keys = {"train.micro_batch": 2, "train.global_batch": 2, "train.steps": 1, "train.precision": "fp32",
                "model.shared_experts": 1, "model.expert_hidden": 12, "data.tokenizer": "", "checkpoint.every": 0}

        def train(name, **more):
            args = ["train", "--config", self.path("base.ini"), "--data.train", self.path("data.bin"),
                    "--checkpoint.dir", self.path(name)]
            for key, value in {**keys, **more}.items():
                args += [f"--{key}", value]
            p = run(args)
            self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
            ck = self.path(name)
            return os.path.join(ck, open(os.path.join(ck, "latest")).read().strip())

        shared = train("shared", **{"checkpoint.init_weights": ""})
        lora = train("lora", **{"checkpoint.init_weights": shared, "lora.rank": 2, "lora.targets": "all-linear"})
        p = run(["inspect", lora])
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        self.assertIn("layers.0.mlp.shared_experts.down_proj.lora_B.weight", p.stdout)
        self.assert_refused(run(["export", lora, "--format", "peft", "--out", self.path("no")]),
                            "model.shared_experts = 1", "--format peft")
        self.assert_refused(run(["export", lora, "--format", "hf", "--merge-lora", "--out", self.path("no")]),
                            "model.shared_experts = 1")
        self.assertFalse(os.path.exists(self.path("no")), "refused exports wrote output")


def dir_bytes(path):
    """Every file of a directory and its bytes."""
    return {name: open(os.path.join(path, name), "rb").read() for name in sorted(os.listdir(path))}


class ExportsCase(LoraCase):
    """A base's weights and an adapter's, imported: the sources of the export cases."""

    def setUp(self):
        super().setUp()
        base = self.base_dir()
        adapter, _, _ = self.adapter(base, ["q_proj", "v_proj"], 2, 4)
        self.weights, _ = self.import_adapter(base, adapter)
        p = run(["import", base, "--out", self.path("base.h5"), "--ini", self.path("base.ini")])
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)


class Exports(ExportsCase):
    """Exports into their own earlier directories, and into mounts that cannot take them."""

    def test_again_into_its_own_directory(self):
        # The second export was refused: its weight files were registered as no kind of their own.
        for name, args in (("hf", [self.path("base.h5"), "--format", "hf"]),
                           ("hf_bf16", [self.path("base.h5"), "--format", "hf", "--dtype", "bf16"]),
                           ("merged", [self.weights, "--format", "hf", "--merge-lora"]),
                           ("peft", [self.weights, "--format", "peft"])):
            with self.subTest(export=name):
                self.export(*args, "--out", self.path(name))
                first = dir_bytes(self.path(name))
                self.export(*args, "--out", self.path(name))
                self.assertEqual(dir_bytes(self.path(name)), first)
        # An unrelated file under a weight file's name is still refused, and kept.
        os.makedirs(self.path("foreign"))
        with open(self.path("foreign", "model.safetensors"), "w") as f:
            f.write("notes\n")
        self.assert_refused(run(["export", self.path("base.h5"), "--format", "hf", "--out", self.path("foreign")]),
                            "model.safetensors", "replaces only its own kind")
        self.assertEqual(open(self.path("foreign", "model.safetensors")).read(), "notes\n")

    def mount(self, name, size, read_only=False):
        path = self.path(name)
        os.makedirs(path)
        if subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", path], capture_output=True,
                          timeout=10).returncode != 0:
            self.skipTest("tmpfs cannot be mounted here (not root)")
        self.addCleanup(subprocess.run, ["umount", "-l", path], capture_output=True, timeout=10)
        if read_only:
            subprocess.run(["mount", "-o", "remount,ro", path], check=True, capture_output=True, timeout=10)
        return path

    def test_full_and_read_only_mounts(self):
        full = self.mount("full", "8k")
        for args in ([self.path("base.h5"), "--format", "hf"], [self.weights, "--format", "hf", "--merge-lora"]):
            with self.subTest(args=args):
                p = run(["export", *args, "--out", os.path.join(full, "out", "model")])
                self.assert_refused(p, "No space left on device")
                # No directory it created left behind (the leaf; its parent went with the mount's test).
                self.assertFalse(os.path.exists(os.path.join(full, "out", "model")), p.stderr)
        read_only = self.mount("ro", "1m", read_only=True)
        for fmt in ("hf", "peft"):
            p = run(["export", self.weights if fmt == "peft" else self.path("base.h5"), "--format", fmt, "--out",
                     os.path.join(read_only, "out")])
            self.assert_refused(p, os.path.join(read_only, "out"), "cannot create the directory")


class OneWriterAtATime(ExportsCase):
    """Two processes writing one output: a second writer is refused (exit 2) while another holds the output's lock,
    with nothing of its own written; two started together leave one of them's output whole, and no temporary."""

    def start(self, args):
        return subprocess.Popen([MESHTRAIN] + [str(a) for a in args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True)

    def test_a_held_export_directory(self):
        for fmt, source in (("hf", self.path("base.h5")), ("peft", self.weights)):
            with self.subTest(format=fmt):
                out = self.path("held_" + fmt)
                self.export(source, "--format", fmt, "--out", out)
                before = dir_bytes(out)
                fd = os.open(out, os.O_RDONLY | os.O_DIRECTORY)  # held as an export in another process holds it
                fcntl.flock(fd, fcntl.LOCK_EX)
                try:
                    self.assert_refused(run(["export", source, "--format", fmt, "--out", out]), out,
                                        "being written by another process")
                finally:
                    os.close(fd)
                self.assertEqual(dir_bytes(out), before)
                self.export(source, "--format", fmt, "--out", out)  # released: the next one writes

    def test_a_held_import_output(self):
        base, out, ini = self.base_dir(), self.path("held.h5"), self.path("held.ini")
        args = ["import", base, "--out", out, "--ini", ini]
        with open(out + ".lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            self.assert_refused(run(args), out, "being written by another process")
        self.assertFalse(os.path.exists(out) or os.path.exists(ini), "the refused import wrote")
        # Left by a killed import (empty, nobody holding it): no obstacle, and gone after the next import.
        self.assertTrue(os.path.exists(out + ".lock"))
        p = run(args)
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        self.assertFalse(os.path.exists(out + ".lock"))
        # Somebody's file under the lock's name is not taken for a lock, nor removed.
        with open(out + ".lock", "w") as f:
            f.write("notes\n")
        self.assert_refused(run(args), out + ".lock", "not an empty lock file")
        self.assertEqual(open(out + ".lock").read(), "notes\n")

    def test_two_at_once(self):
        base = self.base_dir()
        self.export(self.path("base.h5"), "--format", "hf", "--out", self.path("alone"))
        p = run(["import", base, "--out", self.path("alone.h5"), "--ini", self.path("alone.ini")])
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        for what, args in (
                ("export", ["export", self.path("base.h5"), "--format", "hf", "--out", self.path("race")]),
                ("import", ["import", base, "--out", self.path("race.h5"), "--ini", self.path("race.ini")])):
            with self.subTest(what=what):
                runs = [self.start(args) for _ in range(2)]
                ends = [(r.wait(timeout=120), r.stdout.read() + r.stderr.read()) for r in runs]
                for r in runs:
                    r.stdout.close()
                    r.stderr.close()
                self.assertIn(0, [code for code, _ in ends], ends)
                for code, text in ends:
                    self.assertIn(code, (0, 2), text)
                    if code == 2:
                        self.assertIn("being written by another process", text)
                if what == "export":
                    self.assertEqual(dir_bytes(self.path("race")), dir_bytes(self.path("alone")))
                else:
                    want, got = h5_model(self.path("alone.h5")), h5_model(self.path("race.h5"))
                    self.assertEqual(sorted(got), sorted(want))
                    for name in want:
                        self.assertEqual(got[name].tobytes(), want[name].tobytes(), name)
                left = [n for n in os.listdir(self.dir) if ".tmp" in n or n.endswith(".lock")]
                self.assertEqual(left, [], "temporaries or locks left")


class BaseIdentity(LoraCase):
    def test_xxh64_against_known_values(self):
        # Known values (the specification's and the reference implementation's), so that a faulty
        # transcription above cannot pass for meshtrain's error.
        self.assertEqual(xxh64(b""), 0xEF46DB3751D8E999)
        self.assertEqual(xxh64(b"a"), 0xD24EC4F1A98C6E5B)
        self.assertEqual(xxh64(b"abc"), 0x44BC2CF5AD770999)
        # Stripes, 8- and 4-byte lanes and single bytes at once (the value of the reference implementation).
        self.assertEqual(xxh64(b"0123456789abcdef" * 3 + b"XYZ12"), 0x4B0DA477B3EAD278)

    def adapter_only(self, base_file, with_adapters, out, identity):
        """A LoRA training checkpoint as issue 28's contract has the trainer write it: the adapters under
        /model (copied with their checksums), the stored config's init_weights the base file."""
        with h5py.File(with_adapters, "r") as src, h5py.File(out, "w") as dst:
            for key, value in src.attrs.items():
                dst.attrs[key] = value
            config = src.attrs["config"]
            config = config.decode() if isinstance(config, bytes) else config
            lines = [f"init_weights = {base_file}" if line.startswith("init_weights =") else line
                     for line in config.splitlines()]
            dst.attrs["config"] = "\n".join(lines) + "\n"
            dst.attrs["lora_base"] = base_file
            dst.attrs["lora_base_hash"] = identity
            group = dst.create_group("model")
            for name in src["model"]:
                if ".lora_" in name:
                    src.copy(src["model"][name], group, name)
        return out

    def test_adapter_only_checkpoint(self):
        base = self.base_dir()
        adapter, cfg, tensors = self.adapter(base, ["q_proj", "v_proj", "down_proj"], 4, 16)
        with_adapters, _ = self.import_adapter(base, adapter)
        p = run(["import", base, "--out", self.path("base.h5"), "--ini", self.path("base.ini")])
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        base_file = self.path("base.h5")
        self.assertEqual(base_identity(with_adapters), base_identity(base_file), "adapters must not count")

        # The base's identity as computed here: meshtrain must agree to merge, from either base file.
        for name, base_path in (("ck", base_file), ("ck_on_import", with_adapters)):
            ck = self.adapter_only(base_path, with_adapters, self.path(name + ".h5"), base_identity(base_path))
            self.export(ck, "--format", "peft", "--out", self.path(name + "_peft"))
            self.assert_same_adapter(self.path(name + "_peft"), cfg, tensors, base_path)
            self.export(ck, "--format", "hf", "--merge-lora", "--out", self.path(name + "_merged"))
            self.assert_merged_logits(self.path(name + "_merged"), base, adapter, safetensors_io.read_weights(base))

        # Another identity recorded, or another base where the recorded one was: refused, nothing written.
        ck = self.adapter_only(base_file, with_adapters, self.path("wrong.h5"), "0123456789abcdef")
        self.assert_refused(run(["export", ck, "--format", "hf", "--merge-lora", "--out", self.path("no")]),
                            "lora_base_hash", base_file)
        other = self.base_dir("other", seed=4)
        p = run(["import", other, "--out", self.path("other.h5"), "--ini", self.path("other.ini")])
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        ck = self.adapter_only(base_file, with_adapters, self.path("moved.h5"), base_identity(base_file))
        shutil.copyfile(self.path("other.h5"), base_file)
        self.assert_refused(run(["export", ck, "--format", "hf", "--merge-lora", "--out", self.path("no")]),
                            "lora_base_hash", base_identity(self.path("other.h5")))
        shutil.copyfile(self.path("other.h5"), base_file)
        with h5py.File(base_file, "r+") as f:  # a base without checksums has no identity
            for name in f["model"]:
                del f["model"][name].attrs["checksum"]
        self.assert_refused(run(["export", ck, "--format", "hf", "--merge-lora", "--out", self.path("no")]),
                            "carries no checksum", base_file)
        os.remove(base_file)
        self.assert_refused(run(["export", ck, "--format", "hf", "--merge-lora", "--out", self.path("no")]),
                            "init_weights", base_file)
        self.assertFalse(os.path.exists(self.path("no")), "refused exports wrote output")


class Refusals(LoraCase):
    def setUp(self):
        super().setUp()
        self.base = self.base_dir()
        self.good, self.cfg, self.tensors = self.adapter(self.base, ["q_proj", "v_proj"], 4, 8)

    def variant(self, config=None, tensors=None):
        """A copy of the good adapter with config keys or tensors replaced."""
        out = self.path("variant")
        shutil.rmtree(out, ignore_errors=True)
        os.makedirs(out)
        safetensors_io.write_json(os.path.join(out, "adapter_config.json"), {**self.cfg, **(config or {})})
        safetensors_io.write_safetensors(os.path.join(out, "adapter_model.safetensors"),
                                         tensors if tensors is not None else self.tensors, {"format": "pt"})
        return out

    def refused(self, adapter, *needles):
        p = run(["import", self.base, "--adapter", adapter, "--out", self.path("w.h5"), "--ini", self.path("w.ini")])
        written = [name for name in ("w.h5", "w.ini") if os.path.exists(self.path(name))]
        for name in written:  # so that the next case is judged on its own
            os.remove(self.path(name))
        self.assert_refused(p, *needles)
        self.assertEqual(written, [], "files written")

    def test_config_values(self):
        self.import_adapter(self.base, self.variant(), "control")  # the unchanged copy imports
        for key, value in (("use_dora", True), ("bias", "lora_only"), ("rank_pattern", {"q_proj": 2}),
                           ("alpha_pattern", {"v_proj": 4}), ("modules_to_save", ["lm_head"]),
                           ("layers_to_transform", [0]), ("fan_in_fan_out", True), ("peft_type", "PREFIX_TUNING"),
                           ("task_type", "SEQ_CLS")):
            with self.subTest(key=key):
                self.refused(self.variant({key: value}), key, "adapter_config.json")
        self.refused(self.variant({"target_modules": ["q_proj", "lm_head"]}), "lm_head", "target_modules")
        self.refused(self.variant({"target_modules": ".*proj"}), "target_modules", "regular expression")
        self.refused(self.variant({"r": 0}), "r = 0", "adapter_config.json")

    def test_hostile_json(self):
        """target_modules nested 100,000 deep (a recursion over it once overflowed the stack), 50 deep (within the
        limit: named by an excerpt), and r beyond a double's range: refused naming the file, no crash."""
        def with_text(key, text):
            out = self.variant()
            config = os.path.join(out, "adapter_config.json")
            good = json.dumps({k: v for k, v in self.cfg.items() if k != key})
            with open(config, "w") as f:
                f.write(good[:-1] + f', "{key}": {text}}}')
            return out
        self.refused(with_text("target_modules", "[" * 100_000 + "]" * 100_000), "adapter_config.json",
                     "not valid JSON", "nest deeper than 64 levels")
        self.refused(with_text("target_modules", "[" * 50 + "]" * 50), "adapter_config.json",
                     "target_modules holds [[[[", "(98 bytes)")
        self.refused(with_text("r", "1e999999"), "adapter_config.json", "number overflow parsing '1e999999'")

    def test_gpt2_fan_in_fan_out_and_names(self):
        """PEFT adapts a Conv1D as fan_in_fan_out whatever the file says (it warns): such an adapter imports;
        llama's tensor names on a gpt2 base are refused, naming one of PEFT's gpt2 names as the example."""
        gpt2 = self.path("gpt2")
        hf_reference.write_hf_dir(gpt2, "gpt2", GPT2_CONFIG, seed=3, std=0.1)
        model = lora_reference.apply_lora(hf_reference.load_hf_dir(gpt2), ["c_attn"], 2, 4, b_std=0.05)
        cfg, tensors = lora_reference.write_peft_adapter(model, self.path("gpt2_adapter"), {"fan_in_fan_out": False})
        self.import_adapter(gpt2, self.path("gpt2_adapter"), "gpt2")
        self.base, self.cfg = gpt2, cfg
        renamed = {name.replace(".transformer.", ".model."): t for name, t in tensors.items()}
        self.refused(self.variant(tensors=renamed), "base_model.model.model.h.0.attn.c_attn.lora_A.weight",
                     "base_model.model.transformer.h.0.attn.c_attn.lora_A.weight")

    def test_tensors(self):
        missing = dict(self.tensors)
        gone = "base_model.model.model.layers.1.self_attn.v_proj.lora_B.weight"
        del missing[gone]
        self.refused(self.variant(tensors=missing), gone, "adapter_model.safetensors")
        extra = {**self.tensors, "base_model.model.model.layers.0.self_attn.k_proj.lora_A.weight": torch.zeros(4, 24)}
        self.refused(self.variant(tensors=extra), "layers.0.self_attn.k_proj.lora_A.weight")
        misshapen = {**self.tensors, "base_model.model.model.layers.0.self_attn.q_proj.lora_B.weight": torch.zeros(32, 5)}
        self.refused(self.variant(tensors=misshapen), "layers.0.self_attn.q_proj.lora_B.weight", "[32, 4]")
        self.refused(self.variant({"r": 5}), "lora_A.weight", "r = 5")
        unnamed = {n.replace(".lora_A.weight", ".lora_A.default.weight"): t for n, t in self.tensors.items()}
        self.refused(self.variant(tensors=unnamed), "lora_A.default.weight")
        damaged = {**self.tensors, "base_model.model.model.layers.0.self_attn.q_proj.lora_B.weight":
                   torch.full((32, 4), float("nan"))}
        self.refused(self.variant(tensors=damaged), "non-finite")

    def test_exports_without_adapters(self):
        p = run(["import", self.base, "--out", self.path("base.h5"), "--ini", self.path("base.ini")])
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        self.assert_refused(run(["export", self.path("base.h5"), "--format", "peft", "--out", self.path("no")]),
                            "holds no LoRA adapters", "base.h5")
        self.assert_refused(run(["export", self.path("base.h5"), "--format", "hf", "--merge-lora", "--out",
                                 self.path("no")]), "holds no LoRA adapters", "--merge-lora")
        with_adapters, _ = self.import_adapter(self.base, self.good)
        for fmt in ("hf", "safetensors"):
            out = self.path("no" if fmt == "hf" else "no.safetensors")
            self.assert_refused(run(["export", with_adapters, "--format", fmt, "--out", out]), "--merge-lora",
                                "--format peft")
        self.assert_refused(run(["export", with_adapters, "--format", "peft", "--merge-lora", "--out",
                                 self.path("no")]), "--merge-lora")
        self.assertFalse(os.path.exists(self.path("no")) or os.path.exists(self.path("no.safetensors")))


def main():
    global MESHTRAIN, WORKDIR
    ap = argparse.ArgumentParser()
    ap.add_argument("--meshtrain", required=True)
    ap.add_argument("--workdir", required=True)
    ap.add_argument("-k", dest="pattern")
    args = ap.parse_args()
    MESHTRAIN, WORKDIR = os.path.abspath(args.meshtrain), os.path.abspath(args.workdir)
    run_cases((RoundTrip, Mixtral, BaseIdentity, Refusals, Exports, OneWriterAtATime), args.pattern)


if __name__ == "__main__":
    main()
