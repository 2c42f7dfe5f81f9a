#!/usr/bin/python3
"""PyTorch eager CPU baseline for meshtrain's training benchmark (same GPT-2, same flop count).

Full fp32 training steps (forward, backward, AdamW step, zero_grad) of the oracle model
tests/oracle/gpt2_torch.py on random tokens; prints one JSON line:
  {"tokens_per_s", "step_time_s", "model_flops_per_s", "flops_per_token", ...}
flops_per_token = 6*N + 6*L*C*T, N = parameter count with the tied wte counted once.

Threads: Debian's torch 1.13 does its fp32 GEMMs in the system BLAS (libblas.so.3 ->
OpenBLAS, pthread build), whose threads are set by OPENBLAS_NUM_THREADS when the library loads;
torch.set_num_threads only sets ATen's OpenMP threads (elementwise ops, softmax, layernorm...).
--blas_threads sets OPENBLAS_NUM_THREADS before torch is imported. Defaults are the fastest
setting measured on the 2-core build machine: --threads 1 --blas_threads 2. The JSON names the
BLAS library the process loaded and, for OpenBLAS, the kernel set it runs (OPENBLAS_CORETYPE or
its own choice), as meshtrain's benchmarks do.

usage: /usr/bin/python3 bench/torch_gpt2_bench.py [--layers 6 --heads 6 --d_model 384 --vocab 256
       --seq_len 256 --batch 8 --steps 10 --warmup 2 --threads 1 --blas_threads 2]
"""
import argparse
import ctypes
import json
import os
import sys
import time

ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
ap.add_argument("--layers", type=int, default=6)
ap.add_argument("--heads", type=int, default=6)
ap.add_argument("--d_model", type=int, default=384)
ap.add_argument("--vocab", type=int, default=256)
ap.add_argument("--seq_len", type=int, default=256)
ap.add_argument("--batch", type=int, default=8)
ap.add_argument("--steps", type=int, default=10, help="timed steps")
ap.add_argument("--warmup", type=int, default=2, help="untimed steps first")
ap.add_argument("--threads", type=int, default=1, help="torch.set_num_threads (ATen OpenMP)")
ap.add_argument("--blas_threads", type=int, default=2, help="OPENBLAS_NUM_THREADS (GEMM); 0: leave env")
ap.add_argument("--seed", type=int, default=1337)
args = ap.parse_args()
if args.blas_threads > 0:
    os.environ["OPENBLAS_NUM_THREADS"] = str(args.blas_threads)

import torch  # noqa: E402  (after OPENBLAS_NUM_THREADS is set)

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "oracle"))
import gpt2_torch  # noqa: E402


def loaded_blas():
    """(library file, OpenBLAS kernel set or "") of the BLAS this process has loaded, from /proc/self/maps."""
    with open("/proc/self/maps") as f:
        paths = {line.split()[-1] for line in f if "/" in line}
    blas = sorted(p for p in paths if "blas" in os.path.basename(p).lower())
    for path in blas:
        lib = ctypes.CDLL(path)
        if hasattr(lib, "openblas_get_corename"):
            lib.openblas_get_corename.restype = ctypes.c_char_p
            return os.path.realpath(path), lib.openblas_get_corename().decode()
    return (os.path.realpath(blas[0]) if blas else "unknown"), ""


def main():
    torch.set_num_threads(args.threads)
    L, C, T, B = args.layers, args.d_model, args.seq_len, args.batch
    model = gpt2_torch.GPT2(L, args.heads, C, args.vocab, T, torch.float32)
    gpt2_torch.random_init(model, args.seed)
    decay = [p for p in model.parameters() if p.dim() >= 2]
    rest = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": rest, "weight_decay": 0.0}],
                            lr=3e-4, betas=(0.9, 0.95), eps=1e-8)
    gen = torch.Generator().manual_seed(args.seed)
    x = torch.randint(0, args.vocab, (B, T), generator=gen)
    y = torch.randint(0, args.vocab, (B, T), generator=gen)

    def step():
        loss = model(x, y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss.item()

    for _ in range(args.warmup):
        step()
    t0 = time.perf_counter()
    for _ in range(args.steps):
        step()
    step_time = (time.perf_counter() - t0) / max(1, args.steps)

    blas = loaded_blas()
    n_params = sum(p.numel() for p in model.parameters())      # wte is one tensor: counted once
    flops_per_token = 6 * n_params + 6 * L * C * T
    tokens_per_s = B * T / step_time
    print(json.dumps({"tokens_per_s": tokens_per_s, "step_time_s": step_time,
                      "model_flops_per_s": flops_per_token * tokens_per_s, "flops_per_token": flops_per_token,
                      "params": n_params, "threads": args.threads,
                      "blas_threads": os.environ.get("OPENBLAS_NUM_THREADS", "default"),
                      "torch": torch.__version__, "blas": blas[0], "blas_kernels": blas[1]}))


if __name__ == "__main__":
    main()
