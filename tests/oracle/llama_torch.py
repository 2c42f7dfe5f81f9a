#!/usr/bin/python3
"""Independent PyTorch LLaMA for meshtrain's oracle (share/docs/usage.md, Model families), written
from the family's definition, not from meshtrain's kernels:

  x = embed_tokens[tokens]                                   (no position table)
  per block:  x += o_proj(attention(rope(q), rope(k), v)),   q, k, v = q|k|v_proj(rmsnorm(x))
              x += down_proj(silu(gate_proj(x')) · up_proj(x')),   x' = rmsnorm(x)
  logits = lm_head(rmsnorm(x))                               (lm_head = embed_tokens when tied)

The checkpoint keys of published models: tie_embeddings (no lm_head tensor: the logits use
embed_tokens), qkv_bias (q_proj, k_proj, v_proj add biases, Qwen2; no other bias anywhere), head_dim
(a head's channels, else d_model / heads; q_proj then has heads·head_dim rows and o_proj as many
columns), rope_scaling (Llama 3.1's and linear rescaled frequencies, `rope_frequencies` below).

RMSNorm: y = x · rstd · w, rstd = 1/sqrt(mean(x²) + eps), weight only. Rotary embedding: Hugging
Face's half-split convention (rotate_half), positions 0..T−1, frequency i = θ^(−2i/hs), i < hs/2,
rescaled under rope_scaling.
Grouped-query attention: kv head h // (NH/KV) serves query head h; causal softmax with scale
1/sqrt(hs). SwiGLU hidden size: ffn_hidden, or the LLaMA rule multiple_of·⌈⌊8C/3⌋/multiple_of⌉.
Mixture of experts (share/docs/usage.md, Mixture of experts): with model.experts E > 0, block l's
MLP (l mod moe_every = 0) is E routed SwiGLU experts of width expert_hidden behind a router, plus
shared experts; the MoE class below states the routing. After each forward every MoE block holds
its pass's RouterPass (aux, z, routed and kept counts), and Llama.auxiliary_loss() is the pass's
coefficient-weighted aux and z terms, which the training objective adds to the mean cross-entropy.
Parameter names and shapes are a meshtrain checkpoint's /model group (Hugging Face Llama names
without `model.`, torch Linear layout [out, in]; the MoE names of usage.md); gpt2_torch.build_model
builds this family when model.arch = llama, and the config, data, schedule and training loop of
gpt2_torch serve both.
"""
import math
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import nn


