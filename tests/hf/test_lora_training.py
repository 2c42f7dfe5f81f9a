#!/usr/bin/python3
"""LoRA training in meshtrain against the independent PyTorch LoRA of tests/oracle/lora_reference.py
(PEFT's definitions) on a small GQA llama of tests/oracle/hf_reference.py, and across layouts.

  Reference   a PEFT adapter (B nonzero, so that every adapter has a gradient from the first step)
              imported onto its base with `import --adapter`; ten steps of meshtrain equal the reference's
              ten (loss 1e-4 relative), on all seven linears under rsLoRA, on attention only, and on q, v and
              the output head lm_head; the trained
              adapter exported as PEFT equals the reference's trained adapter (1e-4 of its largest value);
              the checkpoint holds the adapters and their moments only, the base file is unchanged; `sample`
              of it draws what the merged model (export --merge-lora, import) draws
  Layouts     all linears and lm_head: dp2·tp2 (rank 3 does not divide tp 2; k and v heads split, the head's
              vocabulary rows), pp2·dp2 under ZeRO-3, tp2·pp2 under ZeRO-1 with full recomputation and under
              ZeRO-3 with selective, dp2·tp2·ZeRO-2 under sequence parallelism: each equals one rank's run
              (2e-5); bf16 on one rank and
              dp2·tp2 within 2e-3 of it, its weights the base in 16 bits (no fp32 copy)
  Dropout     lora.dropout 0.1 on all linears and lm_head (its mask keyed by the sample, not the layout): dp2·tp2
              (also under sequence parallelism) and pp2·dp2·ZeRO-3 with one sample per micro-batch each equal
              one rank's run (2e-5), which
              differs from the run without dropout; the same on gpt2's c_attn, c_proj and c_fc
  Fresh       without an adapter in init_weights the adapters start as PEFT starts them: A uniform in
              ±1/sqrt(in) (its spread against the closed form), B zero; the same values under another layout
  AdapterKeys lora.rank, lora.alpha, lora.targets or lora.rslora changed on a resume or on an imported adapter in
              init_weights: exit 2 naming the key and both values; a full checkpoint under a LoRA run named as one
  Mixtral     Reference's checks on q, v, every routed expert's w1, w2, w3 and the routers (gate)
  GPT-2       its Conv1D [in, out] layers, c_attn's q|k|v split by heads, c_fc's GELU after the adapter's
              term: Reference's checks on c_attn, c_proj (attention's and MLP's) and c_fc at rank 3, and
              on c_fc alone (the MLP's c_proj backward fused with GELU's, its weight frozen); tp2·pp2
              under full recomputation (the frozen tied wte: no tied group), also under sequence parallelism,
              and pp2·dp2 under ZeRO-3
              equal one rank's run over three steps (2e-5)
  Resume      stopped at step 5 and resumed: bitwise the straight run; resumed under another layout: 2e-5;
              a base changed under the same path refuses the adapters (exit 2, naming lora_base_hash)
  MoE         a Mixtral with fresh adapters on every linear and the routers: dp2·tp2·ep2 (also under sequence
              parallelism), pp2·dp2·ep2·ZeRO-3,
              dp4·ep2·ZeRO-3 (experts sharded over 2 expert-data-parallel ranks) and cp2·dp2·ep2 equal one rank (2e-5), bf16
              within 2e-3, and a run stopped under dp2·ep2·ZeRO-2 resumes on one rank; a meshtrain MoE base with
              a shared expert and a dense block between MoE ones under tp2·dp2·ep2·ZeRO-1 with full recomputation
              and pp2·dp2·ep2·ZeRO-3; lora.dropout 0.1 on the Mixtral's every linear (each routed row's mask keyed by
              its token and expert, which travel with it) under dp2·tp2·ep2, dp4·ep4 and cp2·dp2·ep2 equals one rank's run,
              which differs from the run without dropout

usage: test_lora_training.py --meshtrain BIN --workdir DIR [--mpiexec MPIEXEC] [--group reference|layouts] [-k PATTERN]
"""
import argparse
import json
import math
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
import hf_reference  # noqa: E402
import lora_reference  # noqa: E402
import safetensors_io  # noqa: E402
from case_runner import run_cases, write_shard  # noqa: E402

