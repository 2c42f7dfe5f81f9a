#!/usr/bin/python3
"""Independent PyTorch reference for meshtrain (share/docs/usage.md: Keys, Checkpoints, Data order, Model and optimizer).

A plain GPT-2 whose parameter names and shapes are exactly those of a meshtrain checkpoint's
/model group (Hugging Face names without `transformer.`, Conv1D layout [in, out], y = x W + b,
output head tied to wte), plus the pieces the oracle scripts share for both families (build_model
builds llama_torch.Llama when model.arch = llama): INI config with the trainer's defaults and
`--section.key value` overrides, token shards and the `sequential` data order, the learning-rate
schedule, and an AdamW training loop built on torch.optim.AdamW.

Run with Debian's interpreter: /usr/bin/python3 (torch 1.13, h5py, numpy).
"""
import configparser
import glob
import math
import os

import h5py
import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

import llama_torch

# ----------------------------------------------------------------------------------------------
# Config: the same keys and defaults as the C++ trainer. Keys the oracle does not use (data.*,
# checkpoint.*, parallel.* ...) are kept as strings so one INI serves both programs.

DEFAULTS = {
    "model": {"layers": 2, "heads": 2, "d_model": 64, "vocab": 256, "seq_len": 64, "arch": "gpt2",
              "kv_heads": 0, "ffn_hidden": 0, "multiple_of": 256, "rope_theta": 1e4, "norm_eps": 1e-5,
              "tie_embeddings": False, "qkv_bias": False, "head_dim": 0,
              **llama_torch.ROPE_DEFAULTS, **llama_torch.MOE_DEFAULTS},
    "train": {"micro_batch": 4, "global_batch": 4, "steps": 10, "seed": 1337},
    "optim": {"lr": 3e-4, "min_lr": 3e-5, "warmup_steps": 2, "decay": "cosine",
              "weight_decay": 0.1, "beta1": 0.9, "beta2": 0.95, "eps": 1e-8, "grad_clip": 1.0},
}


def parse_bool(text):
    """true/false (also yes/no, on/off, 1/0, any case), as the trainer reads a bool; bool("false") is True."""
    words = {"true": True, "yes": True, "on": True, "1": True, "false": False, "no": False, "off": False, "0": False}
    if text.strip().lower() not in words:
        raise ValueError(f"{text!r} is not true or false")
    return words[text.strip().lower()]


def _typed(section, key, text):
    default = DEFAULTS.get(section, {}).get(key)
    if default is None or isinstance(default, str):
        return text.strip()
    if isinstance(default, bool):
        return parse_bool(text)
    return type(default)(text.strip())


def load_config(path=None, overrides=()):
    """Returns {section: {key: value}}: defaults, then the INI file, then overrides.

    `overrides` is a list of (section, key, text) or the raw argv tail ['--model.layers', '4', ...].
    """
    cfg = {s: dict(v) for s, v in DEFAULTS.items()}
    if path:
        ini = configparser.ConfigParser(inline_comment_prefixes=("#", ";"))
        if not ini.read(path):
            raise FileNotFoundError(f"config file {path} cannot be read")
        for section in ini.sections():
            for key, text in ini.items(section):
                cfg.setdefault(section, {})[key] = _typed(section, key, text)
    if overrides and isinstance(overrides[0], str):
        overrides = parse_overrides(overrides)
    for section, key, text in overrides:
        cfg.setdefault(section, {})[key] = _typed(section, key, text)
    return cfg


def write_config(path, cfg):
    """Writes {section: {key: value}} as the INI file both programs read (a float as its round-trip
    repr, a bool as true or false)."""
    def text(v):
        return str(v).lower() if isinstance(v, bool) else str(v)

    with open(path, "w") as f:
        for section, keys in cfg.items():
            f.write(f"[{section}]\n" + "".join(f"{k} = {text(v)}\n" for k, v in keys.items()) + "\n")


def parse_overrides(argv):
    """['--model.layers', '4', '--optim.decay=constant'] -> [('model', 'layers', '4'), ...]."""
    out, i = [], 0
    while i < len(argv):
        arg = argv[i]
        if not arg.startswith("--") or "." not in arg:
            raise ValueError(f"unexpected argument {arg!r}: overrides look like --section.key VALUE")
        name, eq, value = arg[2:].partition("=")
        if not eq:
            if i + 1 >= len(argv):
                raise ValueError(f"{arg} needs a value")
            value, i = argv[i + 1], i + 1
        section, _, key = name.partition(".")
        out.append((section, key, value))
        i += 1
    return out


