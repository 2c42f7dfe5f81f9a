#!/usr/bin/python3
"""Independent PyTorch reference for Hugging Face checkpoints (issue 26's oracle), written from the
transformers model definitions (about version 4.46), not from meshtrain's code. No transformers
here: the five causal LMs are rebuilt from torch modules with HF's parameter names, and their
weights are read and written as HF directories by safetensors_io.py.

Architectures (config.json `architectures`, `model_type`) and what each follows:
  llama    LlamaForCausalLM    modeling_llama: LlamaRMSNorm, LlamaRotaryEmbedding, LlamaAttention,
                               LlamaMLP, LlamaDecoderLayer, LlamaModel, tied lm_head
  mistral  MistralForCausalLM  modeling_mistral (the Llama layers without biases)
  qwen2    Qwen2ForCausalLM    modeling_qwen2 (q/k/v_proj with bias, o_proj without)
  mixtral  MixtralForCausalLM  modeling_mixtral: MixtralSparseMoeBlock, MixtralBlockSparseTop2MLP,
                               load_balancing_loss_func
  gpt2     GPT2LMHeadModel     modeling_gpt2: Conv1D, GPT2Attention, GPT2MLP (gelu_new), GPT2Block

Llama family (llama, mistral, qwen2, mixtral), C hidden_size, H heads, KV num_key_value_heads,
D head_dim (config `head_dim`, else C/H; it may differ from C/H), V vocab_size:
  x = model.embed_tokens[tokens]   (nn.Embedding with padding_idx = pad_token_id: that row gets no gradient)
  per layer l (model.layers.l.):
    a = input_layernorm(x);  q, k, v = self_attn.{q,k,v}_proj(a)  [H·D | KV·D | KV·D]
    q, k = rope(q), rope(k);  kv head h // (H/KV) serves query head h (repeat_kv)
    x += self_attn.o_proj(softmax(q kᵀ / sqrt(D) + causal mask) v)
    m = post_attention_layernorm(x)
    x += mlp.down_proj(silu(mlp.gate_proj(m)) · mlp.up_proj(m))       (llama, mistral, qwen2)
      or block_sparse_moe(m)                                            (mixtral)
  logits = lm_head(model.norm(x));  lm_head.weight = model.embed_tokens.weight when tie_word_embeddings
  (then lm_head.weight is absent from the files, as save_pretrained leaves it).
RMSNorm: weight · x / sqrt(mean(x²) + rms_norm_eps). Biases: llama's attention_bias puts one on
q, k, v and o_proj, mlp_bias on gate, up and down_proj; qwen2 always has q, k, v biases and none on
o_proj; mistral and mixtral have none.
RoPE (rotate_half): inv_freq_i = 1 / rope_theta^(2i/D), i < D/2; then rope_scaling:
  None; {"rope_type" (or legacy "type"): "linear", "factor": f}: inv_freq / f;
  {"rope_type": "llama3", "factor", "low_freq_factor", "high_freq_factor",
   "original_max_position_embeddings": L}, as _compute_llama3_parameters: wavelen = 2π/inv_freq;
   wavelen < L/high_freq_factor: unchanged; wavelen > L/low_freq_factor: inv_freq/factor; between:
   (1 − s)·inv_freq/factor + s·inv_freq, s = (L/wavelen − low_freq_factor)/(high_freq_factor − low_freq_factor).
  angle(t, i) = t · inv_freq_i at positions t = 0..T−1; cos and sin repeat each frequency over
  both halves; rope(x) = x·cos + rotate_half(x)·sin, rotate_half(x1, x2) = (−x2, x1).
Mixtral's block_sparse_moe over the N = B·T rows: router logits z = gate(m) [N, E]
(E num_local_experts), p = softmax(z) over all experts, the k = num_experts_per_tok largest
(torch.topk), their p renormalised to sum 1; y = Σ_j w_j · experts.e_j(m), expert e:
w2(silu(w1 m) · w3 m). No capacity, nothing dropped, no shared expert.
Load-balancing loss (load_balancing_loss_func, no attention mask): over the router logits of all
layers concatenated (L·N rows), E · Σ_{j,e} f_{j,e} · P_e, f_{j,e} = the fraction of rows whose j-th
choice is e, P_e = the mean of p_e. MixtralForCausalLM adds router_aux_loss_coef · aux to the
cross-entropy only when output_router_logits is set (default false): here the objective is the
cross-entropy alone; the aux loss is reported beside it, and include_aux adds it as HF would.

GPT-2 (transformer.):  x = wte[tokens] + wpe[0..T−1]; per block h.l: x += attn.c_proj(attention(
attn.c_attn(ln_1(x)))) (c_attn's columns q | k | v, heads contiguous, scale 1/sqrt(C/n_head),
causal); x += mlp.c_proj(gelu_new(mlp.c_fc(ln_2(x)))), width n_inner or 4·C; logits = ln_f(x) wteᵀ
(lm_head tied, absent from the files). Conv1D: y = x W + b with W stored [in, out]. LayerNorm eps
layer_norm_epsilon. gelu_new(x) = ½x(1 + tanh(sqrt(2/π)(x + 0.044715x³))).

What an importer meets beyond these files: save_pretrained leaves out of config.json a field equal
to the config class's own default (to_diff_dict compares with a default instance of that class), so a
missing tie_word_embeddings means that class's default: false for Llama, Mistral, Qwen2 and Mixtral,
true for GPT-2 (this writer always writes it); the original `gpt2` checkpoint on the Hub names its tensors without `transformer.`
and may carry `attn.bias` buffers; newer transformers (v5) write RoPE as `rope_parameters`.

Loss: the mean cross-entropy of logits [B, T, V] against the given targets [B, T] (HF shifts its
labels inside the model; here the caller passes inputs and targets already shifted).

Numerics: everything in float64, including what HF computes in float32 for stability (RMSNorm,
the rotary tables, the attention softmax, the router softmax); against HF's own float32 tables
angles differ by about 1e-7 relative.

Not supported (build_model refuses, write_hf_dir still writes them so that importers can be tested
on refusals): a sliding window (mistral/mixtral `sliding_window` not null, qwen2
`use_sliding_window`), other rope_scaling types, a hidden_act other than silu (gelu_new for GPT-2),
Mixtral's router_jitter_noise, GPT-2's scale_attn_by_inverse_layer_idx or scale_attn_weights false.

The writer: write_hf_dir builds the config (HF defaults for behaviour, a tiny model for sizes
unless given), random weights (gpt2_torch.random_init: matrices and embeddings normal(0, std),
biases normal(0, 0.1), norm weights 1 + normal(0, 0.1), deterministic from the seed), and writes
config.json, generation_config.json and model.safetensors or shards + index in float32,
bfloat16 or float16 (both rounded to nearest even from the float32 values). Training: train_steps runs
gpt2_torch.train (meshtrain's schedule, AdamW decay on tensors of two or more dimensions, clipping;
share/docs/usage.md, Model and optimizer) on a model keyed by HF names.

CLI (run with /usr/bin/python3):
  hf_reference.py write --arch llama --config '{"tie_word_embeddings": true}' --out DIR
                        [--dtype float32|bfloat16|float16] [--shard-bytes 4096] [--seed 3] [--std 0.02]
  hf_reference.py oracle --dir DIR --tokens tokens.npy [--targets targets.npy] --out ref.npz|ref.h5 [--include-aux]
      tokens.npy int [B, T+1] (inputs = [:, :-1], targets = [:, 1:]) or [B, T] with --targets;
      writes logits, loss, aux_loss (mixtral), tokens, targets and grad/<HF name> in float64
      (.h5: the same as datasets, gradients under /grad).
  hf_reference.py train --dir DIR --data shard.bin|'shards/*.bin'|tokens.npy --out losses.json
                        --set model.seq_len=24 --set train.steps=10 --set optim.lr=1e-3 ... [--include-aux] [--save DIR]
      the sequential data order and the trainer's defaults for train.* and optim.* keys
      (gpt2_torch.DEFAULTS); writes {"loss", "lr", "grad_norm"[, "aux_loss"]} per step, and with
      --save the trained weights as an HF directory (float32).
"""
import argparse
import json
import math
import os
import sys

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gpt2_torch  # noqa: E402
import safetensors_io as st  # noqa: E402

