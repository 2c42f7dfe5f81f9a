#!/usr/bin/python3
"""Reference training run with the independent PyTorch model (gpt2_torch.py).

Reads the same INI as `meshtrain train` (plus `--section.key VALUE` overrides), starts from the
same init-weights HDF5 (/model group, what meshtrain gets as checkpoint.init_weights), walks the
`sequential` data order, and writes per-step JSON:
  {"loss": [...], "lr": [...], "grad_norm": [...]}
loss = mean cross-entropy of the step's global batch before the update; lr = rate used by the
step; grad_norm = global L2 norm before clipping.

usage: /usr/bin/python3 train_reference.py [--config cfg.ini] --init_weights init.h5
       --data 'shards/*.bin' [--steps N] [--dtype float64|float32] --out losses.json
       [--model.layers 4 --optim.lr 1e-3 ...]
--steps runs the first N steps of the schedule; the schedule itself always spans train.steps.
"""
import argparse
import json
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gpt2_torch  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--config", help="INI file (the trainer's keys; defaults as the trainer's)")
    ap.add_argument("--init_weights", required=True, help="HDF5 file with a /model group")
    ap.add_argument("--data", help="token shard or glob (default: data.train of the config)")
    ap.add_argument("--steps", type=int, help="steps to run (default train.steps)")
    ap.add_argument("--dtype", choices=["float64", "float32"], default="float64")
    ap.add_argument("--out", required=True, help="JSON file to write")
    ap.add_argument("--quiet", action="store_true")
    args, rest = ap.parse_known_args()
    cfg = gpt2_torch.load_config(args.config, gpt2_torch.parse_overrides(rest))

    order = cfg.get("data", {}).get("order", "sequential")
    if order != "sequential":
        sys.exit(f"data.order = {order}: the reference reproduces only the sequential order")
    data = args.data or cfg.get("data", {}).get("train")
    if not data:
        sys.exit("no data: give --data or data.train")

    torch.manual_seed(cfg["train"]["seed"])
    model = gpt2_torch.build_model(cfg, gpt2_torch.torch_dtype(args.dtype))
    gpt2_torch.load_weights(model, args.init_weights)
    tokens = gpt2_torch.read_tokens(data)
    hist = gpt2_torch.train(model, tokens, cfg, args.steps, log=None if args.quiet else print)
    with open(args.out, "w") as f:
        json.dump(hist, f, indent=1)


if __name__ == "__main__":
    main()
