#include "hf/hf_config.hpp"

#include "core/errors.hpp"
#include "core/regular_file.hpp"
#include "io/json_input.hpp"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <array>
#include <cmath>
#include <fstream>
#include <sstream>

namespace meshtrain::hf {

namespace {

using json = nlohmann::json;

struct ArchitectureNames {
  Architecture architecture;
  std::string_view name, model_type;
};

constexpr std::array<ArchitectureNames, 5> architectures{{
    {Architecture::llama, "LlamaForCausalLM", "llama"},
    {Architecture::mistral, "MistralForCausalLM", "mistral"},
    {Architecture::qwen2, "Qwen2ForCausalLM", "qwen2"},
    {Architecture::mixtral, "MixtralForCausalLM", "mixtral"},
    {Architecture::gpt2, "GPT2LMHeadModel", "gpt2"},
}};

const ArchitectureNames& names_of(Architecture a) {
  for (const auto& n : architectures) {
    if (n.architecture == a) return n;
  }
  throw std::logic_error("an hf::Architecture without names");
}

std::string known_architectures() {
  std::string out;
  for (const auto& n : architectures) out += (out.empty() ? "" : ", ") + std::string(n.name);
  return out;
}

// config.json's keys, each read with the file and the key named in every message. A key that is
// absent or null takes the fallback where there is one: transformers' own default for that class.
class Fields {
 public:
  Fields(const json& j, const std::string& path) : j_(j), path_(path) {}

  bool has(const char* key) const { return j_.contains(key) && !j_.at(key).is_null(); }

  template <class T>
  T required(const char* key) const {
    if (!has(key)) input_error("{}: config.json has no '{}', which a {} model needs", path_, key, kind());
    return value<T>(key);
  }
  template <class T>
  T optional(const char* key, T fallback) const {
    return has(key) ? value<T>(key) : fallback;
  }
  // Refuses `key` unless it is absent or equals `supported` (why: what meshtrain computes instead).
  template <class T>
  void require(const char* key, T supported, const char* why) const {
    if (has(key) && value<T>(key) != supported) {
      input_error("{}: config.json has {} = {}, which meshtrain cannot compute ({}); supported: {}", path_, key,
                  io::json_excerpt(j_.at(key)), why, json(supported).dump());
    }
  }
  const json& at(const char* key) const { return j_.at(key); }
  const std::string& path() const { return path_; }
  void set_kind(std::string_view kind) { kind_ = kind; }

 private:
  std::string_view kind() const { return kind_.empty() ? std::string_view("Hugging Face") : kind_; }

  template <class T>
  T value(const char* key) const {
    const json& v = j_.at(key);
    if constexpr (std::is_same_v<T, bool>) {
      if (!v.is_boolean()) mistyped(key, "true or false");
      return v.get<bool>();
    } else if constexpr (std::is_integral_v<T>) {
      if (!v.is_number_integer()) mistyped(key, "an integer");
      const auto n = v.get<std::int64_t>();
      if (n < 0 || n > std::int64_t(std::numeric_limits<int>::max())) mistyped(key, "an integer in 0..2^31-1");
      return T(n);
    } else if constexpr (std::is_floating_point_v<T>) {
      if (!v.is_number()) mistyped(key, "a number");
      const double x = v.get<double>();
      if (!std::isfinite(x)) mistyped(key, "a finite number");
      return T(x);
    } else {
      if (!v.is_string()) mistyped(key, "a string");
      return v.get<std::string>();
    }
  }
  [[noreturn]] void mistyped(const char* key, const char* want) const {
    input_error("{}: config.json's '{}' is {}, not {}", path_, key, io::json_excerpt(j_.at(key)), want);
  }

