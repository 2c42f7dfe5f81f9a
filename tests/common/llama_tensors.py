"""Hugging Face Llama's parameter names and shapes, written from its definition (share/docs/usage.md,
Model families), for the tests that need a llama checkpoint's tensors without meshtrain's layout:
torch Linear layout [out, in], no biases, lm_head untied from embed_tokens.

  embed_tokens.weight                        [V, C]
  layers.{i}.input_layernorm.weight          [C]
  layers.{i}.self_attn.q_proj.weight         [heads·hs, C]
  layers.{i}.self_attn.{k,v}_proj.weight     [kv_heads·hs, C]
  layers.{i}.self_attn.o_proj.weight         [C, heads·hs]
  layers.{i}.post_attention_layernorm.weight [C]
  layers.{i}.mlp.{gate,up}_proj.weight       [H, C]
  layers.{i}.mlp.down_proj.weight            [C, H]
  norm.weight                                [C]
  lm_head.weight                             [V, C]
"""
import h5py
import numpy as np


def hidden_size(m):
    """The SwiGLU width: model.ffn_hidden, or the LLaMA rule (8C/3 rounded up to model.multiple_of)."""
    if int(m.get("ffn_hidden", 0)) > 0:
        return int(m["ffn_hidden"])
    multiple = int(m.get("multiple_of", 256))
    return -(-(8 * int(m["d_model"]) // 3) // multiple) * multiple


def shapes(m):
    """{name: shape} of a llama of model keys m (a dict of model.* values, numbers or text)."""
    C, V, heads = int(m["d_model"]), int(m["vocab"]), int(m["heads"])
    kv = int(m.get("kv_heads", 0)) or heads
    hs, H = C // heads, hidden_size(m)
    out = {"embed_tokens.weight": (V, C)}
    for i in range(int(m["layers"])):
        p = f"layers.{i}."
        out.update({p + "input_layernorm.weight": (C,), p + "self_attn.q_proj.weight": (heads * hs, C),
                    p + "self_attn.k_proj.weight": (kv * hs, C), p + "self_attn.v_proj.weight": (kv * hs, C),
                    p + "self_attn.o_proj.weight": (C, heads * hs), p + "post_attention_layernorm.weight": (C,),
                    p + "mlp.gate_proj.weight": (H, C), p + "mlp.up_proj.weight": (H, C),
                    p + "mlp.down_proj.weight": (C, H)})
    out.update({"norm.weight": (C,), "lm_head.weight": (V, C)})
    return out


def save_random_weights(m, path, seed, std=0.1, small=0.1):
    """An init_weights file: matrices normal(0, std), RMSNorm weights 1 + normal(0, small), so that
    every gradient path (the norm weights' included) carries signal."""
    rng = np.random.default_rng(seed)
    with h5py.File(path, "w") as f:
        group = f.create_group("model")
        for name, shape in shapes(m).items():
            noise = rng.standard_normal(shape)
            values = noise * std if len(shape) >= 2 else 1.0 + noise * small
            group.create_dataset(name, data=values.astype(np.float32))
