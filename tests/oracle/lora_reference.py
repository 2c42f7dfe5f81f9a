#!/usr/bin/python3
"""Independent PyTorch LoRA for issue 28's oracle, written from PEFT's definitions (its LoraConfig,
lora.Linear, get_peft_model_state_dict and save_pretrained, about version 0.13), not from
meshtrain's code and without the peft package. It wraps the modules of hf_reference.py's models.

Definitions (PEFT's, for init_lora_weights=True, bias="none", one adapter):
  A target matches a module when the module's name equals it or ends with "." + target (PEFT's rule
  for a list of target_modules): `gate` matches Mixtral's block_sparse_moe.gate and not gate_proj,
  `c_proj` both of GPT-2's. A matched module must be an nn.Linear or GPT-2's Conv1D; a target list
  that matches nothing is an error, as in PEFT.
  Each matched module computes  y = base(x) + s · B(A(drop(x))),  base(x) = W x + b unchanged,
    A [r, in], B [out, r] (lora_A.weight, lora_B.weight, nn.Linear layouts, no biases),
    s = alpha / r, or alpha / sqrt(r) with use_rslora (rsLoRA),
    drop = nn.Dropout(lora_dropout), the identity when lora_dropout is 0; it acts on the input of A
    only and, as any torch dropout, only in training mode and from torch's global generator.
  Initialisation: A Kaiming-uniform with a = sqrt(5), i.e. uniform(−bound, bound),
  bound = sqrt(6 / ((1 + a²) · fan_in)) = 1/sqrt(in); B zero, so the wrapped model starts equal to
  the base. Here A is drawn from a torch.Generator seeded by `seed`, module by module in
  named_modules order (reproducible, not PEFT's global-generator draw); `b_std` draws B normal(0,
  b_std) too, for tests that need B ≠ 0.
  GPT-2's Conv1D stores W as [in, out] (PEFT's fan_in_fan_out=True): A and B keep the shapes
  [r, in] and [out, r]; only the merged delta is transposed.
  Every base parameter is frozen (requires_grad False): norms, embeddings and biases included.
  merge: W' = W + s · B A ([out, in]; its transpose for Conv1D). A tied lm_head (Llama family with
  tie_word_embeddings) is untied by the merge: lm_head.weight gets W + s·B A, the embedding keeps W,
  and the merged config says tie_word_embeddings false. GPT2LMHeadModel always ties, so a merged
  lm_head adapter cannot be written as a GPT-2 model: merge_lora refuses it.

Files (PEFT's save_pretrained of a causal LM):
  adapter_model.safetensors: base_model.model.<module path>.lora_A.weight [r, in] and
  .lora_B.weight [out, r] (the adapter name `default` left out), metadata {"format": "pt"}, in
  float32 unless asked otherwise;
  adapter_config.json (indent 2, sorted keys): r, lora_alpha, lora_dropout, target_modules (sorted
  list), use_rslora, fan_in_fan_out (true when a Conv1D is wrapped), bias "none", task_type
  "CAUSAL_LM", peft_type "LORA", base_model_name_or_path, init_lora_weights true, inference_mode
  true, use_dora false, modules_to_save, layers_to_transform, layers_pattern, revision null,
  rank_pattern, alpha_pattern {}; the caller's `config` overrides or adds keys.

Training: train_lora runs hf_reference.train_steps (gpt2_torch.train: AdamW over the parameters
that get gradients, decay on A and B as on any 2-D tensor, clipping over the adapters' norm) on a
wrapped model; the frozen base gets no gradient, no moment and no update.

CLI (run with /usr/bin/python3; BASE an HF directory as hf_reference.py writes or reads it):
  lora_reference.py write --dir BASE --out ADAPTER --targets q_proj,v_proj --rank 4 --alpha 8
                          [--dropout 0] [--rslora] [--seed 0] [--b-std 0.02] [--dtype float32|float64]
      a PEFT adapter directory with A drawn from the seed and B zero (or normal(0, b-std)).
  lora_reference.py oracle --dir BASE --adapter ADAPTER --tokens tokens.npy [--targets targets.npy] --out ref.npz|ref.h5
      logits, loss, tokens, targets and grad/<PEFT adapter name> (A and B only) in float64, the
      tokens as hf_reference.py oracle reads them.
  lora_reference.py train --dir BASE --adapter ADAPTER --data shard.bin|tokens.npy --out losses.json
                          --set model.seq_len=24 --set train.steps=10 ... [--save TRAINED_ADAPTER]
      the per-step {"loss", "lr", "grad_norm"} from ADAPTER's initial A and B; the base is checked
      bitwise unchanged afterwards; --save writes the trained adapter (float32).
  lora_reference.py merge --dir BASE --adapter ADAPTER --out HF_DIR [--dtype float32|bfloat16|float16]
      the merged model (merged in float64, then written in dtype) as an HF directory.
"""
import argparse
import copy
import json
import math
import os
import sys

