#!/usr/bin/python3
"""checkpoint.init_weights with llama's names (share/docs/usage.md, Checkpoints): a /model group
written by the PyTorch reference (llama_torch.py, Hugging Face Llama names) starts a one-step run,
and the same file with one tensor renamed, one tensor of the wrong shape, or a gpt2 model's weights
is refused with exit 2 and a message naming the file and the tensor (or the other model).

usage: /usr/bin/python3 test_llama_init_weights.py --meshtrain build/bin/meshtrain --workdir DIR
"""
import argparse
import os
import shutil
import subprocess
import sys

import h5py
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gpt2_torch  # noqa: E402

MODEL = {"arch": "llama", "layers": 1, "heads": 4, "kv_heads": 2, "d_model": 16, "ffn_hidden": 24,
         "vocab": 53, "seq_len": 8}


def changed(src, dst, change):
    """A copy of the /model group of `src` with change(name, array) -> (name, array) applied."""
    with h5py.File(src, "r") as f, h5py.File(dst, "w") as out:
        for name, data in f["model"].items():
            new_name, new_data = change(name, data[()])
            out["model/" + new_name] = new_data
    return dst


def run(cmd):
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    return p.returncode, p.stdout + p.stderr


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--meshtrain", required=True)
    ap.add_argument("--workdir", required=True)
    args = ap.parse_args()
    work = os.path.abspath(args.workdir)
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    cfg = {"model": MODEL, "train": {"micro_batch": 2, "global_batch": 2, "steps": 1}}
    ini, shard = os.path.join(work, "cfg.ini"), os.path.join(work, "shard.bin")
    gpt2_torch.write_config(ini, cfg)
    gpt2_torch.write_shard(shard, np.random.default_rng(1).integers(0, MODEL["vocab"], size=200))
    good = os.path.join(work, "good.h5")
    gpt2_torch.save_weights(gpt2_torch.random_init(gpt2_torch.build_model(cfg), seed=3), good)
    gpt2_model = {k: v for k, v in MODEL.items() if k not in ("arch", "kv_heads", "ffn_hidden")}
    gpt2_weights = os.path.join(work, "gpt2.h5")
    gpt2_torch.save_weights(gpt2_torch.build_model({"model": gpt2_model}), gpt2_weights)

    k_proj = "layers.0.self_attn.k_proj.weight"
    cases = [  # (file, exit code, text the output must hold)
        (good, 0, None),
        (changed(good, os.path.join(work, "renamed.h5"),
                 lambda n, a: (n.replace("k_proj", "key_proj"), a)), 2, "layers.0.self_attn.key_proj.weight"),
        (changed(good, os.path.join(work, "shape.h5"),      # k_proj as if multi-head: [NH·hs, C]
                 lambda n, a: (n, np.concatenate([a, a]) if n == k_proj else a)), 2, k_proj),
        (gpt2_weights, 2, "from another model"),
    ]
    failures = []
    for i, (weights, code, needle) in enumerate(cases):
        cmd = [args.meshtrain, "train", "--config", ini, "--data.train", shard, "--checkpoint.init_weights", weights,
               "--checkpoint.dir", os.path.join(work, f"ckpt{i}"), "--checkpoint.every", "0",
               "--checkpoint.resume", "never"]
        got, out = run(cmd)
        name = os.path.basename(weights)
        if got != code or (needle and (needle not in out or name not in out)):
            failures.append(f"{name}: exit {got} (expected {code}), the output must name {name} and {needle!r}:\n{out}")
        else:
            print(f"ok    {name}: exit {got}" + (f", names {needle}" if needle else ""))
    print(f"{len(cases) - len(failures)} of {len(cases)} init-weights cases as expected")
    print("\n".join(["FAIL:"] + failures) if failures else "OK")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