TRANSFORMERS_VERSION = "4.46.0"
DTYPE = torch.float64

# arch -> (architectures[0], model_type)
ARCHS = {"llama": ("LlamaForCausalLM", "llama"), "mistral": ("MistralForCausalLM", "mistral"),
         "qwen2": ("Qwen2ForCausalLM", "qwen2"), "mixtral": ("MixtralForCausalLM", "mixtral"),
         "gpt2": ("GPT2LMHeadModel", "gpt2")}
ARCH_OF_TYPE = {model_type: arch for arch, (_, model_type) in ARCHS.items()}

# Sizes default to a tiny model (HF's class defaults are 7B-sized); the other fields are HF's defaults.
_TINY = {"vocab_size": 67, "hidden_size": 32, "intermediate_size": 48, "num_hidden_layers": 2,
         "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 128}
_COMMON = {"hidden_act": "silu", "initializer_range": 0.02, "use_cache": True, "attention_dropout": 0.0,
           "rope_theta": 10000.0, "tie_word_embeddings": False}
CONFIG_DEFAULTS = {
    "llama": {**_TINY, **_COMMON, "rms_norm_eps": 1e-6, "bos_token_id": 1, "eos_token_id": 2, "pretraining_tp": 1,
              "rope_scaling": None, "attention_bias": False, "mlp_bias": False, "head_dim": None},
    # Mistral's class default sliding_window is 4096; the released v0.2+ checkpoints and this writer say null.
    "mistral": {**_TINY, **_COMMON, "rms_norm_eps": 1e-6, "bos_token_id": 1, "eos_token_id": 2,
                "sliding_window": None, "head_dim": None},
    "qwen2": {**_TINY, **_COMMON, "rms_norm_eps": 1e-6, "rope_scaling": None, "use_sliding_window": False,
              "sliding_window": 4096, "max_window_layers": 28},
    "mixtral": {**_TINY, **_COMMON, "rms_norm_eps": 1e-5, "bos_token_id": 1, "eos_token_id": 2,
                "rope_theta": 1e6, "sliding_window": None, "num_local_experts": 4, "num_experts_per_tok": 2,
                "output_router_logits": False, "router_aux_loss_coef": 0.001, "router_jitter_noise": 0.0},
    "gpt2": {"vocab_size": 67, "n_positions": 64, "n_embd": 24, "n_layer": 2, "n_head": 3, "n_inner": None,
             "activation_function": "gelu_new", "resid_pdrop": 0.1, "embd_pdrop": 0.1, "attn_pdrop": 0.1,
             "layer_norm_epsilon": 1e-5, "initializer_range": 0.02, "summary_type": "cls_index",
             "summary_use_proj": True, "summary_activation": None, "summary_proj_to_labels": True,
             "summary_first_dropout": 0.1, "scale_attn_weights": True, "use_cache": True,
             "scale_attn_by_inverse_layer_idx": False, "reorder_and_upcast_attn": False,
             "tie_word_embeddings": True},
}
# PretrainedConfig fields that save_pretrained leaves out when null.
_OMIT_WHEN_NULL = ("bos_token_id", "eos_token_id", "pad_token_id")


def make_config(arch, overrides=None, torch_dtype="float32"):
    """config.json's dict for `arch`: its defaults, then `overrides` (any key, unknown ones kept), with
    architectures, model_type, torch_dtype and transformers_version; num_key_value_heads and (llama,
    mistral) head_dim resolved as the config classes resolve them. GPT-2's bos/eos default to the
    last token id."""
    if arch not in ARCHS:
        raise ValueError(f"arch {arch!r}: valid values are {', '.join(ARCHS)}")
    cfg = dict(CONFIG_DEFAULTS[arch])
    if arch == "gpt2":
        vocab = (overrides or {}).get("vocab_size", cfg["vocab_size"])
        cfg.update(bos_token_id=vocab - 1, eos_token_id=vocab - 1)
    cfg.update(overrides or {})
    cfg.update(architectures=[ARCHS[arch][0]], model_type=ARCHS[arch][1], torch_dtype=torch_dtype,
               transformers_version=TRANSFORMERS_VERSION)
    if arch != "gpt2":
        if cfg.get("num_key_value_heads") is None:
            cfg["num_key_value_heads"] = cfg["num_attention_heads"]
        if arch in ("llama", "mistral") and cfg.get("head_dim") is None:
            cfg["head_dim"] = cfg["hidden_size"] // cfg["num_attention_heads"]
    return {k: v for k, v in cfg.items() if not (k in _OMIT_WHEN_NULL and v is None)}


def arch_of(config):
    if config.get("model_type") not in ARCH_OF_TYPE:
        raise ValueError(f"config.json model_type {config.get('model_type')!r}: valid values are"
                         f" {', '.join(ARCH_OF_TYPE)}")
    return ARCH_OF_TYPE[config["model_type"]]


def rope_type(config):
    scaling = config.get("rope_scaling")
    if scaling is None:
        return "default"
    return scaling.get("rope_type", scaling.get("type"))


def unsupported(config):
    """Reasons this reference cannot reproduce the config ([] when it can)."""
    arch, out = arch_of(config), []
    if arch == "gpt2":
        if config.get("activation_function", "gelu_new") not in ("gelu_new", "gelu_pytorch_tanh"):
            out.append(f"activation_function {config['activation_function']!r} (gelu_new only)")
        if not config.get("scale_attn_weights", True) or config.get("scale_attn_by_inverse_layer_idx", False):
            out.append("attention scaling other than 1/sqrt(head size)")
        return out
    if config.get("hidden_act", "silu") != "silu":
        out.append(f"hidden_act {config['hidden_act']!r} (silu only)")
    if rope_type(config) not in ("default", "linear", "llama3"):
        out.append(f"rope_scaling type {rope_type(config)!r} (linear and llama3 only)")
    if arch in ("mistral", "mixtral") and config.get("sliding_window") is not None:
        out.append(f"sliding_window {config['sliding_window']} (no sliding window)")
    if arch == "qwen2" and config.get("use_sliding_window", False):
        out.append("use_sliding_window true (no sliding window)")
    if arch == "mixtral" and config.get("router_jitter_noise", 0.0):
        out.append(f"router_jitter_noise {config['router_jitter_noise']} (0 only)")
    return out


# ----------------------------------------------------------------------------------------------
# Rotary embedding (LlamaRotaryEmbedding, modeling_rope_utils)

def rope_inv_freq(config, head_dim):
    """[head_dim/2] float64: 1/θ^(2i/D), then the rope_scaling adjustment (module docstring)."""
    inv_freq = 1.0 / config.get("rope_theta", 10000.0) ** (torch.arange(0, head_dim, 2, dtype=DTYPE) / head_dim)
    kind, scaling = rope_type(config), config.get("rope_scaling")
    if kind == "linear":
        return inv_freq / scaling["factor"]
    if kind != "llama3":
        return inv_freq
    factor, low, high = scaling["factor"], scaling["low_freq_factor"], scaling["high_freq_factor"]
    old_len = scaling["original_max_position_embeddings"]
    wavelen = 2 * math.pi / inv_freq
    scaled = torch.where(wavelen > old_len / low, inv_freq / factor, inv_freq)
    smooth = (old_len / wavelen - low) / (high - low)
    smoothed = (1 - smooth) * scaled / factor + smooth * scaled
    medium = (wavelen >= old_len / high) & (wavelen <= old_len / low)
    return torch.where(medium, smoothed, scaled)


def rope_tables(config, head_dim, T):
    """cos, sin [T, head_dim] of positions 0..T−1."""
    angle = torch.outer(torch.arange(T, dtype=DTYPE), rope_inv_freq(config, head_dim))
    angle = torch.cat((angle, angle), dim=-1)
    return angle.cos(), angle.sin()


def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


# ----------------------------------------------------------------------------------------------
# Llama family. Attribute names are HF's, so named_parameters() yields the checkpoint names.

def linear(n_in, n_out, bias):
    return nn.Linear(n_in, n_out, bias=bias, dtype=DTYPE)


class RMSNorm(nn.Module):
    def __init__(self, c, eps):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(c, dtype=DTYPE))

    def forward(self, x):
        return self.weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps))