MESHTRAIN = WORKDIR = MPIEXEC = None

# GQA (4 query heads over 2 key/value heads), head_dim ≠ C/H and an MLP width of its own: every adapter's
# in and out differ.
CONFIG = {"vocab_size": 61, "hidden_size": 24, "intermediate_size": 40, "num_hidden_layers": 2,
          "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 8, "tie_word_embeddings": False,
          "max_position_embeddings": 32}
ATTENTION = ["q_proj", "k_proj", "v_proj", "o_proj"]
ALL_LINEAR = ATTENTION + ["gate_proj", "up_proj", "down_proj"]
SEQ_LEN = 16
# GPT-2 with 4 heads (tp 2 splits them) and a vocabulary tp does not divide.
GPT2_CONFIG = {"vocab_size": 61, "n_positions": 32, "n_embd": 16, "n_layer": 2, "n_head": 4}
GPT2_ALL_LINEAR = ["c_attn", "c_proj", "c_fc"]
KEYS = {"train.micro_batch": 2, "train.global_batch": 4, "train.steps": 10, "train.precision": "fp32",
        "optim.lr": 3e-3, "optim.min_lr": 3e-4, "optim.warmup_steps": 2, "optim.weight_decay": 0.1,
        "data.order": "sequential"}


def run(args, launcher=(), timeout=300):
    return subprocess.run([str(a) for a in launcher] + [MESHTRAIN] + [str(a) for a in args], capture_output=True, text=True,
                          timeout=timeout)


def metrics(path):
    return [json.loads(line) for line in open(path) if line.strip()]


class LoraCase(unittest.TestCase):
    arch, config = "llama", CONFIG
    targets = ALL_LINEAR
    rank, alpha, rslora = 3, 6.0, True

    def setUp(self):
        self.dir = os.path.join(WORKDIR, self.id().split(".")[-1])
        shutil.rmtree(self.dir, ignore_errors=True)
        os.makedirs(self.dir)
        self.base = self.path("hf")
        hf_reference.write_hf_dir(self.base, self.arch, self.config, seed=3, std=0.1)
        self.tokens = np.random.default_rng(5).integers(0, self.config["vocab_size"], 700)
        write_shard(self.path("data.bin"), self.tokens)

    def path(self, *parts):
        return os.path.join(self.dir, *parts)

    def adapter(self, b_std=0.05):
        """A PEFT adapter of the reference for the base; B drawn with b_std (None: PEFT's zeros)."""
        out = self.path("adapter")
        lora_reference.main(["write", "--dir", self.base, "--out", out, "--targets", ",".join(self.targets),
                             "--rank", str(self.rank), "--alpha", str(self.alpha), "--seed", "11"]
                            + (["--rslora"] if self.rslora else []) + ([] if b_std is None else ["--b-std", str(b_std)]))
        return out

    def import_base(self, adapter=None):
        stem = "init" if adapter else "base"
        args = ["import", self.base, "--out", self.path(stem + ".h5"), "--ini", self.path(stem + ".ini"),
                "--seq-len", SEQ_LEN]
        if adapter:
            args += ["--adapter", adapter]
        p = run(args)
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        return self.path(stem + ".h5"), self.path(stem + ".ini")

    def train(self, ini, name, launcher=(), layout=(), lora=(), expect=0, **keys):
        """meshtrain train from `ini` with KEYS, `layout` and `keys`; returns (metrics, checkpoint dir)."""
        ck = self.path(name + "_ck")
        args = ["train", "--config", ini, "--data.train", self.path("data.bin"), "--checkpoint.dir", ck,
                "--checkpoint.every", 0, "--log.metrics", self.path(name + ".jsonl"), "--data.tokenizer", ""]
        for key, value in {**KEYS, **dict(lora), **dict(layout), **keys}.items():
            args += [f"--{key}", value]
        p = run(args, launcher)
        self.assertEqual(p.returncode, expect, p.stdout + p.stderr)
        return metrics(self.path(name + ".jsonl")), ck

    def latest(self, ck):
        return os.path.join(ck, open(os.path.join(ck, "latest")).read().strip())

    def export_peft(self, checkpoint, name):
        out = self.path(name)
        p = run(["export", checkpoint, "--format", "peft", "--out", out])
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        return lora_reference.read_peft_adapter(out)

    def reference(self, adapter, steps=10):
        cfg = hf_reference.train_config(SEQ_LEN, **{k.replace(".", "_"): v for k, v in KEYS.items()
                                                    if not k.startswith("data.") and k != "train.precision"})
        model = lora_reference.load_peft_adapter(hf_reference.load_hf_dir(self.base), adapter)
        hist = lora_reference.train_lora(model, self.tokens, cfg, steps)
        return hist, {name: t.detach() for name, t in lora_reference.adapter_state_dict(model).items()}

    def assert_same_losses(self, got, want, tolerance, what, first_step=1):
        self.assertEqual([r["step"] for r in got], list(range(first_step, first_step + len(want))), what)
        for step, (r, loss) in enumerate(zip(got, want), first_step):
            self.assertLess(abs(r["loss"] - loss) / loss, tolerance, f"{what}, step {step}: {r['loss']} vs {loss}")


