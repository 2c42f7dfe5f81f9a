#!/usr/bin/python3
"""An independent safetensors writer and reader, written from the format's definition with numpy and
torch (no safetensors package): the other side of tests/io/safetensors_{read,write}_test.cpp.

The format: an 8-byte little-endian unsigned header length N; N bytes of UTF-8 JSON mapping each
tensor name to {"dtype", "shape", "data_offsets": [begin, end]} plus an optional "__metadata__"
object of strings; then the data region, each tensor's row-major little-endian bytes at
[begin, end) from the region's start. A Hugging Face directory holds model.safetensors, or
model-0000i-of-0000K.safetensors shards and model.safetensors.index.json
({"metadata": {"total_size": bytes}, "weight_map": {tensor: shard}}). BF16 values are rounded by
torch, F16 by numpy: neither is meshtrain's code.

usage:
  safetensors_reference.py write-cases DIR    good and bad files and directories, and DIR/cases.json
                                              saying what each holds or which names its refusal must
                                              carry
  safetensors_reference.py check-written DIR  checks the directories meshtrain wrote against
                                              DIR/expected.json (the float32 values it was given);
                                              exit 1 with every failure listed
"""
import json
import os
import struct
import sys

import numpy as np
import torch

F32, BF16, F16 = "F32", "BF16", "F16"
SIZE = {F32: 4, BF16: 2, F16: 2}


# ---------------------------------------------------------------------------------------------
# Values: float32 arrays, and their bytes and exactly widened float32 bits in each dtype.

def f32(values):
    return np.asarray(values, dtype=np.float32)


def encode(dtype, values):
    """(bytes as stored, float32 bits of the stored values widened back) of float32 `values`."""
    values = f32(values)
    if dtype == F32:
        stored = values
        return stored.astype("<f4").tobytes(), stored.view(np.uint32)
    if dtype == BF16:
        b = torch.from_numpy(values.copy()).to(torch.bfloat16)
        raw = b.view(torch.int16).numpy().astype("<i2").tobytes()
        return raw, b.to(torch.float32).numpy().view(np.uint32)
    h = values.astype(np.float16)
    return h.astype("<f2").tobytes(), h.astype(np.float32).view(np.uint32)


def specials(dtype):
    """Values each dtype must carry exactly: signed zero, infinities, NaN, subnormals, extremes."""
    common = [0.0, -0.0, np.inf, -np.inf, np.nan, 1.0, -2.5]
    if dtype == F16:
        return common + [2.0 ** -24, -(2.0 ** -24), 3 * 2.0 ** -24, 2.0 ** -14, 65504.0, -65504.0]
    if dtype == BF16:
        return common + [2.0 ** -133, 2.0 ** -126, 3.3895313892515355e38, -1.0e-40]
    return common + [1.0e-45, -1.4e-45, 1.17549435e-38, 3.4028234663852886e38]


def random_values(rng, n, dtype):
    v = list(rng.standard_normal(n) * 3)
    extra = specials(dtype)
    for i, x in enumerate(extra[:n]):
        v[(i * 7) % n] = x
    return f32(v)


# ---------------------------------------------------------------------------------------------
# Writing.

def header_bytes(header, pad=True):
    text = json.dumps(header, separators=(",", ":")).encode()
    if pad:
        text += b" " * ((8 - len(text) % 8) % 8)
    return text


def write_raw(path, header_text, data, length=None):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(header_text) if length is None else length))
        f.write(header_text)
        f.write(data)


def write_file(path, tensors, metadata=None, pad=True):
    """tensors: [(name, dtype, shape, float32 values)] in data order. Returns {name: expectation}."""
    header, data, expect = {}, b"", {}
    for name, dtype, shape, values in tensors:
        raw, bits = encode(dtype, np.reshape(values, -1))
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
        expect[name] = {"dtype": dtype, "shape": list(shape), "bits": [int(b) for b in bits]}
    if metadata is not None:
        header["__metadata__"] = metadata
    write_raw(path, header_bytes(header, pad), data)
    return expect


def write_index(path, weight_map, total_size):
    with open(path, "w") as f:
        json.dump({"metadata": {"total_size": total_size}, "weight_map": weight_map}, f, indent=2)


def shard_name(i, k):
    return f"model-{i:05d}-of-{k:05d}.safetensors"


