#!/usr/bin/python3
"""PyTorch eager CPU baseline for meshtrain's training benchmark on the llama family (same shape,
same flop count).

A LLaMA written here from its definitions (share/docs/usage.md, Model families): token embedding,
blocks of x += attn(rmsnorm(x)); x += mlp(rmsnorm(x)), a final RMSNorm and an untied output head;
RMSNorm x / sqrt(mean(x²) + eps) · w; rotary position embedding on q and k with the half-split
convention (the first and second half of each head's channels rotated as pairs); grouped-query
attention, each kv head serving heads/kv_heads query heads (repeat_interleave); SwiGLU
down(silu(gate(x)) · up(x)); no biases. Full fp32 training steps on random tokens
(bench/torch_eager.py: the steps, threads and BLAS); prints one JSON line as
bench/torch_gpt2_bench.py does, with flops_per_token = 6*N + 6*L*C*T, N the parameters but
embed_tokens (a lookup, not a product).

usage: /usr/bin/python3 bench/torch_llama_bench.py --ffn_hidden H [--layers 6 --heads 6 --kv_heads 2
       --d_model 384 --vocab 256 --seq_len 256 --batch 8 --steps 10 --warmup 2 --threads 1 --blas_threads 2]
"""
import torch_eager


def add_llama_args(ap):
    ap.add_argument("--layers", type=int, default=6)
    ap.add_argument("--heads", type=int, default=6)
    ap.add_argument("--kv_heads", type=int, default=2)
    ap.add_argument("--d_model", type=int, default=384)
    ap.add_argument("--ffn_hidden", type=int, required=True, help="SwiGLU hidden size")
    ap.add_argument("--rope_theta", type=float, default=1e4)
    ap.add_argument("--norm_eps", type=float, default=1e-5)


args = torch_eager.parse_args(__doc__.split("\n\n")[0], add_llama_args)

import torch  # noqa: E402  (after OPENBLAS_NUM_THREADS is set)
import torch.nn.functional as F  # noqa: E402
from torch import nn  # noqa: E402


class RMSNorm(nn.Module):
    def __init__(self, c, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(c))
        self.eps = eps

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def rotary_tables(seq_len, head_size, theta):
    """cos and sin (T, hs/2) of position t times frequency θ^(−2i/hs)."""
    freq = theta ** (-torch.arange(0, head_size, 2, dtype=torch.float32) / head_size)
    angle = torch.outer(torch.arange(seq_len, dtype=torch.float32), freq)
    return angle.cos(), angle.sin()


def rotate(x, cos, sin):
    """x (B, heads, T, hs): channel i and i + hs/2 rotated as a pair by the angle of (t, i)."""
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)


class Attention(nn.Module):
    def __init__(self, c, heads, kv_heads):
        super().__init__()
        self.heads, self.kv_heads, self.hs = heads, kv_heads, c // heads
        self.q_proj = nn.Linear(c, heads * self.hs, bias=False)
        self.k_proj = nn.Linear(c, kv_heads * self.hs, bias=False)
        self.v_proj = nn.Linear(c, kv_heads * self.hs, bias=False)
        self.o_proj = nn.Linear(heads * self.hs, c, bias=False)

    def forward(self, x, cos, sin):
        B, T, _ = x.shape
        q = self.q_proj(x).view(B, T, self.heads, self.hs).transpose(1, 2)
        k = self.k_proj(x).view(B, T, self.kv_heads, self.hs).transpose(1, 2)
        v = self.v_proj(x).view(B, T, self.kv_heads, self.hs).transpose(1, 2)
        q, k = rotate(q, cos, sin), rotate(k, cos, sin)
        group = self.heads // self.kv_heads  # query heads per kv head
        k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
        att = torch.matmul(q, k.transpose(-2, -1)) / self.hs ** 0.5
        future = torch.triu(torch.ones(T, T, dtype=torch.bool), diagonal=1)
        att = torch.softmax(att.masked_fill(future, float("-inf")), dim=-1)
        y = torch.matmul(att, v).transpose(1, 2).reshape(B, T, self.heads * self.hs)
        return self.o_proj(y)


class SwiGLU(nn.Module):
    def __init__(self, c, hidden):
        super().__init__()
        self.gate_proj = nn.Linear(c, hidden, bias=False)
        self.up_proj = nn.Linear(c, hidden, bias=False)
        self.down_proj = nn.Linear(hidden, c, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class Block(nn.Module):
    def __init__(self, c, heads, kv_heads, hidden, eps):
        super().__init__()
        self.input_layernorm = RMSNorm(c, eps)
        self.self_attn = Attention(c, heads, kv_heads)
        self.post_attention_layernorm = RMSNorm(c, eps)
        self.mlp = SwiGLU(c, hidden)

    def forward(self, x, cos, sin):
        x = x + self.self_attn(self.input_layernorm(x), cos, sin)
        return x + self.mlp(self.post_attention_layernorm(x))


class Llama(nn.Module):
    def __init__(self, a):
        super().__init__()
        self.embed_tokens = nn.Embedding(a.vocab, a.d_model)
        self.layers = nn.ModuleList(Block(a.d_model, a.heads, a.kv_heads, a.ffn_hidden, a.norm_eps)
                                    for _ in range(a.layers))
        self.norm = RMSNorm(a.d_model, a.norm_eps)
        self.lm_head = nn.Linear(a.d_model, a.vocab, bias=False)
        cos, sin = rotary_tables(a.seq_len, a.d_model // a.heads, a.rope_theta)
        self.register_buffer("cos", cos)
        self.register_buffer("sin", sin)
        for p in self.parameters():
            if p.dim() >= 2:
                nn.init.normal_(p, std=0.02)

    def forward(self, tokens, targets):
        """Mean cross-entropy over every target token."""
        x = self.embed_tokens(tokens)
        for block in self.layers:
            x = block(x, self.cos, self.sin)
        logits = self.lm_head(self.norm(x))
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))


def main():
    if args.d_model % args.heads or args.heads % args.kv_heads:
        raise SystemExit("heads must divide d_model and kv_heads must divide heads")
    torch.manual_seed(args.seed)
    model = Llama(args)
    products = sum(p.numel() for p in model.parameters()) - model.embed_tokens.weight.numel()
    torch_eager.benchmark(model, args, 6 * products + 6 * args.layers * args.d_model * args.seq_len)


if __name__ == "__main__":
    main()