def hidden_size(d_model, ffn_hidden, multiple_of):
    """The SwiGLU width: ffn_hidden, or 2/3 of 4·C rounded up to a multiple of multiple_of."""
    if ffn_hidden > 0:
        return ffn_hidden
    return multiple_of * math.ceil((8 * d_model // 3) / multiple_of)


class Linear(nn.Module):
    """y = x Wᵀ (+ b) with W stored [out, in] (torch Linear layout); a bias only where asked."""

    def __init__(self, n_in, n_out, dtype, bias=False):
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(n_out, n_in, dtype=dtype))
        self.bias = nn.Parameter(torch.zeros(n_out, dtype=dtype)) if bias else None

    def forward(self, x):
        y = torch.matmul(x, self.weight.t())
        return y if self.bias is None else y + self.bias


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


# The rotary scaling keys and their defaults (share/docs/usage.md, Model families).
ROPE_DEFAULTS = {"rope_scaling": "none", "rope_factor": 1.0, "rope_low_freq_factor": 1.0,
                 "rope_high_freq_factor": 4.0, "rope_original_max_position": 8192}


def rope_frequencies(hs, theta, rope=None):
    """[hs/2] float64: θ^(−2i/hs), then as rope_scaling says. linear: each divided by the factor.
    llama3 (Llama 3.1's published rule), with wavelength λ = 2π/f and L the original context:
    λ > L/low_freq_factor → f/factor; λ < L/high_freq_factor → f; between, the blend
    (1 − s)·f/factor + s·f with s = (L/λ − low_freq_factor)/(high_freq_factor − low_freq_factor)."""
    rope = {**ROPE_DEFAULTS, **(rope or {})}
    freq = theta ** (-2.0 * torch.arange(hs // 2, dtype=torch.float64) / hs)
    factor = rope["rope_factor"]
    if rope["rope_scaling"] == "linear":
        return freq / factor
    if rope["rope_scaling"] == "llama3":
        low, high, L = rope["rope_low_freq_factor"], rope["rope_high_freq_factor"], rope["rope_original_max_position"]
        wavelength = 2 * math.pi / freq
        s = (L / wavelength - low) / (high - low)
        blended = (1 - s) * freq / factor + s * freq
        return torch.where(wavelength > L / low, freq / factor, torch.where(wavelength < L / high, freq, blended))
    if rope["rope_scaling"] != "none":
        raise ValueError(f"rope_scaling {rope['rope_scaling']!r}")
    return freq


def rotary_tables(T, hs, theta, dtype, rope=None):
    """cos and sin [T, hs] of angle(t, i) = t · f_i, each frequency repeated for both halves."""
    angle = torch.outer(torch.arange(T, dtype=torch.float64), rope_frequencies(hs, theta, rope))
    angle = torch.cat((angle, angle), dim=-1)
    return angle.cos().to(dtype), angle.sin().to(dtype)


class Attention(nn.Module):
    def __init__(self, c, heads, kv_heads, theta, dtype, hs, qkv_bias=False, rope=None):
        super().__init__()
        if heads % kv_heads:
            raise ValueError(f"kv_heads {kv_heads} does not divide heads {heads}")
        self.heads, self.kv_heads, self.hs, self.theta, self.rope = heads, kv_heads, hs, theta, rope
        self.q_proj = Linear(c, heads * self.hs, dtype, qkv_bias)
        self.k_proj = Linear(c, kv_heads * self.hs, dtype, qkv_bias)
        self.v_proj = Linear(c, kv_heads * self.hs, dtype, qkv_bias)
        self.o_proj = Linear(heads * self.hs, c, dtype)

    def forward(self, x):
        B, T, _ = x.shape
        NH, KV, hs = self.heads, self.kv_heads, self.hs
        q = self.q_proj(x).view(B, T, NH, hs).transpose(1, 2)   # [B, NH, T, hs]
        k = self.k_proj(x).view(B, T, KV, hs).transpose(1, 2)   # [B, KV, T, hs]
        v = self.v_proj(x).view(B, T, KV, hs).transpose(1, 2)
        cos, sin = rotary_tables(T, hs, self.theta, x.dtype, self.rope)
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


# The [model] keys of a mixture of experts and the trainer's defaults (share/docs/usage.md, Keys).
MOE_DEFAULTS = {"experts": 0, "experts_per_token": 2, "moe_every": 1, "shared_experts": 0, "expert_hidden": 0,
                "capacity_factor": 0.0, "normalize_gates": True, "aux_loss_coef": 0.01, "z_loss_coef": 0.0}


def expert_capacity(capacity_factor, tokens, k, experts):
    """Assignments one expert keeps of a micro-batch's `tokens`: max(1, ⌈f·N·k/E⌉), 0 for no limit
    (f = 0). The 1e-9 keeps a product that is whole in exact arithmetic but rounds just above it
    (1.1·25·2/5 = 11.000000000000002) from taking one more."""
    if capacity_factor == 0:
        return 0
    return max(1, math.ceil(capacity_factor * tokens * k / experts - 1e-9))


def top_k(p, k):
    """[N, k] each row's experts of the k largest probabilities, largest first. A stable sort of −p
    keeps equal probabilities in index order: a tie goes to the lower expert index."""
    return torch.sort(-p, dim=-1, stable=True).indices[:, :k]


def kept_assignments(chosen, capacity, experts):
    """[N, k] bool: which assignments (token n to expert chosen[n, j]) their expert computes. Priority
    (GShard): every token's first choice (j = 0) in token order, then every second choice, ...; an
    expert keeps the first `capacity` assignments that reach it (0: all)."""
    N, k = chosen.shape
    if capacity == 0:
        return torch.ones(N, k, dtype=torch.bool)
    queue = chosen.t().reshape(-1)                        # the assignments in priority order
    arrivals = F.one_hot(queue, experts)
    place = (arrivals.cumsum(0) * arrivals).sum(-1) - 1   # assignments ahead of it at its expert
    return (place < capacity).view(k, N).t()


class RouterPass(NamedTuple):
    """What one MoE block's router saw in one forward pass."""
    aux: torch.Tensor     # load-balancing loss E·Σ_e f_e·P_e (differentiable through P)
    z: torch.Tensor       # router z-loss mean_n (logsumexp_e z_{n,e})²
    routed: torch.Tensor  # [E] int64: assignments routed to each expert, before capacity
    kept: torch.Tensor    # [E] int64: assignments each expert computed


class MoE(nn.Module):
    """y = Σ_{kept j} g_j · experts[e_j](x) + shared_experts(x) over the N = B·T tokens of the pass:
    router logits z = gate(x) [N, E], p = softmax(z) in the model's dtype, e_j the top-k experts of
    p, g_j = p_{e_j} (normalised to Σ_j g_j = 1 with normalize_gates); dropped assignments add
    nothing and the kept gates are not renormalised."""

    def __init__(self, c, experts, k, hidden, shared, capacity_factor, normalize_gates, dtype):
        super().__init__()
        if not 1 <= k <= experts:
            raise ValueError(f"experts_per_token {k} is not in 1 .. experts {experts}")
        self.k, self.capacity_factor, self.normalize_gates = k, capacity_factor, normalize_gates
        self.gate = Linear(c, experts, dtype)
        self.experts = nn.ModuleList(MLP(c, hidden, dtype) for _ in range(experts))
        self.shared_experts = MLP(c, shared * hidden, dtype) if shared > 0 else None
        self.router = None   # the RouterPass of the last forward

    def forward(self, x):
        rows = x.reshape(-1, x.shape[-1])
        N, E = rows.shape[0], len(self.experts)
        logits = self.gate(rows)
        p = torch.softmax(logits, dim=-1)
        chosen = top_k(p, self.k)
        gates = p.gather(1, chosen)
        if self.normalize_gates:
            gates = gates / gates.sum(-1, keepdim=True)
        kept = kept_assignments(chosen, expert_capacity(self.capacity_factor, N, self.k, E), E)
        y = torch.zeros_like(rows)
        for e, expert in enumerate(self.experts):
            token, j = torch.nonzero((chosen == e) & kept, as_tuple=True)
            y = y.index_add(0, token, gates[token, j, None] * expert(rows[token]))
        if self.shared_experts is not None:
            y = y + self.shared_experts(rows)
        routed = torch.bincount(chosen.reshape(-1), minlength=E)
        share = routed.to(p.dtype) / (N * self.k)            # f_e: counts, so no gradient
        self.router = RouterPass(aux=E * (share * p.mean(0)).sum(), z=torch.logsumexp(logits, -1).pow(2).mean(),
                                 routed=routed, kept=torch.bincount(chosen[kept], minlength=E))
        return y.view(x.shape)


class Block(nn.Module):
    def __init__(self, c, heads, kv_heads, theta, eps, dtype, mlp, hs, qkv_bias, rope):
        super().__init__()
        self.input_layernorm = RMSNorm(c, eps, dtype)
        self.self_attn = Attention(c, heads, kv_heads, theta, dtype, hs, qkv_bias, rope)
        self.post_attention_layernorm = RMSNorm(c, eps, dtype)
        self.mlp = mlp

    def forward(self, x):
        x = x + self.self_attn(self.input_layernorm(x))
        return x + self.mlp(self.post_attention_layernorm(x))


class Embedding(nn.Module):
    def __init__(self, n, c, dtype):
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(n, c, dtype=dtype))


class Llama(nn.Module):
    """`moe`: the MOE_DEFAULTS keys (left out: those defaults; experts 0 is the dense model); `rope`:
    the ROPE_DEFAULTS keys."""

    def __init__(self, layers, heads, d_model, vocab, kv_heads=0, ffn_hidden=0, multiple_of=256,
                 rope_theta=1e4, norm_eps=1e-5, dtype=torch.float64, moe=None, tie_embeddings=False,
                 qkv_bias=False, head_dim=0, rope=None):
        super().__init__()
        hs = head_dim or d_model // heads
        if (not head_dim and d_model % heads) or hs % 2:
            raise ValueError(f"heads {heads}, d_model {d_model}, head_dim {head_dim}: no even head size")
        kv_heads = kv_heads or heads
        hidden = hidden_size(d_model, ffn_hidden, multiple_of)
        moe = {**MOE_DEFAULTS, **(moe or {})}
        self.aux_loss_coef, self.z_loss_coef = moe["aux_loss_coef"], moe["z_loss_coef"]

        def mlp(l):
            if moe["experts"] == 0 or l % moe["moe_every"]:
                return MLP(d_model, hidden, dtype)
            return MoE(d_model, moe["experts"], moe["experts_per_token"], moe["expert_hidden"] or hidden,
                       moe["shared_experts"], moe["capacity_factor"], moe["normalize_gates"], dtype)

        self.embed_tokens = Embedding(vocab, d_model, dtype)
        self.layers = nn.ModuleList(Block(d_model, heads, kv_heads, rope_theta, norm_eps, dtype, mlp(l), hs,
                                          qkv_bias, rope) for l in range(layers))
        self.norm = RMSNorm(d_model, norm_eps, dtype)
        self.lm_head = None if tie_embeddings else Linear(d_model, vocab, dtype)

    def moe_blocks(self):
        """[(l, MoE)] the MoE blocks in order."""
        return [(l, block.mlp) for l, block in enumerate(self.layers) if isinstance(block.mlp, MoE)]

    def auxiliary_loss(self):
        """aux_loss_coef · Σ aux + z_loss_coef · Σ z over the MoE blocks of the last forward: what a
        micro-batch adds to its mean cross-entropy in the objective (0 without MoE blocks)."""
        return sum(self.aux_loss_coef * moe.router.aux + self.z_loss_coef * moe.router.z
                   for _, moe in self.moe_blocks())

    def logits(self, tokens):
        x = self.embed_tokens.weight[tokens]
        for block in self.layers:
            x = block(x)
        x = self.norm(x)
        return torch.matmul(x, self.embed_tokens.weight.t()) if self.lm_head is None else self.lm_head(x)

    def forward(self, tokens, targets):
        """Mean cross-entropy over every target token."""
        logits = self.logits(tokens)
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))


def build(m, dtype=torch.float64):
    """The model of a config's [model] section (seq_len needs no table: rope works for any T); MoE
    and rope keys left out take their defaults, the other checkpoint keys theirs (untied, no bias,
    head_dim d_model / heads)."""
    return Llama(m["layers"], m["heads"], m["d_model"], m["vocab"], m["kv_heads"], m["ffn_hidden"],
                 m["multiple_of"], m["rope_theta"], m["norm_eps"], dtype,
                 moe={key: m[key] for key in MOE_DEFAULTS if key in m},
                 tie_embeddings=m.get("tie_embeddings", False), qkv_bias=m.get("qkv_bias", False),
                 head_dim=m.get("head_dim", 0), rope={key: m[key] for key in ROPE_DEFAULTS if key in m})
