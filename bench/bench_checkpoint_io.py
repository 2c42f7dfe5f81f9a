#!/usr/bin/python3
"""Checkpoint save and load bandwidth against the disk's raw sequential write, and the time training
is held by a background save against a synchronous one — all measured in the same run.

For each layout (ranks × ZeRO stage × checkpoint.io) it trains one step of a model whose checkpoint
is large enough to time (default L6 C384: 10.8 M parameters, 130 MB per checkpoint with the two AdamW
moments), reads the save time meshtrain logs ("saved … (Ns)": the whole commit, fsync included), then
resumes from that checkpoint and reads the load time ("read and verified in Ns": every tensor read and
its checksum checked). Each is the median of --repeats runs. Beside them, the same number of bytes written to the same directory with
os.write in 8 MiB blocks and one fsync, and read back (the page cache may serve the reads, as it
serves meshtrain's: the read figure is a peer, not the disk).

Then a run of several steps saving every step, synchronously and with checkpoint.async: the median
time each save held training.

usage: bench_checkpoint_io.py --meshtrain BIN [--mpiexec mpiexec] [--dir /tmp/ckbench]
       [--layers 6 --d_model 384] [--ranks 1 2 4] [--steps 6]
"""
import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import time

import numpy as np


def write_shard(path, tokens):
    header = np.zeros(256, "<i4")
    header[:3] = [20240520, 1, len(tokens)]
    with open(path, "wb") as f:
        f.write(header.tobytes() + np.asarray(tokens, "<u2").tobytes())


def raw_disk(directory, nbytes):
    """Seconds to write nbytes sequentially and fsync, and to read them back."""
    path = os.path.join(directory, "raw.bin")
    block = np.random.default_rng(0).integers(0, 255, 8 << 20, dtype=np.uint8).tobytes()
    start = time.monotonic()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    left = nbytes
    while left > 0:
        left -= os.write(fd, block[:min(left, len(block))])
    os.fsync(fd)
    os.close(fd)
    write_s = time.monotonic() - start
    start = time.monotonic()
    with open(path, "rb") as f:
        while f.read(8 << 20):
            pass
    read_s = time.monotonic() - start
    os.unlink(path)
    return write_s, read_s


def train(args, ranks, keys, cwd):
    cmd = [args.mpiexec, "-n", str(ranks), args.meshtrain, "train"]
    for k, v in keys.items():
        cmd += [f"--{k}", str(v)]
    p = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=3600)
    if p.returncode not in (0, 3):
        sys.exit(f"meshtrain failed ({p.returncode}):\n{p.stdout[-3000:]}\n{p.stderr[-3000:]}")
    return p.stdout


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--meshtrain", required=True)
    ap.add_argument("--mpiexec", default="mpiexec")
    ap.add_argument("--dir", default="/tmp/meshtrain_ckbench", help="where checkpoints go (the disk measured)")
    ap.add_argument("--layers", type=int, default=6)
    ap.add_argument("--d_model", type=int, default=384)
    ap.add_argument("--ranks", type=int, nargs="+", default=[1, 2, 4])
    ap.add_argument("--steps", type=int, default=6, help="steps of the sync/async comparison")
    ap.add_argument("--repeats", type=int, default=3, help="saves, loads and raw writes per layout (medians)")
    args = ap.parse_args()
    args.meshtrain = os.path.abspath(args.meshtrain)

    shutil.rmtree(args.dir, ignore_errors=True)
    os.makedirs(args.dir)
    write_shard(os.path.join(args.dir, "data.bin"), np.random.default_rng(1).integers(0, 256, 200000))
    model = {"model.layers": args.layers, "model.d_model": args.d_model, "model.heads": 6, "model.vocab": 256,
             "model.seq_len": 64, "train.micro_batch": 1, "data.train": "data.bin", "optim.warmup_steps": 1}

    print(f"model L{args.layers} C{args.d_model}; checkpoints in {args.dir}")
    print(f"{'layout':<28}{'MB':>8}{'save s':>9}{'MB/s':>8}{'raw write':>11}{'save/raw':>10}"
          f"{'load s':>9}{'MB/s':>8}{'raw read':>10}{'load/raw':>10}")
    for ranks in args.ranks:
        for zero in ([0, 1] if ranks > 1 else [0]):
            for io in (["independent", "collective"] if ranks > 1 else ["independent"]):
                name = f"n{ranks}_zero{zero}_{io}"
                ck = os.path.join(args.dir, name)
                keys = {**model, "parallel.zero": zero, "checkpoint.io": io, "checkpoint.dir": ck,
                        "train.global_batch": ranks, "train.steps": 2, "train.stop_after": 1}
                saves, loads, raws = [], [], []
                for _ in range(args.repeats):
                    shutil.rmtree(ck, ignore_errors=True)
                    out = train(args, ranks, keys, args.dir)
                    saves.append(float(re.search(r"saved \S+ \(([\d.]+)s\)", out).group(1)))
                    path = os.path.join(ck, "step_00000001.h5")
                    mb = os.path.getsize(path) / 1e6
                    out = train(args, ranks, {**keys, "train.stop_after": 0}, args.dir)
                    loads.append(float(re.search(r"read and verified in ([\d.]+)s", out).group(1)))
                    raws.append(raw_disk(args.dir, int(mb * 1e6)))
                save_s, load_s = statistics.median(saves), statistics.median(loads)
                raw_w, raw_r = statistics.median(r[0] for r in raws), statistics.median(r[1] for r in raws)
                print(f"{f'{ranks} ranks zero {zero} {io}':<28}{mb:8.1f}{save_s:9.3f}{mb / save_s:8.0f}"
                      f"{mb / raw_w:9.0f}/s{(mb / save_s) / (mb / raw_w):10.2f}"
                      f"{load_s:9.3f}{mb / load_s:8.0f}{mb / raw_r:8.0f}/s{(mb / load_s) / (mb / raw_r):10.2f}",
                      flush=True)
                shutil.rmtree(ck)

    ranks = max(r for r in args.ranks if r <= 2) if any(r <= 2 for r in args.ranks) else args.ranks[0]
    print(f"\nsaving every step, {ranks} ranks, zero 1, {args.steps} steps: seconds training was held per save")
    for mode in ("false", "true"):
        ck = os.path.join(args.dir, f"async_{mode}")
        keys = {**model, "parallel.zero": 1 if ranks > 1 else 0, "checkpoint.dir": ck, "checkpoint.every": 1,
                "checkpoint.keep": 2, "checkpoint.async": mode, "train.global_batch": ranks,
                "train.steps": args.steps}
        start = time.monotonic()
        out = train(args, ranks, keys, args.dir)
        wall = time.monotonic() - start
        held = [float(x) for x in re.findall(r"training held ([\d.]+)s", out)]
        sync = [float(x) for x in re.findall(r"saved \S+ \(([\d.]+)s\)", out)]
        background = [float(x) for x in re.findall(r"in the background \(([\d.]+)s\)", out)]
        # The job's last save is synchronous in both modes.
        per_save = held if mode == "true" else sync[:-1]
        print(f"  {'async' if mode == 'true' else 'sync':<6} held median {statistics.median(per_save):.3f}s "
              f"max {max(per_save):.3f}s over {len(per_save)} saves"
              + (f"; background writes median {statistics.median(background):.3f}s" if background else "")
              + f"; job wall {wall:.1f}s")
        shutil.rmtree(ck)


if __name__ == "__main__":
    main()