def apply_sets(cfg, items):
    """Applies ['model.vocab=101', ...] (the test drivers' --set) to cfg in place, typed by the defaults."""
    for item in items:
        key, eq, text = item.partition("=")
        section, _, name = key.partition(".")
        if not eq or not name:
            raise ValueError(f"--set {item!r}: expected SECTION.KEY=VALUE")
        cfg.setdefault(section, {})[name] = _typed(section, name, text)
    return cfg


def lr_at(i, cfg):
    """Learning rate of update i (0-based), share/docs/usage.md, Model and optimizer."""
    o, steps = cfg["optim"], cfg["train"]["steps"]
    lr, warmup = o["lr"], o["warmup_steps"]
    if i < warmup:
        return lr * (i + 1) / warmup
    if o["decay"] == "constant":
        return lr
    if o["decay"] != "cosine":
        raise ValueError(f"optim.decay = {o['decay']!r}: valid values are cosine, constant")
    p = (i - warmup) / max(1, steps - warmup)
    return o["min_lr"] + 0.5 * (lr - o["min_lr"]) * (1.0 + math.cos(math.pi * p))


# ----------------------------------------------------------------------------------------------
# Model. Module attribute names are chosen so that named_parameters() yields the checkpoint names.

class Conv1D(nn.Module):
    """y = x W + b with W stored [in, out] (GPT-2 / Hugging Face Conv1D layout)."""

    def __init__(self, n_in, n_out, dtype):
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(n_in, n_out, dtype=dtype))
        self.bias = nn.Parameter(torch.zeros(n_out, dtype=dtype))

    def forward(self, x):
        return torch.matmul(x, self.weight) + self.bias


class LayerNorm(nn.Module):
    def __init__(self, c, dtype):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(c, dtype=dtype))
        self.bias = nn.Parameter(torch.zeros(c, dtype=dtype))

    def forward(self, x):
        return F.layer_norm(x, x.shape[-1:], self.weight, self.bias, eps=1e-5)


class Embedding(nn.Module):
    def __init__(self, n, c, dtype):
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(n, c, dtype=dtype))


class Attention(nn.Module):
    def __init__(self, c, heads, dtype):
        super().__init__()
        self.heads = heads
        self.c_attn = Conv1D(c, 3 * c, dtype)
        self.c_proj = Conv1D(c, c, dtype)

    def forward(self, x):
        B, T, C = x.shape
        H, D = self.heads, C // self.heads
        q, k, v = self.c_attn(x).split(C, dim=-1)            # columns q | k | v
        q, k, v = (t.view(B, T, H, D).transpose(1, 2) for t in (q, k, v))  # heads contiguous
        att = torch.matmul(q, k.transpose(-2, -1)) * (1.0 / math.sqrt(D))
        future = torch.ones(T, T, dtype=torch.bool, device=x.device).triu(1)
        att = torch.softmax(att.masked_fill(future, float("-inf")), dim=-1)
        y = torch.matmul(att, v).transpose(1, 2).reshape(B, T, C)
        return self.c_proj(y)


class MLP(nn.Module):
    def __init__(self, c, dtype):
        super().__init__()
        self.c_fc = Conv1D(c, 4 * c, dtype)
        self.c_proj = Conv1D(4 * c, c, dtype)

    def forward(self, x):
        return self.c_proj(F.gelu(self.c_fc(x), approximate="tanh"))


class Block(nn.Module):
    def __init__(self, c, heads, dtype):
        super().__init__()
        self.ln_1 = LayerNorm(c, dtype)
        self.attn = Attention(c, heads, dtype)
        self.ln_2 = LayerNorm(c, dtype)
        self.mlp = MLP(c, dtype)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT2(nn.Module):
    def __init__(self, layers, heads, d_model, vocab, seq_len, dtype=torch.float64):
        super().__init__()
        if d_model % heads:
            raise ValueError(f"d_model {d_model} is not a multiple of heads {heads}")
        self.wte = Embedding(vocab, d_model, dtype)
        self.wpe = Embedding(seq_len, d_model, dtype)
        self.h = nn.ModuleList(Block(d_model, heads, dtype) for _ in range(layers))
        self.ln_f = LayerNorm(d_model, dtype)

    def logits(self, tokens):
        T = tokens.shape[1]
        x = self.wte.weight[tokens] + self.wpe.weight[:T]
        for block in self.h:
            x = block(x)
        return torch.matmul(self.ln_f(x), self.wte.weight.t())   # tied output head

    def forward(self, tokens, targets):
        """Mean cross-entropy over every target token."""
        logits = self.logits(tokens)
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))

    # The mixture-of-experts interface of llama_torch.Llama: GPT-2 has no MoE blocks, so its
    # objective adds nothing to the mean cross-entropy.
    def moe_blocks(self):
        return []

    def auxiliary_loss(self):
        return 0.0


