#!/usr/bin/python3
"""A test_model_vs_torch reference case made through `meshtrain import`: the Hugging Face reference
(tests/oracle/hf_reference.py) writes a model directory of random weights, `meshtrain import` turns it
into initial weights and an INI, and this script writes, in make_reference.py's file format, the
imported weights under /model, a random batch, and the reference's float64 logits, loss and
gradients under meshtrain's names, with the INI's [model] keys as root attributes. test_model_vs_torch
then checks that the imported model computes what the Hugging Face definition computes.

A Mixtral directory adds make_reference.py's /expected/moe: each block's routing counts and its
load-balancing and z-losses, computed here from the reference's router logits by usage.md's
definitions (Mixture of experts); the imported objective carries no aux term (transformers adds
none unless output_router_logits), so the gradients are the cross-entropy's.

usage: make_hf_reference.py --meshtrain BIN --arch llama|qwen2|mistral|mixtral|gpt2 --config JSON --out REF.h5
       [--batch 2] [--seed 5] [--dtype float32|bfloat16]
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

import h5py
import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "oracle"))
sys.path.insert(0, HERE)
import hf_reference  # noqa: E402
from test_hf_import import meshtrain_name  # noqa: E402

# The root attributes test_model_vs_torch reads, by type (make_reference.py's file format).
INT_KEYS = ["layers", "heads", "d_model", "vocab", "seq_len", "kv_heads", "ffn_hidden", "multiple_of", "head_dim",
            "rope_original_max_position"]
BOOL_KEYS = ["tie_embeddings", "qkv_bias"]
REAL_KEYS = ["rope_theta", "norm_eps", "rope_factor", "rope_low_freq_factor", "rope_high_freq_factor"]
TEXT_KEYS = ["arch", "rope_scaling"]
MOE_INT_KEYS = ["experts", "experts_per_token", "moe_every", "shared_experts", "expert_hidden"]
MOE_BOOL_KEYS = ["normalize_gates"]
MOE_REAL_KEYS = ["capacity_factor", "aux_loss_coef", "z_loss_coef"]


def resolved_model_keys(meshtrain, ini, names):
    """Every [model] key as `meshtrain config` resolves the INI: a gpt2 import leaves out the keys at their
    defaults, and the reference file needs them all."""
    p = subprocess.run([meshtrain, "config", "--config", ini, "--get"] + [f"model.{k}" for k in names],
                       capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"make_hf_reference.py: meshtrain config failed ({p.returncode}):\n{p.stdout}{p.stderr}")
    return dict(zip(names, p.stdout.splitlines()))


def routing_statistics(router_logits, k):
    """usage.md's per-block terms from each block's router logits [N, E]: assignments routed to each
    expert (top-k of the softmax; nothing dropped without capacity), aux = E · Σ_e f_e · P_e and
    z = mean over rows of logsumexp²."""
    routed, aux, z = [], [], []
    for logits in router_logits:
        logits = logits.detach().to(torch.float64)
        p = torch.softmax(logits, dim=-1)
        N, E = p.shape
        counts = torch.bincount(torch.topk(p, k, dim=-1).indices.reshape(-1), minlength=E)
        routed.append(counts.numpy().astype(np.int64))
        aux.append(float(E * (counts.to(torch.float64) / (N * k) * p.mean(0)).sum()))
        z.append(float((torch.logsumexp(logits, dim=-1) ** 2).mean()))
    return np.stack(routed), np.array(aux), np.array(z)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--meshtrain", required=True)
    ap.add_argument("--arch", required=True, choices=["llama", "qwen2", "mistral", "mixtral", "gpt2"])
    ap.add_argument("--config", default="{}", help="config.json fields over the reference's tiny defaults")
    ap.add_argument("--out", required=True)
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--seed", type=int, default=5)
    ap.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    a = ap.parse_args()

    with tempfile.TemporaryDirectory() as work:
        source = os.path.join(work, "hf")
        hf_reference.write_hf_dir(source, a.arch, json.loads(a.config), seed=a.seed, dtype=a.dtype, shard_bytes=4096,
                                  std=0.1)
        weights, ini = os.path.join(work, "w.h5"), os.path.join(work, "w.ini")
        p = subprocess.run([a.meshtrain, "import", source, "--out", weights, "--ini", ini], capture_output=True,
                           text=True)
        if p.returncode != 0:
            sys.exit(f"make_hf_reference.py: meshtrain import failed ({p.returncode}):\n{p.stdout}{p.stderr}")
        ints, bools, reals = INT_KEYS, BOOL_KEYS, REAL_KEYS
        if a.arch == "mixtral":
            ints, bools, reals = ints + MOE_INT_KEYS, bools + MOE_BOOL_KEYS, reals + MOE_REAL_KEYS
        model = resolved_model_keys(a.meshtrain, ini, ints + bools + reals + TEXT_KEYS)
        with h5py.File(weights, "r") as f:
            imported = {name: f["model"][name][()] for name in f["model"]}

        reference = hf_reference.load_hf_dir(source)
        T, V = int(model["seq_len"]), int(model["vocab"])
        g = torch.Generator().manual_seed(a.seed + 1)
        inputs = torch.randint(0, V, (a.batch, T), generator=g)
        targets = torch.randint(0, V, (a.batch, T), generator=g)
        router_logits = []
        for module in reference.modules():
            if isinstance(module, hf_reference.SparseMoeBlock):
                module.register_forward_hook(lambda _m, _i, out: router_logits.append(out[1]))
        result = hf_reference.forward_loss(reference, inputs, targets)

    with h5py.File(a.out, "w") as f:
        for name, values in imported.items():
            f.create_dataset(f"model/{name}", data=values)
        for hf_name, grad in result["grads"].items():
            f.create_dataset(f"expected/grads/{meshtrain_name(a.arch, hf_name)}", data=grad.numpy())
        f.create_dataset("inputs", data=inputs.numpy().astype(np.int32))
        f.create_dataset("targets", data=targets.numpy().astype(np.int32))
        f.create_dataset("expected/loss", data=np.float64(result["loss"]))
        f.create_dataset("expected/logits", data=result["logits"].numpy())
        f.attrs["batch"] = np.int64(a.batch)
        for key, text in model.items():
            f.attrs[key] = (text if key in TEXT_KEYS else np.int64(text == "true") if key in bools
                            else np.int64(text) if key in ints else np.float64(text))
        if router_logits:
            routed, aux, z = routing_statistics(router_logits, int(model["experts_per_token"]))
            f.create_dataset("expected/moe/blocks", data=np.arange(len(router_logits), dtype=np.int64))
            f.create_dataset("expected/moe/routed", data=routed)
            f.create_dataset("expected/moe/kept", data=routed)
            f.create_dataset("expected/moe/aux", data=aux)
            f.create_dataset("expected/moe/z", data=z)
    print(f"wrote {a.out}: {a.arch} through meshtrain import, loss {result['loss']:.12f}")


if __name__ == "__main__":
    main()
