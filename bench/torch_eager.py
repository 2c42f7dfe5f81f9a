"""What the PyTorch eager CPU baselines of bench/benchmark.py share (bench/torch_gpt2_bench.py,
bench/torch_llama_bench.py): their command line, the threads, the timed training steps and the JSON
line they print.

Threads: Debian's torch 1.13 does its fp32 GEMMs in the system BLAS (libblas.so.3 ->
OpenBLAS, pthread build), whose threads are set by OPENBLAS_NUM_THREADS when the library loads;
torch.set_num_threads only sets ATen's OpenMP threads (elementwise ops, softmax, norms...).
--blas_threads sets OPENBLAS_NUM_THREADS, so parse_args() must run before torch is imported.
Defaults are the fastest setting measured on the 2-core build machine: --threads 1
--blas_threads 2. The JSON names the BLAS library the process loaded and, for OpenBLAS, the kernel
set it runs (OPENBLAS_CORETYPE or its own choice), as meshtrain's benchmarks do.
"""
import argparse
import ctypes
import json
import os
import time


def parse_args(description, add_model_args):
    """The shape arguments add_model_args(parser) adds, then the run's; sets OPENBLAS_NUM_THREADS."""
    ap = argparse.ArgumentParser(description=description)
    add_model_args(ap)
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
    return args


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


def benchmark(model, args, flops_per_token):
    """Times full fp32 training steps of `model` (model(x, y) is the mean loss): forward, backward,
    AdamW step (meshtrain's decay groups and hyperparameters), zero_grad, on random tokens; prints
    the JSON line."""
    import torch

    torch.set_num_threads(args.threads)
    decay = [p for p in model.parameters() if p.dim() >= 2]
    rest = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": rest, "weight_decay": 0.0}],
                            lr=3e-4, betas=(0.9, 0.95), eps=1e-8)
    gen = torch.Generator().manual_seed(args.seed)
    x = torch.randint(0, args.vocab, (args.batch, args.seq_len), generator=gen)
    y = torch.randint(0, args.vocab, (args.batch, args.seq_len), generator=gen)

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
    tokens_per_s = args.batch * args.seq_len / step_time
    print(json.dumps({"tokens_per_s": tokens_per_s, "step_time_s": step_time,
                      "model_flops_per_s": flops_per_token * tokens_per_s, "flops_per_token": flops_per_token,
                      "params": sum(p.numel() for p in model.parameters()), "threads": args.threads,
                      "blas_threads": os.environ.get("OPENBLAS_NUM_THREADS", "default"),
                      "torch": torch.__version__, "blas": blas[0], "blas_kernels": blas[1]}))