def build_model(cfg, dtype=torch.float64):
    """The family model.arch names, with the trainer's defaults for keys the config leaves out."""
    m = {**DEFAULTS["model"], **cfg["model"]}
    if m["arch"] == "llama":
        return llama_torch.build(m, dtype)
    if m["arch"] != "gpt2":
        raise ValueError(f"model.arch = {m['arch']!r}: valid values are gpt2, llama")
    return GPT2(m["layers"], m["heads"], m["d_model"], m["vocab"], m["seq_len"], dtype)


def torch_dtype(name):
    return {"float64": torch.float64, "float32": torch.float32}[name]


def random_init(model, seed, std=0.02, small=0.1):
    """Random weights for tests: matrices and embeddings normal(0, std); biases normal(0, small);
    norm weights (the 1-D `.weight`s: LayerNorm's, RMSNorm's) 1 + normal(0, small), so that every
    gradient path is exercised."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=g, dtype=torch.float64)
            if p.dim() >= 2:
                p.copy_(noise * std)
            elif name.endswith(".weight"):
                p.copy_(1.0 + noise * small)
            else:
                p.copy_(noise * small)
    return model


def comparable(name, values, d_model):
    """The elements of a trained tensor that training determines: the key bias (the middle third of
    c_attn.bias) has a true gradient of exactly zero (softmax ignores a shift shared by all keys of
    a row), so AdamW turns its rounding noise into ±lr steps in any implementation, one rank
    included, and it is left out."""
    if name.endswith("attn.c_attn.bias"):
        return np.concatenate([values[:d_model], values[2 * d_model:]])
    return values


def decay_flags(model):
    """Name -> whether AdamW weight decay applies (tensors of two or more dimensions)."""
    return {name: p.dim() >= 2 for name, p in model.named_parameters()}


# ----------------------------------------------------------------------------------------------
# HDF5 weights: /model/<name>

def save_weights(model, path, dtype=np.float32, mode="w"):
    with h5py.File(path, mode) as f:
        grp = f.require_group("model")
        for name, p in model.named_parameters():
            grp.create_dataset(name, data=p.detach().cpu().numpy().astype(dtype))


def load_weights(model, path):
    with h5py.File(path, "r") as f:
        if "model" not in f:
            raise KeyError(f"{path} has no /model group")
        grp = f["model"]
        with torch.no_grad():
            for name, p in model.named_parameters():
                if name not in grp:
                    raise KeyError(f"{path}: /model/{name} is missing")
                data = grp[name][()]
                if tuple(data.shape) != tuple(p.shape):
                    raise ValueError(f"{path}: /model/{name} has shape {data.shape}, expected {tuple(p.shape)}")
                p.copy_(torch.from_numpy(np.asarray(data, dtype=np.float64)))
    return model


# ----------------------------------------------------------------------------------------------
# Data: token shards and the `sequential` order (share/docs/usage.md, Data order)

SHARD_MAGIC, SHARD_VERSION = 20240520, 1


def write_shard(path, tokens):
    header = np.zeros(256, dtype="<i4")
    header[:3] = (SHARD_MAGIC, SHARD_VERSION, len(tokens))
    with open(path, "wb") as f:
        f.write(header.tobytes())
        f.write(np.asarray(tokens, dtype="<u2").tobytes())


def read_shard(path):
    header = np.fromfile(path, dtype="<i4", count=256)
    if len(header) != 256 or header[0] != SHARD_MAGIC or header[1] != SHARD_VERSION:
        raise ValueError(f"{path} is not a version-1 token shard")
    tokens = np.fromfile(path, dtype="<u2", offset=1024)
    if len(tokens) != header[2]:
        raise ValueError(f"{path}: header says {header[2]} tokens, file holds {len(tokens)}")
    return tokens


def read_tokens(spec):
    """One shard, or a glob of shards read as one stream in sorted path order."""
    paths = sorted(glob.glob(spec)) if glob.has_magic(spec) else [spec]
    if not paths or not all(os.path.isfile(p) for p in paths):
        raise FileNotFoundError(f"no token shard matches {spec}")
    return np.concatenate([read_shard(p) for p in paths]).astype(np.int64)


def step_windows(tokens, step, G, T):
    """Inputs and targets [G, T] (int64) of 0-based `step` in the sequential order."""
    W = (len(tokens) - 1) // T
    if W < 1:
        raise ValueError(f"{len(tokens)} tokens hold no window of seq_len {T} + 1")
    starts = ((step * G + np.arange(G)) % W) * T
    rows = np.stack([tokens[s:s + T + 1] for s in starts])
    return torch.from_numpy(rows[:, :T].copy()), torch.from_numpy(rows[:, 1:].copy())


# ----------------------------------------------------------------------------------------------
# Training (share/docs/usage.md, Model and optimizer)

def make_optimizer(model, cfg):
    o = cfg["optim"]
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    groups = [{"params": decay, "weight_decay": o["weight_decay"]},
              {"params": no_decay, "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=o["lr"], betas=(o["beta1"], o["beta2"]), eps=o["eps"])


def global_grad_norm(params):
    """The norm over the parameters that have a gradient (frozen ones, as LoRA's base, have none)."""
    return torch.sqrt(sum((p.grad.double() ** 2).sum() for p in params if p.grad is not None)).item()


def train(model, tokens, cfg, steps=None, log=None):
    """Runs `steps` optimizer steps (default train.steps; the schedule always spans train.steps).
    Each micro-batch's objective is its mean cross-entropy + model.auxiliary_loss(), weighted 1/accum
    (share/docs/usage.md, Mixture of experts, Objective).
    Returns {"loss": [...], "lr": [...], "grad_norm": [...]}, one entry per step (loss: the
    cross-entropy alone), and with MoE blocks "moe_aux" and "moe_z": Σ over the blocks of the mean
    over the step's micro-batches of each micro-batch's aux and z (coefficients not applied), and
    "moe_dropped": the fraction of the step's assignments (all blocks) that capacity dropped."""
    t, o = cfg["train"], cfg["optim"]
    T, G, mb = cfg["model"]["seq_len"], t["global_batch"], t["micro_batch"]
    if G % mb:
        raise ValueError(f"train.global_batch {G} is not a multiple of train.micro_batch {mb}")
    accum = G // mb
    steps = t["steps"] if steps is None else steps
    params = list(model.parameters())
    opt = make_optimizer(model, cfg)
    moe = model.moe_blocks()
    hist = {"loss": [], "lr": [], "grad_norm": [], **({"moe_aux": [], "moe_z": [], "moe_dropped": []} if moe else {})}
    for s in range(steps):
        inputs, targets = step_windows(tokens, s, G, T)
        opt.zero_grad(set_to_none=True)
        step_loss = step_aux = step_z = 0.0
        routed = kept = 0
        for k in range(accum):
            rows = slice(k * mb, (k + 1) * mb)
            loss = model(inputs[rows], targets[rows])
            ((loss + model.auxiliary_loss()) / accum).backward()
            step_loss += loss.item() / accum
            step_aux += sum(block.router.aux.item() for _, block in moe) / accum
            step_z += sum(block.router.z.item() for _, block in moe) / accum
            routed += sum(int(block.router.routed.sum()) for _, block in moe)
            kept += sum(int(block.router.kept.sum()) for _, block in moe)
        if o["grad_clip"] > 0:
            norm = float(torch.nn.utils.clip_grad_norm_(params, o["grad_clip"]))
        else:
            norm = global_grad_norm(params)
        lr = lr_at(s, cfg)
        for group in opt.param_groups:
            group["lr"] = lr
        opt.step()
        hist["loss"].append(step_loss)
        hist["lr"].append(lr)
        hist["grad_norm"].append(norm)
        if moe:
            hist["moe_aux"].append(step_aux)
            hist["moe_z"].append(step_z)
            hist["moe_dropped"].append((routed - kept) / routed)
        if log:
            log(f"step {s + 1:4d}  loss {step_loss:.6f}  lr {lr:.3e}  grad_norm {norm:.6f}")
    return hist


def run_meshtrain(cmd, expected_code=0):
    """Runs a meshtrain command line; prints FAIL with its output and returns False unless it exits
    with expected_code (3: left after train.stop_after with a checkpoint)."""
    import subprocess
    print("running:", " ".join(cmd), flush=True)
    try:
        run = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    except (OSError, subprocess.TimeoutExpired) as e:
        print(f"FAIL: could not run meshtrain: {e}")
        return False
    if run.returncode != expected_code:
        print(f"FAIL: meshtrain exited with {run.returncode}, expected {expected_code}\n"
              f"--- stdout\n{run.stdout}\n--- stderr\n{run.stderr}")
        return False
    return True