class Reference(LoraCase):
    def check(self):
        adapter = self.adapter()
        init, ini = self.import_base(adapter)
        before = open(init, "rb").read()
        got, ck = self.train(ini, "one")
        want, trained = self.reference(adapter)
        self.assert_same_losses(got, want["loss"], 1e-4, "meshtrain against the reference")
        checkpoint = self.latest(ck)
        with h5py.File(checkpoint, "r") as f:
            names = set(f["model"])
            self.assertTrue(names and all(".lora_" in n for n in names), f"not adapter-only: {sorted(names)[:4]}")
            self.assertEqual(set(f["optim/exp_avg"]), names)
        self.assertEqual(open(init, "rb").read(), before, "the base file changed")
        config, tensors = self.export_peft(checkpoint, "trained")
        self.assertEqual(set(tensors), set(trained))
        for name, t in trained.items():
            scale = float(t.abs().max())
            diff = float((tensors[name].double() - t.double()).abs().max())
            self.assertLess(diff, 1e-4 * max(scale, 1e-3), f"{name}: {diff} of {scale}")
        # `sample` of the adapter checkpoint draws what the merged model, exported and imported, draws.
        p = run(["export", checkpoint, "--format", "hf", "--merge-lora", "--out", self.path("merged")])
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        p = run(["import", self.path("merged"), "--out", self.path("merged.h5"), "--ini", self.path("merged.ini"),
                 "--seq-len", SEQ_LEN])
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        p = run(["inspect", checkpoint])
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        self.assertIn("lora_A.weight", p.stdout)
        drawn = []
        for source in (checkpoint, self.path("merged.h5")):
            p = run(["sample", "--checkpoint", source, "--prompt", "0123", "--tokens", 12, "--temperature", 0.7,
                     "--ids"])
            self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
            drawn.append(p.stdout.split())
        self.assertEqual(drawn[0], drawn[1])
        self.assertEqual(len(drawn[0]), 4 + 12)
        return got

    def test_all_linear_rslora(self):
        self.check()

    def test_attention_only(self):
        self.targets, self.rank, self.alpha, self.rslora = ATTENTION, 4, 8.0, False
        self.check()

    def test_query_value_and_head(self):  # PEFT's llama default, and the vocabulary-parallel output head
        self.targets, self.rank, self.alpha, self.rslora = ["q_proj", "v_proj", "lm_head"], 2, 4.0, False
        self.check()