import numpy as np

import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hf_reference as hr  # noqa: E402
import safetensors_io as st  # noqa: E402

DTYPE = hr.DTYPE
KAIMING_A = math.sqrt(5.0)
ADAPTER_FILE, CONFIG_FILE = "adapter_model.safetensors", "adapter_config.json"
PREFIX = "base_model.model."
# The module names issue 28 lets lora.targets name, per family.
LLAMA_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj", "lm_head")
MIXTRAL_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "w1", "w2", "w3", "gate", "lm_head")
GPT2_TARGETS = ("c_attn", "c_proj", "c_fc", "lm_head")


def kaiming_bound(fan_in, a=KAIMING_A):
    """kaiming_uniform_'s bound with leaky-relu gain sqrt(2/(1+a²)): sqrt(6 / ((1 + a²) fan_in))."""
    return math.sqrt(6.0 / ((1.0 + a * a) * fan_in))


def scaling(r, alpha, rslora):
    return alpha / math.sqrt(r) if rslora else alpha / r


class LoraLinear(nn.Module):
    """base_layer(x) + scaling · lora_B(lora_A(lora_dropout(x))) around an nn.Linear or Conv1D."""

    def __init__(self, base_layer, r, alpha, dropout, rslora):
        super().__init__()
        self.fan_in_fan_out = isinstance(base_layer, hr.Conv1D)
        n_out, n_in = base_layer.weight.shape
        if self.fan_in_fan_out:
            n_in, n_out = n_out, n_in
        self.base_layer = base_layer
        self.lora_dropout = nn.Dropout(dropout) if dropout > 0 else nn.Identity()
        self.lora_A = nn.Linear(n_in, r, bias=False, dtype=DTYPE)
        self.lora_B = nn.Linear(r, n_out, bias=False, dtype=DTYPE)
        self.scaling = scaling(r, alpha, rslora)

    def forward(self, x):
        return self.base_layer(x) + self.scaling * self.lora_B(self.lora_A(self.lora_dropout(x)))

    def delta_weight(self):
        """s · B A in the base weight's layout ([out, in], or [in, out] for Conv1D), float64."""
        delta = self.scaling * (self.lora_B.weight.detach().to(torch.float64) @
                                self.lora_A.weight.detach().to(torch.float64))
        return delta.t() if self.fan_in_fan_out else delta


def matches(name, targets):
    return any(name == t or name.endswith("." + t) for t in targets)


