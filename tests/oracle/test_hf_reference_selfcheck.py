#!/usr/bin/python3
"""Self-checks of hf_reference.py and safetensors_io.py against things independent of them: HF's
parameter names and shapes listed by hand, central finite differences of the float64 loss, the
older references llama_torch.py and gpt2_torch.py (same logits, loss and gradients after renaming),
Mixtral's routing and load-balancing loss by explicit loops and a closed form, llama3 RoPE
frequencies from the definition's closed form, safetensors headers parsed by hand, bf16 rounding
by integer arithmetic on the float32 bits, and the reader's refusals of damaged files.
Exits non-zero if any check fails. usage: /usr/bin/python3 test_hf_reference_selfcheck.py
"""
import json
import math
import os
import struct
import sys
import tempfile

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gpt2_torch  # noqa: E402
import hf_reference as hr  # noqa: E402
import llama_torch  # noqa: E402
import safetensors_io as st  # noqa: E402
from test_reference_selfcheck import run  # noqa: E402

V, T = 23, 7
# One shape per architecture, each with what sets it apart: GQA, head_dim ≠ C/H, biases, ties, rope scaling.
CASES = {
    "llama": {"vocab_size": V, "hidden_size": 16, "intermediate_size": 12, "num_hidden_layers": 2,
              "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 6, "attention_bias": True,
              "tie_word_embeddings": True, "rope_theta": 50.0,
              "rope_scaling": {"rope_type": "llama3", "factor": 4.0, "low_freq_factor": 1.0, "high_freq_factor": 2.0,
                               "original_max_position_embeddings": 8}},
    "mistral": {"vocab_size": V, "hidden_size": 12, "intermediate_size": 10, "num_hidden_layers": 2,
                "num_attention_heads": 3, "num_key_value_heads": 1, "rope_theta": 30.0},
    "qwen2": {"vocab_size": V, "hidden_size": 16, "intermediate_size": 12, "num_hidden_layers": 1,
              "num_attention_heads": 4, "num_key_value_heads": 2, "tie_word_embeddings": True,
              "rope_theta": 40.0, "rope_scaling": {"type": "linear", "factor": 2.0}},
    "mixtral": {"vocab_size": V, "hidden_size": 12, "intermediate_size": 8, "num_hidden_layers": 2,
                "num_attention_heads": 2, "num_key_value_heads": 1, "num_local_experts": 4, "num_experts_per_tok": 2,
                "rope_theta": 20.0},
    "gpt2": {"vocab_size": V, "n_embd": 12, "n_head": 3, "n_layer": 2, "n_positions": T},
}
CHECKS = []


def check(fn):
    CHECKS.append(fn)
    return fn


def model_of(arch, over=None, seed=1, std=0.2):
    config = hr.make_config(arch, {**CASES[arch], **(over or {})})
    return gpt2_torch.random_init(hr.build_model(config), seed, std=std)


def batch(B=2, seed=2):
    gen = torch.Generator().manual_seed(seed)
    return torch.randint(0, V, (B, T), generator=gen), torch.randint(0, V, (B, T), generator=gen)


