// Hugging Face model configurations (config.json) and tensor names, for `meshtrain import` and
// `meshtrain export --format hf` (share/docs/usage.md, Hugging Face models).
//
// Five architectures map onto meshtrain's two families:
//   LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM  → llama (Qwen2: q|k|v biases)
//   MixtralForCausalLM                                      → llama with a mixture of experts in every
//                                                             block: softmax top-k, gates renormalised, no capacity
//   GPT2LMHeadModel                                         → gpt2
// Anything those configurations can say that the families cannot compute (an active sliding window,
// biases elsewhere than q|k|v, another activation or rope scaling, ...) is refused, naming the key.
#pragma once

#include "core/config.hpp"

#include <nlohmann/json_fwd.hpp>

#include <optional>
#include <string>
#include <string_view>

namespace meshtrain::hf {

enum class Architecture { llama, mistral, qwen2, mixtral, gpt2 };

// "LlamaForCausalLM", ... as config.json's `architectures` names it; and its `model_type` ("llama").
std::string_view architecture_name(Architecture a);
std::string_view model_type(Architecture a);

struct ImportedConfig {
  Architecture architecture;
  ModelConfig model;  // every [model] key; seq_len as chosen
  int max_positions;  // max_position_embeddings (gpt2: n_positions)
  std::optional<int> bos_token_id, eos_token_id;
};

// Reads the config.json at `path`. `seq_len`: the model.seq_len to train at (0: max_positions, at most
// 4096); gpt2's position table then keeps its first seq_len rows. InputError naming the file and the
// key for a missing or mistyped key, an architecture not above, or a value the family cannot compute.
ImportedConfig read_config(const std::string& path, int seq_len);

// The architecture an export writes for `m`: gpt2 → GPT2LMHeadModel; llama with experts → Mixtral,
// with q|k|v biases → Qwen2, else Llama. InputError naming the key when no Hugging Face model computes
// what `m` does (shared experts, capacity, MoE only every few blocks, raw gates, z-loss, a head_dim
// with heads not dividing it, ...).
Architecture export_architecture(const ModelConfig& m);

// config.json for `m` as transformers writes it: architectures, model_type, torch_dtype ("float32",
// "bfloat16") and every field read_config reads, so that read_config(config_json(m)) gives m back
// (seq_len as max_position_embeddings).
nlohmann::json config_json(const ModelConfig& m, std::string_view torch_dtype,
                           std::optional<int> bos_token_id = std::nullopt,
                           std::optional<int> eos_token_id = std::nullopt);

// The Hugging Face name of meshtrain's tensor `name` (its checkpoint name) in architecture `a`.
std::string hf_tensor_name(Architecture a, std::string_view name);
// meshtrain's name of the Hugging Face tensor `hf_name`; nullopt for the buffers some files carry that
// are no parameter (rotary_emb.inv_freq, GPT-2's attn.bias and attn.masked_bias masks). A name of no
// tensor in meshtrain's naming comes back as it would map; the caller checks it against the model.
std::optional<std::string> meshtrain_tensor_name(Architecture a, std::string_view hf_name);

}  // namespace meshtrain::hf
