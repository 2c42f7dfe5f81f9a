#!/usr/bin/python3
"""Hugging Face weight files written and read by hand, for the oracle (no safetensors package here).

safetensors, from its format definition: an 8-byte little-endian unsigned header length N, N bytes
of UTF-8 JSON {name: {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__": {str: str}}
(padded here with spaces to a multiple of 8, as the reference writer does), then the tensors'
little-endian C-order bytes; offsets count from the first byte after the header. The reader is
strict: every tensor's byte count matches dtype × shape, the offsets tile the data exactly (no
gap, no overlap, nothing after the last tensor), no duplicate names; any breach is a ValueError
naming the file and the tensor.

A weights directory, as transformers' save_pretrained leaves it: `model.safetensors`, or shards
`model-0000i-of-0000K.safetensors` filled in the state-dict order (a tensor that would take a shard
past shard_bytes starts the next one; one larger than shard_bytes gets a shard of its own) with
`model.safetensors.index.json` = {"metadata": {"total_size": bytes of all tensors}, "weight_map":
{name: shard file}}. One shard is written as `model.safetensors` without an index, as transformers
does. JSON files are written as transformers writes them: indent 2, sorted keys, a final newline.
"""
import json
import math
import os
import struct
import sys

import numpy as np
import torch

# safetensors dtype -> (torch dtype, bytes per element)
DTYPES = {"F64": (torch.float64, 8), "F32": (torch.float32, 4), "F16": (torch.float16, 2),
          "BF16": (torch.bfloat16, 2), "I64": (torch.int64, 8), "I32": (torch.int32, 4)}
DTYPE_NAMES = {dt: name for name, (dt, _) in DTYPES.items()}
# Same-size integer types that carry a tensor's bits through numpy (bf16 has no numpy type).
_BITS = {2: (torch.int16, np.int16), 4: (torch.int32, np.int32), 8: (torch.int64, np.int64)}
SINGLE_FILE, INDEX_FILE = "model.safetensors", "model.safetensors.index.json"
MAX_HEADER = 100 * 1024 * 1024

if sys.byteorder != "little":
    raise RuntimeError("safetensors_io assumes a little-endian host")


def tensor_bytes(t):
    """The tensor's little-endian C-order bytes."""
    t = t.detach().contiguous().cpu()
    if t.dtype not in DTYPE_NAMES:
        raise ValueError(f"dtype {t.dtype} has no safetensors name")
    torch_int, _ = _BITS[t.element_size()]
    return t.view(torch_int).numpy().tobytes()


def tensor_from_bytes(data, dtype_name, shape):
    torch_dtype, size = DTYPES[dtype_name]
    torch_int, np_int = _BITS[size]
    bits = np.frombuffer(data, dtype=np_int).copy()
    return torch.from_numpy(bits).view(torch_dtype).reshape(shape)


def header_bytes(tensors, metadata=None):
    """(the 8-byte length + JSON header, the data blobs in file order) for {name: tensor}; tensors
    are laid out in the dict's order."""
    header, blobs, offset = {}, [], 0
    if metadata is not None:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    for name, t in tensors.items():
        blob = tensor_bytes(t)
        header[name] = {"dtype": DTYPE_NAMES[t.dtype], "shape": list(t.shape),
                        "data_offsets": [offset, offset + len(blob)]}
        blobs.append(blob)
        offset += len(blob)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text, blobs


def write_safetensors(path, tensors, metadata=None):
    head, blobs = header_bytes(tensors, metadata)
    with open(path, "wb") as f:
        f.write(head)
        for blob in blobs:
            f.write(blob)


def _no_duplicates(pairs, path):
    seen = {}
    for key, value in pairs:
        if key in seen:
            raise ValueError(f"{path}: header names {key!r} twice")
        seen[key] = value
    return seen


def read_header(path, data):
    """(entries {name: (dtype, shape, begin, end)} with offsets into `data`, metadata) — strictly checked."""
    if len(data) < 8:
        raise ValueError(f"{path}: {len(data)} bytes, shorter than the 8-byte header length")
    (n,) = struct.unpack("<Q", data[:8])
    if n > MAX_HEADER or 8 + n > len(data):
        raise ValueError(f"{path}: header length {n} does not fit the file's {len(data)} bytes")
    try:
        text = data[8:8 + n].decode("utf-8")
        header = json.loads(text, object_pairs_hook=lambda pairs: _no_duplicates(pairs, path))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ValueError(f"{path}: the header is not UTF-8 JSON ({e})") from None
    if not text.startswith("{") or not isinstance(header, dict):
        raise ValueError(f"{path}: the header is not a JSON object")
    metadata = header.pop("__metadata__", None)
    if metadata is not None and not (isinstance(metadata, dict) and
                                     all(isinstance(v, str) for v in metadata.values())):
        raise ValueError(f"{path}: __metadata__ must map strings to strings")
    start, entries = 8 + n, {}
    for name, e in header.items():
        if not isinstance(e, dict) or set(e) != {"dtype", "shape", "data_offsets"}:
            raise ValueError(f"{path}: tensor {name!r}: an entry has exactly dtype, shape and data_offsets")
        dtype, shape, offsets = e["dtype"], e["shape"], e["data_offsets"]
        if dtype not in DTYPES:
            raise ValueError(f"{path}: tensor {name!r}: dtype {dtype!r} is not one of {', '.join(DTYPES)}")
        if not isinstance(shape, list) or not all(type(d) is int and d >= 0 for d in shape):
            raise ValueError(f"{path}: tensor {name!r}: shape {shape!r} is not a list of sizes")
        if (not isinstance(offsets, list) or len(offsets) != 2 or not all(type(o) is int for o in offsets)
                or not 0 <= offsets[0] <= offsets[1]):
            raise ValueError(f"{path}: tensor {name!r}: data_offsets {offsets!r} is not [begin, end], begin <= end")
        want = math.prod(shape) * DTYPES[dtype][1]
        if offsets[1] - offsets[0] != want:
            raise ValueError(f"{path}: tensor {name!r}: data_offsets {offsets} hold {offsets[1] - offsets[0]} bytes,"
                             f" {dtype} {shape} needs {want}")
        entries[name] = (dtype, shape, start + offsets[0], start + offsets[1])
    end = start
    for name, (_, _, b, e) in sorted(entries.items(), key=lambda item: (item[1][2], item[1][3])):
        if b != end:
            raise ValueError(f"{path}: tensor {name!r} starts at data byte {b - start}, expected {end - start}"
                             " (the tensors must tile the data without gaps or overlaps)")
        end = e
    if end != len(data):
        raise ValueError(f"{path}: the tensors end at byte {end}, the file has {len(data)}")
    return entries, metadata


