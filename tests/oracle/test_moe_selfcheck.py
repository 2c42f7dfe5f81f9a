#!/usr/bin/python3
"""Self-checks of the PyTorch oracle's mixture of experts (llama_torch.MoE) against things independent
of it (share/docs/usage.md, Mixture of experts): a routing of 4 tokens over 3 experts worked out by
hand (top-k, which assignments capacity drops under the first-choices-first priority, the counts,
the gates, the aux and z losses in closed form), ties, the capacity rounding, E identical experts
with k = E and no drops against the dense SwiGLU, central finite differences of the objective
with its aux and z terms, the training loop's objective, and make_reference.py's MoE file layout.
Exits non-zero on the first failure. usage: /usr/bin/python3 test_moe_selfcheck.py
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
import test_reference_selfcheck as selfcheck  # noqa: E402

# Three blocks, the middle one dense (moe_every 2); 3 experts of width 6, k 2, a shared expert,
# capacity 1.0 (drops), the aux and z coefficients large enough to matter in the gradients.
MOE = dict(selfcheck.LLAMA, layers=3, experts=3, experts_per_token=2, moe_every=2, shared_experts=1,
           expert_hidden=6, capacity_factor=1.0, aux_loss_coef=0.1, z_loss_coef=0.05)
CHECKS = []


def check(fn):
    CHECKS.append(fn)
    return fn


def tiny_moe(seed=1, **over):
    return g.random_init(g.build_model({"model": {"arch": "llama", **MOE, **over}}), seed, std=0.2)


@check
def names_and_shapes():
    C, H, V = MOE["d_model"], MOE["expert_hidden"], MOE["vocab"]
    got = {n: tuple(p.shape) for n, p in tiny_moe().named_parameters()}
    mlp = {n[len("layers.0.mlp."):]: s for n, s in got.items() if n.startswith("layers.0.mlp.")}
    want = {"gate.weight": (3, C)}
    for prefix, width in [(f"experts.{e}.", H) for e in range(3)] + [("shared_experts.", H)]:
        want.update({prefix + "gate_proj.weight": (width, C), prefix + "up_proj.weight": (width, C),
                     prefix + "down_proj.weight": (C, width)})
    assert mlp == want, f"MoE block names/shapes differ: {set(mlp.items()) ^ set(want.items())}"
    assert {n for n in got if n.startswith("layers.2.mlp.")} == {"layers.2." + "mlp." + n for n in want}
    dense = {n: s for n, s in got.items() if n.startswith("layers.1.mlp.")}
    assert dense == {"layers.1.mlp.gate_proj.weight": (MOE["ffn_hidden"], C),
                     "layers.1.mlp.up_proj.weight": (MOE["ffn_hidden"], C),
                     "layers.1.mlp.down_proj.weight": (C, MOE["ffn_hidden"])}, dense
    assert got["embed_tokens.weight"] == (V, C) and [l for l, _ in tiny_moe().moe_blocks()] == [0, 2]
    shared = tiny_moe(shared_experts=2, expert_hidden=0).layers[0].mlp.shared_experts
    assert tuple(shared.up_proj.weight.shape) == (2 * MOE["ffn_hidden"], C), "shared width is S · dense width"


def hand_routing(capacity_factor, normalize_gates):
    """4 tokens, 3 experts, k 2, the router the identity so that the logits are the inputs. Every
    token's logits are a permutation of (2, 1, 0): p = (a, b, c) = (e², e, 1) / (e² + e + 1)."""
    moe = llama_torch.MoE(3, 3, 2, 4, 0, capacity_factor, normalize_gates, torch.float64)
    g.random_init(moe, 3, std=0.5)
    with torch.no_grad():
        moe.gate.weight.copy_(torch.eye(3, dtype=torch.float64))
    x = torch.tensor([[2., 1., 0.], [1., 2., 0.], [0., 2., 1.], [2., 0., 1.]], dtype=torch.float64)
    return moe, x, moe(x.view(1, 4, 3)).view(4, 3)