@check
def hf_names_and_shapes():
    """The checkpoint names of each architecture, listed by hand from the transformers modules."""
    def llama_like(layer_names, C, H, KV, D, F, tied, layers=2):
        want = {"model.embed_tokens.weight": (V, C), "model.norm.weight": (C,)}
        if not tied:
            want["lm_head.weight"] = (V, C)
        for l in range(layers):
            p = f"model.layers.{l}."
            want.update({p + "input_layernorm.weight": (C,), p + "post_attention_layernorm.weight": (C,),
                         p + "self_attn.q_proj.weight": (H * D, C), p + "self_attn.k_proj.weight": (KV * D, C),
                         p + "self_attn.v_proj.weight": (KV * D, C), p + "self_attn.o_proj.weight": (C, H * D)})
            want.update({p + n: s for n, s in layer_names(C, H, KV, D, F).items()})
        return want

    def mlp(C, H, KV, D, F):
        return {"mlp.gate_proj.weight": (F, C), "mlp.up_proj.weight": (F, C), "mlp.down_proj.weight": (C, F)}

    def qkv_bias(C, H, KV, D):
        return {"self_attn.q_proj.bias": (H * D,), "self_attn.k_proj.bias": (KV * D,),
                "self_attn.v_proj.bias": (KV * D,)}

    def moe(C, H, KV, D, F):
        out = {"block_sparse_moe.gate.weight": (4, C)}
        for e in range(4):
            out.update({f"block_sparse_moe.experts.{e}.w1.weight": (F, C),
                        f"block_sparse_moe.experts.{e}.w2.weight": (C, F),
                        f"block_sparse_moe.experts.{e}.w3.weight": (F, C)})
        return out

    want = {
        "llama": llama_like(lambda *a: {**mlp(*a), **qkv_bias(*a[:4]), "self_attn.o_proj.bias": (a[0],)},
                            16, 4, 2, 6, 12, tied=True),
        "mistral": llama_like(mlp, 12, 3, 1, 4, 10, tied=False),
        "qwen2": llama_like(lambda *a: {**mlp(*a), **qkv_bias(*a[:4])}, 16, 4, 2, 4, 12, tied=True, layers=1),
        "mixtral": llama_like(moe, 12, 2, 1, 6, 8, tied=False),
    }
    C = 12
    want["gpt2"] = {"transformer.wte.weight": (V, C), "transformer.wpe.weight": (T, C),
                    "transformer.ln_f.weight": (C,), "transformer.ln_f.bias": (C,)}
    for l in range(2):
        p = f"transformer.h.{l}."
        want["gpt2"].update({p + "ln_1.weight": (C,), p + "ln_1.bias": (C,), p + "attn.c_attn.weight": (C, 3 * C),
                             p + "attn.c_attn.bias": (3 * C,), p + "attn.c_proj.weight": (C, C),
                             p + "attn.c_proj.bias": (C,), p + "ln_2.weight": (C,), p + "ln_2.bias": (C,),
                             p + "mlp.c_fc.weight": (C, 4 * C), p + "mlp.c_fc.bias": (4 * C,),
                             p + "mlp.c_proj.weight": (4 * C, C), p + "mlp.c_proj.bias": (C,)})
    for arch, names in want.items():
        got = {n: tuple(p.shape) for n, p in model_of(arch).named_parameters()}
        assert got == names, f"{arch}: names/shapes differ: {sorted(set(got.items()) ^ set(names.items()))}"
    decayed = {n for n, d in gpt2_torch.decay_flags(model_of("mixtral")).items() if d}
    assert "block_sparse_moe.gate.weight" in " ".join(decayed) and not any(n.endswith("norm.weight") for n in decayed)


def directional_difference(model, p, d, x, y, h=1e-6):
    """The central difference of the float64 loss model(x, y) along direction d of parameter p."""
    with torch.no_grad():
        p.add_(h * d)
        up = model(x, y).item()
        p.sub_(2 * h * d)
        down = model(x, y).item()
        p.add_(h * d)
    return (up - down) / (2 * h)


@check
def finite_differences():
    """Autograd against central differences of the float64 loss along a random direction per tensor."""
    x, y = batch()
    rng = np.random.default_rng(5)
    worst = 0.0
    for arch in CASES:
        model = model_of(arch)
        grads = hr.forward_loss(model, x, y)["grads"]
        for name, p in model.named_parameters():
            d = torch.from_numpy(rng.standard_normal(tuple(p.shape)))
            fd, an = directional_difference(model, p, d, x, y), (grads[name] * d).sum().item()
            worst = max(worst, abs(fd - an) / max(abs(an), 1e-4))
            assert abs(fd - an) < 1e-6 * abs(an) + 1e-9, f"{arch} {name}: autograd {an:.10g} vs differences {fd:.10g}"
    print(f"  worst finite-difference error (relative, floor 1e-4) {worst:.2e}")


@check
def tied_gradient_is_both_uses():
    """Tied: the embedding's gradient is the untied model's embedding + lm_head gradients."""
    x, y = batch()
    tied = model_of("qwen2")
    untied = hr.build_model(hr.make_config("qwen2", {**CASES["qwen2"], "tie_word_embeddings": False}))
    weights = {n: p.detach() for n, p in tied.named_parameters()}
    hr.load_weights(untied, {**weights, "lm_head.weight": weights["model.embed_tokens.weight"]})
    a, b = hr.forward_loss(tied, x, y), hr.forward_loss(untied, x, y)
    assert torch.equal(a["logits"], b["logits"])
    both = b["grads"]["model.embed_tokens.weight"] + b["grads"]["lm_head.weight"]
    assert torch.allclose(a["grads"]["model.embed_tokens.weight"], both, rtol=1e-12, atol=1e-15)