class Layouts(LoraCase):
    targets = ALL_LINEAR + ["lm_head"]  # the output head's B split by vocabulary rows, on the last stage

    def test_layouts_equal_one_rank(self):
        _, ini = self.import_base(self.adapter())
        one, _ = self.train(ini, "one")
        for name, n, layout in (
                ("dp2_tp2", 4, {"parallel.tp": 2}),
                ("pp2_dp2_zero3", 4, {"parallel.pp": 2, "parallel.zero": 3}),
                ("tp2_pp2_zero1_full", 4, {"parallel.tp": 2, "parallel.pp": 2, "parallel.zero": 1,
                                           "train.recompute": "full", "train.micro_batch": 1}),
                ("tp2_pp2_zero3_selective", 4, {"parallel.tp": 2, "parallel.pp": 2, "parallel.zero": 3,
                                                "train.recompute": "selective"}),
                # sequence parallelism: the adapters inside the regions, on the gathered rows
                ("dp2_tp2_sp_zero2", 4, {"parallel.tp": 2, "parallel.zero": 2, "parallel.sequence_parallel": "true"}),
                # context parallelism: each rank's h over its chunks' rows, the adapters' gradients summed over dp × cp
                ("cp2_tp2_zero1", 4, {"parallel.cp": 2, "parallel.tp": 2, "parallel.zero": 1}),
                # ZB-H1: the adapters' dB, dA (and the column modules' dh sums over tp) deferred, ZeRO-2 reducing each
                # unit as its weight pass ends; under sequence parallelism and full recomputation
                ("tp2_pp2_zbh1_zero2", 4, {"parallel.tp": 2, "parallel.pp": 2, "parallel.zero": 2,
                                           "parallel.schedule": "zb-h1", "train.micro_batch": 1}),
                ("tp2_pp2_zbh1_sp_full", 4, {"parallel.tp": 2, "parallel.pp": 2, "parallel.schedule": "zb-h1",
                                             "parallel.sequence_parallel": "true", "train.recompute": "full"})):
            got, _ = self.train(ini, name, [MPIEXEC, "-n", n], layout)
            self.assert_same_losses(got, [r["loss"] for r in one], 2e-5, name)
        # bf16: the frozen base held in 16 bits only, the adapters' master and moments in fp32 (measured ~3e-4)
        for name, n, layout in (("bf16", 1, {}), ("bf16_dp2_tp2", 4, {"parallel.tp": 2})):
            got, _ = self.train(ini, name, [MPIEXEC, "-n", n], {"train.precision": "bf16", **layout})
            self.assert_same_losses(got, [r["loss"] for r in one], 2e-3, name)
            base_bytes = sum(np.prod(t.shape) for t in safetensors_io.read_weights(self.base).values())
            weights = got[0]["memory"]["weights"]
            self.assertLess(weights, 2 * base_bytes / (2 if n > 1 else 1) + 64 * 1024,
                            f"{name}: {weights} bytes of weights for a base of {base_bytes} parameters in bf16")


class Gpt2Case(LoraCase):
    arch, config = "gpt2", GPT2_CONFIG
    targets = GPT2_ALL_LINEAR


class Gpt2Reference(Gpt2Case):
    def test_reference_all_linear(self):
        Reference.check(self)

    def test_reference_c_fc_only(self):
        # The unadapted c_proj of the MLP keeps its backward fused with GELU's, its weight frozen.
        self.targets, self.rank, self.alpha, self.rslora = ["c_fc"], 2, 4.0, False
        Reference.check(self)

class Gpt2Layouts(Gpt2Case):
    def test_layouts_equal_one_rank(self):
        # Three steps (B nonzero: the adapters move from the first) to stay short. tp splits c_attn's B by
        # q|k|v and both c_proj's A; pp puts wte on the first and last stage (frozen: no tied group); full
        # recomputation remakes h; ZeRO-3 shards the frozen base, wte and wpe included, and dp the adapters.
        _, ini = self.import_base(self.adapter())
        one, _ = self.train(ini, "one", **{"train.steps": 3})
        for name, layout in (
                ("tp2_pp2_full", {"parallel.tp": 2, "parallel.pp": 2, "train.recompute": "full",
                                  "train.micro_batch": 1}),
                ("pp2_dp2_zero3", {"parallel.pp": 2, "parallel.zero": 3}),
                ("tp2_pp2_sp_full", {"parallel.tp": 2, "parallel.pp": 2, "train.recompute": "full", "parallel.sequence_parallel": "true"}),
                ("cp2_pp2_full", {"parallel.cp": 2, "parallel.pp": 2, "train.recompute": "full"}),
                ("tp2_pp2_zbh1", {"parallel.tp": 2, "parallel.pp": 2, "parallel.schedule": "zb-h1",
                                  "train.micro_batch": 1})):
            got, _ = self.train(ini, name, [MPIEXEC, "-n", 4], layout, **{"train.steps": 3})
            self.assert_same_losses(got, [r["loss"] for r in one], 2e-5, name)


