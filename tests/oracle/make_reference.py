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
  /expected/grads/<name>   float64, same shape as /model/<name>: gradients of the batch's objective,
                           the mean cross-entropy + aux_loss_coef·Σ aux + z_loss_coef·Σ z (MoE)
  root attributes          layers, heads, d_model, vocab, seq_len, batch, seed (int64),
                           arch, dtype (string), std, bias_std (float64); llama also
                           kv_heads, ffn_hidden, multiple_of, head_dim, rope_original_max_position,
                           tie_embeddings, qkv_bias (0/1) (int64), rope_theta, norm_eps, rope_factor,
                           rope_low_freq_factor, rope_high_freq_factor (float64), rope_scaling (string)

A mixture of experts (llama, --experts E > 0; share/docs/usage.md, Mixture of experts), the batch
being one micro-batch, adds
  /expected/moe/blocks     int64 [M]: the MoE blocks' indices
  /expected/moe/aux, /z    float64 [M]: each MoE block's load-balancing and z-loss
  /expected/moe/routed     int64 [M, E]: assignments routed to each expert, before capacity
  /expected/moe/kept       int64 [M, E]: assignments each expert computed
  root attributes          experts, experts_per_token, moe_every, shared_experts, expert_hidden,
                           normalize_gates (0/1) (int64), capacity_factor, aux_loss_coef, z_loss_coef (float64)
and checks that the case exercises what it is for: every expert computes something (else its
gradients are zero), an aux or z term with a non-zero coefficient moves the gradients by more than
the C++ test's tolerance, and, with --expect_drops, that capacity drops assignments (yes) or none (no).

usage: /usr/bin/python3 make_reference.py --out ref.h5 [--arch gpt2 --layers 2 --heads 2
       --d_model 64 --vocab 256 --seq_len 64 --batch 4 --seed 1337 --dtype float32 --std 0.02
       --bias_std 0.1] [llama: --kv_heads 0 --ffn_hidden 0 --multiple_of 256 --rope_theta 1e4
       --norm_eps 1e-5 --tie_embeddings false --qkv_bias false --head_dim 0 --rope_scaling none
       --rope_factor 1 --rope_low_freq_factor 1 --rope_high_freq_factor 4
       --rope_original_max_position 8192] [MoE: --experts 0 --experts_per_token 2 --moe_every 1 --shared_experts 0
       --expert_hidden 0 --capacity_factor 0 --normalize_gates true --aux_loss_coef 0.01
       --z_loss_coef 0 --expect_drops yes|no]
"""
import argparse
import os
import sys

import h5py
import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gpt2_torch  # noqa: E402
import llama_torch  # noqa: E402


LLAMA_KEYS = {"kv_heads": int, "ffn_hidden": int, "multiple_of": int, "rope_theta": float, "norm_eps": float,
              "tie_embeddings": bool, "qkv_bias": bool, "head_dim": int,
              **{key: type(value) for key, value in llama_torch.ROPE_DEFAULTS.items()},
              **{key: type(value) for key, value in llama_torch.MOE_DEFAULTS.items()}}
GRAD_TOLERANCE = 1e-9   # test_model_vs_torch.cpp: max |Δ| ≤ 1e-9 · max(1, max |gradient|) per tensor


def moe_terms(model):
    """{"aux": aux_loss_coef · Σ aux, "z": z_loss_coef · Σ z} over the MoE blocks of the last forward,
    the non-zero coefficients only."""
    routers = [moe.router for _, moe in model.moe_blocks()]
    if not routers:
        return {}
    terms = {"aux": (model.aux_loss_coef, sum(r.aux for r in routers)),
             "z": (model.z_loss_coef, sum(r.z for r in routers))}
    return {name: coef * value for name, (coef, value) in terms.items() if coef > 0}


def check_moe_case(model, terms, expect_drops):
    """Raises ValueError when the case cannot show what it is meant to (see the module's doc)."""
    params = list(model.parameters())
    for l, moe in model.moe_blocks():
        idle = (moe.router.kept == 0).nonzero().flatten().tolist()
        if idle:
            raise ValueError(f"block {l}: experts {idle} compute nothing, so their gradients are zero: choose another --seed")
    for name, term in terms.items():
        grads = torch.autograd.grad(term, params, retain_graph=True, allow_unused=True)
        moved = max((g.abs().max().item() / max(1.0, p.grad.abs().max().item())
                     for g, p in zip(grads, params) if g is not None), default=0.0)
        print(f"the {name} term moves a gradient by up to {moved:.3g} of the C++ tolerance's scale"
              f" ({moved / GRAD_TOLERANCE:.3g} × {GRAD_TOLERANCE})")
        if moved < 1e3 * GRAD_TOLERANCE:
            raise ValueError(f"the {name} term hardly moves the gradients ({moved:.3g}): a model without it"
                             f" would pass; raise its coefficient")
    if expect_drops is not None:
        dropped = sum(int((moe.router.routed - moe.router.kept).sum()) for _, moe in model.moe_blocks())
        if (dropped > 0) != expect_drops:
            raise ValueError(f"capacity drops {dropped} assignments, expected {'some' if expect_drops else 'none'}")


def write_moe(f, model, moe_keys):
    blocks = model.moe_blocks()
    for key, default in llama_torch.MOE_DEFAULTS.items():
        value = moe_keys.get(key, default)
        f.attrs[key] = np.float64(value) if isinstance(default, float) else np.int64(value)
    f.create_dataset("expected/moe/blocks", data=np.array([l for l, _ in blocks], dtype=np.int64))
    for name in ("aux", "z"):
        f.create_dataset(f"expected/moe/{name}", data=np.array([getattr(m.router, name).item() for _, m in blocks]))
    for name in ("routed", "kept"):
        f.create_dataset(f"expected/moe/{name}", data=np.stack([getattr(m.router, name).numpy() for _, m in blocks]))


def make_reference(out, layers, heads, d_model, vocab, seq_len, batch, seed, dtype="float32", std=0.02, small=0.1,
                   arch="gpt2", expect_drops=None, **llama):
    """`llama`: the LLAMA_KEYS of arch llama (the trainer's defaults where left out). `expect_drops`:
    None, or whether capacity must drop some assignment. Returns the loss (mean cross-entropy)."""
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
    terms = moe_terms(model)
    (loss + sum(terms.values())).backward(retain_graph=bool(terms))
    if model.moe_blocks():
        check_moe_case(model, terms, expect_drops)

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
                if key not in llama_torch.MOE_DEFAULTS:
                    value = kind(llama.get(key, gpt2_torch.DEFAULTS["model"][key]))
                    f.attrs[key] = (value if kind is str else np.int64(value) if kind in (int, bool)
                                    else np.float64(value))
        if model.moe_blocks():
            write_moe(f, model, llama)
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
        ap.add_argument(f"--{key}", type=gpt2_torch.parse_bool if kind is bool else kind,
                        help=f"llama: model.{key} (default the trainer's)")
    ap.add_argument("--expect_drops", type=gpt2_torch.parse_bool,
                    help="MoE: fail unless capacity drops some assignment (yes) or none (no)")
    a = ap.parse_args()
    llama = {k: getattr(a, k) for k in LLAMA_KEYS if getattr(a, k) is not None}
    try:
        loss = make_reference(a.out, a.layers, a.heads, a.d_model, a.vocab, a.seq_len, a.batch, a.seed,
                              a.dtype, a.std, a.bias_std, a.arch, a.expect_drops, **llama)
    except ValueError as e:
        sys.exit(f"make_reference.py: {e}")
    print(f"wrote {a.out}: loss {loss:.12f}")


if __name__ == "__main__":
    main()