def causal_attention(q, k, v):
    """softmax(q kᵀ / sqrt(D), causal) v for q, k, v [B, heads, T, D]."""
    T, D = q.shape[-2], q.shape[-1]
    scores = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(D)
    future = torch.ones(T, T, dtype=torch.bool).triu(1)
    return torch.matmul(torch.softmax(scores.masked_fill(future, float("-inf")), dim=-1), v)


class SelfAttention(nn.Module):
    def __init__(self, config, qkv_bias, o_bias):
        super().__init__()
        C, H, KV = config["hidden_size"], config["num_attention_heads"], config["num_key_value_heads"]
        D = config.get("head_dim") or C // H
        if H % KV or D % 2:
            raise ValueError(f"num_key_value_heads {KV} must divide num_attention_heads {H}, head_dim {D} be even")
        self.H, self.KV, self.D = H, KV, D
        self.q_proj = linear(C, H * D, qkv_bias)
        self.k_proj = linear(C, KV * D, qkv_bias)
        self.v_proj = linear(C, KV * D, qkv_bias)
        self.o_proj = linear(H * D, C, o_bias)

    def forward(self, x, cos, sin):
        B, T, _ = x.shape
        q = self.q_proj(x).view(B, T, self.H, self.D).transpose(1, 2)
        k = self.k_proj(x).view(B, T, self.KV, self.D).transpose(1, 2)
        v = self.v_proj(x).view(B, T, self.KV, self.D).transpose(1, 2)
        q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
        rep = self.H // self.KV                                  # repeat_kv: each kv head serves rep query heads
        k = k[:, :, None].expand(B, self.KV, rep, T, self.D).reshape(B, self.H, T, self.D)
        v = v[:, :, None].expand(B, self.KV, rep, T, self.D).reshape(B, self.H, T, self.D)
        y = causal_attention(q, k, v).transpose(1, 2).reshape(B, T, self.H * self.D)
        return self.o_proj(y)