class Dropout(LoraCase):
    targets = ALL_LINEAR + ["lm_head"]  # every adapter's input dropped, the output head's too

    def test_dropout_layouts_equal_one_rank(self):
        # The reference cannot share meshtrain's mask (usage.md, LoRA: keyed by seed, step, sample, block,
        # module, column): layouts are compared with one rank, and with the run without dropout, which it leaves.
        _, ini = self.import_base(self.adapter())
        dropout, steps = {"lora.dropout": 0.1}, {"train.steps": 4}
        plain, _ = self.train(ini, "plain", **steps)
        one, _ = self.train(ini, "one", lora=dropout, **steps)
        for p, d in zip(plain[1:], one[1:]):
            self.assertGreater(abs(p["loss"] - d["loss"]), 1e-6, "dropout 0.1 trained as without dropout")
        for name, layout in (("dp2_tp2", {"parallel.tp": 2}),
                             ("dp2_tp2_sp", {"parallel.tp": 2, "parallel.sequence_parallel": "true"}),
                             # a rank's rows draw their bits at their global positions
                             ("dp2_cp2", {"parallel.cp": 2}),
                             ("pp2_dp2_zero3_micro1", {"parallel.pp": 2, "parallel.zero": 3, "train.micro_batch": 1}),
                             # the masks drawn again when the deferred dA runs
                             ("pp2_dp2_zbh1_micro1", {"parallel.pp": 2, "parallel.schedule": "zb-h1",
                                                      "train.micro_batch": 1})):
            got, _ = self.train(ini, name, [MPIEXEC, "-n", 4], layout, lora=dropout, **steps)
            self.assert_same_losses(got, [r["loss"] for r in one], 2e-5, name)


class Gpt2Dropout(Gpt2Case):
    def test_dropout_layouts_equal_one_rank(self):  # both c_proj row-parallel: their masks by global column
        Dropout.test_dropout_layouts_equal_one_rank(self)


class MixtralReference(LoraCase):
    """Reference's checks on a Mixtral (4 experts, top 2): the attention's q and v, every routed expert's w1, w2
    and w3 (gate_proj, down_proj, up_proj here) and the routers (`gate`), PEFT's names for Mixtral."""
    arch = "mixtral"
    config = {**CONFIG, "intermediate_size": 20, "num_local_experts": 4, "num_experts_per_tok": 2}
    targets = ["q_proj", "v_proj", "w1", "w2", "w3", "gate"]
    rank, alpha, rslora = 3, 6.0, False

    def test_reference_experts_and_router(self):
        Reference.check(self)


