#!/usr/bin/python3
"""PyTorch eager CPU baseline for meshtrain's training benchmark on the llama family (same shape,
same flop count).

The oracle's LLaMA (tests/oracle/llama_torch.py, written from share/docs/usage.md's Model
families) in float32, weights normal(0, 0.02), norms 1. Full fp32 training steps on random tokens
(bench/torch_eager.py: the steps, threads and BLAS); prints one JSON line as
bench/torch_gpt2_bench.py does, with flops_per_token = 6*N + 6*L*C*T, N the parameters but
embed_tokens (a lookup, not a product).

usage: /usr/bin/python3 bench/torch_llama_bench.py --ffn_hidden H [--layers 6 --heads 6 --kv_heads 2
       --d_model 384 --vocab 256 --seq_len 256 --batch 8 --steps 10 --warmup 2 --threads 1 --blas_threads 2]
"""
import os
import sys

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

# The model is the oracle's (tests/oracle/llama_torch.py, written from the family's definitions),
# in float32 here, as torch_gpt2_bench.py takes the gpt2 oracle's.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "oracle"))
import llama_torch  # noqa: E402


def main():
    if args.d_model % args.heads or args.heads % args.kv_heads:
        raise SystemExit("heads must divide d_model and kv_heads must divide heads")
    torch.manual_seed(args.seed)
    model = llama_torch.Llama(args.layers, args.heads, args.d_model, args.vocab, args.kv_heads, args.ffn_hidden,
                              rope_theta=args.rope_theta, norm_eps=args.norm_eps, dtype=torch.float32)
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() >= 2:
                p.normal_(0.0, 0.02)
    products = sum(p.numel() for p in model.parameters()) - model.embed_tokens.weight.numel()
    torch_eager.benchmark(model, args, 6 * products + 6 * args.layers * args.d_model * args.seq_len)


if __name__ == "__main__":
    main()