def apply_lora(model, targets, r, alpha, dropout=0.0, rslora=False, seed=0, b_std=None):
    """Wraps, in place, every module of `model` whose name matches a target (module docstring), freezes
    the base, draws A (and B when b_std is given) from `seed`, and returns the model. The settings
    are kept in model.lora_settings for adapter_config.json and merge_lora."""
    targets = [targets] if isinstance(targets, str) else list(targets)
    if r < 1:
        raise ValueError(f"LoRA rank {r} must be at least 1")
    chosen = [(name, module) for name, module in model.named_modules() if name and matches(name, targets)]
    if not chosen:
        raise ValueError(f"LoRA targets {targets} match no module of the model"
                         f" (linear modules end with e.g. {sorted(linear_suffixes(model))})")
    wrong = [f"{name} ({type(m).__name__})" for name, m in chosen if not isinstance(m, (nn.Linear, hr.Conv1D))]
    if wrong:
        raise ValueError(f"LoRA targets {targets} match modules that are neither nn.Linear nor Conv1D: {wrong}")
    for p in model.parameters():
        p.requires_grad_(False)
    gen = torch.Generator().manual_seed(seed)
    for name, module in chosen:
        wrapped = LoraLinear(module, r, alpha, dropout, rslora)
        with torch.no_grad():
            bound = kaiming_bound(wrapped.lora_A.weight.shape[1])
            a = torch.rand(wrapped.lora_A.weight.shape, generator=gen, dtype=DTYPE) * (2 * bound) - bound
            wrapped.lora_A.weight.copy_(a)
            if b_std is None:
                wrapped.lora_B.weight.zero_()
            else:
                b = torch.randn(wrapped.lora_B.weight.shape, generator=gen, dtype=DTYPE)
                wrapped.lora_B.weight.copy_(b * b_std)
        parent_name, _, attr = name.rpartition(".")
        setattr(model.get_submodule(parent_name), attr, wrapped)
    model.lora_settings = {"r": r, "lora_alpha": alpha, "lora_dropout": dropout, "use_rslora": rslora,
                           "target_modules": sorted(set(targets)),
                           "fan_in_fan_out": any(isinstance(m, hr.Conv1D) for _, m in chosen)}
    return model


def linear_suffixes(model):
    return {name.rpartition(".")[2] for name, m in model.named_modules() if isinstance(m, (nn.Linear, hr.Conv1D))}


def lora_modules(model):
    """[(module path, LoraLinear)] in named_modules order."""
    return [(name, m) for name, m in model.named_modules() if isinstance(m, LoraLinear)]


def adapter_state_dict(model):
    """{PEFT name: tensor} of the adapters: base_model.model.<path>.lora_A.weight [r, in], .lora_B.weight [out, r]."""
    out = {}
    for name, m in lora_modules(model):
        out[f"{PREFIX}{name}.lora_A.weight"] = m.lora_A.weight.detach()
        out[f"{PREFIX}{name}.lora_B.weight"] = m.lora_B.weight.detach()
    return out


def trainable_parameters(model):
    """(trainable, total) parameter counts, each shared tensor once, as PEFT's get_nb_trainable_parameters."""
    params = list(model.parameters())
    return sum(p.numel() for p in params if p.requires_grad), sum(p.numel() for p in params)


def base_tensors(model):
    """{HF name: tensor} of the base weights of a wrapped model (`.base_layer` left out of the names)."""
    return {name.replace(".base_layer.", "."): p.detach() for name, p in model.named_parameters()
            if ".lora_A." not in name and ".lora_B." not in name}


def merge_lora(model):
    """A plain hf_reference model (float64) with W' = W + s·B A in every wrapped module; the
    wrapped model is left as it is."""
    config, tensors = copy.deepcopy(model.config), dict(base_tensors(model))
    for name, m in lora_modules(model):
        tied = name == "lm_head" and (config.get("tie_word_embeddings", False) or config["model_type"] == "gpt2")
        if tied and config["model_type"] == "gpt2":
            raise ValueError("an lm_head adapter on GPT-2 cannot be merged: GPT2LMHeadModel ties lm_head to"
                             " transformer.wte, and a merged head would change the embedding too")
        if tied:
            config["tie_word_embeddings"] = False
        tensors[name + ".weight"] = m.base_layer.weight.detach().to(torch.float64) + m.delta_weight()
    return hr.load_weights(hr.build_model(config), tensors, "merged LoRA weights")


def adapter_config(model, config=None):
    """adapter_config.json's dict for a wrapped model; `config` overrides or adds keys."""
    s = model.lora_settings
    out = {"alpha_pattern": {}, "base_model_name_or_path": None, "bias": "none", "fan_in_fan_out": s["fan_in_fan_out"],
           "inference_mode": True, "init_lora_weights": True, "layers_pattern": None, "layers_to_transform": None,
           "lora_alpha": s["lora_alpha"], "lora_dropout": s["lora_dropout"], "modules_to_save": None,
           "peft_type": "LORA", "r": s["r"], "rank_pattern": {}, "revision": None,
           "target_modules": s["target_modules"], "task_type": "CAUSAL_LM", "use_dora": False,
           "use_rslora": s["use_rslora"]}
    out.update(config or {})
    return out