class MoeLayouts(LoraCase):
    """A Mixtral (4 experts, top 2) with every linear layer and the routers adapted from PEFT's start (A drawn, B
    zero), and a meshtrain mixture of experts beside it with a shared expert and a dense block between two MoE
    ones: each layout equals one rank's run over four steps (2e-5)."""
    arch, config = MixtralReference.arch, MixtralReference.config
    lora = {"lora.rank": 3, "lora.alpha": 6, "lora.targets": "all-linear"}
    steps = {"train.steps": 4, "optim.lr": 3e-2}

    def check_layouts(self, ini, layouts, **keys):
        one, _ = self.train(ini, "one", lora=self.lora, **self.steps, **keys)
        for name, layout in layouts:
            got, _ = self.train(ini, name, [MPIEXEC, "-n", 4], layout, lora=self.lora, **self.steps, **keys)
            self.assert_same_losses(got, [r["loss"] for r in one], 2e-5, name)
        return one

    def test_mixtral_layouts_equal_one_rank(self):
        # ep splits the routed experts' adapters with their experts, tp their B (gate, up) and A (down) and
        # sums the rows' h; the routers' adapters are replicated; ZeRO-3 shards the frozen experts too.
        _, ini = self.import_base()
        one = self.check_layouts(ini, (
            ("dp2_tp2_ep2", {"parallel.tp": 2, "parallel.ep": 2}),
            # the routers' adapters add their input gradient to this rank's rows only
            ("dp2_tp2_ep2_sp", {"parallel.tp": 2, "parallel.ep": 2, "parallel.sequence_parallel": "true"}),
            ("pp2_dp2_ep2_zero3", {"parallel.pp": 2, "parallel.ep": 2, "parallel.zero": 3}),
            # dp4 over ep2: each expert's frozen weights and adapters sharded over its 2 expert-data-parallel ranks
            ("dp4_ep2_zero3", {"parallel.ep": 2, "parallel.zero": 3, "train.micro_batch": 1}),
            # context parallelism: each rank routes its chunks' rows, the losses take the micro-batch's counts
            ("cp2_dp2_ep2", {"parallel.cp": 2, "parallel.ep": 2})))
        # bf16: the router's adapter adds into fp32 logits from 16-bit h and B (measured ~5e-4 from fp32).
        got, _ = self.train(ini, "bf16", lora=self.lora, **{**self.steps, "train.precision": "bf16"})
        self.assert_same_losses(got, [r["loss"] for r in one], 2e-3, "bf16")
        # Stopped after step 2 under dp2·ep2·ZeRO-2 (each rank's experts' adapters and their moments sharded),
        # resumed on one rank: the adapter checkpoint is layout-independent.
        moved = {"parallel.ep": 2, "parallel.zero": 2}
        self.train(ini, "moved", [MPIEXEC, "-n", 2], moved, lora=self.lora, expect=3,
                   **{**self.steps, "train.stop_after": 2})
        resumed, _ = self.train(ini, "moved", lora=self.lora, **self.steps)
        self.assert_same_losses(resumed[-2:], [r["loss"] for r in one[2:]], 2e-5, "resumed on one rank", 3)

    def test_mixtral_dropout_layouts_equal_one_rank(self):
        # Every expert's rows come from all four ranks under dp4·ep4, each sender's tokens of its own samples;
        # tp2 splits down_proj's input columns, whose mask is by global column.
        _, ini = self.import_base()
        plain, _ = self.train(ini, "plain", lora=self.lora, **self.steps)
        self.lora = {**self.lora, "lora.dropout": 0.1}
        one = self.check_layouts(ini, (("dp2_tp2_ep2", {"parallel.tp": 2, "parallel.ep": 2}),
                                       ("dp4_ep4_micro1", {"parallel.ep": 4, "train.micro_batch": 1}),
                                       # each routed row's token at its global position
                                       ("cp2_dp2_ep2", {"parallel.cp": 2, "parallel.ep": 2})))
        for p, d in zip(plain[1:], one[1:]):
            self.assertGreater(abs(p["loss"] - d["loss"]), 1e-6, "dropout 0.1 trained as without dropout")

    def test_shared_experts_and_dense_block(self):
        # The base: a meshtrain MoE model of 3 blocks (MoE, dense, MoE) with a shared expert, saved after one step.
        _, ini = self.import_base()
        shape = {"model.layers": 3, "model.moe_every": 2, "model.shared_experts": 1, "model.expert_hidden": 12,
                 "checkpoint.init_weights": "", "train.steps": 1, "model.aux_loss_coef": 0.01}
        _, ck = self.train(ini, "base", **shape)
        del shape["checkpoint.init_weights"], shape["train.steps"]
        self.check_layouts(ini, (
            # (micro-batches of 2 as one rank's: the load-balancing loss is the micro-batch's)
            ("tp2_dp2_ep2_zero1_full", {"parallel.tp": 2, "parallel.ep": 2, "parallel.zero": 1,
                                        "train.recompute": "full"}),
            ("pp2_dp2_ep2_zero3", {"parallel.pp": 2, "parallel.ep": 2, "parallel.zero": 3})),
            **{"checkpoint.init_weights": self.latest(ck), **shape})


