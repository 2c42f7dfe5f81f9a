#!/usr/bin/python3
"""`meshtrain export --format safetensors` against the checkpoint it reads and an independent reader.

A small model trains under tensor parallelism (tp 2, so the file was written in pieces) and its
final checkpoint is exported. The file is then parsed here by hand from the format's definition
(8-byte little-endian header length, JSON header, tensors back to back, 8-byte aligned), every
tensor must equal the checkpoint's /model dataset bit for bit, and the tensors must load strictly
(every name and shape, nothing missing or extra) into the PyTorch GPT-2 of tests/oracle, whose
parameters carry Hugging Face's GPT-2 names. A llama trained under tp 2 exports likewise: its
tensors equal the checkpoint's, under Hugging Face Llama's names and torch Linear shapes [out, in]
as the PyTorch oracle (tests/oracle/llama_torch.py) names and shapes them from the definition. Bad input exits 2 and writes
nothing.

usage: test_export.py --meshtrain BIN --workdir DIR [--mpiexec MPIEXEC]
"""
import argparse
import hashlib
import json
import os
import shutil
import struct
import subprocess
import sys

import h5py
import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "oracle"))
import gpt2_torch  # noqa: E402

MODEL = {"layers": 2, "heads": 4, "d_model": 32, "vocab": 67, "seq_len": 16}
# Grouped-query (4 query heads over 2 kv heads), a SwiGLU width that is no power of two.
LLAMA = {**MODEL, "arch": "llama", "kv_heads": 2, "ffn_hidden": 44}


def run(cmd, expect=0):
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    if done.returncode != expect:
        sys.exit(f"FAIL: {' '.join(cmd)} exited {done.returncode}, expected {expect}\n{done.stdout}\n{done.stderr}")
    return done


def read_safetensors(path):
    """name -> numpy array, read from the format's definition alone."""
    with open(path, "rb") as f:
        blob = f.read()
    (length,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + length])
    assert (8 + length) % 8 == 0, f"header of {length} bytes leaves the data unaligned"
    data = blob[8 + length:]
    tensors, end = {}, 0
    for name, info in sorted(((k, v) for k, v in header.items() if k != "__metadata__"),
                             key=lambda kv: kv[1]["data_offsets"][0]):
        begin, stop = info["data_offsets"]
        assert info["dtype"] == "F32" and begin == end, f"{name}: {info} (expected F32 starting at {end})"
        tensors[name] = np.frombuffer(data[begin:stop], dtype="<f4").reshape(info["shape"])
        end = stop
    assert end == len(data), f"{len(data) - end} bytes after the last tensor"
    return tensors, header.get("__metadata__", {})


