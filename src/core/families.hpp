// The model families as the code outside their own files sees them: one row each, read by the
// config's names and checks (core/config.cpp), the sizes and their fit checks
// (core/model_sizes.cpp), the grid's checks (parallel/topology.cpp) and plan's model line. What a
// family computes (its tensors, activations, block listings) lives in its files under src/model/;
// share/docs/design.md, How to add a family, says what else a new one writes.
#pragma once

#include <array>
#include <stdexcept>
#include <string_view>

namespace meshtrain {

enum class Arch { gpt2, llama };  // model.arch: the model family

// The MLP of a dense block. gelu: up to 4 · d_model columns, GELU, back down (two matrices).
// swiglu: gate and up to the hidden width (model.ffn_hidden, or the LLaMA rule), SiLU(gate) · up,
// then down (three matrices); mixture-of-experts blocks are SwiGLU experts.
enum class MlpKind { gelu, swiglu };

struct FamilyShape {
  Arch arch;
  std::string_view name;         // model.arch's value
  std::string_view description;  // shown by `--help`
  MlpKind mlp;
  bool biases;             // the linear layers and the norms carry biases (LayerNorm's shift)
  bool learned_positions;  // a position table of seq_len rows; else rotary positions
  bool tied_head;          // the output head is the token embedding (a pipeline's first and last stage hold it)
  // The llama keys apply (model.kv_heads, ffn_hidden, multiple_of, rope_theta, norm_eps and the
  // mixture-of-experts keys): a family without them must not be given any (core/config.cpp).
  bool llama_keys;
  // The largest weights' names, for the messages of the fit checks (core/model_sizes.cpp).
  std::string_view embedding_names;       // the token embedding, and the output head where it is not tied
  std::string_view token_embedding_name;  // the token embedding alone (llama's with model.tie_embeddings)
  std::string_view position_name;         // the position table (learned_positions)
  std::string_view block_prefix;          // "h.*.": a block's tensor names below
  std::string_view qkv_names;
  std::string_view attention_out_name;
  std::string_view mlp_in_names;  // the dense MLP's first product
};

inline constexpr std::array<FamilyShape, 2> families{{
    {Arch::gpt2, "gpt2", "LayerNorm, GELU, learned positions, tied head", MlpKind::gelu, true, true, true, false,
     "wte.weight", "wte.weight", "wpe.weight", "h.*.", "attn.c_attn.weight", "attn.c_proj.weight", "mlp.c_fc.weight"},
    {Arch::llama, "llama", "RMSNorm, SwiGLU, rotary positions, grouped-query attention, untied head", MlpKind::swiglu,
     false, false, false, true, "embed_tokens.weight and lm_head.weight", "embed_tokens.weight", "", "layers.*.",
     "self_attn.q_proj|k_proj|v_proj.weight", "self_attn.o_proj.weight", "mlp.gate_proj|up_proj.weight"},
}};

constexpr const FamilyShape& family_shape(Arch arch) {
  for (const FamilyShape& f : families) {
    if (f.arch == arch) return f;
  }
  throw std::logic_error("a model.arch without a row in core/families.hpp");
}

}  // namespace meshtrain