@check
def routing_by_hand():
    S = math.e ** 2 + math.e + 1
    a, b, c = math.e ** 2 / S, math.e / S, 1 / S
    # Choices (first, second): t0 (0, 1), t1 (1, 0), t2 (1, 2), t3 (0, 2). Capacity ⌈0.75·4·2/3⌉ = 2.
    # First choices first: e0 takes t0, t3; e1 takes t1, t2; then the second choices t0→e1 and
    # t1→e0 find their experts full and drop, t2→e2 and t3→e2 are kept. (Token order alone would
    # keep t0→e1 and drop t2's first choice.)
    for normalize in (True, False):
        moe, x, y = hand_routing(0.75, normalize)
        E = moe.experts
        first, second = (a / (a + b), b / (a + b)) if normalize else (a, b)
        want = torch.stack([first * E[0](x[0]), first * E[1](x[1]), first * E[1](x[2]) + second * E[2](x[2]),
                            first * E[0](x[3]) + second * E[2](x[3])])
        assert torch.allclose(y, want, rtol=1e-13, atol=1e-15), f"normalize {normalize}: {y} vs {want}"
    r = moe.router
    assert r.routed.tolist() == [3, 3, 2] and r.kept.tolist() == [2, 2, 2], (r.routed, r.kept)
    # f = (3, 3, 2)/8; P = ((2a+b+c)/4, (2a+b+c)/4, (2b+2c)/4); aux = 3·Σ f·P = 3(12a + 10b + 10c)/32.
    aux, z = 3 * (12 * a + 10 * b + 10 * c) / 32, math.log(S) ** 2
    assert abs(r.aux.item() - aux) < 1e-14 and abs(r.z.item() - z) < 1e-14, (r.aux, aux, r.z, z)
    # No capacity: every assignment kept, the aux loss unchanged (it counts before capacity).
    moe, x, y = hand_routing(0.0, True)
    assert moe.router.kept.tolist() == [3, 3, 2] and abs(moe.router.aux.item() - aux) < 1e-14
    want_t0 = (a * moe.experts[0](x[0]) + b * moe.experts[1](x[0])) / (a + b)
    assert torch.allclose(y[0], want_t0, rtol=1e-13, atol=1e-15)


@check
def ties_go_to_the_lower_index():
    p = torch.tensor([[0.2, 0.4, 0.4], [1 / 3, 1 / 3, 1 / 3], [0.4, 0.2, 0.4], [0.1, 0.1, 0.8]])
    assert llama_torch.top_k(p, 2).tolist() == [[1, 2], [0, 1], [0, 2], [2, 0]]
    assert llama_torch.top_k(p, 1).flatten().tolist() == [1, 0, 0, 2]
    # Rows torch.topk orders otherwise ([4, 3] and [12, 14, 13] with torch 1.13).
    assert llama_torch.top_k(torch.tensor([[0.1, 0.1, 0.1, 0.35, 0.35]]), 2).tolist() == [[3, 4]]
    assert llama_torch.top_k(torch.full((1, 20), 0.05), 3).tolist() == [[0, 1, 2]]


@check
def capacity_rounding():
    cap = llama_torch.expert_capacity
    assert cap(0.0, 48, 2, 5) == 0                      # no limit
    assert cap(1.25, 48, 2, 5) == 24                    # 24 exactly
    assert cap(1.0, 10, 1, 3) == 4                      # ⌈3.33⌉
    assert cap(0.01, 4, 1, 3) == 1                      # at least one
    assert 1.1 * 25 * 2 / 5 > 11 and cap(1.1, 25, 2, 5) == 11   # 11.000000000000002 is 11


@check
def identical_experts_are_the_dense_mlp():
    """E copies of the dense SwiGLU, every token to all E (k = E), nothing dropped: the gates sum to
    one, normalised or not, so the MoE block is the dense block."""
    dense = selfcheck.tiny_llama()
    x, y = selfcheck.batch(2)
    want = dense(x, y).item()
    for normalize in (True, False):
        moe = g.build_model({"model": {"arch": "llama", **selfcheck.LLAMA, "experts": 3, "experts_per_token": 3,
                                       "normalize_gates": normalize}})
        g.random_init(moe, 5, std=0.2)                       # the routers: anything
        mine = dict(moe.named_parameters())
        with torch.no_grad():
            for name, p in dense.named_parameters():
                copies = [name.replace(".mlp.", f".mlp.experts.{e}.") for e in range(3)] if ".mlp." in name else [name]
                for copy in copies:
                    mine[copy].copy_(p)
        got = moe(x, y).item()
        assert abs(got - want) < 1e-13 * abs(want), f"normalize {normalize}: {got!r} vs dense {want!r}"
        assert all(m.router.kept.tolist() == [x.numel()] * 3 for _, m in moe.moe_blocks())


