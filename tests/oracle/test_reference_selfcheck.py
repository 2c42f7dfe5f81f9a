#!/usr/bin/python3
"""Self-checks of the PyTorch oracle (gpt2_torch.py, llama_torch.py) against things independent of it:
central finite differences of the float64 loss, hand-computed learning rates, a numpy AdamW +
clipping written from share/docs/usage.md, Model and optimizer, hand-indexed data windows, causality, gradient
accumulation invariance, HDF5 round trips and make_reference.py's file layout.
Exits non-zero on the first failure. usage: /usr/bin/python3 test_reference_selfcheck.py
"""
import math
import os
import sys
import tempfile

import h5py
import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gpt2_torch as g  # noqa: E402
import llama_torch  # noqa: E402
import make_reference  # noqa: E402

SHAPE = dict(layers=2, heads=3, d_model=12, vocab=11, seq_len=7)
# Grouped-query (2 kv heads of 4, head size 4), a SwiGLU width of 10, θ small enough to turn every pair.
LLAMA = dict(layers=2, heads=4, kv_heads=2, d_model=16, ffn_hidden=10, vocab=SHAPE["vocab"], rope_theta=50.0,
             norm_eps=1e-5)
CHECKS = []


def check(fn):
    CHECKS.append(fn)
    return fn


def small_cfg(over=None):
    cfg = g.load_config(None, [("model", k, str(v)) for k, v in SHAPE.items()])
    for (section, key), value in (over or {}).items():
        cfg[section][key] = value
    return cfg


def tiny_model(seed=1):
    return g.random_init(g.GPT2(**SHAPE, dtype=torch.float64), seed)


def tiny_llama(seed=1):
    return g.random_init(g.build_model({"model": {"arch": "llama", **LLAMA}}), seed, std=0.2)


def batch(B, seed=2):
    gen = torch.Generator().manual_seed(seed)
    return (torch.randint(0, SHAPE["vocab"], (B, SHAPE["seq_len"]), generator=gen),
            torch.randint(0, SHAPE["vocab"], (B, SHAPE["seq_len"]), generator=gen))


@check
def names_and_shapes():
    V, T, C = SHAPE["vocab"], SHAPE["seq_len"], SHAPE["d_model"]
    want = {"wte.weight": (V, C), "wpe.weight": (T, C), "ln_f.weight": (C,), "ln_f.bias": (C,)}
    for l in range(SHAPE["layers"]):
        p = f"h.{l}."
        want.update({p + "ln_1.weight": (C,), p + "ln_1.bias": (C,), p + "attn.c_attn.weight": (C, 3 * C),
                     p + "attn.c_attn.bias": (3 * C,), p + "attn.c_proj.weight": (C, C), p + "attn.c_proj.bias": (C,),
                     p + "ln_2.weight": (C,), p + "ln_2.bias": (C,), p + "mlp.c_fc.weight": (C, 4 * C),
                     p + "mlp.c_fc.bias": (4 * C,), p + "mlp.c_proj.weight": (4 * C, C), p + "mlp.c_proj.bias": (C,)})
    got = {n: tuple(p.shape) for n, p in tiny_model().named_parameters()}
    assert got == want, f"parameter names/shapes differ: {set(got.items()) ^ set(want.items())}"
    decayed = sorted(n for n, d in g.decay_flags(tiny_model()).items() if d)
    assert len(decayed) == 2 + 4 * SHAPE["layers"], decayed