class Fresh(LoraCase):
    def test_peft_initialisation(self):
        base, ini = self.import_base()
        lora = {"lora.rank": 4, "lora.alpha": 8, "lora.targets": "q_proj,v_proj,down_proj"}
        # One step at a learning rate too small to move A: the adapters as they started.
        tiny = {"train.steps": 1, "optim.lr": 1e-30, "optim.min_lr": 0, "optim.warmup_steps": 0}
        _, ck = self.train(ini, "one", lora=lora, **tiny)
        _, tensors = self.export_peft(self.latest(ck), "fresh")
        self.assertEqual(len(tensors), 2 * 2 * 3)
        for name, t in tensors.items():
            if ".lora_B." in name:
                self.assertLess(float(t.abs().max()), 1e-20, name)
                continue
            bound = 1 / math.sqrt(t.shape[1])
            self.assertLessEqual(float(t.abs().max()), bound, name)
            # uniform(±bound): standard deviation bound/sqrt(3); 4·in draws give it to about 10%
            self.assertLess(abs(float(t.std()) / (bound / math.sqrt(3)) - 1), 0.25, name)
        _, ck2 = self.train(ini, "dp2_tp2", [MPIEXEC, "-n", 4], {"parallel.tp": 2}, lora=lora, **tiny)
        _, other = self.export_peft(self.latest(ck2), "fresh2")
        for name, t in tensors.items():
            if ".lora_A." in name:
                self.assertTrue(torch.equal(t, other[name]), f"{name} differs under dp2·tp2")


class Resume(LoraCase):
    def test_resume_bitwise_and_across_layouts(self):
        _, ini = self.import_base(self.adapter())
        straight, _ = self.train(ini, "straight")
        self.train(ini, "resumed", expect=3, **{"train.stop_after": 5})
        resumed, _ = self.train(ini, "resumed")
        self.assertEqual([r["loss"] for r in resumed[5:]], [r["loss"] for r in straight[5:]])
        self.train(ini, "moved", expect=3, **{"train.stop_after": 5})
        moved, _ = self.train(ini, "moved", [MPIEXEC, "-n", 4], {"parallel.tp": 2, "parallel.zero": 2})
        self.assert_same_losses(moved[-5:], [r["loss"] for r in straight[5:]], 2e-5, "resumed under dp2·tp2", 6)
        # Another base under the same path: the adapters are refused, naming what changed.
        self.train(ini, "other", expect=3, **{"train.stop_after": 5})
        hf_reference.write_hf_dir(self.base, "llama", CONFIG, seed=4, std=0.1)
        p = run(["import", self.base, "--out", self.path("init.h5"), "--ini", self.path("init.ini"),
                 "--seq-len", SEQ_LEN, "--adapter", self.path("adapter")])
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        args = ["train", "--config", ini, "--data.train", self.path("data.bin"), "--checkpoint.dir",
                self.path("other_ck"), "--data.tokenizer", ""] + [str(x) for k, v in KEYS.items() for x in (f"--{k}", v)]
        p = run(args)
        self.assertEqual(p.returncode, 2, p.stdout + p.stderr)
        for needle in ("lora_base_hash", "checkpoint.init_weights", self.path("init.h5")):
            self.assertIn(needle, p.stderr)