class MLP(nn.Module):
    def __init__(self, c, hidden, bias):
        super().__init__()
        self.gate_proj = linear(c, hidden, bias)
        self.up_proj = linear(c, hidden, bias)
        self.down_proj = linear(hidden, c, bias)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class ExpertMLP(nn.Module):
    """MixtralBlockSparseTop2MLP: w2(silu(w1 x) · w3 x)."""

    def __init__(self, c, hidden):
        super().__init__()
        self.w1 = linear(c, hidden, False)
        self.w2 = linear(hidden, c, False)
        self.w3 = linear(c, hidden, False)

    def forward(self, x):
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class SparseMoeBlock(nn.Module):
    """MixtralSparseMoeBlock; forward returns (y, router logits [N, E])."""

    def __init__(self, c, hidden, experts, k):
        super().__init__()
        if not 1 <= k <= experts:
            raise ValueError(f"num_experts_per_tok {k} is not in 1 .. num_local_experts {experts}")
        self.k = k
        self.gate = linear(c, experts, False)
        self.experts = nn.ModuleList(ExpertMLP(c, hidden) for _ in range(experts))

    def forward(self, x):
        rows = x.reshape(-1, x.shape[-1])
        logits = self.gate(rows)
        weights, chosen = torch.topk(torch.softmax(logits, dim=-1), self.k, dim=-1)
        weights = weights / weights.sum(-1, keepdim=True)
        y = torch.zeros_like(rows)
        for e, expert in enumerate(self.experts):
            token, slot = torch.nonzero(chosen == e, as_tuple=True)
            y = y.index_add(0, token, weights[token, slot, None] * expert(rows[token]))
        return y.view(x.shape), logits