@check
def llama_names_and_shapes():
    V, C, H, hs = LLAMA["vocab"], LLAMA["d_model"], LLAMA["ffn_hidden"], LLAMA["d_model"] // LLAMA["heads"]
    want = {"embed_tokens.weight": (V, C), "norm.weight": (C,), "lm_head.weight": (V, C)}
    for l in range(LLAMA["layers"]):
        p = f"layers.{l}."
        want.update({p + "input_layernorm.weight": (C,), p + "post_attention_layernorm.weight": (C,),
                     p + "self_attn.q_proj.weight": (LLAMA["heads"] * hs, C),
                     p + "self_attn.k_proj.weight": (LLAMA["kv_heads"] * hs, C),
                     p + "self_attn.v_proj.weight": (LLAMA["kv_heads"] * hs, C),
                     p + "self_attn.o_proj.weight": (C, LLAMA["heads"] * hs),
                     p + "mlp.gate_proj.weight": (H, C), p + "mlp.up_proj.weight": (H, C), p + "mlp.down_proj.weight": (C, H)})
    got = {n: tuple(p.shape) for n, p in tiny_llama().named_parameters()}
    assert got == want, f"parameter names/shapes differ: {set(got.items()) ^ set(want.items())}"
    # The LLaMA rule by hand: ⌊8·40/3⌋ = 106 -> 112 (multiple of 16); ⌊8·48/3⌋ = 128 stays.
    assert [llama_torch.hidden_size(c, 0, 16) for c in (40, 48)] == [112, 128]


def objective(model, x, y):
    """A micro-batch's training objective: mean cross-entropy + the MoE blocks' weighted aux and z terms."""
    return model(x, y) + model.auxiliary_loss()


def check_finite_differences(model):
    """Autograd vs central differences of the objective for several elements of every tensor (float64)."""
    x, y = batch(3)
    objective(model, x, y).backward()
    rng = np.random.default_rng(3)
    worst = 0.0
    for name, p in model.named_parameters():
        flat, grad = p.data.view(-1), p.grad.view(-1)
        for idx in rng.choice(flat.numel(), size=min(3, flat.numel()), replace=False):
            h, orig = 1e-5, flat[idx].item()
            with torch.no_grad():
                flat[idx] = orig + h
                up = objective(model, x, y).item()
                flat[idx] = orig - h
                down = objective(model, x, y).item()
                flat[idx] = orig
            fd = (up - down) / (2 * h)
            err = abs(fd - grad[idx].item())
            worst = max(worst, err / max(abs(fd), 1e-4))
            assert err < 1e-7 * abs(fd) + 1e-10, f"{name}[{idx}]: autograd {grad[idx].item():.10g} vs fd {fd:.10g}"
    print(f"  worst finite-difference error (relative, floor 1e-4) {worst:.2e}")


@check
def finite_differences():
    check_finite_differences(tiny_model())


@check
def llama_finite_differences():
    check_finite_differences(tiny_llama())


@check
def llama_forward_by_hand():
    """Loss from an independent numpy forward pass: rotation of each (i, i + hs/2) pair by
    t·θ^(−2i/hs), query head h reading kv head h // (NH/KV), explicit loops over heads and rows."""
    model = tiny_llama()
    x, y = batch(2)
    P = {n: p.detach().numpy() for n, p in model.named_parameters()}
    T, C, NH, KV = SHAPE["seq_len"], LLAMA["d_model"], LLAMA["heads"], LLAMA["kv_heads"]
    hs = C // NH
    half = hs // 2

    def rms(v, w):
        return v / np.sqrt((v ** 2).mean(-1, keepdims=True) + LLAMA["norm_eps"]) * w

    def rope(head):  # [T, hs]
        out = head.copy()
        for t in range(T):
            for i in range(half):
                a = t * LLAMA["rope_theta"] ** (-2 * i / hs)
                out[t, i] = head[t, i] * math.cos(a) - head[t, i + half] * math.sin(a)
                out[t, i + half] = head[t, i + half] * math.cos(a) + head[t, i] * math.sin(a)
        return out

    total = 0.0
    for b in range(x.shape[0]):
        h = P["embed_tokens.weight"][x[b].numpy()]
        for l in range(LLAMA["layers"]):
            p = f"layers.{l}."
            a = rms(h, P[p + "input_layernorm.weight"])
            q, k, v = (a @ P[p + f"self_attn.{n}_proj.weight"].T for n in "qkv")
            out = np.zeros((T, NH * hs))
            for hd in range(NH):
                kv = hd // (NH // KV)
                qh, kh = rope(q[:, hd * hs:(hd + 1) * hs]), rope(k[:, kv * hs:(kv + 1) * hs])
                for i in range(T):
                    s = qh[i] @ kh[:i + 1].T / math.sqrt(hs)
                    w = np.exp(s - s.max())
                    out[i, hd * hs:(hd + 1) * hs] = (w / w.sum()) @ v[:i + 1, kv * hs:(kv + 1) * hs]
            h = h + out @ P[p + "self_attn.o_proj.weight"].T
            m = rms(h, P[p + "post_attention_layernorm.weight"])
            gate, up = m @ P[p + "mlp.gate_proj.weight"].T, m @ P[p + "mlp.up_proj.weight"].T
            h = h + (gate / (1 + np.exp(-gate)) * up) @ P[p + "mlp.down_proj.weight"].T
        logits = rms(h, P["norm.weight"]) @ P["lm_head.weight"].T
        lse = np.log(np.exp(logits - logits.max(-1, keepdims=True)).sum(-1)) + logits.max(-1)
        total += (lse - logits[np.arange(T), y[b].numpy()]).sum()
    ref = total / (x.shape[0] * T)
    got = model(x, y).item()
    assert abs(got - ref) < 1e-12 * max(1, abs(ref)), f"loss {got!r} vs by hand {ref!r}"