def digest(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def refusals_to_destroy(meshtrain, work, ckpt):
    """export never writes over its checkpoint (by name, through a symlink or a hard link), over a
    directory or over another checkpoint, and refuses a checkpoint whose tensor no longer matches its
    checksum: exit 2 naming the culprit, every file as it was, no .tmp left."""
    failures = []
    link, hard, other, folder = (os.path.join(work, n) for n in ("link.h5", "hard.h5", "other.h5", "out.dir"))
    os.symlink(ckpt, link)
    os.link(ckpt, hard)
    shutil.copy(ckpt, other)
    os.mkdir(folder)
    corrupt = os.path.join(work, "corrupt.h5")
    shutil.copy(ckpt, corrupt)
    with h5py.File(corrupt, "r+") as f:
        d = f["model/wpe.weight"]
        d[0, 0] = d[0, 0] + 1.0  # the stored checksum is left as it was
    written = os.path.join(work, "fresh.safetensors")
    for source, out, needle in [(ckpt, ckpt, "same file"), (ckpt, link, "same file"), (link, hard, "same file"),
                                (ckpt, folder, "directory"), (ckpt, other, "HDF5"),
                                (corrupt, written, "/model/wpe.weight")]:
        files = [ckpt, other, corrupt]
        before = [digest(f) for f in files]
        done = run([meshtrain, "export", source, "--format", "safetensors", "--out", out], expect=2)
        leftovers = [p for p in (out + ".tmp", written) if os.path.exists(p)]
        if (needle not in done.stderr or [digest(f) for f in files] != before or leftovers
                or os.listdir(folder)):
            failures.append(f"export {source} --out {out}: expected exit 2 naming '{needle}', every file as it "
                            f"was and nothing written (left: {leftovers}); stderr: {done.stderr.strip()}")
    return failures


def train_and_export(args, work, model, name, shard):
    """Trains `model` 3 steps under tp 2 and exports its final checkpoint: (checkpoint, safetensors file)."""
    keys = [x for k, v in model.items() for x in (f"--model.{k}", str(v))]
    ck = os.path.join(work, name)
    run(args.mpiexec.split() + ["-n", "2", args.meshtrain, "train"] + keys +
        ["--parallel.tp", "2", "--train.steps", "3", "--data.train", shard, "--checkpoint.dir", ck,
         "--checkpoint.resume", "never"])
    ckpt = os.path.join(ck, open(os.path.join(ck, "latest")).read().strip())
    out = os.path.join(work, f"{name}.safetensors")
    run([args.meshtrain, "export", ckpt, "--format", "safetensors", "--out", out])
    return ckpt, out


def llama_export(args, work, shard):
    """The llama's export: every tensor the checkpoint's, bit for bit, in the names and [out, in]
    shapes of Hugging Face Llama; as torch tensors, q_proj maps C channels to heads·hs outputs."""
    ckpt, out = train_and_export(args, work, LLAMA, "llama", shard)
    tensors, metadata = read_safetensors(out)
    want = {name: tuple(p.shape) for name, p in gpt2_torch.build_model({"model": LLAMA}).named_parameters()}
    failures = [] if metadata.get("model_family") == "llama" else [f"llama: metadata {metadata} names no llama"]
    if set(tensors) != set(want):
        failures.append(f"llama: names differ from Hugging Face Llama's: {sorted(set(tensors) ^ set(want))}")
    with h5py.File(ckpt, "r") as f:
        if f.attrs.get("model_family") != "llama":
            failures.append(f"llama: the checkpoint records model_family {f.attrs.get('model_family')!r}")
        for name in sorted(set(tensors) & set(want)):
            if tensors[name].shape != want[name]:
                failures.append(f"llama: {name} has shape {tensors[name].shape}, Hugging Face's is {want[name]}")
            elif not np.array_equal(tensors[name], f["model"][name][...]):
                failures.append(f"llama: {name} differs from the checkpoint's /model/{name}")
    q = torch.nn.Linear(32, 32, bias=False)
    with torch.no_grad():
        q.weight.copy_(torch.from_numpy(tensors["layers.0.self_attn.q_proj.weight"].copy()))
        k = torch.from_numpy(tensors["layers.0.self_attn.k_proj.weight"].copy())
        if q(torch.ones(1, 32)).shape != (1, 32) or (torch.ones(1, 32) @ k.t()).shape != (1, 16):
            failures.append("llama: q_proj and k_proj do not map C = 32 channels to 32 and 16 outputs")
    print(f"llama: exported {len(tensors)} tensors in Hugging Face Llama names and shapes"
          f"{': FAILED' if failures else ''}")
    return failures


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--meshtrain", required=True)
    ap.add_argument("--mpiexec", default="mpiexec")
    ap.add_argument("--workdir", required=True)
    args = ap.parse_args()
    work = os.path.abspath(args.workdir)
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    shard = os.path.join(work, "shard.bin")
    gpt2_torch.write_shard(shard, np.random.default_rng(1).integers(0, MODEL["vocab"], size=4000))
    ckpt, out = train_and_export(args, work, MODEL, "ck", shard)

    failures = llama_export(args, work, shard)
    tensors, metadata = read_safetensors(out)
    with h5py.File(ckpt, "r") as f:
        stored = {name: f["model"][name][...] for name in f["model"]}
    if set(tensors) != set(stored):
        failures.append(f"names differ: {sorted(set(tensors) ^ set(stored))}")
    for name in stored:
        if name in tensors and not np.array_equal(tensors[name], stored[name]):
            failures.append(f"{name} differs from the checkpoint's /model/{name}")
    if metadata.get("step") != "3":
        failures.append(f"metadata {metadata} should name step 3")
    model = gpt2_torch.build_model({"model": MODEL}, dtype=torch.float32)
    try:
        model.load_state_dict({k: torch.from_numpy(v.copy()) for k, v in tensors.items()}, strict=True)
    except RuntimeError as e:
        failures.append(f"the PyTorch GPT-2 (Hugging Face names) refuses the file: {e}")
    print(f"exported {len(tensors)} tensors; strict load into the PyTorch GPT-2 "
          f"{'failed' if failures else 'succeeded'}")

    # Bad input: exit 2, nothing written.
    bad = os.path.join(work, "bad.safetensors")
    for cmd, needle in [
        ([ckpt, "--format", "onnx", "--out", bad], "--format"),
        ([ckpt, "--format", "safetensors", "--out", os.path.join(work, "no", "dir", "x.safetensors")], "does not exist"),
        ([os.path.join(work, "missing.h5"), "--format", "safetensors", "--out", bad], "no such file"),
        ([shard, "--format", "safetensors", "--out", bad], shard),
        ([ckpt, "--format", "safetensors"], "--out"),
    ]:
        done = run([args.meshtrain, "export"] + cmd, expect=2)
        if needle not in done.stderr or os.path.exists(bad) or os.path.exists(bad + ".tmp"):
            failures.append(f"export {' '.join(cmd)}: expected exit 2 naming '{needle}' and nothing written; "
                            f"stderr: {done.stderr.strip()}")
    failures += refusals_to_destroy(args.meshtrain, work, ckpt)
    if failures:
        print("FAIL:\n  " + "\n  ".join(failures))
        return 1
    print("OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())