  const json& j_;
  std::string path_;
  std::string_view kind_;
};

json parse_file(const std::string& path) {
  const std::string text = read_regular_file(path, "the model's config.json");
  json j;
  try {
    j = io::parse_json_input(text, io::DuplicateKeys::refused);
  } catch (const io::JsonInputError& e) {
    input_error("{}: config.json is not valid JSON ({})", path, e.located());
  }
  if (!j.is_object()) input_error("{}: config.json is not a JSON object", path);
  return j;
}

Architecture architecture_in(const Fields& f) {
  if (!f.has("architectures") || !f.at("architectures").is_array() || f.at("architectures").size() != 1 ||
      !f.at("architectures")[0].is_string()) {
    input_error("{}: config.json's 'architectures' must list one architecture name; meshtrain imports {}", f.path(),
                known_architectures());
  }
  const std::string name = f.at("architectures")[0].get<std::string>();
  for (const auto& n : architectures) {
    if (n.name == name) return n.architecture;
  }
  input_error("{}: architecture '{}' is not one meshtrain imports; it imports {}", f.path(), name,
              known_architectures());
}

// rope_scaling: absent, null, or {"rope_type" (older files: "type"): "default" | "linear" | "llama3", ...}.
void read_rope_scaling(const Fields& f, ModelConfig& m) {
  if (!f.has("rope_scaling")) return;
  const json& r = f.at("rope_scaling");
  const std::string where = f.path() + ": config.json's rope_scaling";
  if (!r.is_object()) input_error("{} is {}, not an object or null", where, io::json_excerpt(r));
  const Fields scaling(r, f.path());
  const char* type_key = scaling.has("rope_type") ? "rope_type" : "type";
  const std::string type = scaling.required<std::string>(type_key);
  if (type == "default") return;
  if (type != "linear" && type != "llama3") {
    input_error("{}: {} '{}' is not supported; meshtrain computes linear and llama3 (model.rope_scaling)", where,
                type_key, type);
  }
  for (const auto& [key, value] : r.items()) {
    static constexpr std::array<std::string_view, 6> known{
        "rope_type", "type", "factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings"};
    if (std::find(known.begin(), known.end(), key) == known.end()) {
      input_error("{}: key '{}' = {} is not one meshtrain computes for {} scaling", where, key, io::json_excerpt(value),
                  type);
    }
  }
  m.rope_factor = scaling.required<double>("factor");
  if (type == "linear") {
    m.rope_scaling = RopeScaling::linear;
    return;
  }
  m.rope_scaling = RopeScaling::llama3;
  m.rope_low_freq_factor = scaling.required<double>("low_freq_factor");
  m.rope_high_freq_factor = scaling.required<double>("high_freq_factor");
  m.rope_original_max_position = scaling.required<int>("original_max_position_embeddings");
}

// Mistral's and Mixtral's sliding window limits attention to the last `sliding_window` tokens; at a
// seq_len no longer than it, every token is in the window and attention is plain causal.
void require_window_covers(const Fields& f, int seq_len) {
  if (!f.has("sliding_window")) return;
  const int window = f.required<int>("sliding_window");
  if (window < seq_len) {
    input_error(
        "{}: config.json has sliding_window = {} and the run's seq_len is {}: meshtrain's attention is plain causal, "
        "which equals the sliding window only when seq_len <= sliding_window (import with --seq-len {} or less)",
        f.path(), window, seq_len, window);
  }
}

int chosen_seq_len(int seq_len, int max_positions) { return seq_len > 0 ? seq_len : std::min(max_positions, 4096); }

ImportedConfig read_llama_like(const Fields& f, Architecture a, int seq_len) {
  ImportedConfig c{a, {}, 0, {}, {}};
  ModelConfig& m = c.model;
  m.arch = Arch::llama;
  m.vocab = f.required<int>("vocab_size");
  m.d_model = f.required<int>("hidden_size");
  m.ffn_hidden = f.required<int>("intermediate_size");
  m.layers = f.required<int>("num_hidden_layers");
  m.heads = f.required<int>("num_attention_heads");
  if (m.heads == 0) input_error("{}: config.json's num_attention_heads is 0", f.path());
  m.kv_heads = f.optional<int>("num_key_value_heads", m.heads);
  const int head_dim = f.optional<int>("head_dim", m.d_model / m.heads);
  m.head_dim = m.d_model % m.heads == 0 && head_dim == m.d_model / m.heads ? 0 : head_dim;
  m.norm_eps = f.required<double>("rms_norm_eps");
  m.rope_theta = f.optional<double>("rope_theta", 1e4);
  m.tie_embeddings = f.optional<bool>("tie_word_embeddings", false);
  read_rope_scaling(f, m);
  f.require<std::string>("hidden_act", "silu", "SwiGLU is silu(gate) · up");
  c.max_positions = f.required<int>("max_position_embeddings");
  m.seq_len = chosen_seq_len(seq_len, c.max_positions);
  switch (a) {
    case Architecture::llama:
      f.require<bool>("attention_bias", false, "model.qkv_bias biases q, k and v but not o_proj");
      f.require<bool>("mlp_bias", false, "the SwiGLU has no biases");
      break;
    case Architecture::qwen2:
      m.qkv_bias = true;
      f.require<bool>("use_sliding_window", false, "attention is plain causal");
      break;
    case Architecture::mistral: require_window_covers(f, m.seq_len); break;
    case Architecture::mixtral:
      require_window_covers(f, m.seq_len);
      m.experts = f.required<int>("num_local_experts");
      m.experts_per_token = f.required<int>("num_experts_per_tok");
      f.require<double>("router_jitter_noise", 0.0, "the router adds no noise");
      // transformers adds router_aux_loss_coef · its load-balancing loss only with output_router_logits;
      // its loss sums the top-k fractions over the k choices, k times meshtrain's (usage.md, Mixture of experts).
      m.aux_loss_coef = f.optional<bool>("output_router_logits", false)
                            ? f.required<double>("router_aux_loss_coef") * m.experts_per_token
                            : 0.0;
      break;
    case Architecture::gpt2: break;
  }
  return c;
}

ImportedConfig read_gpt2(const Fields& f, int seq_len) {
  ImportedConfig c{Architecture::gpt2, {}, 0, {}, {}};
  ModelConfig& m = c.model;
  m.arch = Arch::gpt2;
  m.vocab = f.required<int>("vocab_size");
  m.d_model = f.required<int>("n_embd");
  m.heads = f.required<int>("n_head");
  m.layers = f.required<int>("n_layer");
  c.max_positions = f.required<int>("n_positions");
  m.seq_len = chosen_seq_len(seq_len, c.max_positions);
  if (m.seq_len > c.max_positions) {
    input_error("{}: seq_len {} is longer than the model's position table (n_positions = {})", f.path(), m.seq_len,
                c.max_positions);
  }
  f.require<double>("layer_norm_epsilon", 1e-5, "gpt2's LayerNorm epsilon is 1e-5");
  f.require<std::string>("activation_function", "gelu_new", "gpt2's MLP is GELU's tanh approximation");
  if (f.has("n_inner") && f.required<int>("n_inner") != 4 * m.d_model) {
    input_error("{}: config.json has n_inner = {}; meshtrain's gpt2 MLP is 4 x n_embd = {} wide", f.path(),
                f.required<int>("n_inner"), 4 * m.d_model);
  }
  f.require<bool>("tie_word_embeddings", true, "gpt2's head is wte");
  f.require<bool>("scale_attn_weights", true, "attention scores are scaled by 1/sqrt(head size)");
  f.require<bool>("scale_attn_by_inverse_layer_idx", false, "no per-layer attention scaling");
  return c;
}

}  // namespace

std::string_view architecture_name(Architecture a) { return names_of(a).name; }
std::string_view model_type(Architecture a) { return names_of(a).model_type; }

ImportedConfig read_config(const std::string& path, int seq_len) {
  const json j = parse_file(path);
  Fields f(j, path);
  const Architecture a = architecture_in(f);
  f.set_kind(architecture_name(a));
  ImportedConfig c = a == Architecture::gpt2 ? read_gpt2(f, seq_len) : read_llama_like(f, a, seq_len);
  if (f.has("bos_token_id") && f.at("bos_token_id").is_number_integer())
    c.bos_token_id = f.required<int>("bos_token_id");
  if (f.has("eos_token_id") && f.at("eos_token_id").is_number_integer())
    c.eos_token_id = f.required<int>("eos_token_id");
  return c;
}

Architecture export_architecture(const ModelConfig& m) {
  if (m.arch == Arch::gpt2) return Architecture::gpt2;
  if (m.experts == 0) return m.qkv_bias ? Architecture::qwen2 : Architecture::llama;
  const ModelConfig d;
  auto refuse_unless = [&](bool ok, const char* key, const std::string& value) {
    if (!ok) {
      input_error(
          "{} = {}: no Hugging Face architecture computes this mixture of experts (Mixtral's: routed experts "
          "in every block, no shared experts, no capacity, renormalised gates, no z-loss, no q|k|v biases)",
          key, value);
    }
  };
  refuse_unless(m.moe_every == 1, "model.moe_every", std::to_string(m.moe_every));
  refuse_unless(m.shared_experts == 0, "model.shared_experts", std::to_string(m.shared_experts));
  refuse_unless(m.capacity_factor == 0, "model.capacity_factor", fmt::format("{}", m.capacity_factor));
  refuse_unless(m.normalize_gates, "model.normalize_gates", "false");
  refuse_unless(m.z_loss_coef == 0, "model.z_loss_coef", fmt::format("{}", m.z_loss_coef));
  refuse_unless(!m.qkv_bias, "model.qkv_bias", "true");
  return Architecture::mixtral;
}

nlohmann::json config_json(const ModelConfig& m, std::string_view torch_dtype, std::optional<int> bos_token_id,
                           std::optional<int> eos_token_id) {
  const Architecture a = export_architecture(m);
  json j;
  j["architectures"] = json::array({std::string(architecture_name(a))});
  j["model_type"] = std::string(model_type(a));
  j["torch_dtype"] = std::string(torch_dtype);
  j["vocab_size"] = m.vocab;
  j["initializer_range"] = 0.02;
  j["bos_token_id"] = bos_token_id ? json(*bos_token_id) : json(nullptr);
  j["eos_token_id"] = eos_token_id ? json(*eos_token_id) : json(nullptr);
  if (a == Architecture::gpt2) {
    j["n_embd"] = m.d_model;
    j["n_head"] = m.heads;
    j["n_layer"] = m.layers;
    j["n_positions"] = m.seq_len;
    j["n_ctx"] = m.seq_len;
    j["n_inner"] = nullptr;
    j["activation_function"] = "gelu_new";
    j["layer_norm_epsilon"] = 1e-5;
    j["tie_word_embeddings"] = true;
    j["scale_attn_weights"] = true;
    j["scale_attn_by_inverse_layer_idx"] = false;
    // meshtrain trains without dropout; transformers' defaults (0.1) would add it to a further training there.
    for (const char* key : {"resid_pdrop", "embd_pdrop", "attn_pdrop"}) j[key] = 0.0;
    return j;
  }
  j["hidden_size"] = m.d_model;
  j["intermediate_size"] = m.experts > 0 ? m.expert_hidden_size() : m.mlp_hidden();
  j["num_hidden_layers"] = m.layers;
  j["num_attention_heads"] = m.heads;
  j["num_key_value_heads"] = m.kv_head_count();
  j["head_dim"] = m.head_size();
  j["rms_norm_eps"] = m.norm_eps;
  j["rope_theta"] = m.rope_theta;
  j["max_position_embeddings"] = m.seq_len;
  j["tie_word_embeddings"] = m.tie_embeddings;
  j["hidden_act"] = "silu";
  j["attention_dropout"] = 0.0;
  j["use_cache"] = true;
  if (m.rope_scaling == RopeScaling::none) {
    j["rope_scaling"] = nullptr;
  } else if (m.rope_scaling == RopeScaling::linear) {
    j["rope_scaling"] = {{"rope_type", "linear"}, {"factor", m.rope_factor}};
  } else {
    j["rope_scaling"] = {{"rope_type", "llama3"},
                         {"factor", m.rope_factor},
                         {"low_freq_factor", m.rope_low_freq_factor},
                         {"high_freq_factor", m.rope_high_freq_factor},
                         {"original_max_position_embeddings", m.rope_original_max_position}};
  }
  switch (a) {
    case Architecture::llama:
      j["attention_bias"] = false;
      j["mlp_bias"] = false;
      j["pretraining_tp"] = 1;
      break;
    case Architecture::qwen2:
      j["use_sliding_window"] = false;
      j["sliding_window"] = nullptr;
      j["max_window_layers"] = m.layers;
      break;
    case Architecture::mixtral:
      j["num_local_experts"] = m.experts;
      j["num_experts_per_tok"] = m.experts_per_token;
      j["output_router_logits"] = m.aux_loss_coef > 0;
      j["router_aux_loss_coef"] = m.aux_loss_coef / m.experts_per_token;
      j["router_jitter_noise"] = 0.0;
      j["sliding_window"] = nullptr;
      break;
    case Architecture::mistral:
    case Architecture::gpt2: break;
  }
  return j;
}

// Hugging Face's names: the llama-like models prefix meshtrain's (its checkpoint names are theirs
// without `model.`) but for lm_head; Mixtral's experts are block_sparse_moe's w1 (gate), w3 (up) and
// w2 (down); GPT-2's are under `transformer.` (files saved from GPT2Model have none).
std::string hf_tensor_name(Architecture a, std::string_view name) {
  const std::string n(name);
  if (a == Architecture::gpt2) return "transformer." + n;
  if (n == "lm_head.weight") return n;
  if (a == Architecture::mixtral) {
    static constexpr std::array<std::pair<std::string_view, std::string_view>, 4> parts{
        {{".mlp.gate.weight", ".block_sparse_moe.gate.weight"},
         {".gate_proj.weight", ".w1.weight"},
         {".up_proj.weight", ".w3.weight"},
         {".down_proj.weight", ".w2.weight"}}};
    std::string out = n;
    const std::size_t experts = out.find(".mlp.experts.");
    if (experts != std::string::npos) {
      out.replace(experts, 13, ".block_sparse_moe.experts.");
      for (const auto& [ours, theirs] : parts) {
        if (out.ends_with(ours)) return "model." + out.substr(0, out.size() - ours.size()) + std::string(theirs);
      }
    } else if (out.ends_with(parts[0].first)) {
      return "model." + out.substr(0, out.size() - parts[0].first.size()) + std::string(parts[0].second);
    }
  }
  return "model." + n;
}

std::optional<std::string> meshtrain_tensor_name(Architecture a, std::string_view hf_name) {
  std::string n(hf_name);
  if (n.ends_with("rotary_emb.inv_freq") ||
      (a == Architecture::gpt2 && (n.ends_with(".attn.bias") || n.ends_with(".attn.masked_bias")))) {
    return std::nullopt;
  }
  if (a == Architecture::gpt2) {
    if (n.starts_with("transformer.")) n.erase(0, 12);
    return n;
  }
  if (n == "lm_head.weight") return n;
  if (n.starts_with("model.")) n.erase(0, 6);
  if (a == Architecture::mixtral) {
    const std::size_t moe = n.find(".block_sparse_moe.");
    if (moe != std::string::npos) {
      n.replace(moe, 18, ".mlp.");
      static constexpr std::array<std::pair<std::string_view, std::string_view>, 3> parts{
          {{".w1.weight", ".gate_proj.weight"},
           {".w3.weight", ".up_proj.weight"},
           {".w2.weight", ".down_proj.weight"}}};
      for (const auto& [theirs, ours] : parts) {
        if (n.ends_with(theirs) && n.find(".mlp.experts.") != std::string::npos) {
          return n.substr(0, n.size() - theirs.size()) + std::string(ours);
        }
      }
    }
  }
  return n;
}

}  // namespace meshtrain::hf