@check
def forward_by_hand():
    """Loss from an independent numpy forward pass (loops over heads, explicit formulas)."""
    model = tiny_model()
    x, y = batch(2)
    P = {n: p.detach().numpy() for n, p in model.named_parameters()}
    T, C, H = SHAPE["seq_len"], SHAPE["d_model"], SHAPE["heads"]
    D = C // H

    def ln(v, w, b):
        mu = v.mean(-1, keepdims=True)
        var = ((v - mu) ** 2).mean(-1, keepdims=True)
        return (v - mu) / np.sqrt(var + 1e-5) * w + b

    def gelu(v):
        return 0.5 * v * (1 + np.tanh(math.sqrt(2 / math.pi) * (v + 0.044715 * v ** 3)))

    total = 0.0
    for b in range(x.shape[0]):
        h = P["wte.weight"][x[b].numpy()] + P["wpe.weight"][:T]
        for l in range(SHAPE["layers"]):
            p = f"h.{l}."
            a = ln(h, P[p + "ln_1.weight"], P[p + "ln_1.bias"]) @ P[p + "attn.c_attn.weight"] + P[p + "attn.c_attn.bias"]
            out = np.zeros((T, C))
            for hd in range(H):
                q, k, v = (a[:, part * C + hd * D: part * C + (hd + 1) * D] for part in range(3))
                for i in range(T):
                    s = q[i] @ k[:i + 1].T / math.sqrt(D)
                    w = np.exp(s - s.max())
                    out[i, hd * D:(hd + 1) * D] = (w / w.sum()) @ v[:i + 1]
            h = h + out @ P[p + "attn.c_proj.weight"] + P[p + "attn.c_proj.bias"]
            f = gelu(ln(h, P[p + "ln_2.weight"], P[p + "ln_2.bias"]) @ P[p + "mlp.c_fc.weight"] + P[p + "mlp.c_fc.bias"])
            h = h + f @ P[p + "mlp.c_proj.weight"] + P[p + "mlp.c_proj.bias"]
        logits = ln(h, P["ln_f.weight"], P["ln_f.bias"]) @ P["wte.weight"].T
        lse = np.log(np.exp(logits - logits.max(-1, keepdims=True)).sum(-1)) + logits.max(-1)
        total += (lse - logits[np.arange(T), y[b].numpy()]).sum()
    ref = total / (x.shape[0] * T)
    got = model(x, y).item()
    assert abs(got - ref) < 1e-12 * max(1, abs(ref)), f"loss {got!r} vs by hand {ref!r}"


@check
def causal():
    model = tiny_model()
    x, _ = batch(1)
    x2 = x.clone()
    x2[0, -1] = (x2[0, -1] + 1) % SHAPE["vocab"]
    a, b = model.logits(x), model.logits(x2)
    assert torch.equal(a[:, :-1], b[:, :-1]) and not torch.equal(a[:, -1], b[:, -1]), "attention is not causal"