class AdapterKeys(LoraCase):
    """Adapters continue only under the keys they were trained with: each of lora.rank, lora.alpha,
    lora.targets and lora.rslora changed on a resume and on an `import --adapter` file is refused naming the
    key and both values (the rank used to fail on a tensor shape, the others to train silently)."""
    changes = (("lora.rank", 4, "3"), ("lora.alpha", 5, "6"), ("lora.targets", "q_proj,v_proj", None),
               ("lora.rslora", "false", "true"))

    def assert_names(self, p, key, origin, run_value, stored_value):
        self.assertEqual(p.returncode, 2, p.stdout + p.stderr)
        self.assertIn(origin, p.stderr)
        self.assertIn(f"but this run has {key} = {run_value}", p.stderr)
        if stored_value is not None:
            self.assertIn(f"trained with {key} = {stored_value}", p.stderr)
            self.assertIn(f"set --{key} {stored_value}", p.stderr)
        self.assertNotIn("another model, or damaged", p.stderr)

    def run_changed(self, ini, name, key, value):
        args = ["train", "--config", ini, "--data.train", self.path("data.bin"), "--checkpoint.dir",
                self.path(name + "_ck"), "--data.tokenizer", "", f"--{key}", value]
        for k, v in KEYS.items():
            args += [f"--{k}", v]
        return run(args)

    def test_resume_and_init_weights_name_the_key(self):
        _, ini = self.import_base(self.adapter())
        self.train(ini, "stopped", expect=3, **{"train.stop_after": 2})
        for key, value, stored in self.changes:
            p = self.run_changed(ini, "stopped", key, value)
            self.assert_names(p, key, "checkpoint.resume", value, stored)
            p = self.run_changed(ini, "fresh_" + key, key, value)
            self.assert_names(p, key, "checkpoint.init_weights", value, stored)
            self.assertIn(self.path("init.h5"), p.stderr)
        # The same keys as stored resume (lora.dropout is free to change).
        resumed, _ = self.train(ini, "stopped", **{"lora.dropout": 0.1})
        self.assertEqual(resumed[-1]["step"], KEYS["train.steps"])

    def test_rank_above_a_targets_shape_is_warned(self):
        # hidden 24, q 32 wide, k and v 16 (GQA, head_dim 8): rank 20 exceeds k_proj's and v_proj's min(in, out)
        # (16), not q_proj's (24).
        _, ini = self.import_base()
        args = ["train", "--config", ini, "--data.train", self.path("data.bin"), "--checkpoint.dir",
                self.path("wide_ck"), "--data.tokenizer", ""]
        for k, v in {**KEYS, "train.steps": 1, "lora.rank": 20, "lora.alpha": 20, "lora.targets": "q_proj"}.items():
            args += [f"--{k}", v]
        p = run(args)
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        self.assertNotIn("exceeds min(in, out)", p.stderr)
        p = run(args[:-1] + ["q_proj,k_proj,v_proj"] + ["--checkpoint.dir", self.path("wide2_ck")])
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        kv = CONFIG["head_dim"] * CONFIG["num_key_value_heads"]
        self.assertIn(f"lora.rank = 20 exceeds min(in, out) = {kv} of layers.0.self_attn.k_proj.weight", p.stderr)
        self.assertIn("and 3 more of the 6 adapted weights", p.stderr)

    def test_full_checkpoint_and_adapter_run(self):
        base, ini = self.import_base()
        self.train(ini, "full", expect=3, **{"train.stop_after": 1})
        lora = {"lora.rank": 2, "lora.alpha": 4, "lora.targets": "q_proj"}
        p = run(["train", "--config", ini, "--data.train", self.path("data.bin"), "--checkpoint.dir",
                 self.path("full_ck"), "--data.tokenizer", ""]
                + [str(x) for k, v in {**KEYS, **lora}.items() for x in (f"--{k}", v)])
        self.assertEqual(p.returncode, 2, p.stdout + p.stderr)
        self.assertIn("holds a full model (lora.rank = 0, no adapters), but this run has lora.rank = 2", p.stderr)


def main():
    global MESHTRAIN, WORKDIR, MPIEXEC
    ap = argparse.ArgumentParser()
    ap.add_argument("--meshtrain", required=True)
    ap.add_argument("--workdir", required=True)
    ap.add_argument("--mpiexec", default=shutil.which("mpiexec"))
    ap.add_argument("--group", choices=["reference", "layouts", "all"], default="all",
                    help="reference: Reference, Gpt2Reference, Fresh and AdapterKeys; layouts: Layouts, Gpt2Layouts, Dropout, Gpt2Dropout and Resume")
    ap.add_argument("-k", dest="pattern")
    args = ap.parse_args()
    MESHTRAIN, WORKDIR, MPIEXEC = os.path.abspath(args.meshtrain), os.path.abspath(args.workdir), args.mpiexec
    groups = {"reference": (Reference, Gpt2Reference, MixtralReference, Fresh, AdapterKeys),
              "layouts": (Layouts, Gpt2Layouts, Dropout, Gpt2Dropout, Resume, MoeLayouts)}
    run_cases(groups["reference"] + groups["layouts"] if args.group == "all" else groups[args.group], args.pattern)


if __name__ == "__main__":
    main()