def write_sharded(directory, shards):
    """shards: [[tensor, ...], ...] as write_file takes them. Returns {name: expectation}."""
    os.makedirs(directory, exist_ok=True)
    expect, weight_map, total = {}, {}, 0
    for i, tensors in enumerate(shards):
        name = shard_name(i + 1, len(shards))
        expect.update(write_file(os.path.join(directory, name), tensors, {"format": "pt"}))
        for t in tensors:
            weight_map[t[0]] = name
            total += int(np.prod(t[2], dtype=np.int64)) * SIZE[t[1]]
    write_index(os.path.join(directory, "model.safetensors.index.json"), weight_map, total)
    return expect


def write_cases(root):
    rng = np.random.default_rng(26)
    cases = {"good_files": [], "good_dirs": [], "bad_files": [], "bad_dirs": []}

    def t(name, dtype, shape):
        n = int(np.prod(shape, dtype=np.int64))
        return (name, dtype, shape, random_values(rng, n, dtype) if n else f32([]))

    def good_file(rel, tensors, metadata=None, pad=True):
        expect = write_file(os.path.join(root, rel), tensors, metadata, pad)
        cases["good_files"].append({"path": rel, "tensors": expect, "metadata": metadata or {}})

    # Data order unlike name order; every dtype, a scalar, an empty tensor.
    good_file("good/f32.safetensors",
              [t("z.last", F32, [3, 4]), t("a.first", F32, [13]), t("scalar", F32, []), t("empty", F32, [0, 3])],
              {"format": "pt", "note": "written by safetensors_reference.py"})
    good_file("good/mixed.safetensors",
              [t("w.bf16", BF16, [4, 6]), t("h.f16", F16, [17]), t("f.f32", F32, [2, 2, 2])])
    # No padding: the data region starts unaligned.
    good_file("good/unaligned.safetensors", [t("odd.bf16", BF16, [5]), t("odd.f32", F32, [3])], {"k": "v"}, pad=False)

    single = write_file(os.path.join(root, "gooddir/single/model.safetensors"),
                        [t("model.embed_tokens.weight", BF16, [10, 4]), t("model.norm.weight", F32, [4])],
                        {"format": "pt"})
    cases["good_dirs"].append({"path": "gooddir/single", "tensors": single})
    sharded = write_sharded(os.path.join(root, "gooddir/sharded"), [
        [t("model.embed_tokens.weight", BF16, [10, 4]), t("model.layers.0.mlp.up_proj.weight", F16, [6, 4])],
        [t("model.layers.0.self_attn.q_proj.weight", F32, [4, 4])],
        [t("lm_head.weight", BF16, [10, 4]), t("model.norm.weight", F32, [4])],
    ])
    cases["good_dirs"].append({"path": "gooddir/sharded", "tensors": sharded})

    # Bad files: each a small variation of a good two-tensor file.
    x = ("layers.0.weight", F32, [2, 3], f32(np.arange(6)))
    y = ("layers.1.bias", BF16, [4], f32([1, 2, 3, 4]))

    def entry(name, dtype, shape, begin, end):
        return {name: {"dtype": dtype, "shape": shape, "data_offsets": [begin, end]}}

    good_header = {**entry(x[0], F32, [2, 3], 0, 24), **entry(y[0], BF16, [4], 24, 32)}
    data = encode(F32, x[3])[0] + encode(BF16, y[3])[0]

    def bad(rel, needles, header=None, payload=None, length=None, text=None):
        path = os.path.join(root, rel)
        write_raw(path, text if text is not None else header_bytes(header if header is not None else good_header),
                  data if payload is None else payload, length)
        cases["bad_files"].append({"path": rel, "needles": [rel] + needles})

    bad("bad/truncated.safetensors", [y[0], "truncated"], payload=data[:-4])
    bad("bad/header_length_past_end.safetensors", ["past the end"], length=10_000)
    bad("bad/header_length_absurd.safetensors", ["limit"], length=1 << 62)
    bad("bad/header_length_short.safetensors", ["not valid JSON"], length=len(header_bytes(good_header)) - 9)
    bad("bad/invalid_json.safetensors", ["not valid JSON"], text=b'{"layers.0.weight": {"dtype": "F32",   ')
    bad("bad/not_an_object.safetensors", ["array"], text=b"[1, 2, 3]       ")
    bad("bad/missing_shape.safetensors", [x[0], "'shape'"],
        header={x[0]: {"dtype": "F32", "data_offsets": [0, 24]}, **entry(y[0], BF16, [4], 24, 32)})
    bad("bad/dtype_f64.safetensors", [x[0], "F64", "F32, BF16, F16"],
        header={**entry(x[0], "F64", [3], 0, 24), **entry(y[0], BF16, [4], 24, 32)})
    bad("bad/dtype_i8.safetensors", [y[0], "I8", "F32, BF16, F16"],
        header={**entry(x[0], F32, [2, 3], 0, 24), **entry(y[0], "I8", [8], 24, 32)})
    bad("bad/overlap.safetensors", [x[0], y[0], "overlap"],
        header={**entry(x[0], F32, [2, 3], 0, 24), **entry(y[0], F32, [2], 20, 28)}, payload=data[:28])
    bad("bad/beyond_end.safetensors", [y[0], "past the end"],
        header={**entry(x[0], F32, [2, 3], 0, 24), **entry(y[0], BF16, [4], 32, 40)})
    bad("bad/length_mismatch.safetensors", [x[0], "20 bytes", "[2, 3]"],
        header={**entry(x[0], F32, [2, 3], 0, 20), **entry(y[0], F32, [3], 20, 32)})
    bad("bad/end_before_begin.safetensors", [y[0], "end before"],
        header={**entry(x[0], F32, [2, 3], 0, 24), **entry(y[0], BF16, [4], 32, 24)})
    bad("bad/gap.safetensors", [y[0], "unused", x[0]],
        header={**entry(x[0], F32, [2, 3], 0, 24), **entry(y[0], BF16, [2], 28, 32)})
    bad("bad/trailing_bytes.safetensors", [y[0], "follow the last tensor"], payload=data + b"\0" * 8)
    bad("bad/metadata_not_strings.safetensors", ["__metadata__", "step"],
        header={**good_header, "__metadata__": {"step": 7}})
    bad("bad/negative_offset.safetensors", [x[0], "data_offsets"],
        header={**entry(x[0], F32, [2, 3], -8, 24), **entry(y[0], BF16, [4], 24, 32)})
    bad("bad/shape_not_integers.safetensors", [x[0], "shape"],
        header={**entry(x[0], F32, [2, 3.5], 0, 24), **entry(y[0], BF16, [4], 24, 32)})
    bad("bad/entry_not_object.safetensors", [x[0]], header={x[0]: "F32", **entry(y[0], BF16, [4], 0, 8)},
        payload=data[24:])
    # A key beside the tensors nested 100,000 deep (a recursion over it once overflowed the stack), and a
    # number beyond a double's range: both refused while the header is parsed.
    plain = header_bytes(good_header, pad=False)
    deep = b"[" * 100_000 + b"]" * 100_000
    bad("bad/deep_extra_key.safetensors", ["not valid JSON", "nest deeper than 64 levels"],
        text=plain[:-1] + b',"extra":' + deep + b"}")
    # A tensor named twice (json.loads would keep the second): which one the file means is a guess.
    bad("bad/tensor_named_twice.safetensors", ["not valid JSON", f'names the key "{x[0]}" twice'],
        text=plain[:-1] + b"," + header_bytes(entry(x[0], F32, [2, 3], 0, 24), pad=False)[1:])
    bad("bad/number_overflow.safetensors", ["not valid JSON", "'1e999999'", "a double's range"],
        text=plain[:-1] + b',"extra":1e999999}')
    with open(os.path.join(root, "bad/short.safetensors"), "wb") as f:
        f.write(b"\x10\0\0")
    cases["bad_files"].append({"path": "bad/short.safetensors", "needles": ["bad/short.safetensors", "3 bytes"]})

    # Bad directories: a good sharded model, then one thing wrong.
    def sharded_dir(rel, extra_shard_tensors=(), index_edit=None, drop_shard=None):
        directory = os.path.join(root, rel)
        shards = [[("a.weight", F32, [2], f32([1, 2]))], [("b.weight", BF16, [2], f32([3, 4]))]]
        for i, tensor in extra_shard_tensors:
            shards[i].append(tensor)
        write_sharded(directory, shards)
        index_path = os.path.join(directory, "model.safetensors.index.json")
        if index_edit is not None:
            with open(index_path) as f:
                index = json.load(f)
            index_edit(index)
            with open(index_path, "w") as f:
                json.dump(index, f)
        if drop_shard is not None:
            os.remove(os.path.join(directory, shard_name(drop_shard, 2)))
        return directory

    def bad_dir(rel, needles):
        cases["bad_dirs"].append({"path": rel, "needles": needles})

    index = "model.safetensors.index.json"
    s1, s2 = shard_name(1, 2), shard_name(2, 2)
    sharded_dir("baddir/missing_shard", drop_shard=2)
    bad_dir("baddir/missing_shard", ["baddir/missing_shard/" + s2, index, "b.weight", "missing"])

    def add_listed(ix):
        ix["weight_map"]["c.listed_only"] = s1
    sharded_dir("baddir/listed_not_held", index_edit=add_listed)
    bad_dir("baddir/listed_not_held", ["c.listed_only", s1, "baddir/listed_not_held/" + index])

    def unlist(ix):
        ix["weight_map"].pop("c.unlisted")
    sharded_dir("baddir/held_not_listed", extra_shard_tensors=[(1, ("c.unlisted", F32, [1], f32([5])))],
                index_edit=unlist)
    bad_dir("baddir/held_not_listed", ["c.unlisted", "baddir/held_not_listed/" + s2, index])

    sharded_dir("baddir/in_two_shards", extra_shard_tensors=[(0, ("b.weight", BF16, [2], f32([3, 4])))])
    bad_dir("baddir/in_two_shards", ["b.weight", s1, s2, "two shards"])

    def swap(ix):
        ix["weight_map"].update({"a.weight": s2, "b.weight": s1})
    sharded_dir("baddir/misplaced", index_edit=swap)
    bad_dir("baddir/misplaced", ["b.weight", s1, s2, index])

    def escape(ix):
        ix["weight_map"]["b.weight"] = "../" + s2
    sharded_dir("baddir/shard_outside", index_edit=escape)
    bad_dir("baddir/shard_outside", ["b.weight", index, "../" + s2])

    def no_map(ix):
        ix.pop("weight_map")
    sharded_dir("baddir/no_weight_map", index_edit=no_map)
    bad_dir("baddir/no_weight_map", ["baddir/no_weight_map/" + index, "weight_map"])

    d = sharded_dir("baddir/index_not_json")
    with open(os.path.join(d, index), "w") as f:
        f.write('{"weight_map": {"a.weight": ')
    bad_dir("baddir/index_not_json", ["baddir/index_not_json/" + index, "not valid JSON"])

    d = sharded_dir("baddir/truncated_shard")
    with open(os.path.join(d, s2), "r+b") as f:
        f.truncate(os.path.getsize(os.path.join(d, s2)) - 2)
    bad_dir("baddir/truncated_shard", ["baddir/truncated_shard/" + s2, "b.weight", "truncated"])

    os.makedirs(os.path.join(root, "baddir/empty"))
    bad_dir("baddir/empty", ["baddir/empty", "model.safetensors", index])

    d = sharded_dir("baddir/both")
    write_file(os.path.join(d, "model.safetensors"), [("a.weight", F32, [2], f32([1, 2]))])
    bad_dir("baddir/both", ["baddir/both", "model.safetensors", index])

    bad_dir("baddir/no_such_dir", ["baddir/no_such_dir", "does not exist"])

    with open(os.path.join(root, "cases.json"), "w") as f:
        json.dump(cases, f)