def write_peft_adapter(model, directory, config=None, dtype=torch.float32):
    """Writes adapter_config.json and adapter_model.safetensors (tensors cast to dtype); returns
    (config dict, {name: written tensor})."""
    os.makedirs(directory, exist_ok=True)
    cfg = adapter_config(model, config)
    tensors = {n: t.to(dtype) for n, t in adapter_state_dict(model).items()}
    st.write_json(os.path.join(directory, CONFIG_FILE), cfg)
    st.write_safetensors(os.path.join(directory, ADAPTER_FILE), tensors, {"format": "pt"})
    return cfg, tensors


def read_peft_adapter(directory):
    """(config dict, {name: tensor in its stored dtype}); every name is base_model.model.<path>.lora_A/B.weight,
    each A has its B, A is [r, *] and B [*, r] with r from the config."""
    with open(os.path.join(directory, CONFIG_FILE)) as f:
        config = json.load(f)
    tensors, _ = st.read_safetensors(os.path.join(directory, ADAPTER_FILE))
    r = config["r"]
    for name, t in tensors.items():
        if not name.startswith(PREFIX) or not name.endswith((".lora_A.weight", ".lora_B.weight")):
            raise ValueError(f"{directory}: tensor {name!r} is not base_model.model.<path>.lora_A/lora_B.weight")
        path, kind = name[len(PREFIX):].rsplit(".", 2)[0], name.rsplit(".", 2)[1]
        other = f"{PREFIX}{path}.{'lora_B' if kind == 'lora_A' else 'lora_A'}.weight"
        if other not in tensors:
            raise ValueError(f"{directory}: {name} has no {other}")
        rank = t.shape[0] if kind == "lora_A" else t.shape[1]
        if t.dim() != 2 or rank != r:
            raise ValueError(f"{directory}: {name} has shape {tuple(t.shape)}, rank r = {r} expected")
    return config, tensors


def load_peft_adapter(model, directory, seed=0):
    """Wraps a base model as the adapter directory says and copies its A and B in; returns the model."""
    config, tensors = read_peft_adapter(directory)
    apply_lora(model, config["target_modules"], config["r"], config["lora_alpha"], config["lora_dropout"],
               config.get("use_rslora", False), seed)
    have = {f"{PREFIX}{name}.lora_{k}.weight": getattr(m, f"lora_{k}").weight
            for name, m in lora_modules(model) for k in "AB"}
    if set(have) != set(tensors):
        raise ValueError(f"{directory}: tensors {sorted(set(tensors) - set(have))} unexpected,"
                         f" {sorted(set(have) - set(tensors))} missing")
    with torch.no_grad():
        for name, p in have.items():
            if tuple(p.shape) != tuple(tensors[name].shape):
                raise ValueError(f"{directory}: {name} has shape {tuple(tensors[name].shape)},"
                                 f" expected {tuple(p.shape)}")
            p.copy_(tensors[name].to(DTYPE))
    return model


def train_lora(model, tokens, cfg, steps=None, include_aux=False, log=None):
    """hf_reference.train_steps on a wrapped model; raises if any base tensor moved."""
    before = {n: t.clone() for n, t in base_tensors(model).items()}
    hist = hr.train_steps(model, tokens, cfg, steps, include_aux, log)
    moved = [n for n, t in base_tensors(model).items() if not torch.equal(t, before[n])]
    if moved:
        raise RuntimeError(f"training changed frozen base tensors {moved}")
    return hist


def adapter_result(model, tokens, targets, include_aux=False):
    """hf_reference.forward_loss with the gradients of the adapters only, under their PEFT names."""
    result = hr.forward_loss(model, tokens, targets, include_aux)
    result["grads"] = {f"{PREFIX}{name}.lora_{k}.weight": getattr(m, f"lora_{k}").weight.grad.detach().clone()
                       for name, m in lora_modules(model) for k in "AB"}
    return result