def load_balancing_loss(router_logits, experts, k):
    """load_balancing_loss_func without an attention mask: E · Σ_{j,e} f_{j,e} · P_e over all layers' rows."""
    logits = torch.cat(router_logits, dim=0)
    p = torch.softmax(logits, dim=-1)
    chosen = torch.topk(p, k, dim=-1).indices
    f = F.one_hot(chosen, experts).to(p.dtype).mean(0)          # [k, E]
    return experts * (f * p.mean(0)).sum()


class DecoderLayer(nn.Module):
    def __init__(self, config, arch):
        super().__init__()
        C, eps = config["hidden_size"], config["rms_norm_eps"]
        qkv_bias = {"llama": config.get("attention_bias", False), "qwen2": True}.get(arch, False)
        o_bias = arch == "llama" and config.get("attention_bias", False)
        self.self_attn = SelfAttention(config, qkv_bias, o_bias)
        if arch == "mixtral":
            self.block_sparse_moe = SparseMoeBlock(C, config["intermediate_size"], config["num_local_experts"],
                                                   config["num_experts_per_tok"])
        else:
            self.mlp = MLP(C, config["intermediate_size"], arch == "llama" and config.get("mlp_bias", False))
        self.input_layernorm = RMSNorm(C, eps)
        self.post_attention_layernorm = RMSNorm(C, eps)

    def forward(self, x, cos, sin, router_logits):
        x = x + self.self_attn(self.input_layernorm(x), cos, sin)
        m = self.post_attention_layernorm(x)
        if hasattr(self, "block_sparse_moe"):
            y, logits = self.block_sparse_moe(m)
            router_logits.append(logits)
            return x + y
        return x + self.mlp(m)


class DecoderModel(nn.Module):
    """LlamaModel and its kin: the part under `model.`."""

    def __init__(self, config, arch):
        super().__init__()
        self.embed_tokens = nn.Embedding(config["vocab_size"], config["hidden_size"],
                                         padding_idx=config.get("pad_token_id"), dtype=DTYPE)
        self.layers = nn.ModuleList(DecoderLayer(config, arch) for _ in range(config["num_hidden_layers"]))
        self.norm = RMSNorm(config["hidden_size"], config["rms_norm_eps"])


class CausalLM(nn.Module):
    """The oracle interface, shared with gpt2_torch.train: forward(tokens, targets) -> mean
    cross-entropy (logits kept in last_logits), moe_blocks() [] (routing statistics are reported
    as aux_loss here, not through llama_torch's RouterPass), auxiliary_loss(): the HF-weighted aux
    loss when include_aux, else 0."""

    include_aux = False

    def _loss(self, logits, targets, router_logits):
        self.last_logits = logits
        self.last_aux_loss = None
        if router_logits:
            self.last_aux_loss = load_balancing_loss(router_logits, self.config["num_local_experts"],
                                                     self.config["num_experts_per_tok"])
            self.aux_history.append(self.last_aux_loss.item())
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))

    def moe_blocks(self):
        return []

    def auxiliary_loss(self):
        if self.include_aux and self.last_aux_loss is not None:
            return self.config["router_aux_loss_coef"] * self.last_aux_loss
        return 0.0