# ---------------------------------------------------------------------------------------------
# Reading and checking what meshtrain wrote.

def read_file(path, problems):
    """(header without __metadata__, metadata, data region); problems appended for format breaches."""
    with open(path, "rb") as f:
        blob = f.read()
    (n,) = struct.unpack("<Q", blob[:8])
    if (8 + n) % 8:
        problems.append(f"{path}: the data region starts at {8 + n}, not 8-byte aligned")
    header = json.loads(blob[8:8 + n].decode("utf-8"))
    metadata = header.pop("__metadata__", {})
    data = blob[8 + n:]
    end = 0
    for name, info in sorted(header.items(), key=lambda kv: kv[1]["data_offsets"]):
        begin, stop = info["data_offsets"]
        if begin != end:
            problems.append(f"{path}: {name} begins at {begin}, the previous tensor ended at {end}")
        if stop - begin != int(np.prod(info["shape"], dtype=np.int64)) * SIZE[info["dtype"]]:
            problems.append(f"{path}: {name}: {stop - begin} bytes for shape {info['shape']} {info['dtype']}")
        end = stop
    if end != len(data):
        problems.append(f"{path}: the data region has {len(data)} bytes, the tensors {end}")
    return header, metadata, data


def greedy_shards(tensors, dtype, limit):
    """transformers' rule: in order, a new shard when the next tensor would pass the limit."""
    shards, filled = [[]], 0
    for t in tensors:
        size = int(np.prod(t["shape"], dtype=np.int64)) * SIZE[dtype]
        if shards[-1] and filled + size > limit:
            shards.append([])
            filled = 0
        shards[-1].append(t["name"])
        filled += size
    return shards


