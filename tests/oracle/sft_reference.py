#!/usr/bin/python3
"""Supervised fine-tuning as share/docs/usage.md defines it, in PyTorch, without packing.

Written from usage.md's sections "Fine-tuning data", "Packing fine-tuning records" and "Packing and the
fine-tuning loss", not from meshtrain's code:
- a fine-tuning shard: header (magic 20261203, version 1, N tokens, R records, width), N tokens, N mask bytes,
  R + 1 int64 record offsets;
- a record of L tokens takes P = min(L - 1, T) positions (data.overlong = truncate) or none when L - 1 > T
  (drop) or L < 2; target i predicts token i + 1 and carries loss iff mask[i + 1] = 1;
- next-fit packing of the records, in record order each epoch (data.order = sequential), into windows of T
  positions; sample k of the run is window k of epochs 0, 1, ... concatenated;
- a step's objective: the sum of the cross-entropies of the loss-carrying targets of its G samples divided
  by their count (no step here lacks them).
Each record is run through the model alone, from position 0: what the packed run must equal if its documents
never see each other and their positions restart. Training then goes as gpt2_torch.train does (AdamW, the
schedule, clipping).
"""
import numpy as np
import torch
import torch.nn.functional as F

import gpt2_torch

SFT_MAGIC, SFT_VERSION = 20261203, 1


def write_sft_shard(path, records):
    """records: [(tokens, mask), ...], each a list of ints; mask[0] must be 0."""
    tokens = np.concatenate([np.asarray(t, dtype="<u2") for t, _ in records])
    mask = np.concatenate([np.asarray(m, dtype="u1") for _, m in records])
    offsets = np.concatenate([[0], np.cumsum([len(t) for t, _ in records])]).astype("<i8")
    header = np.zeros(256, dtype="<i4")
    header[:5] = (SFT_MAGIC, SFT_VERSION, len(tokens), len(records), 2)
    with open(path, "wb") as f:
        for part in (header, tokens, mask, offsets):
            f.write(part.tobytes())


def kept_positions(length, T, overlong):
    """Positions a record of `length` tokens takes in a window (0: skipped)."""
    if length < 2 or (length - 1 > T and overlong == "drop"):
        return 0
    return min(length - 1, T)


def pack_epoch(records, T, overlong):
    """Next-fit windows of one epoch in record order: [[(record, positions), ...], ...]."""
    windows, current, used = [], [], 0
    for r, (tokens, _) in enumerate(records):
        p = kept_positions(len(tokens), T, overlong)
        if p == 0:
            continue
        if used + p > T:
            windows.append(current)
            current, used = [], 0
        current.append((r, p))
        used += p
    if current:
        windows.append(current)
    return windows


def document_loss_sum(model, tokens, mask, positions):
    """Σ of the loss-carrying targets' cross-entropies of one record run alone, and their count."""
    x = torch.tensor(tokens[:positions], dtype=torch.long)[None]
    y = torch.tensor(tokens[1:positions + 1], dtype=torch.long)
    carries = torch.tensor(mask[1:positions + 1], dtype=torch.bool)
    logits = model.logits(x)[0]
    losses = F.cross_entropy(logits, y, reduction="none")
    return (losses * carries).sum(), int(carries.sum())


def validation_loss(model, valid, T, overlong="truncate", windows=None):
    """usage.md's Validation: the loss over the loss-carrying targets of the first `windows` windows of the
    validation data (all when None) — records packed in file order, each run alone, or a token stream's
    windows [wT, wT + T]."""
    with torch.no_grad():
        if isinstance(valid, np.ndarray):
            W = (len(valid) - 1) // T if windows is None else windows
            rows = torch.from_numpy(np.stack([valid[w * T:w * T + T + 1] for w in range(W)]).astype(np.int64))
            logits = model.logits(rows[:, :T])
            return float(F.cross_entropy(logits.reshape(-1, logits.shape[-1]), rows[:, 1:].reshape(-1)))
        epoch = pack_epoch(valid, T, overlong)
        total, count = 0.0, 0
        for window in epoch[:windows]:
            for r, p in window:
                loss_sum, n = document_loss_sum(model, valid[r][0], valid[r][1], p)
                total += float(loss_sum)
                count += n
        return total / count


def train(model, records, cfg, overlong="truncate", steps=None, valid=None, eval_every=0, eval_windows=None):
    """Steps of fine-tuning; returns {"loss": [...], "lr": [...], "grad_norm": [...], "targets": [...]} and,
    with `valid` (records or a token array), "val_loss": {step: value} after every eval_every-th and the last
    step."""
    T = cfg["model"]["seq_len"]
    G = cfg["train"]["global_batch"]
    steps = cfg["train"]["steps"] if steps is None else steps
    epoch = pack_epoch(records, T, overlong)  # sequential order: every epoch packs alike
    params = list(model.parameters())
    opt = gpt2_torch.make_optimizer(model, cfg)
    hist = {"loss": [], "lr": [], "grad_norm": [], "targets": [], "val_loss": {}}
    for s in range(steps):
        opt.zero_grad(set_to_none=True)
        total, count = 0.0, 0
        for j in range(G):
            for r, p in epoch[(s * G + j) % len(epoch)]:
                tokens, mask = records[r]
                loss_sum, n = document_loss_sum(model, tokens, mask, p)
                total = total + loss_sum
                count += n
        (total / count).backward()
        clip = cfg["optim"]["grad_clip"]
        norm = float(torch.nn.utils.clip_grad_norm_(params, clip)) if clip > 0 else gpt2_torch.global_grad_norm(params)
        lr = gpt2_torch.lr_at(s, cfg)
        for group in opt.param_groups:
            group["lr"] = lr
        opt.step()
        hist["loss"].append(float(total) / count)
        hist["lr"].append(lr)
        hist["grad_norm"].append(norm)
        hist["targets"].append(count)
        if valid is not None and (s + 1 == cfg["train"]["steps"] or (eval_every and (s + 1) % eval_every == 0)):
            hist["val_loss"][s + 1] = validation_loss(model, valid, T, overlong, eval_windows)
    return hist
