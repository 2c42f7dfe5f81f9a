#!/usr/bin/env python3
"""`meshtrain plan`'s trainable parameter counts for LoRA and full fine-tuning against PyTorch: the
small llama models of tests/oracle/hf_reference.py wrapped by tests/oracle/lora_reference.py (PEFT's
definitions, not meshtrain's code), counted as PEFT's get_nb_trainable_parameters counts them, and
summed from the PEFT adapter's own names and shapes. Models with grouped-query attention, a head_dim
that is not d_model / heads and a tied head; targets on attention only, on all linears and a mix.
And a Mixtral (every block MoE: 4 experts, top-2) with its router's and every routed expert's
adapters, PyTorch's targets in Mixtral's names (w1, w3, w2; gate the router), meshtrain's in its own.
Also: the table names both columns, and a config without [lora] prints no LoRA column.

usage: test_lora_plan_count.py --meshtrain BIN [-v]
"""
import argparse
import json
import os
import subprocess
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "oracle"))
import hf_reference as hr  # noqa: E402
import lora_reference as lr  # noqa: E402

MESHTRAIN = None
ATTENTION = ["q_proj", "k_proj", "v_proj", "o_proj"]
ALL_LINEAR = ATTENTION + ["gate_proj", "up_proj", "down_proj"]

# (HF config overrides, the same model as meshtrain keys)
MODELS = [
    ({"hidden_size": 32, "intermediate_size": 48, "num_hidden_layers": 2, "num_attention_heads": 4,
      "num_key_value_heads": 2, "vocab_size": 67},
     {"layers": 2, "d_model": 32, "ffn_hidden": 48, "heads": 4, "kv_heads": 2, "vocab": 67}),
    ({"hidden_size": 48, "intermediate_size": 80, "num_hidden_layers": 3, "num_attention_heads": 6,
      "num_key_value_heads": 3, "vocab_size": 101, "head_dim": 16, "tie_word_embeddings": True},
     {"layers": 3, "d_model": 48, "ffn_hidden": 80, "heads": 6, "kv_heads": 3, "vocab": 101, "head_dim": 16,
      "tie_embeddings": "true"}),
]

# (HF config overrides, meshtrain keys) of a Mixtral, and (rank, meshtrain's targets) on it.
MIXTRAL = ({"hidden_size": 32, "intermediate_size": 48, "num_hidden_layers": 2, "num_attention_heads": 4,
            "num_key_value_heads": 2, "vocab_size": 67, "num_local_experts": 4, "num_experts_per_tok": 2},
           {"layers": 2, "d_model": 32, "ffn_hidden": 48, "heads": 4, "kv_heads": 2, "vocab": 67, "experts": 4,
            "experts_per_token": 2})
MIXTRAL_TARGETS = [(3, ATTENTION + ["gate"]), (8, ALL_LINEAR + ["gate"]), (5, ["v_proj", "gate", "down_proj"]),
                   (4, ["up_proj"])]
MIXTRAL_NAME = {"gate_proj": "w1", "up_proj": "w3", "down_proj": "w2"}


def plan_json(model_keys, rank, targets):
    args = [MESHTRAIN, "plan", "--world", "1", "--json", "--model.arch", "llama", "--model.seq_len", "16",
            "--train.micro_batch", "1", "--train.global_batch", "1"]
    for key, value in model_keys.items():
        args += [f"--model.{key}", str(value)]
    if rank:
        args += ["--lora.rank", str(rank), "--lora.targets", ",".join(targets),
                 "--checkpoint.init_weights", "base.h5"]
    p = subprocess.run(args, capture_output=True, text=True, timeout=60)
    if p.returncode != 0:
        raise AssertionError(f"{' '.join(args)}: exit {p.returncode}\n{p.stderr}")
    return json.loads(p.stdout)


class LoraPlanCount(unittest.TestCase):
    def test_counts_equal_pytorch(self):
        for hf, keys in MODELS:
            for rank, targets in [(3, ATTENTION), (8, ALL_LINEAR), (5, ["v_proj", "up_proj", "down_proj"])]:
                with self.subTest(model=keys, rank=rank, targets=targets):
                    model = hr.LlamaFamilyForCausalLM(hr.make_config("llama", hf))
                    total_before = sum(p.numel() for p in model.parameters())
                    lr.apply_lora(model, targets, rank, alpha=16)
                    trainable, _ = lr.trainable_parameters(model)
                    adapter = lr.adapter_state_dict(model)
                    from_names = sum(t.numel() for name, t in adapter.items())
                    self.assertEqual(trainable, from_names)
                    comparison = plan_json(keys, rank, targets)["lora"]["comparison"]
                    self.assertEqual(comparison["lora"]["trainable_parameters"], trainable)
                    self.assertEqual(comparison["full"]["trainable_parameters"], total_before)

    def test_mixtral_counts_equal_pytorch(self):
        hf, keys = MIXTRAL
        for rank, targets in MIXTRAL_TARGETS:
            with self.subTest(rank=rank, targets=targets):
                model = hr.LlamaFamilyForCausalLM(hr.make_config("mixtral", hf))
                total_before = sum(p.numel() for p in model.parameters())
                lr.apply_lora(model, [MIXTRAL_NAME.get(t, t) for t in targets], rank, alpha=16)
                trainable, _ = lr.trainable_parameters(model)
                self.assertEqual(trainable, sum(t.numel() for t in lr.adapter_state_dict(model).values()))
                comparison = plan_json(keys, rank, targets)["lora"]["comparison"]
                self.assertEqual(comparison["lora"]["trainable_parameters"], trainable)
                self.assertEqual(comparison["full"]["trainable_parameters"], total_before)

    def test_table_and_plain_plan(self):
        hf, keys = MODELS[0]
        args = [MESHTRAIN, "plan", "--world", "1", "--model.arch", "llama", "--model.seq_len", "16",
                "--train.micro_batch", "1", "--train.global_batch", "1"]
        for key, value in keys.items():
            args += [f"--model.{key}", str(value)]
        plain = subprocess.run(args, capture_output=True, text=True, timeout=60)
        self.assertEqual(plain.returncode, 0, plain.stderr)
        self.assertNotIn("LoRA", plain.stdout)
        self.assertNotIn("lora", json.loads(subprocess.run(args + ["--json"], capture_output=True, text=True,
                                                           timeout=60).stdout))
        lora = subprocess.run(args + ["--lora.rank", "4", "--checkpoint.init_weights", "base.h5"],
                              capture_output=True, text=True, timeout=60)
        self.assertEqual(lora.returncode, 0, lora.stderr)
        self.assertIn("LoRA against full fine-tuning", lora.stdout)
        self.assertIn("trainable parameters", lora.stdout)
        for category in ["weights", "master", "grads", "optimizer", "activations"]:
            self.assertIn(f"    {category}", lora.stdout)


def main():
    global MESHTRAIN
    ap = argparse.ArgumentParser()
    ap.add_argument("--meshtrain", required=True)
    args, rest = ap.parse_known_args()
    MESHTRAIN = os.path.abspath(args.meshtrain)
    unittest.main(argv=[sys.argv[0]] + rest)


if __name__ == "__main__":
    main()
