#!/usr/bin/python3
"""Writes a reference case for meshtrain's C++ gradient test.

Random weights of the family --arch names (gpt2 or llama; matrices/embeddings normal(0, --std
0.02); biases normal(0, --bias_std 0.1); norm weights 1 + normal(0, --bias_std)) and random
tokens/targets; the loss, logits and every parameter gradient are computed in float64 by the
independent PyTorch model (gpt2_torch.py, llama_torch.py) from the weights exactly as stored
(rounded to --dtype first), and written with the inputs to one HDF5 file:

  /model/<name>            weights, float32 or float64 (--dtype), names and shapes as in share/docs/usage.md, Checkpoints
  /inputs, /targets        int32 [B, T]
  /expected/loss           float64 scalar (mean cross-entropy over the B*T targets)
  /expected/logits         float64 [B, T, V]
  /expected/grads/<name>   float64, same shape as /model/<name>
  root attributes          layers, heads, d_model, vocab, seq_len, batch, seed (int64),
                           arch, dtype (string), std, bias_std (float64); llama also
                           kv_heads, ffn_hidden, multiple_of (int64), rope_theta, norm_eps (float64)

usage: /usr/bin/python3 make_reference.py --out ref.h5 [--arch gpt2 --layers 2 --heads 2
       --d_model 64 --vocab 256 --seq_len 64 --batch 4 --seed 1337 --dtype float32 --std 0.02
       --bias_std 0.1] [llama: --kv_heads 0 --ffn_hidden 0 --multiple_of 256 --rope_theta 1e4
       --norm_eps 1e-5]
"""
import argparse
import os
import sys

import h5py
import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gpt2_torch  # noqa: E402


LLAMA_KEYS = {"kv_heads": int, "ffn_hidden": int, "multiple_of": int, "rope_theta": float, "norm_eps": float}


def make_reference(out, layers, heads, d_model, vocab, seq_len, batch, seed, dtype="float32", std=0.02, small=0.1,
                   arch="gpt2", **llama):
    """`llama`: the LLAMA_KEYS of arch llama (the trainer's defaults where left out)."""
    np_dtype = {"float32": np.float32, "float64": np.float64}[dtype]
    if arch != "llama" and llama:
        raise ValueError(f"{sorted(llama)} are llama keys, not {arch}'s")
    shape = dict(layers=layers, heads=heads, d_model=d_model, vocab=vocab, seq_len=seq_len)
    model = gpt2_torch.build_model({"model": {**shape, "arch": arch, **llama}}, torch.float64)
    gpt2_torch.random_init(model, seed, std, small)
    with torch.no_grad():                      # compute from the weights exactly as stored
        for p in model.parameters():
            p.copy_(torch.from_numpy(p.numpy().astype(np_dtype).astype(np.float64)))
    g = torch.Generator().manual_seed(seed + 1)
    inputs = torch.randint(0, vocab, (batch, seq_len), generator=g)
    targets = torch.randint(0, vocab, (batch, seq_len), generator=g)

    logits = model.logits(inputs)
    loss = torch.nn.functional.cross_entropy(logits.reshape(-1, vocab), targets.reshape(-1))
    loss.backward()

    with h5py.File(out, "w") as f:
        for name, p in model.named_parameters():
            f.create_dataset(f"model/{name}", data=p.detach().numpy().astype(np_dtype))
            f.create_dataset(f"expected/grads/{name}", data=p.grad.numpy().astype(np.float64))
        f.create_dataset("inputs", data=inputs.numpy().astype(np.int32))
        f.create_dataset("targets", data=targets.numpy().astype(np.int32))
        f.create_dataset("expected/loss", data=np.float64(loss.item()))
        f.create_dataset("expected/logits", data=logits.detach().numpy().astype(np.float64))
        for key, value in dict(**shape, batch=batch, seed=seed).items():
            f.attrs[key] = np.int64(value)
        if arch == "llama":
            for key, kind in LLAMA_KEYS.items():
                value = kind(llama.get(key, gpt2_torch.DEFAULTS["model"][key]))
                f.attrs[key] = np.int64(value) if kind is int else np.float64(value)
        f.attrs["arch"], f.attrs["dtype"] = arch, dtype
        f.attrs["std"], f.attrs["bias_std"] = std, small
    return loss.item()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, help="HDF5 file to write")
    ap.add_argument("--arch", choices=["gpt2", "llama"], default="gpt2", help="model family")
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--heads", type=int, default=2)
    ap.add_argument("--d_model", type=int, default=64)
    ap.add_argument("--vocab", type=int, default=256)
    ap.add_argument("--seq_len", type=int, default=64)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--seed", type=int, default=1337)
    ap.add_argument("--dtype", choices=["float32", "float64"], default="float32",
                    help="storage type of /model (expected values are always float64)")
    ap.add_argument("--std", type=float, default=0.02, help="std of matrices and embeddings")
    ap.add_argument("--bias_std", type=float, default=0.1,
                    help="std of biases and of norm weights around 1 / biases around 0")
    for key, kind in LLAMA_KEYS.items():
        ap.add_argument(f"--{key}", type=kind, help=f"llama: model.{key} (default the trainer's)")
    a = ap.parse_args()
    llama = {k: getattr(a, k) for k in LLAMA_KEYS if getattr(a, k) is not None}
    loss = make_reference(a.out, a.layers, a.heads, a.d_model, a.vocab, a.seq_len, a.batch, a.seed,
                          a.dtype, a.std, a.bias_std, a.arch, **llama)
    print(f"wrote {a.out}: loss {loss:.12f}")


if __name__ == "__main__":
    main()