@check
def pad_token_row_gets_no_gradient():
    x, y = batch()
    x[0, 0] = 5
    grads = hr.forward_loss(model_of("mistral", {"pad_token_id": 5}), x, y)["grads"]["model.embed_tokens.weight"]
    assert grads[5].abs().max() == 0 and grads[x[1, 0]].abs().max() > 0


def renamed(model, strip):
    return {n[len(strip):] if n.startswith(strip) else n: p.detach() for n, p in model.named_parameters()}


def same_results(new, old, names, x, y):
    """new (hf_reference) and old (llama_torch/gpt2_torch) models: logits, loss and gradients agree."""
    a = hr.forward_loss(new, x, y)
    old_logits = old.logits(x)
    loss = old(x, y)
    loss.backward()
    assert torch.allclose(a["logits"], old_logits, rtol=1e-12, atol=1e-12), (a["logits"] - old_logits).abs().max()
    assert abs(a["loss"] - loss.item()) < 1e-12
    old_params = dict(old.named_parameters())
    for name, grad in a["grads"].items():
        assert torch.allclose(grad, old_params[names(name)].grad, rtol=1e-10, atol=1e-14), name


@check
def llama_and_mistral_equal_llama_torch():
    """Untied, no biases, no rope scaling, head_dim = C/H: llama_torch.Llama with names less `model.`."""
    x, y = batch()
    for arch, over in (("llama", {"head_dim": None, "attention_bias": False, "tie_word_embeddings": False,
                                  "rope_scaling": None}), ("mistral", {})):
        new = model_of(arch, over)
        c = new.config
        old = llama_torch.Llama(c["num_hidden_layers"], c["num_attention_heads"], c["hidden_size"], V,
                                c["num_key_value_heads"], c["intermediate_size"], rope_theta=c["rope_theta"],
                                norm_eps=c["rms_norm_eps"])
        hr.load_weights(old, renamed(new, "model."))
        same_results(new, old, lambda n: n[len("model."):] if n.startswith("model.") else n, x, y)


@check
def gpt2_equals_gpt2_torch():
    x, y = batch()
    new = model_of("gpt2")
    old = gpt2_torch.GPT2(2, 3, 12, V, T)
    hr.load_weights(old, renamed(new, "transformer."))
    same_results(new, old, lambda n: n[len("transformer."):], x, y)


@check
def mixtral_equals_llama_torch_moe():
    """llama_torch's MoE without capacity, shared experts or aux terms, gates normalised: Mixtral's block
    (gate -> gate, experts.e.w1/w3/w2 -> gate_proj/up_proj/down_proj)."""
    x, y = batch()
    new = model_of("mixtral")
    c = new.config
    old = llama_torch.Llama(2, 2, 12, V, 1, 8, rope_theta=c["rope_theta"], norm_eps=c["rms_norm_eps"],
                            moe={"experts": 4, "experts_per_token": 2, "expert_hidden": 8, "capacity_factor": 0.0,
                                 "normalize_gates": True, "aux_loss_coef": 0.0, "z_loss_coef": 0.0})
    names = {"block_sparse_moe.": "mlp.", ".w1.": ".gate_proj.", ".w3.": ".up_proj.", ".w2.": ".down_proj."}

    def to_old(n):
        n = n[len("model."):] if n.startswith("model.") else n
        for a, b in names.items():
            n = n.replace(a, b)
        return n

    hr.load_weights(old, {to_old(n): p.detach() for n, p in new.named_parameters()})
    same_results(new, old, to_old, x, y)


@check
def mixtral_routing_by_hand():
    """Each row through an explicit loop: softmax over all experts, the two largest, renormalised."""
    torch.manual_seed(0)
    block = hr.SparseMoeBlock(6, 5, 4, 2)
    gpt2_torch.random_init(block, 3, std=0.5)
    x = torch.randn(2, 5, 6, dtype=torch.float64)
    y, logits = block(x)
    W = {n: p.detach().numpy() for n, p in block.named_parameters()}
    used = set()
    for n, row in enumerate(x.reshape(-1, 6).numpy()):
        z = W["gate.weight"] @ row
        p = np.exp(z - z.max()) / np.exp(z - z.max()).sum()
        first, second = sorted(range(4), key=lambda e: -p[e])[:2]
        used.add((first, second))
        want = np.zeros(6)
        for e in (first, second):
            a, b = W[f"experts.{e}.w1.weight"] @ row, W[f"experts.{e}.w3.weight"] @ row
            want += p[e] / (p[first] + p[second]) * (W[f"experts.{e}.w2.weight"] @ (a / (1 + np.exp(-a)) * b))
        assert np.allclose(y.reshape(-1, 6)[n].detach().numpy(), want, rtol=1e-12, atol=1e-14), n
    assert len(used) > 2, f"the rows chose only {used}: the check would not see a routing error"