SAVE_DTYPES = {"float32": torch.float32, "float64": torch.float64}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="command", required=True)
    w = sub.add_parser("write", help="a PEFT adapter for a base directory")
    w.add_argument("--dir", required=True)
    w.add_argument("--out", required=True)
    w.add_argument("--targets", required=True, help="comma-separated module names")
    w.add_argument("--rank", type=int, required=True)
    w.add_argument("--alpha", type=float, required=True)
    w.add_argument("--dropout", type=float, default=0.0)
    w.add_argument("--rslora", action="store_true")
    w.add_argument("--seed", type=int, default=0)
    w.add_argument("--b-std", type=float, default=None)
    w.add_argument("--dtype", choices=sorted(SAVE_DTYPES), default="float32")
    o = sub.add_parser("oracle", help="logits, loss and adapter gradients of a batch (float64)")
    o.add_argument("--dir", required=True)
    o.add_argument("--adapter", required=True)
    o.add_argument("--tokens", required=True, help=".npy int [B, T+1], or [B, T] with --targets")
    o.add_argument("--targets")
    o.add_argument("--out", required=True, help=".npz or .h5")
    o.add_argument("--include-aux", action="store_true")
    t = sub.add_parser("train", help="the per-step losses of a short LoRA run")
    t.add_argument("--dir", required=True)
    t.add_argument("--adapter", required=True)
    t.add_argument("--data", required=True, help="token shard, glob of shards, or 1-D .npy")
    t.add_argument("--out", required=True, help="JSON file")
    t.add_argument("--set", action="append", default=[], metavar="SECTION.KEY=VALUE")
    t.add_argument("--include-aux", action="store_true")
    t.add_argument("--save", help="write the trained adapter here (float32)")
    t.add_argument("--quiet", action="store_true")
    m = sub.add_parser("merge", help="the merged model as an HF directory")
    m.add_argument("--dir", required=True)
    m.add_argument("--adapter", required=True)
    m.add_argument("--out", required=True)
    m.add_argument("--dtype", choices=sorted(hr.FILE_DTYPES), default="float32")
    args = ap.parse_args(argv)

    base = hr.load_hf_dir(args.dir)
    if args.command == "write":
        apply_lora(base, args.targets.split(","), args.rank, args.alpha, args.dropout, args.rslora, args.seed,
                   args.b_std)
        write_peft_adapter(base, args.out, {"base_model_name_or_path": args.dir}, SAVE_DTYPES[args.dtype])
        return 0
    model = load_peft_adapter(base, args.adapter)
    if args.command == "oracle":
        tokens = torch.from_numpy(np.load(args.tokens).astype(np.int64))
        if args.targets:
            targets = torch.from_numpy(np.load(args.targets).astype(np.int64))
        else:
            tokens, targets = tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous()
        hr.save_result(args.out, adapter_result(model, tokens, targets, args.include_aux), tokens, targets)
    elif args.command == "train":
        cfg = {"model": {}, "train": dict(hr.gpt2_torch.DEFAULTS["train"]),
               "optim": dict(hr.gpt2_torch.DEFAULTS["optim"])}
        hr.gpt2_torch.apply_sets(cfg, args.set)
        if set(cfg) != {"model", "train", "optim"} or set(cfg["model"]) != {"seq_len"}:
            ap.error("train takes --set model.seq_len=T (required), train.* and optim.*; the model is the directory's")
        hist = train_lora(model, hr.read_token_stream(args.data), cfg, include_aux=args.include_aux,
                          log=None if args.quiet else print)
        with open(args.out, "w") as f:
            json.dump(hist, f, indent=1)
        if args.save:
            with open(os.path.join(args.adapter, CONFIG_FILE)) as f:
                write_peft_adapter(model, args.save, json.load(f))
    else:
        hr.write_model_dir(args.out, merge_lora(model), args.dtype)
    return 0


if __name__ == "__main__":
    sys.exit(main())
