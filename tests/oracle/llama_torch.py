#!/usr/bin/python3
"""Independent PyTorch LLaMA for meshtrain's oracle (share/docs/usage.md, Model families), written
from the family's definition, not from meshtrain's kernels:

  x = embed_tokens[tokens]                                   (no position table)
  per block:  x += o_proj(attention(rope(q), rope(k), v)),   q, k, v = q|k|v_proj(rmsnorm(x))
              x += down_proj(silu(gate_proj(x')) · up_proj(x')),   x' = rmsnorm(x)
  logits = lm_head(rmsnorm(x))                               (untied; no biases anywhere)

RMSNorm: y = x · rstd · w, rstd = 1/sqrt(mean(x²) + eps), weight only. Rotary embedding: Hugging
Face's half-split convention (rotate_half), positions 0..T−1, frequency i = θ^(−2i/hs), i < hs/2.
Grouped-query attention: kv head h // (NH/KV) serves query head h; causal softmax with scale
1/sqrt(hs). SwiGLU hidden size: ffn_hidden, or the LLaMA rule multiple_of·⌈⌊8C/3⌋/multiple_of⌉.
Parameter names and shapes are a meshtrain checkpoint's /model group (Hugging Face Llama names
without `model.`, torch Linear layout [out, in]); gpt2_torch.build_model builds this family when
model.arch = llama, and the config, data, schedule and training loop of gpt2_torch serve both.
"""
import math

import torch
import torch.nn.functional as F
from torch import nn


def hidden_size(d_model, ffn_hidden, multiple_of):
    """The SwiGLU width: ffn_hidden, or 2/3 of 4·C rounded up to a multiple of multiple_of."""
    if ffn_hidden > 0:
        return ffn_hidden
    return multiple_of * math.ceil((8 * d_model // 3) / multiple_of)


class Linear(nn.Module):
    """y = x Wᵀ with W stored [out, in] (torch Linear layout), no bias."""

    def __init__(self, n_in, n_out, dtype):
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(n_out, n_in, dtype=dtype))

    def forward(self, x):
        return torch.matmul(x, self.weight.t())


class RMSNorm(nn.Module):
    def __init__(self, c, eps, dtype):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(c, dtype=dtype))

    def forward(self, x):
        rstd = torch.rsqrt((x * x).mean(-1, keepdim=True) + self.eps)
        return x * rstd * self.weight


def rotate_half(x):
    """(x1, x2) -> (−x2, x1) over the two halves of the last dimension."""
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def rotary_tables(T, hs, theta, dtype):
    """cos and sin [T, hs] of angle(t, i) = t · θ^(−2i/hs), each frequency repeated for both halves."""
    freq = theta ** (-2.0 * torch.arange(hs // 2, dtype=torch.float64) / hs)
    angle = torch.outer(torch.arange(T, dtype=torch.float64), freq)
    angle = torch.cat((angle, angle), dim=-1)
    return angle.cos().to(dtype), angle.sin().to(dtype)


class Attention(nn.Module):
    def __init__(self, c, heads, kv_heads, theta, dtype):
        super().__init__()
        if heads % kv_heads:
            raise ValueError(f"kv_heads {kv_heads} does not divide heads {heads}")
        self.heads, self.kv_heads, self.hs, self.theta = heads, kv_heads, c // heads, theta
        self.q_proj = Linear(c, heads * self.hs, dtype)
        self.k_proj = Linear(c, kv_heads * self.hs, dtype)
        self.v_proj = Linear(c, kv_heads * self.hs, dtype)
        self.o_proj = Linear(heads * self.hs, c, dtype)

    def forward(self, x):
        B, T, _ = x.shape
        NH, KV, hs = self.heads, self.kv_heads, self.hs
        q = self.q_proj(x).view(B, T, NH, hs).transpose(1, 2)   # [B, NH, T, hs]
        k = self.k_proj(x).view(B, T, KV, hs).transpose(1, 2)   # [B, KV, T, hs]
        v = self.v_proj(x).view(B, T, KV, hs).transpose(1, 2)
        cos, sin = rotary_tables(T, hs, self.theta, x.dtype)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        serving = torch.arange(NH) // (NH // KV)                 # the kv head of each query head
        k, v = k[:, serving], v[:, serving]
        att = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(hs)
        future = torch.ones(T, T, dtype=torch.bool).triu(1)
        att = torch.softmax(att.masked_fill(future, float("-inf")), dim=-1)
        y = torch.matmul(att, v).transpose(1, 2).reshape(B, T, NH * hs)
        return self.o_proj(y)


class MLP(nn.Module):
    def __init__(self, c, hidden, dtype):
        super().__init__()
        self.gate_proj = Linear(c, hidden, dtype)
        self.up_proj = Linear(c, hidden, dtype)
        self.down_proj = Linear(hidden, c, dtype)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class Block(nn.Module):
    def __init__(self, c, heads, kv_heads, hidden, theta, eps, dtype):
        super().__init__()
        self.input_layernorm = RMSNorm(c, eps, dtype)
        self.self_attn = Attention(c, heads, kv_heads, theta, dtype)
        self.post_attention_layernorm = RMSNorm(c, eps, dtype)
        self.mlp = MLP(c, hidden, dtype)

    def forward(self, x):
        x = x + self.self_attn(self.input_layernorm(x))
        return x + self.mlp(self.post_attention_layernorm(x))


class Embedding(nn.Module):
    def __init__(self, n, c, dtype):
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(n, c, dtype=dtype))


class Llama(nn.Module):
    def __init__(self, layers, heads, d_model, vocab, kv_heads=0, ffn_hidden=0, multiple_of=256,
                 rope_theta=1e4, norm_eps=1e-5, dtype=torch.float64):
        super().__init__()
        if d_model % heads or (d_model // heads) % 2:
            raise ValueError(f"d_model {d_model} / heads {heads} is not an even head size")
        kv_heads = kv_heads or heads
        hidden = hidden_size(d_model, ffn_hidden, multiple_of)
        self.embed_tokens = Embedding(vocab, d_model, dtype)
        self.layers = nn.ModuleList(Block(d_model, heads, kv_heads, hidden, rope_theta, norm_eps, dtype)
                                    for _ in range(layers))
        self.norm = RMSNorm(d_model, norm_eps, dtype)
        self.lm_head = Linear(d_model, vocab, dtype)

    def logits(self, tokens):
        x = self.embed_tokens.weight[tokens]
        for block in self.layers:
            x = block(x)
        return self.lm_head(self.norm(x))

    def forward(self, tokens, targets):
        """Mean cross-entropy over every target token."""
        logits = self.logits(tokens)
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))


def build(m, dtype=torch.float64):
    """The model of a config's [model] section (seq_len needs no table: rope works for any T)."""
    return Llama(m["layers"], m["heads"], m["d_model"], m["vocab"], m["kv_heads"], m["ffn_hidden"],
                 m["multiple_of"], m["rope_theta"], m["norm_eps"], dtype)
