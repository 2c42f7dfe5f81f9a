#!/usr/bin/python3
"""PyTorch eager CPU baseline for meshtrain's training benchmark (same GPT-2, same flop count).

Full fp32 training steps of the oracle model tests/oracle/gpt2_torch.py on random tokens
(bench/torch_eager.py: the steps, threads and BLAS); prints one JSON line:
  {"tokens_per_s", "step_time_s", "model_flops_per_s", "flops_per_token", ...}
flops_per_token = 6*N + 6*L*C*T, N = parameter count with the tied wte counted once.

usage: /usr/bin/python3 bench/torch_gpt2_bench.py [--layers 6 --heads 6 --d_model 384 --vocab 256
       --seq_len 256 --batch 8 --steps 10 --warmup 2 --threads 1 --blas_threads 2]
"""
import os
import sys

import torch_eager


def add_gpt2_args(ap):
    ap.add_argument("--layers", type=int, default=6)
    ap.add_argument("--heads", type=int, default=6)
    ap.add_argument("--d_model", type=int, default=384)


args = torch_eager.parse_args(__doc__.split("\n\n")[0], add_gpt2_args)

import torch  # noqa: E402  (after OPENBLAS_NUM_THREADS is set)

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "oracle"))
import gpt2_torch  # noqa: E402


def main():
    L, C, T = args.layers, args.d_model, args.seq_len
    model = gpt2_torch.GPT2(L, args.heads, C, args.vocab, T, torch.float32)
    gpt2_torch.random_init(model, args.seed)
    n_params = sum(p.numel() for p in model.parameters())  # wte is one tensor: counted once
    torch_eager.benchmark(model, args, 6 * n_params + 6 * L * C * T)


if __name__ == "__main__":
    main()