@check
def load_balancing_loss():
    """By loops over layers and rows, and the closed form k for a uniform router."""
    gen = torch.Generator().manual_seed(4)
    layers = [torch.randn(6, 4, generator=gen, dtype=torch.float64) for _ in range(3)]
    E, k = 4, 2
    rows = np.concatenate([z.numpy() for z in layers])
    p = np.exp(rows) / np.exp(rows).sum(-1, keepdims=True)
    f, P = np.zeros((k, E)), p.mean(0)
    for r in p:
        for j, e in enumerate(np.argsort(-r)[:k]):
            f[j, e] += 1 / len(p)
    assert abs(hr.load_balancing_loss(layers, E, k).item() - E * (f * P).sum()) < 1e-14
    assert abs(hr.load_balancing_loss([torch.zeros(5, E, dtype=torch.float64)], E, k).item() - k) < 1e-14


@check
def rope_frequencies():
    """llama3 and linear scaling against the definition's closed form at chosen frequencies: D 16,
    θ 1e4, original length 1024, low 1, high 4, factor 8 -> wavelengths below 256 kept, above 1024
    divided by 8, between smoothed."""
    cfg = {"rope_theta": 1e4, "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                               "high_freq_factor": 4.0, "original_max_position_embeddings": 1024}}
    inv = hr.rope_inv_freq(cfg, 16)
    assert abs(inv[1].item() - 1e4 ** (-1 / 8)) < 1e-17                 # wavelength 19.9: kept
    s = (1024 * 0.01 / (2 * math.pi) - 1) / 3                             # wavelength 628: smoothed
    assert abs(inv[4].item() - ((1 - s) * 0.01 / 8 + s * 0.01)) < 1e-17
    assert abs(inv[6].item() - 0.001 / 8) < 1e-18                         # wavelength 6283: divided
    linear = hr.rope_inv_freq({"rope_theta": 1e4, "rope_scaling": {"type": "linear", "factor": 2.0}}, 16)
    assert abs(linear[2].item() - 0.1 / 2) < 1e-17
    cos, sin = hr.rope_tables(cfg, 16, 5)
    assert abs(cos[3, 4].item() - math.cos(3 * inv[4].item())) < 1e-15 and torch.equal(sin[:, :8], sin[:, 8:])
    x, y = batch()
    plain = hr.forward_loss(model_of("qwen2", {"rope_scaling": None}), x, y)["loss"]
    assert abs(plain - hr.forward_loss(model_of("qwen2"), x, y)["loss"]) > 1e-6, "rope_scaling changes nothing"


@check
def unsupported_configs_written_not_run():
    with tempfile.TemporaryDirectory() as d:
        for arch, over, word in (("mistral", {"sliding_window": 4}, "sliding_window"),
                                 ("qwen2", {"use_sliding_window": True}, "use_sliding_window"),
                                 ("llama", {"rope_scaling": {"rope_type": "dynamic", "factor": 2.0}}, "dynamic")):
            hr.write_hf_dir(d, arch, {**CASES[arch], **over}, seed=1)
            with open(os.path.join(d, "config.json")) as f:
                assert all(json.load(f)[k] == v for k, v in over.items())
            try:
                hr.load_hf_dir(d)
            except ValueError as e:
                assert word in str(e), e
            else:
                raise AssertionError(f"{arch} {over} was accepted")


def first_shard(directory):
    index = json.load(open(os.path.join(directory, st.INDEX_FILE)))
    return sorted(index["weight_map"].values())[0]


def parse_by_hand(path):
    data = open(path, "rb").read()
    n = int.from_bytes(data[:8], "little")
    assert n % 8 == 0 and data[8:9] == b"{", f"{path}: header of {n} bytes, not padded to 8 or not an object"
    return json.loads(data[8:8 + n]), data[8 + n:]


@check
def safetensors_round_trip():
    """fp32 written sharded and whole: the same bits as the model, the header as the format defines it."""
    model = model_of("mixtral", std=0.02)
    with tempfile.TemporaryDirectory() as d:
        whole, sharded = os.path.join(d, "whole"), os.path.join(d, "sharded")
        hr.write_model_dir(whole, model)
        hr.write_model_dir(sharded, model, shard_bytes=1000)
        assert sorted(os.listdir(whole)) == ["config.json", "generation_config.json", "model.safetensors"]
        cw, tw = hr.read_hf_dir(whole)
        cs, ts = hr.read_hf_dir(sharded)
        assert cw == cs == {**model.config, "torch_dtype": "float32"}
        for name, p in model.named_parameters():
            bits = p.detach().float().numpy().view(np.uint32)
            assert np.array_equal(tw[name].numpy().view(np.uint32), bits) and torch.equal(tw[name], ts[name]), name
        index = json.load(open(os.path.join(sharded, st.INDEX_FILE)))
        files = sorted(set(index["weight_map"].values()))
        assert files == [f"model-{i:05d}-of-{len(files):05d}.safetensors" for i in range(1, len(files) + 1)]
        total = 0
        for fname in files:
            header, data = parse_by_hand(os.path.join(sharded, fname))
            assert header.pop("__metadata__") == {"format": "pt"}
            names = [n for n, f in index["weight_map"].items() if f == fname]
            assert sorted(header) == sorted(names)
            assert len(data) <= 1000 or len(header) == 1, f"{fname}: {len(data)} bytes in {len(header)} tensors"
            for name, e in header.items():
                b, end = e["data_offsets"]
                assert e["dtype"] == "F32" and e["shape"] == list(ts[name].shape)
                assert np.array_equal(np.frombuffer(data[b:end], "<f4"), ts[name].numpy().reshape(-1))
            total += len(data)
        assert index["metadata"]["total_size"] == total
        cfg = json.load(open(os.path.join(whole, "generation_config.json")))
        assert cfg["bos_token_id"] == 1 and cfg["eos_token_id"] == 2


@check
def bf16_and_fp16_rounding():
    """bf16 = the float32 bits rounded to nearest even by integer arithmetic; fp16 as numpy rounds."""
    with tempfile.TemporaryDirectory() as d:
        config, tensors = hr.write_hf_dir(d, "llama", CASES["llama"], seed=9, dtype="bfloat16", shard_bytes=2048)
        fp32 = hr.stored_tensors(gpt2_torch.random_init(hr.build_model(config), 9, std=0.02), "float32")
        _, back = hr.read_hf_dir(d)
        assert config["torch_dtype"] == "bfloat16"
        rounded_up = 0
        for name, t in fp32.items():
            bits = t.numpy().view(np.uint32).astype(np.uint64)
            want = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)
            assert back[name].dtype == torch.bfloat16
            assert np.array_equal(back[name].view(torch.int16).numpy().view(np.uint16), want), name
            rounded_up += int(((bits & 0xFFFF) > 0x8000).sum())
        assert rounded_up > 0, "no value rounds up: the check would not see truncation"
        header, _ = parse_by_hand(os.path.join(d, first_shard(d)))
        assert header["model.embed_tokens.weight"]["dtype"] == "BF16"
        hr.write_hf_dir(d, "llama", CASES["llama"], seed=9, dtype="float16")
        _, half = hr.read_hf_dir(d)
        assert sorted(os.listdir(d)) == ["config.json", "generation_config.json", "model.safetensors"]
        for name, t in fp32.items():                              # numpy's own float32 -> float16 rounding
            assert np.array_equal(half[name].numpy().view(np.uint16), t.numpy().astype(np.float16).view(np.uint16))