@check
def learning_rates():
    cfg = small_cfg({("train", "steps"): 10, ("optim", "lr"): 1.0, ("optim", "min_lr"): 0.1,
                       ("optim", "warmup_steps"): 2})
    # warmup 1/2, 2/2; then p = (i-2)/8: cos(0)=1 -> 1.0, p=1/2 -> 0.55, p=1 -> 0.1
    for i, want in [(0, 0.5), (1, 1.0), (2, 1.0), (6, 0.55), (10, 0.1),
                    (4, 0.1 + 0.45 * (1 + math.cos(math.pi / 4)))]:
        assert abs(g.lr_at(i, cfg) - want) < 1e-15, f"cosine lr_at({i}) = {g.lr_at(i, cfg)}, want {want}"
    cfg["optim"]["decay"] = "constant"
    assert [g.lr_at(i, cfg) for i in (0, 1, 2, 9)] == [0.5, 1.0, 1.0, 1.0]
    cfg["optim"]["warmup_steps"] = 0
    cfg["optim"]["decay"] = "cosine"
    assert g.lr_at(0, cfg) == 1.0
    cfg["train"]["steps"] = 0   # max(1, steps - warmup) guards the division
    assert abs(g.lr_at(1, cfg) - 0.1) < 1e-15


@check
def config_parsing():
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "c.ini")
        with open(path, "w") as f:
            f.write("[model]\nlayers = 4\n[optim]\nlr = 1e-3  # peak\ndecay = constant\n[data]\ntrain = x.bin\n")
        cfg = g.load_config(path, ["--model.layers", "5", "--optim.grad_clip=0"])
    assert cfg["model"]["layers"] == 5 and cfg["model"]["heads"] == 2
    assert cfg["optim"]["lr"] == 1e-3 and cfg["optim"]["decay"] == "constant" and cfg["optim"]["grad_clip"] == 0.0
    assert cfg["data"]["train"] == "x.bin" and cfg["train"]["seed"] == 1337 and cfg["optim"]["beta2"] == 0.95


@check
def data_order():
    with tempfile.TemporaryDirectory() as d:
        tokens = np.arange(53) % 50
        g.write_shard(os.path.join(d, "b.bin"), tokens[30:])     # sorted order: a then b
        g.write_shard(os.path.join(d, "a.bin"), tokens[:30])
        stream = g.read_tokens(os.path.join(d, "*.bin"))
        assert np.array_equal(stream, tokens)
        raw = np.fromfile(os.path.join(d, "a.bin"), dtype="<i4", count=3)
        assert list(raw) == [20240520, 1, 30] and os.path.getsize(os.path.join(d, "a.bin")) == 1024 + 60
    T, G = 5, 4                      # W = floor(52 / 5) = 10 windows
    x, y = g.step_windows(stream, 2, G, T)   # windows 8, 9, 0, 1
    for j, w in enumerate([8, 9, 0, 1]):
        assert list(x[j]) == list(tokens[w * T:w * T + T]) and list(y[j]) == list(tokens[w * T + 1:w * T + T + 1])


@check
def accumulation_invariance():
    cfg = small_cfg({("train", "global_batch"): 4, ("train", "micro_batch"): 4, ("train", "steps"): 3})
    tokens = torch.randint(0, SHAPE["vocab"], (200,), generator=torch.Generator().manual_seed(5)).numpy()
    a = g.train(tiny_model(), tokens, cfg)
    cfg["train"]["micro_batch"] = 1
    b = g.train(tiny_model(), tokens, cfg)
    for key in a:
        assert np.allclose(a[key], b[key], rtol=1e-12, atol=0), f"{key}: {a[key]} vs {b[key]}"