class LlamaFamilyForCausalLM(CausalLM):
    def __init__(self, config):
        super().__init__()
        self.config, self.arch, self.aux_history = config, arch_of(config), []
        self.model = DecoderModel(config, self.arch)
        self.lm_head = linear(config["hidden_size"], config["vocab_size"], False)
        if config.get("tie_word_embeddings", False):
            self.lm_head.weight = self.model.embed_tokens.weight   # one Parameter, named model.embed_tokens.weight
        layer = self.model.layers[0].self_attn if config["num_hidden_layers"] else None
        self.head_dim = layer.D if layer else config["hidden_size"] // config["num_attention_heads"]

    def forward(self, tokens, targets):
        x = self.model.embed_tokens(tokens)
        cos, sin = rope_tables(self.config, self.head_dim, tokens.shape[1])
        router_logits = []
        for layer in self.model.layers:
            x = layer(x, cos, sin, router_logits)
        return self._loss(self.lm_head(self.model.norm(x)), targets, router_logits)


# ----------------------------------------------------------------------------------------------
# GPT-2

class Conv1D(nn.Module):
    """y = x W + b, W stored [in, out]."""

    def __init__(self, n_in, n_out):
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(n_in, n_out, dtype=DTYPE))
        self.bias = nn.Parameter(torch.zeros(n_out, dtype=DTYPE))

    def forward(self, x):
        return torch.matmul(x, self.weight) + self.bias


def gelu_new(x):
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x.pow(3))))