def read_safetensors(path):
    """({name: tensor in its stored dtype}, metadata or None)."""
    with open(path, "rb") as f:
        data = f.read()
    entries, metadata = read_header(path, data)
    tensors = {name: tensor_from_bytes(data[b:e], dtype, shape) for name, (dtype, shape, b, e) in entries.items()}
    return tensors, metadata


def write_json(path, obj):
    with open(path, "w") as f:
        f.write(json.dumps(obj, indent=2, sort_keys=True) + "\n")


def shard_plan(tensors, shard_bytes):
    """[[names of shard 1], ...] in the dict's order, as save_pretrained splits a state dict."""
    shards, size = [[]], 0
    for name, t in tensors.items():
        n = t.numel() * t.element_size()
        if shards[-1] and size + n > shard_bytes:
            shards.append([])
            size = 0
        shards[-1].append(name)
        size += n
    return shards


def weight_files(directory):
    return [n for n in os.listdir(directory)
            if n == INDEX_FILE or (n.startswith("model") and n.endswith(".safetensors"))]


def write_weights(directory, tensors, shard_bytes=None):
    """Writes {name: tensor} as model.safetensors, or as shards + index when shard_bytes splits them.
    Weight files already in `directory` are removed first, so no stale shard is left beside the new ones."""
    os.makedirs(directory, exist_ok=True)
    for name in weight_files(directory):
        os.remove(os.path.join(directory, name))
    shards = shard_plan(tensors, shard_bytes) if shard_bytes else [list(tensors)]
    meta = {"format": "pt"}
    if len(shards) == 1:
        write_safetensors(os.path.join(directory, SINGLE_FILE), tensors, meta)
        return [SINGLE_FILE]
    files, weight_map = [], {}
    for i, names in enumerate(shards):
        fname = f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors"
        write_safetensors(os.path.join(directory, fname), {n: tensors[n] for n in names}, meta)
        files.append(fname)
        weight_map.update({n: fname for n in names})
    total = sum(t.numel() * t.element_size() for t in tensors.values())
    write_json(os.path.join(directory, INDEX_FILE), {"metadata": {"total_size": total}, "weight_map": weight_map})
    return files + [INDEX_FILE]


def read_weights(directory):
    """{name: tensor} from model.safetensors or from the index and its shards (both present: an error).
    Index checks: total_size is the tensors' byte count; each shard holds exactly the tensors the
    weight_map sends to it."""
    single, index = os.path.join(directory, SINGLE_FILE), os.path.join(directory, INDEX_FILE)
    if os.path.exists(single) and os.path.exists(index):
        raise ValueError(f"{directory}: both {SINGLE_FILE} and {INDEX_FILE}; which one holds the weights?")
    if os.path.exists(single):
        return read_safetensors(single)[0]
    if not os.path.exists(index):
        raise ValueError(f"{directory}: neither {SINGLE_FILE} nor {INDEX_FILE}")
    with open(index) as f:
        idx = json.load(f)
    if not isinstance(idx, dict) or not isinstance(idx.get("weight_map"), dict) \
            or not isinstance(idx.get("metadata", {}).get("total_size"), int):
        raise ValueError(f"{index}: expected {{\"metadata\": {{\"total_size\": int}}, \"weight_map\": {{...}}}}")
    tensors = {}
    for fname in sorted(set(idx["weight_map"].values())):
        path = os.path.join(directory, fname)
        if os.path.basename(fname) != fname or not os.path.isfile(path):
            raise ValueError(f"{index}: shard {fname!r} is missing")
        shard, _ = read_safetensors(path)
        mapped = {n for n, f in idx["weight_map"].items() if f == fname}
        if set(shard) != mapped:
            raise ValueError(f"{path}: holds {sorted(set(shard) - mapped)} not mapped to it and lacks"
                             f" {sorted(mapped - set(shard))} that the index maps to it")
        tensors.update(shard)
    total = sum(t.numel() * t.element_size() for t in tensors.values())
    if total != idx["metadata"]["total_size"]:
        raise ValueError(f"{index}: metadata.total_size {idx['metadata']['total_size']}, the shards hold {total} bytes")
    return tensors
