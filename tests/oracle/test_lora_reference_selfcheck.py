#!/usr/bin/python3
"""Self-checks of lora_reference.py against things independent of it: the base model's logits
(B = 0), the merged model (random B), central finite differences of the float64 loss, a one-layer
LoRA worked out in numpy with the scaling written by hand, the Kaiming-uniform bound in closed
form, PEFT's tensor names and shapes listed by hand, the safetensors header parsed by hand, and
the refusals. Exits non-zero if any check fails. usage: /usr/bin/python3 test_lora_reference_selfcheck.py
"""
import copy
import json
import math
import os
import struct
import sys
import tempfile

import numpy as np
import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gpt2_torch  # noqa: E402
import hf_reference as hr  # noqa: E402
import lora_reference as lr  # noqa: E402
from test_hf_reference_selfcheck import directional_difference  # noqa: E402
from test_reference_selfcheck import run  # noqa: E402

V, T, R = 23, 6, 3
CASES = {
    "llama": {"vocab_size": V, "hidden_size": 16, "intermediate_size": 12, "num_hidden_layers": 2,
              "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 6, "attention_bias": True},
    "llama_tied": {"vocab_size": V, "hidden_size": 12, "intermediate_size": 10, "num_hidden_layers": 1,
                   "num_attention_heads": 3, "num_key_value_heads": 1, "tie_word_embeddings": True},
    "mixtral": {"vocab_size": V, "hidden_size": 12, "intermediate_size": 8, "num_hidden_layers": 2,
                "num_attention_heads": 2, "num_key_value_heads": 1, "num_local_experts": 3, "num_experts_per_tok": 2},
    "gpt2": {"vocab_size": V, "n_embd": 12, "n_head": 3, "n_layer": 2, "n_positions": T},
}
# Every target each case can take (lm_head on GPT-2 is checked apart: it cannot be merged).
TARGETS = {"llama": lr.LLAMA_TARGETS, "llama_tied": lr.LLAMA_TARGETS, "mixtral": lr.MIXTRAL_TARGETS,
           "gpt2": ("c_attn", "c_proj", "c_fc")}
CHECKS = []


def check(fn):
    CHECKS.append(fn)
    return fn


def base_of(case, seed=1):
    arch = "llama" if case.startswith("llama") else case
    return gpt2_torch.random_init(hr.build_model(hr.make_config(arch, CASES[case])), seed, std=0.2)


def lora_of(case, b_std=0.3, **kw):
    return lr.apply_lora(base_of(case), TARGETS[case], R, kw.pop("alpha", 5.0), seed=kw.pop("seed", 4),
                         b_std=b_std, **kw)


def batch(B=2, seed=2):
    gen = torch.Generator().manual_seed(seed)
    return torch.randint(0, V, (B, T), generator=gen), torch.randint(0, V, (B, T), generator=gen)


@check
def zero_b_is_the_base_model():
    """PEFT's initialisation (B = 0) leaves every logit exactly as the base model's."""
    x, y = batch()
    for case in CASES:
        base = base_of(case)
        wrapped = lr.apply_lora(copy.deepcopy(base), TARGETS[case], R, 7.0, seed=3)
        assert all(torch.count_nonzero(m.lora_A.weight) > 0 and torch.count_nonzero(m.lora_B.weight) == 0
                   for _, m in lr.lora_modules(wrapped)), case
        a = hr.forward_loss(base, x, y)["logits"]
        b = hr.forward_loss(wrapped, x, y)["logits"]
        assert torch.equal(a, b), f"{case}: logits differ by {(a - b).abs().max().item():.3e}"


@check
def merged_equals_adapter_model():
    """With random B, the merged plain model's logits equal the adapter model's (float64, 1e-12),
    and the merged model differs from the base (the adapters do something)."""
    x, y = batch()
    for case in CASES:
        for rslora in (False, True):
            wrapped = lora_of(case, rslora=rslora)
            merged = lr.merge_lora(wrapped)
            assert not any(isinstance(m, lr.LoraLinear) for m in merged.modules())
            a = hr.forward_loss(wrapped, x, y)["logits"]
            b = hr.forward_loss(merged, x, y)["logits"]
            assert (a - b).abs().max().item() < 1e-12, f"{case}: merged differs by {(a - b).abs().max().item():.3e}"
            base = hr.forward_loss(base_of(case), x, y)["logits"]
            assert (a - base).abs().max().item() > 1e-3, case
    merged = lr.merge_lora(lora_of("llama_tied"))
    assert merged.config["tie_word_embeddings"] is False
    assert not torch.equal(merged.lm_head.weight, merged.model.embed_tokens.weight)
    assert torch.equal(merged.model.embed_tokens.weight, base_of("llama_tied").model.embed_tokens.weight)
    gpt2_head = lr.apply_lora(base_of("gpt2"), ["lm_head"], R, 5.0, b_std=0.3)
    try:
        lr.merge_lora(gpt2_head)
    except ValueError as e:
        assert "lm_head" in str(e) and "GPT2LMHeadModel ties" in str(e), str(e)
    else:
        raise AssertionError("merging GPT-2's tied lm_head adapter was not refused")


@check
def adapter_gradients_by_finite_differences():
    """Autograd's A and B gradients against central differences of the float64 loss, one random
    direction per tensor; the base gets no gradient."""
    x, y = batch()
    rng = np.random.default_rng(6)
    worst = 0.0
    for case in list(CASES) + ["gpt2_head"]:
        model = lr.apply_lora(base_of("gpt2"), ["c_attn", "lm_head"], R, 4.0, b_std=0.3, rslora=True) \
            if case == "gpt2_head" else lora_of(case)
        hr.forward_loss(model, x, y)
        for name, p in model.named_parameters():
            if not p.requires_grad:
                assert p.grad is None, f"{case} {name}: a frozen parameter got a gradient"
                continue
            assert ".lora_A." in name or ".lora_B." in name, f"{case}: {name} is trainable"
            d = torch.from_numpy(rng.standard_normal(tuple(p.shape)))
            fd, an = directional_difference(model, p, d, x, y), (p.grad * d).sum().item()
            worst = max(worst, abs(fd - an) / max(abs(an), 1e-4))
            assert abs(fd - an) < 1e-6 * abs(an) + 1e-9, f"{case} {name}: autograd {an:.10g} vs differences {fd:.10g}"
    print(f"  worst finite-difference error (relative, floor 1e-4) {worst:.2e}")


@check
def scaling_by_hand():
    """One nn.Linear (in 5, out 3, bias) and one Conv1D, r 4, alpha 6: s = 6/4 = 1.5, and 6/sqrt(4) = 3
    under rsLoRA; y = W x + b + s B A x computed in numpy."""
    class One(nn.Module):
        def __init__(self):
            super().__init__()
            self.q_proj = nn.Linear(5, 3, dtype=torch.float64)
            self.c_attn = hr.Conv1D(5, 3)

    rng = np.random.default_rng(8)
    x = rng.standard_normal((2, 5))
    for rslora, s in ((False, 1.5), (True, 3.0)):
        one = lr.apply_lora(One(), ["q_proj", "c_attn"], 4, 6, rslora=rslora, seed=1, b_std=1.0)
        with torch.no_grad():
            one.c_attn.base_layer.weight.copy_(torch.from_numpy(rng.standard_normal((5, 3))))
            one.c_attn.base_layer.bias.copy_(torch.from_numpy(rng.standard_normal(3)))
        for name, w_out_in in (("q_proj", lambda m: m.weight.detach().numpy()),
                               ("c_attn", lambda m: m.weight.detach().numpy().T)):
            m = getattr(one, name)
            W, b = w_out_in(m.base_layer), m.base_layer.bias.detach().numpy()
            A, B = m.lora_A.weight.detach().numpy(), m.lora_B.weight.detach().numpy()
            assert A.shape == (4, 5) and B.shape == (3, 4), (name, A.shape, B.shape)
            want = x @ W.T + b + s * (x @ A.T) @ B.T
            got = m(torch.from_numpy(x)).detach().numpy()
            assert np.abs(got - want).max() < 1e-13, f"{name} rslora={rslora}: {np.abs(got - want).max():.3e}"
            delta = s * B @ A
            assert np.abs(m.delta_weight().numpy() -
                          (delta.T if name == "c_attn" else delta)).max() < 1e-13, name


@check
def kaiming_uniform_init():
    """A uniform within sqrt(6/((1+a²)·fan_in)), a = sqrt(5) (= 1/sqrt(fan_in)), filling that range
    (max |A| above 0.9 of it, variance bound²/3 within 10 %), B zero; the same seed the same draw,
    another seed another; dropout 0.1 puts an nn.Dropout on A's input."""
    model = lr.apply_lora(base_of("mixtral"), lr.MIXTRAL_TARGETS, 16, 32.0, dropout=0.1, seed=11)
    values = []
    for name, m in lr.lora_modules(model):
        fan_in = m.lora_A.weight.shape[1]
        bound = math.sqrt(6.0 / ((1.0 + 5.0) * fan_in))
        A = m.lora_A.weight.detach()
        assert A.abs().max().item() <= bound and torch.count_nonzero(m.lora_B.weight) == 0, name
        assert isinstance(m.lora_dropout, nn.Dropout) and m.lora_dropout.p == 0.1, name
        values.append((A / bound).reshape(-1))
    u = torch.cat(values)
    assert u.abs().max().item() > 0.9 and abs(u.var().item() - 1 / 3) < 0.1 / 3, (u.abs().max(), u.var())
    again = lr.apply_lora(base_of("mixtral"), lr.MIXTRAL_TARGETS, 16, 32.0, seed=11)
    other = lr.apply_lora(base_of("mixtral"), lr.MIXTRAL_TARGETS, 16, 32.0, seed=12)
    assert all(torch.equal(a, b) for a, b in zip(lr.adapter_state_dict(model).values(),
                                                 lr.adapter_state_dict(again).values()))
    assert not torch.equal(lr.adapter_state_dict(model)[f"{lr.PREFIX}model.layers.0.self_attn.q_proj.lora_A.weight"],
                           lr.adapter_state_dict(other)[f"{lr.PREFIX}model.layers.0.self_attn.q_proj.lora_A.weight"])


def named(prefix, modules):
    """{PEFT name: shape} of the A and B of {module path: (in, out)}."""
    out = {}
    for path, (n_in, n_out) in modules.items():
        out[f"{prefix}{path}.lora_A.weight"] = (R, n_in)
        out[f"{prefix}{path}.lora_B.weight"] = (n_out, R)
    return out


@check
def peft_names_and_shapes():
    """PEFT's adapter names and shapes, listed by hand; the trainable count is their sum, the rest frozen."""
    P = "base_model.model."
    llama = {"model.layers.0.self_attn.q_proj": (16, 24), "model.layers.0.self_attn.k_proj": (16, 12),
             "model.layers.0.self_attn.v_proj": (16, 12), "model.layers.0.self_attn.o_proj": (24, 16),
             "model.layers.0.mlp.gate_proj": (16, 12), "model.layers.0.mlp.up_proj": (16, 12),
             "model.layers.0.mlp.down_proj": (12, 16)}
    llama.update({k.replace("layers.0", "layers.1"): v for k, v in llama.items()})
    llama["lm_head"] = (16, V)
    gpt2 = {}
    for l in range(2):
        gpt2.update({f"transformer.h.{l}.attn.c_attn": (12, 36), f"transformer.h.{l}.attn.c_proj": (12, 12),
                     f"transformer.h.{l}.mlp.c_fc": (12, 48), f"transformer.h.{l}.mlp.c_proj": (48, 12)})
    mixtral = {}
    for l in range(2):
        p = f"model.layers.{l}.block_sparse_moe."
        mixtral[p + "gate"] = (12, 3)
        for e in range(3):
            mixtral.update({f"{p}experts.{e}.w1": (12, 8), f"{p}experts.{e}.w2": (8, 12),
                            f"{p}experts.{e}.w3": (12, 8)})
    for case, targets, want, fan in (("llama", lr.LLAMA_TARGETS, llama, False), ("gpt2", TARGETS["gpt2"], gpt2, True),
                                     ("mixtral", ["w1", "w2", "w3", "gate"], mixtral, False)):
        model = lr.apply_lora(base_of(case), targets, R, 8.0)
        got = {n: tuple(t.shape) for n, t in lr.adapter_state_dict(model).items()}
        want_named = named(P, want)
        assert got == want_named, f"{case}: {sorted(set(got.items()) ^ set(want_named.items()))}"
        assert lr.adapter_config(model)["fan_in_fan_out"] is fan, case
        trainable, total = lr.trainable_parameters(model)
        base_total = sum(p.numel() for p in base_of(case).parameters())
        assert trainable == sum(R * (i + o) for i, o in want.values()) and total == base_total + trainable, case
        frozen = [n for n, p in model.named_parameters() if p.requires_grad and ".lora_" not in n]
        assert not frozen, f"{case}: base parameters still trainable: {frozen}"
    # A target is a whole last name (or a dotted tail): `gate` is Mixtral's router, never llama's
    # gate_proj, and `proj` matches nothing; `c_proj` took attention's and the MLP's above.
    for part in ("gate", "proj", "_proj", "layers.0.self_attn.q"):
        try:
            lr.apply_lora(base_of("llama"), [part], R, 8.0)
        except ValueError:
            pass
        else:
            raise AssertionError(f"target {part!r} matched a llama module")
    dotted = lr.apply_lora(base_of("llama"), ["layers.1.mlp.up_proj"], R, 8.0)
    assert list(lr.adapter_state_dict(dotted)) == [P + "model.layers.1.mlp.up_proj.lora_A.weight",
                                                   P + "model.layers.1.mlp.up_proj.lora_B.weight"]


@check
def adapter_files_round_trip():
    """adapter_model.safetensors's header parsed by hand (names, F32 shapes, tiled offsets, format pt),
    its tensors bitwise the adapters in float32 (and float64 when asked), adapter_config.json's keys,
    and the adapter read back onto a fresh base giving the same logits."""
    x, y = batch()
    model = lora_of("gpt2")
    with tempfile.TemporaryDirectory() as d:
        cfg, written = lr.write_peft_adapter(model, d, {"base_model_name_or_path": "tiny-gpt2"})
        raw = open(os.path.join(d, "adapter_model.safetensors"), "rb").read()
        (n,) = struct.unpack("<Q", raw[:8])
        header = json.loads(raw[8:8 + n])
        assert header.pop("__metadata__") == {"format": "pt"}
        offset = 0
        for name, t in lr.adapter_state_dict(model).items():
            e = header.pop(name)
            assert e["dtype"] == "F32" and e["shape"] == list(t.shape), name
            assert e["data_offsets"] == [offset, offset + 4 * t.numel()], name
            data = raw[8 + n + offset:8 + n + e["data_offsets"][1]]
            assert data == t.to(torch.float32).numpy().astype("<f4").tobytes(), name
            offset = e["data_offsets"][1]
        assert not header and 8 + n + offset == len(raw)
        on_disk = json.load(open(os.path.join(d, "adapter_config.json")))
        assert on_disk == cfg
        assert {k: on_disk[k] for k in ("r", "lora_alpha", "lora_dropout", "target_modules", "use_rslora",
                                        "fan_in_fan_out", "bias", "task_type", "peft_type",
                                        "base_model_name_or_path")} == \
            {"r": R, "lora_alpha": 5.0, "lora_dropout": 0.0, "target_modules": ["c_attn", "c_fc", "c_proj"],
             "use_rslora": False, "fan_in_fan_out": True, "bias": "none", "task_type": "CAUSAL_LM",
             "peft_type": "LORA", "base_model_name_or_path": "tiny-gpt2"}
        config, tensors = lr.read_peft_adapter(d)
        assert config == cfg and list(tensors) == list(written)
        assert all(tensors[k].dtype == torch.float32 and torch.equal(tensors[k], written[k]) for k in written)

        lr.write_peft_adapter(model, d, dtype=torch.float64)
        _, tensors = lr.read_peft_adapter(d)
        assert all(torch.equal(tensors[k], t) for k, t in lr.adapter_state_dict(model).items())
        loaded = lr.load_peft_adapter(base_of("gpt2"), d)
        a, b = hr.forward_loss(model, x, y)["logits"], hr.forward_loss(loaded, x, y)["logits"]
        assert torch.equal(a, b)


@check
def dropout_on_the_input_of_a():
    """lora_dropout in training mode: base(x) + s·B A dropout(x) with torch's own dropout under the same
    seed; in eval mode none."""
    rng = np.random.default_rng(9)
    model = lr.apply_lora(base_of("llama"), ["q_proj"], R, 6.0, dropout=0.5, seed=2, b_std=1.0)
    m = model.model.layers[0].self_attn.q_proj
    x = torch.from_numpy(rng.standard_normal((4, 16)))
    base = x @ m.base_layer.weight.detach().t() + m.base_layer.bias.detach()
    A, B = m.lora_A.weight.detach(), m.lora_B.weight.detach()
    torch.manual_seed(5)
    got = m(x).detach()
    torch.manual_seed(5)
    want = base + 2.0 * torch.nn.functional.dropout(x, 0.5, training=True) @ A.t() @ B.t()
    assert (got - want).abs().max().item() < 1e-12, (got - want).abs().max().item()
    assert (got - (base + 2.0 * x @ A.t() @ B.t())).abs().max().item() > 1e-3
    model.eval()
    assert (m(x).detach() - (base + 2.0 * x @ A.t() @ B.t())).abs().max().item() < 1e-12


@check
def training_moves_only_the_adapters():
    """Three AdamW steps (gpt2_torch.train) on the adapters: step 1's loss is the forward loss, the
    loss falls, every A and B moves, the base stays bitwise, the optimizer holds moments for A and B only."""
    stream = np.random.default_rng(3).integers(0, V, size=6 * T + 1)
    cfg = hr.train_config(T, train_steps=3, train_global_batch=4, train_micro_batch=2, optim_lr=3e-2,
                          optim_warmup_steps=1)
    for case in ("llama", "mixtral", "gpt2"):
        model = lora_of(case, b_std=0.05)
        base = {n: p.clone() for n, p in lr.base_tensors(model).items()}
        start = {n: t.clone() for n, t in lr.adapter_state_dict(model).items()}
        x, y = gpt2_torch.step_windows(stream, 0, 4, T)
        first = hr.forward_loss(model, x, y)["loss"]
        hist = lr.train_lora(model, stream, cfg)
        assert abs(hist["loss"][0] - first) < 1e-12 and hist["loss"][2] < hist["loss"][0], (case, hist["loss"])
        assert all(torch.equal(t, base[n]) for n, t in lr.base_tensors(model).items()), case
        assert all(not torch.equal(t, start[n]) for n, t in lr.adapter_state_dict(model).items()), case
    leaky = lora_of("llama")
    leaky.model.norm.weight.requires_grad_(True)
    try:
        lr.train_lora(leaky, stream, cfg, steps=1)
    except RuntimeError as e:
        assert "model.norm.weight" in str(e), str(e)
    else:
        raise AssertionError("a trained base tensor went unnoticed")
    opt = gpt2_torch.make_optimizer(model, cfg)
    model(x, y).backward()
    opt.step()
    adapters = [t for _, m in lr.lora_modules(model) for t in (m.lora_A.weight, m.lora_B.weight)]
    assert {id(p) for p in opt.state} == {id(t) for t in adapters}, "moments held for frozen tensors"


@check
def command_line():
    """write, oracle, train and merge through main(): the oracle file holds exactly the direct
    result (adapter gradients under PEFT names), the saved adapter is the trained one, the merged
    directory holds merge_lora's weights rounded to float32."""
    import h5py
    with tempfile.TemporaryDirectory() as d:
        base_dir, adapter, trained = (os.path.join(d, n) for n in ("base", "adapter", "trained"))
        hr.write_model_dir(base_dir, base_of("llama"))
        assert lr.main(["write", "--dir", base_dir, "--out", adapter, "--targets", "q_proj,v_proj,down_proj",
                        "--rank", "2", "--alpha", "4", "--rslora", "--b-std", "0.1", "--dtype", "float64"]) == 0
        tokens = np.random.default_rng(4).integers(0, V, size=(2, T + 1))
        np.save(os.path.join(d, "tokens.npy"), tokens)
        ref = os.path.join(d, "ref.h5")
        assert lr.main(["oracle", "--dir", base_dir, "--adapter", adapter, "--tokens",
                        os.path.join(d, "tokens.npy"), "--out", ref]) == 0
        model = lr.load_peft_adapter(hr.load_hf_dir(base_dir), adapter)
        direct = lr.adapter_result(model, torch.from_numpy(tokens[:, :-1]), torch.from_numpy(tokens[:, 1:]))
        assert len(direct["grads"]) == 2 * 3 * 2
        assert all(n.startswith("base_model.model.model.layers.") for n in direct["grads"])
        with h5py.File(ref) as f:
            assert f["loss"][()] == direct["loss"] and np.array_equal(f["logits"][()], direct["logits"].numpy())
            assert sorted(f["grad"]) == sorted(direct["grads"])
            assert all(np.array_equal(f["grad"][n][()], g.numpy()) for n, g in direct["grads"].items())

        np.save(os.path.join(d, "stream.npy"), np.random.default_rng(5).integers(0, V, size=5 * T + 1))
        sets = ["model.seq_len=6", "train.steps=2", "train.global_batch=2", "train.micro_batch=1", "optim.lr=1e-2"]
        assert lr.main(["train", "--dir", base_dir, "--adapter", adapter, "--data", os.path.join(d, "stream.npy"),
                        "--out", os.path.join(d, "losses.json"), "--quiet", "--save", trained]
                       + sum((["--set", s] for s in sets), [])) == 0
        assert len(json.load(open(os.path.join(d, "losses.json")))["loss"]) == 2
        config, after = lr.read_peft_adapter(trained)
        written_config, before = lr.read_peft_adapter(adapter)
        assert config == written_config and config["base_model_name_or_path"] == base_dir
        assert config["use_rslora"] is True and config["r"] == 2 and set(after) == set(before)
        assert all(not torch.equal(after[n].double(), before[n]) for n in after)

        merged_dir = os.path.join(d, "merged")
        assert lr.main(["merge", "--dir", base_dir, "--adapter", trained, "--out", merged_dir]) == 0
        merged = lr.merge_lora(lr.load_peft_adapter(hr.load_hf_dir(base_dir), trained))
        _, files = hr.read_hf_dir(merged_dir)
        assert set(files) == {n for n, _ in merged.named_parameters()}
        assert all(torch.equal(files[n], p.detach().float()) for n, p in merged.named_parameters())


@check
def refusals():
    """Targets that match nothing name the targets; a target on a non-linear module and a rank 0 are refused."""
    for targets, words in ((["q_prj", "nope"], ["q_prj", "nope"]), (["c_attn"], ["c_attn"]),
                           (["input_layernorm"], ["input_layernorm", "RMSNorm"]), (["mlp"], ["mlp", "MLP"])):
        try:
            lr.apply_lora(base_of("llama"), targets, R, 8.0)
        except ValueError as e:
            assert all(w in str(e) for w in words), str(e)
        else:
            raise AssertionError(f"targets {targets} were accepted")
    try:
        lr.apply_lora(base_of("llama"), ["q_proj"], 0, 8.0)
    except ValueError as e:
        assert "rank" in str(e)
    else:
        raise AssertionError("rank 0 was accepted")


if __name__ == "__main__":
    torch.set_num_threads(1)
    sys.exit(run(CHECKS))