@check
def reader_refuses_damaged_files():
    model = model_of("gpt2", std=0.02)
    with tempfile.TemporaryDirectory() as d:
        hr.write_model_dir(d, model, shard_bytes=800)
        first = os.path.join(d, first_shard(d))
        index_path = os.path.join(d, st.INDEX_FILE)
        pristine, pristine_index = open(first, "rb").read(), open(index_path).read()
        header, data = parse_by_hand(first)

        def rewrite(h, body=data):
            text = json.dumps(h).encode()
            open(first, "wb").write(struct.pack("<Q", len(text)) + text + body)

        def refused(word):
            try:
                hr.read_hf_dir(d)
            except ValueError as e:
                assert word in str(e), f"{word!r} not in {e}"
            else:
                raise AssertionError(f"accepted ({word})")
            open(first, "wb").write(pristine)
            open(index_path, "w").write(pristine_index)

        open(first, "wb").write(pristine[:-3])
        refused("the file has")
        name = next(n for n in header if n != "__metadata__")
        rewrite({**header, name: {**header[name], "data_offsets": [4, header[name]["data_offsets"][1] + 4]}},
                data + b"\0" * 4)
        refused("starts at data byte 4")
        rewrite({**header, name: {**header[name], "shape": [1]}})
        refused("needs 4")
        rewrite({**header, name: {**header[name], "dtype": "Q8"}})
        refused("Q8")
        open(first, "wb").write(pristine[:8] + b"[" + pristine[9:])
        refused("not UTF-8 JSON")
        index = json.load(open(index_path))
        index["weight_map"][name] = sorted(index["weight_map"].values())[1]
        st.write_json(index_path, index)
        refused("not mapped to it")
        os.rename(first, os.path.join(d, "gone"))
        refused("missing")