class GPT2Attention(nn.Module):
    def __init__(self, c, heads):
        super().__init__()
        self.heads = heads
        self.c_attn = Conv1D(c, 3 * c)
        self.c_proj = Conv1D(c, c)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = (t.view(B, T, self.heads, C // self.heads).transpose(1, 2) for t in self.c_attn(x).split(C, dim=-1))
        return self.c_proj(causal_attention(q, k, v).transpose(1, 2).reshape(B, T, C))


class GPT2MLP(nn.Module):
    def __init__(self, c, inner):
        super().__init__()
        self.c_fc = Conv1D(c, inner)
        self.c_proj = Conv1D(inner, c)

    def forward(self, x):
        return self.c_proj(gelu_new(self.c_fc(x)))


class GPT2Block(nn.Module):
    def __init__(self, config):
        super().__init__()
        C, eps = config["n_embd"], config["layer_norm_epsilon"]
        self.ln_1 = nn.LayerNorm(C, eps=eps, dtype=DTYPE)
        self.attn = GPT2Attention(C, config["n_head"])
        self.ln_2 = nn.LayerNorm(C, eps=eps, dtype=DTYPE)
        self.mlp = GPT2MLP(C, config.get("n_inner") or 4 * C)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT2Model(nn.Module):
    def __init__(self, config):
        super().__init__()
        if config["n_embd"] % config["n_head"]:
            raise ValueError(f"n_embd {config['n_embd']} is not a multiple of n_head {config['n_head']}")
        self.wte = nn.Embedding(config["vocab_size"], config["n_embd"], dtype=DTYPE)
        self.wpe = nn.Embedding(config["n_positions"], config["n_embd"], dtype=DTYPE)
        self.h = nn.ModuleList(GPT2Block(config) for _ in range(config["n_layer"]))
        self.ln_f = nn.LayerNorm(config["n_embd"], eps=config["layer_norm_epsilon"], dtype=DTYPE)


class GPT2LMHeadModel(CausalLM):
    def __init__(self, config):
        super().__init__()
        self.config, self.arch, self.aux_history = config, "gpt2", []
        self.transformer = GPT2Model(config)
        self.lm_head = linear(config["n_embd"], config["vocab_size"], False)
        self.lm_head.weight = self.transformer.wte.weight        # GPT2LMHeadModel always ties

    def forward(self, tokens, targets):
        T = tokens.shape[1]
        if T > self.config["n_positions"]:
            raise ValueError(f"{T} tokens exceed n_positions {self.config['n_positions']}")
        x = self.transformer.wte(tokens) + self.transformer.wpe.weight[:T]
        for block in self.transformer.h:
            x = block(x)
        return self._loss(self.lm_head(self.transformer.ln_f(x)), targets, [])


# ----------------------------------------------------------------------------------------------
# Building, reading and writing

def build_model(config, allow_unsupported=False):
    """The float64 model of a config.json dict (weights not yet set)."""
    reasons = unsupported(config)
    if reasons and not allow_unsupported:
        raise ValueError("the reference does not support: " + "; ".join(reasons))
    return GPT2LMHeadModel(config) if arch_of(config) == "gpt2" else LlamaFamilyForCausalLM(config)


# Buffers some checkpoints carry that are no parameters (the issue: ignored on import).
IGNORED_SUFFIXES = ("rotary_emb.inv_freq", ".attn.bias", ".attn.masked_bias")


def load_weights(model, tensors, source="weights"):
    """Copies {HF name: tensor} into the model as float64; every parameter must be there with its
    shape and nothing else but IGNORED_SUFFIXES buffers (a tied lm_head.weight included)."""
    params = dict(model.named_parameters())
    extra = sorted(n for n in tensors if n not in params and not n.endswith(IGNORED_SUFFIXES))
    missing = sorted(n for n in params if n not in tensors)
    if extra or missing:
        raise ValueError(f"{source}: unexpected tensors {extra}, missing tensors {missing}")
    with torch.no_grad():
        for name, p in params.items():
            if tuple(tensors[name].shape) != tuple(p.shape):
                raise ValueError(f"{source}: {name} has shape {tuple(tensors[name].shape)}, expected {tuple(p.shape)}")
            p.copy_(tensors[name].to(DTYPE))
    return model


def read_hf_dir(directory):
    """(config dict, {name: tensor in its stored dtype}) from an HF directory, either weights form."""
    with open(os.path.join(directory, "config.json")) as f:
        config = json.load(f)
    return config, st.read_weights(directory)


def load_hf_dir(directory, allow_unsupported=False):
    config, tensors = read_hf_dir(directory)
    return load_weights(build_model(config, allow_unsupported), tensors, directory)


FILE_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def stored_tensors(model, dtype):
    """{HF name: tensor} in file dtype: float32, or bfloat16/float16 rounded from the float32 values."""
    return {name: p.detach().to(torch.float32).to(FILE_DTYPES[dtype]) for name, p in model.named_parameters()}


def write_model_dir(out_dir, model, dtype="float32", shard_bytes=None):
    """Writes config.json (torch_dtype = dtype), generation_config.json and the model's weights."""
    if dtype not in FILE_DTYPES:
        raise ValueError(f"dtype {dtype!r}: valid values are {', '.join(FILE_DTYPES)}")
    config = {**model.config, "torch_dtype": dtype}
    os.makedirs(out_dir, exist_ok=True)
    st.write_json(os.path.join(out_dir, "config.json"), config)
    generation = {k: config[k] for k in _OMIT_WHEN_NULL if config.get(k) is not None}
    st.write_json(os.path.join(out_dir, "generation_config.json"),
                  {"_from_model_config": True, **generation, "transformers_version": TRANSFORMERS_VERSION})
    tensors = stored_tensors(model, dtype)
    st.write_weights(out_dir, tensors, shard_bytes)
    return config, tensors


def write_hf_dir(out_dir, arch, config_dict=None, seed=0, dtype="float32", shard_bytes=None, std=0.02):
    """A random model of `arch` written as an HF directory; returns (config, {name: stored tensor})."""
    config = make_config(arch, config_dict, dtype)
    model = gpt2_torch.random_init(build_model(config, allow_unsupported=True), seed, std=std)
    return write_model_dir(out_dir, model, dtype, shard_bytes)


# ----------------------------------------------------------------------------------------------
# Oracle and training

def forward_loss(model, tokens, targets, include_aux=False):
    """{"logits" [B, T, V], "loss" (mean cross-entropy), "aux_loss" (mixtral's load-balancing loss,
    else None), "grads" {HF name: d objective / d parameter}} in float64; the objective is the loss,
    plus router_aux_loss_coef · aux_loss with include_aux."""
    tokens, targets = torch.as_tensor(tokens, dtype=torch.int64), torch.as_tensor(targets, dtype=torch.int64)
    if tokens.shape != targets.shape or tokens.dim() != 2:
        raise ValueError(f"tokens {tuple(tokens.shape)} and targets {tuple(targets.shape)} must both be [B, T]")
    V = model.config["vocab_size"]
    if int(tokens.min()) < 0 or int(max(tokens.max(), targets.max())) >= V or int(targets.min()) < 0:
        raise ValueError(f"token ids must lie in 0 .. {V - 1}")
    model.zero_grad(set_to_none=True)
    model.include_aux = include_aux
    loss = model(tokens, targets)
    (loss + model.auxiliary_loss()).backward()
    aux = model.last_aux_loss
    return {"logits": model.last_logits.detach(), "loss": loss.item(),
            "aux_loss": None if aux is None else aux.item(),
            "grads": {n: (p.grad if p.grad is not None else torch.zeros_like(p)).detach().clone()
                      for n, p in model.named_parameters()}}


def train_config(seq_len, **keys):
    """gpt2_torch's training config: the trainer's train.* and optim.* defaults, seq_len, then
    keys given as section_key=value (train_steps=10, optim_lr=1e-3, ...)."""
    cfg = {"model": {"seq_len": seq_len}, "train": dict(gpt2_torch.DEFAULTS["train"]),
           "optim": dict(gpt2_torch.DEFAULTS["optim"])}
    for key, value in keys.items():
        section, _, name = key.partition("_")
        if section not in ("train", "optim") or name not in cfg[section]:
            keys = sorted(cfg["train"]) + sorted(cfg["optim"])
            raise ValueError(f"{key}: expected train_<key> or optim_<key> of {keys}")
        cfg[section][name] = value
    return cfg


def train_steps(model, tokens, cfg, steps=None, include_aux=False, log=None):
    """gpt2_torch.train on an HF-named model: `tokens` a 1-D stream read in the sequential order,
    `cfg` from train_config (or gpt2_torch.load_config); returns its history plus, for mixtral,
    "aux_loss": each step's mean over its micro-batches of the load-balancing loss."""
    model.include_aux, model.aux_history = include_aux, []
    hist = gpt2_torch.train(model, np.asarray(tokens, dtype=np.int64), cfg, steps, log)
    if model.aux_history:
        accum = cfg["train"]["global_batch"] // cfg["train"]["micro_batch"]
        hist["aux_loss"] = [float(np.mean(model.aux_history[s * accum:(s + 1) * accum]))
                            for s in range(len(hist["loss"]))]
    return hist


# ----------------------------------------------------------------------------------------------
# CLI

def save_result(path, result, tokens, targets):
    arrays = {"logits": result["logits"].numpy(), "loss": np.float64(result["loss"]),
              "tokens": tokens.numpy(), "targets": targets.numpy()}
    if result["aux_loss"] is not None:
        arrays["aux_loss"] = np.float64(result["aux_loss"])
    arrays.update({f"grad/{n}": g.numpy() for n, g in result["grads"].items()})
    if path.endswith(".h5"):
        import h5py
        with h5py.File(path, "w") as f:
            for key, value in arrays.items():
                f.create_dataset(key, data=value)
    else:
        np.savez(path, **arrays)


def read_token_stream(path):
    return np.load(path).reshape(-1).astype(np.int64) if path.endswith(".npy") else gpt2_torch.read_tokens(path)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="command", required=True)
    w = sub.add_parser("write", help="write a random HF directory")
    w.add_argument("--arch", required=True, choices=sorted(ARCHS))
    w.add_argument("--config", default="{}", help="JSON object of config.json fields")
    w.add_argument("--out", required=True)
    w.add_argument("--dtype", choices=sorted(FILE_DTYPES), default="float32")
    w.add_argument("--shard-bytes", type=int, default=None)
    w.add_argument("--seed", type=int, default=0)
    w.add_argument("--std", type=float, default=0.02)
    o = sub.add_parser("oracle", help="logits, loss and gradients of a batch (float64)")
    o.add_argument("--dir", required=True)
    o.add_argument("--tokens", required=True, help=".npy int [B, T+1], or [B, T] with --targets")
    o.add_argument("--targets")
    o.add_argument("--out", required=True, help=".npz or .h5")
    o.add_argument("--include-aux", action="store_true")
    t = sub.add_parser("train", help="the per-step losses of a short training run")
    t.add_argument("--dir", required=True)
    t.add_argument("--data", required=True, help="token shard, glob of shards, or 1-D .npy")
    t.add_argument("--out", required=True, help="JSON file")
    t.add_argument("--set", action="append", default=[], metavar="SECTION.KEY=VALUE")
    t.add_argument("--include-aux", action="store_true")
    t.add_argument("--save", help="write the trained weights here as an HF directory (float32)")
    t.add_argument("--quiet", action="store_true")
    args = ap.parse_args(argv)

    if args.command == "write":
        write_hf_dir(args.out, args.arch, json.loads(args.config), args.seed, args.dtype, args.shard_bytes, args.std)
    elif args.command == "oracle":
        model = load_hf_dir(args.dir)
        tokens = torch.from_numpy(np.load(args.tokens).astype(np.int64))
        if args.targets:
            targets = torch.from_numpy(np.load(args.targets).astype(np.int64))
        else:
            tokens, targets = tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous()
        save_result(args.out, forward_loss(model, tokens, targets, args.include_aux), tokens, targets)
    else:
        model = load_hf_dir(args.dir)
        cfg = {"model": {}, "train": dict(gpt2_torch.DEFAULTS["train"]), "optim": dict(gpt2_torch.DEFAULTS["optim"])}
        gpt2_torch.apply_sets(cfg, args.set)
        if set(cfg) != {"model", "train", "optim"} or set(cfg["model"]) != {"seq_len"}:
            ap.error("train takes --set model.seq_len=T (required), train.* and optim.*; the model is the directory's")
        hist = train_steps(model, read_token_stream(args.data), cfg, include_aux=args.include_aux,
                           log=None if args.quiet else print)
        with open(args.out, "w") as f:
            json.dump(hist, f, indent=1)
        if args.save:
            write_model_dir(args.save, model)
    return 0


if __name__ == "__main__":
    sys.exit(main())