@check
def adamw_by_hand():
    """Two training steps vs. a numpy AdamW + clipping written from share/docs/usage.md, Model and optimizer."""
    cfg = small_cfg({("train", "global_batch"): 2, ("train", "micro_batch"): 1, ("train", "steps"): 5,
                       ("optim", "lr"): 1e-2, ("optim", "warmup_steps"): 1, ("optim", "grad_clip"): 0.3})
    o = cfg["optim"]
    tokens = torch.randint(0, SHAPE["vocab"], (100,), generator=torch.Generator().manual_seed(6)).numpy()
    model, probe = tiny_model(), tiny_model()
    hist = g.train(model, tokens, cfg, steps=2)
    P = {n: p.detach().numpy().copy() for n, p in probe.named_parameters()}
    M = {n: np.zeros_like(v) for n, v in P.items()}
    V = {n: np.zeros_like(v) for n, v in P.items()}
    clipped = 0
    for i in range(2):
        with torch.no_grad():
            for n, p in probe.named_parameters():
                p.copy_(torch.from_numpy(P[n]))
        probe.zero_grad()
        x, y = g.step_windows(tokens, i, 2, SHAPE["seq_len"])
        loss = probe(x, y)
        loss.backward()
        G = {n: p.grad.numpy().copy() for n, p in probe.named_parameters()}
        norm = math.sqrt(sum((v ** 2).sum() for v in G.values()))
        assert abs(norm - hist["grad_norm"][i]) < 1e-10 * norm and abs(loss.item() - hist["loss"][i]) < 1e-12
        scale = min(1.0, o["grad_clip"] / (norm + 1e-6))
        clipped += scale < 1
        lr, t = g.lr_at(i, cfg), i + 1
        for n in P:
            gr = G[n] * scale
            if P[n].ndim >= 2:
                P[n] *= 1 - lr * o["weight_decay"]
            M[n] = o["beta1"] * M[n] + (1 - o["beta1"]) * gr
            V[n] = o["beta2"] * V[n] + (1 - o["beta2"]) * gr ** 2
            P[n] -= lr * (M[n] / (1 - o["beta1"] ** t)) / (np.sqrt(V[n] / (1 - o["beta2"] ** t)) + o["eps"])
    assert clipped >= 1, "the clipping branch was not exercised"
    for n, p in model.named_parameters():
        err = np.abs(p.detach().numpy() - P[n]).max()
        assert err < 1e-12, f"{n}: torch AdamW differs from the documented AdamW by {err}"


@check
def hdf5_round_trip_and_make_reference():
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "w.h5")
        a = tiny_model()
        g.save_weights(a, path)
        b = g.load_weights(g.GPT2(**SHAPE), path)
        with h5py.File(path) as f:
            assert set(f.keys()) == {"model"} and f["model/wte.weight"].dtype == np.float32
        for (n, p), q in zip(a.named_parameters(), b.parameters()):
            assert torch.equal(p.float().double(), q), n

        ref = os.path.join(d, "ref.h5")
        make_reference.make_reference(ref, batch=2, seed=9, dtype="float32", **SHAPE)
        with h5py.File(ref) as f:
            B, T, V = 2, SHAPE["seq_len"], SHAPE["vocab"]
            assert f["inputs"].shape == (B, T) and f["inputs"].dtype == np.int32 and f["targets"].dtype == np.int32
            assert f["expected/logits"].shape == (B, T, V) and f["expected/loss"].shape == ()
            assert all(f.attrs[k] == v for k, v in SHAPE.items()) and f.attrs["batch"] == B
            m = g.load_weights(g.GPT2(**SHAPE), ref)
            x, y = (torch.from_numpy(f[k][()].astype(np.int64)) for k in ("inputs", "targets"))
            loss = m(x, y)
            loss.backward()
            assert abs(loss.item() - f["expected/loss"][()]) < 1e-13
            for n, p in m.named_parameters():
                assert f[f"model/{n}"].dtype == np.float32
                assert np.allclose(p.grad.numpy(), f[f"expected/grads/{n}"][()], rtol=1e-10, atol=1e-15), n
                assert np.abs(f[f"expected/grads/{n}"][()]).max() > 0, f"{n}: gradient is zero"


def run(checks):
    """Runs every check, reports each, and returns the exit status (1 if any failed)."""
    failed = 0
    for fn in checks:
        try:
            fn()
            print(f"ok    {fn.__name__}")
        except Exception as e:  # report every check, then fail
            failed += 1
            print(f"FAIL  {fn.__name__}: {type(e).__name__}: {e}")
    print(f"{len(checks) - failed} of {len(checks)} checks passed")
    return 1 if failed else 0


if __name__ == "__main__":
    torch.set_num_threads(1)
    sys.exit(run(CHECKS))