@check
def cli_write_oracle_train():
    """The three commands in process: oracle equals forward_loss; train's first loss is the first batch's."""
    with tempfile.TemporaryDirectory() as d:
        hf, out = os.path.join(d, "hf"), os.path.join(d, "ref.npz")
        assert hr.main(["write", "--arch", "mixtral", "--config", json.dumps(CASES["mixtral"]), "--out", hf,
                        "--dtype", "bfloat16", "--shard-bytes", "4096", "--seed", "3", "--std", "0.2"]) == 0
        rng = np.random.default_rng(1)
        np.save(os.path.join(d, "tokens.npy"), rng.integers(0, V, size=(2, T + 1)))
        assert hr.main(["oracle", "--dir", hf, "--tokens", os.path.join(d, "tokens.npy"), "--out", out]) == 0
        ref = np.load(out)
        toks = torch.from_numpy(np.load(os.path.join(d, "tokens.npy")))
        direct = hr.forward_loss(hr.load_hf_dir(hf), toks[:, :-1], toks[:, 1:])
        assert ref["loss"] == direct["loss"] and ref["aux_loss"] == direct["aux_loss"]
        assert np.array_equal(ref["logits"], direct["logits"].numpy())
        assert all(np.array_equal(ref[f"grad/{n}"], g.numpy()) for n, g in direct["grads"].items())

        stream = rng.integers(0, V, size=5 * T + 1)
        np.save(os.path.join(d, "stream.npy"), stream)
        sets = ["model.seq_len=7", "train.steps=3", "train.global_batch=4", "train.micro_batch=2",
                "optim.lr=1e-2", "optim.warmup_steps=1"]
        losses = os.path.join(d, "losses.json")
        assert hr.main(["train", "--dir", hf, "--data", os.path.join(d, "stream.npy"), "--out", losses, "--quiet",
                        "--save", os.path.join(d, "trained")] + sum((["--set", s] for s in sets), [])) == 0
        hist = json.load(open(losses))
        x, y = gpt2_torch.step_windows(stream, 0, 4, T)
        model = hr.load_hf_dir(hf)
        assert abs(hist["loss"][0] - hr.forward_loss(model, x, y)["loss"]) < 1e-12
        aux = np.mean([hr.forward_loss(model, x[r], y[r])["aux_loss"] for r in (slice(0, 2), slice(2, 4))])
        assert abs(hist["aux_loss"][0] - aux) < 1e-12 and len(hist["loss"]) == 3
        assert hist["loss"][2] < hist["loss"][0], hist["loss"]
        trained = hr.load_hf_dir(os.path.join(d, "trained"))
        assert not torch.equal(trained.model.norm.weight, model.model.norm.weight)

        cfg = hr.train_config(7, train_steps=3, train_global_batch=4, train_micro_batch=2, optim_lr=1e-2,
                              optim_warmup_steps=1)
        with_aux = hr.train_steps(hr.load_hf_dir(hf), stream, cfg, include_aux=True)
        assert with_aux["loss"][0] == hist["loss"][0] and with_aux["loss"][1] != hist["loss"][1]


if __name__ == "__main__":
    torch.set_num_threads(1)
    sys.exit(run(CHECKS))