@check
def finite_differences():
    """The objective's gradient (cross-entropy + aux and z terms) with a shared expert, drops, gates
    raw and normalised."""
    for normalize in (True, False):
        model = tiny_moe(normalize_gates=normalize)
        selfcheck.check_finite_differences(model)
        assert any((m.router.kept < m.router.routed).any() for _, m in model.moe_blocks()), "nothing dropped"


@check
def training_objective():
    """One step of g.train with 2 micro-batches: its gradient norm and aux/z records against a
    loop written here from usage.md's objective."""
    cfg = selfcheck.small_cfg({("train", "global_batch"): 4, ("train", "micro_batch"): 2, ("train", "steps"): 1})
    cfg["model"].update(arch="llama", **MOE)
    tokens = torch.randint(0, MOE["vocab"], (200,), generator=torch.Generator().manual_seed(5)).numpy()
    hist = g.train(tiny_moe(), tokens, cfg)
    probe = tiny_moe()
    x, y = g.step_windows(tokens, 0, 4, cfg["model"]["seq_len"])
    aux = z = 0.0
    for rows in (slice(0, 2), slice(2, 4)):
        loss = probe(x[rows], y[rows])
        routers = [m.router for _, m in probe.moe_blocks()]
        (0.5 * (loss + 0.1 * sum(r.aux for r in routers) + 0.05 * sum(r.z for r in routers))).backward()
        aux += 0.5 * sum(r.aux.item() for r in routers)
        z += 0.5 * sum(r.z.item() for r in routers)
    norm = math.sqrt(sum((p.grad ** 2).sum().item() for p in probe.parameters()))
    assert abs(hist["grad_norm"][0] - norm) < 1e-12 * norm, (hist["grad_norm"][0], norm)
    assert abs(hist["moe_aux"][0] - aux) < 1e-14 and abs(hist["moe_z"][0] - z) < 1e-14


@check
def make_reference_layout():
    keys = dict(experts=5, experts_per_token=2, moe_every=2, shared_experts=1, expert_hidden=8, capacity_factor=1.0,
                normalize_gates=False, aux_loss_coef=0.1, z_loss_coef=0.02)
    with tempfile.TemporaryDirectory() as d:
        ref = os.path.join(d, "ref.h5")
        make_reference.make_reference(ref, 3, 2, 16, 13, 6, 2, seed=3, dtype="float64", std=0.2, arch="llama",
                                      expect_drops=True, ffn_hidden=10, **keys)
        with h5py.File(ref) as f:
            assert {k: f.attrs[k] for k in keys} == {**keys, "normalize_gates": 0}
            model = g.load_weights(g.build_model({"model": {"arch": "llama", "layers": 3, "heads": 2, "d_model": 16,
                                                            "vocab": 13, "ffn_hidden": 10, **keys}}), ref)
            x, y = (torch.from_numpy(f[k][()].astype(np.int64)) for k in ("inputs", "targets"))
            ce = model(x, y)
            routers = [m.router for _, m in model.moe_blocks()]
            (ce + 0.1 * sum(r.aux for r in routers) + 0.02 * sum(r.z for r in routers)).backward()
            assert abs(ce.item() - f["expected/loss"][()]) < 1e-13, "expected/loss is the cross-entropy alone"
            assert f["expected/moe/blocks"][()].tolist() == [0, 2]
            assert np.allclose(f["expected/moe/aux"][()], [r.aux.item() for r in routers], rtol=1e-14, atol=0)
            assert np.allclose(f["expected/moe/z"][()], [r.z.item() for r in routers], rtol=1e-14, atol=0)
            routed, kept = f["expected/moe/routed"][()], f["expected/moe/kept"][()]
            assert routed.shape == (2, 5) and (routed.sum(1) == 2 * 12).all() and (kept <= routed).all()
            assert routed.tolist() == [r.routed.tolist() for r in routers]
            assert kept.tolist() == [r.kept.tolist() for r in routers] and (kept < routed).any()
            for n, p in model.named_parameters():
                assert np.allclose(p.grad.numpy(), f[f"expected/grads/{n}"][()], rtol=1e-10, atol=1e-15), n
        try:
            make_reference.make_reference(ref, 1, 2, 16, 13, 6, 2, seed=3, std=0.2, arch="llama", expect_drops=True,
                                          experts=3, capacity_factor=0.0)
        except ValueError as e:
            assert "drops 0" in str(e), e
        else:
            raise AssertionError("--expect_drops yes passed a dropless case")


if __name__ == "__main__":
    torch.set_num_threads(1)
    sys.exit(selfcheck.run(CHECKS))