def check_case(root, case, problems):
    directory = os.path.join(root, case["dir"])
    dtype = case["dtype"]
    tensors = case["tensors"]
    shards = greedy_shards(tensors, dtype, case["max_shard_bytes"])
    if len(shards) != case.get("expected_shards", len(shards)):
        problems.append(f"{directory}: the test meant {case['expected_shards']} shards, the rule gives {len(shards)}")
    names = ["model.safetensors"] if len(shards) == 1 else \
        [shard_name(i + 1, len(shards)) for i in range(len(shards))] + ["model.safetensors.index.json"]
    present = sorted(os.listdir(directory))
    expected_present = sorted(names + case.get("other_files", []))
    if present != expected_present:
        problems.append(f"{directory}: holds {present}, expected {expected_present}")
        return
    by_name = {t["name"]: t for t in tensors}
    total = 0
    weight_map = {}
    for shard_names, file in zip(shards, names):
        header, metadata, data = read_file(os.path.join(directory, file), problems)
        if metadata.get("format") != "pt":
            problems.append(f"{file}: metadata {metadata} lacks format: pt")
        for key, value in case.get("metadata", {}).items():
            if metadata.get(key) != value:
                problems.append(f"{file}: metadata {key} = {metadata.get(key)!r}, expected {value!r}")
        if sorted(header) != sorted(shard_names):
            problems.append(f"{file}: holds {sorted(header)}, expected {sorted(shard_names)}")
        offsets = [header[n]["data_offsets"][0] for n in shard_names if n in header]
        if offsets != sorted(offsets):
            problems.append(f"{file}: tensors not stored in the order given")
        for name in shard_names:
            weight_map[name] = file
            if name not in header:
                continue
            info, want = header[name], by_name[name]
            if info["dtype"] != dtype or info["shape"] != want["shape"]:
                problems.append(f"{file}: {name} is {info['dtype']} {info['shape']}, expected {dtype} {want['shape']}")
                continue
            begin, stop = info["data_offsets"]
            total += stop - begin
            given = np.array(want["bits"], dtype=np.uint32).view(np.float32)
            raw, _ = encode(dtype, given)
            stored = data[begin:stop]
            if dtype == F32:
                same = stored == raw
            else:
                a, b = np.frombuffer(stored, "<u2"), np.frombuffer(raw, "<u2")
                # NaN as NaN: torch spells every NaN 0x7fc0, meshtrain keeps its sign and payload.
                nan = np.isnan(given)
                same = np.array_equal(a[~nan], b[~nan]) and bool(np.all((a[nan] & 0x7fff) > 0x7f80))
            if not same:
                problems.append(f"{file}: {name}'s bytes differ from the {dtype} of the values given")
    if len(shards) > 1:
        with open(os.path.join(directory, "model.safetensors.index.json")) as f:
            index = json.load(f)
        if index.get("weight_map") != weight_map:
            problems.append(f"{directory}: index weight_map {index.get('weight_map')} != {weight_map}")
        if index.get("metadata", {}).get("total_size") != total:
            problems.append(f"{directory}: index total_size {index.get('metadata')}, the tensors hold {total} bytes")


def check_written(root):
    with open(os.path.join(root, "expected.json")) as f:
        expected = json.load(f)
    problems = []
    for case in expected["cases"]:
        check_case(root, case, problems)
    for p in problems:
        print("FAIL:", p)
    print(f"{len(expected['cases'])} directories checked, {len(problems)} problems")
    return 1 if problems else 0


def main():
    if len(sys.argv) != 3 or sys.argv[1] not in ("write-cases", "check-written"):
        sys.exit(__doc__)
    if sys.argv[1] == "write-cases":
        write_cases(sys.argv[2])
        return 0
    return check_written(sys.argv[2])


if __name__ == "__main__":
    sys.exit(main())
