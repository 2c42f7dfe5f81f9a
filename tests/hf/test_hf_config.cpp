// Hugging Face config.json and tensor names (src/hf/hf_config.hpp). The configurations are published
// models' own fields, written out by hand from their model cards' config.json (Llama 3.2 1B, Qwen2.5
// 0.5B, Mistral 7B v0.1, Mixtral 8x7B, GPT-2), so what they mean is independent of the reader.
#include "core/errors.hpp"
#include "hf/hf_config.hpp"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cstdio>
#include <filesystem>
#include <fstream>

namespace meshtrain::hf {
namespace {

using json = nlohmann::json;

const json llama32_1b = json::parse(R"({
  "architectures": ["LlamaForCausalLM"], "model_type": "llama", "attention_bias": false, "attention_dropout": 0.0,
  "bos_token_id": 128000, "eos_token_id": 128001, "head_dim": 64, "hidden_act": "silu", "hidden_size": 2048,
  "initializer_range": 0.02, "intermediate_size": 8192, "max_position_embeddings": 131072, "mlp_bias": false,
  "num_attention_heads": 32, "num_hidden_layers": 16, "num_key_value_heads": 8, "pretraining_tp": 1,
  "rms_norm_eps": 1e-05, "rope_scaling": {"factor": 32.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
  "original_max_position_embeddings": 8192, "rope_type": "llama3"}, "rope_theta": 500000.0,
  "tie_word_embeddings": true, "torch_dtype": "bfloat16", "use_cache": true, "vocab_size": 128256})");

const json qwen25_05b = json::parse(R"({
  "architectures": ["Qwen2ForCausalLM"], "attention_dropout": 0.0, "bos_token_id": 151643, "eos_token_id": 151643,
  "hidden_act": "silu", "hidden_size": 896, "initializer_range": 0.02, "intermediate_size": 4864,
  "max_position_embeddings": 32768, "max_window_layers": 24, "model_type": "qwen2", "num_attention_heads": 14,
  "num_hidden_layers": 24, "num_key_value_heads": 2, "rms_norm_eps": 1e-06, "rope_theta": 1000000.0,
  "sliding_window": 32768, "tie_word_embeddings": true, "torch_dtype": "bfloat16", "use_cache": true,
  "use_sliding_window": false, "vocab_size": 151936})");

const json mistral_7b_v01 = json::parse(R"({
  "architectures": ["MistralForCausalLM"], "bos_token_id": 1, "eos_token_id": 2, "hidden_act": "silu",
  "hidden_size": 4096, "initializer_range": 0.02, "intermediate_size": 14336, "max_position_embeddings": 32768,
  "model_type": "mistral", "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 8,
  "rms_norm_eps": 1e-05, "rope_theta": 10000.0, "sliding_window": 4096, "tie_word_embeddings": false,
  "torch_dtype": "bfloat16", "use_cache": true, "vocab_size": 32000})");

const json mixtral_8x7b = json::parse(R"({
  "architectures": ["MixtralForCausalLM"], "attention_dropout": 0.0, "bos_token_id": 1, "eos_token_id": 2,
  "hidden_act": "silu", "hidden_size": 4096, "initializer_range": 0.02, "intermediate_size": 14336,
  "max_position_embeddings": 32768, "model_type": "mixtral", "num_attention_heads": 32, "num_experts_per_tok": 2,
  "num_hidden_layers": 32, "num_key_value_heads": 8, "num_local_experts": 8, "output_router_logits": false,
  "rms_norm_eps": 1e-05, "rope_theta": 1000000.0, "router_aux_loss_coef": 0.02, "sliding_window": null,
  "tie_word_embeddings": false, "torch_dtype": "bfloat16", "use_cache": true, "vocab_size": 32000})");

const json gpt2_small = json::parse(R"({
  "activation_function": "gelu_new", "architectures": ["GPT2LMHeadModel"], "attn_pdrop": 0.1, "bos_token_id": 50256,
  "embd_pdrop": 0.1, "eos_token_id": 50256, "initializer_range": 0.02, "layer_norm_epsilon": 1e-05,
  "model_type": "gpt2", "n_ctx": 1024, "n_embd": 768, "n_head": 12, "n_layer": 12, "n_positions": 1024,
  "resid_pdrop": 0.1, "summary_activation": null, "vocab_size": 50257})");

class HfConfig : public ::testing::Test {
 protected:
  std::string write(const json& j, const std::string& name = "config.json") {
    const auto path = (dir_ / name).string();
    std::ofstream(path) << j.dump(2);
    return path;
  }
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() / ("meshtrain_hf_" + std::to_string(::getpid()) + "_" +
                                                     ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  // The message read_config refuses `j` with ("" when it accepts it).
  std::string refusal(const json& j, int seq_len = 0) {
    try {
      read_config(write(j), seq_len);
    } catch (const InputError& e) {
      return e.what();
    }
    return "";
  }
  std::filesystem::path dir_;
};

TEST_F(HfConfig, Llama32OneB) {
  const ImportedConfig c = read_config(write(llama32_1b), 2048);
  const ModelConfig& m = c.model;
  EXPECT_EQ(c.architecture, Architecture::llama);
  EXPECT_EQ(m.arch, Arch::llama);
  EXPECT_EQ(m.vocab, 128256);
  EXPECT_EQ(m.d_model, 2048);
  EXPECT_EQ(m.ffn_hidden, 8192);
  EXPECT_EQ(m.layers, 16);
  EXPECT_EQ(m.heads, 32);
  EXPECT_EQ(m.kv_head_count(), 8);
  EXPECT_EQ(m.head_size(), 64);
  EXPECT_EQ(m.head_dim, 0);  // 2048 / 32: the default, not a key of its own
  EXPECT_EQ(m.rope_theta, 500000.0);
  EXPECT_EQ(m.rope_scaling, RopeScaling::llama3);
  EXPECT_EQ(m.rope_factor, 32.0);
  EXPECT_EQ(m.rope_low_freq_factor, 1.0);
  EXPECT_EQ(m.rope_high_freq_factor, 4.0);
  EXPECT_EQ(m.rope_original_max_position, 8192);
  EXPECT_TRUE(m.tie_embeddings);
  EXPECT_FALSE(m.qkv_bias);
  EXPECT_EQ(m.seq_len, 2048);
  EXPECT_EQ(c.max_positions, 131072);
  EXPECT_EQ(c.bos_token_id, 128000);
  EXPECT_EQ(c.eos_token_id, 128001);
  EXPECT_EQ(read_config(write(llama32_1b), 0).model.seq_len, 4096);  // max_position_embeddings, at most 4096
}

TEST_F(HfConfig, Qwen25HalfB) {
  const ModelConfig m = read_config(write(qwen25_05b), 0).model;
  EXPECT_TRUE(m.qkv_bias);
  EXPECT_TRUE(m.tie_embeddings);
  EXPECT_EQ(m.heads, 14);
  EXPECT_EQ(m.kv_head_count(), 2);
  EXPECT_EQ(m.head_size(), 64);
  EXPECT_EQ(m.norm_eps, 1e-6);
  EXPECT_EQ(m.rope_scaling, RopeScaling::none);
  json windowed = qwen25_05b;
  windowed["use_sliding_window"] = true;
  EXPECT_NE(refusal(windowed).find("use_sliding_window"), std::string::npos) << refusal(windowed);
}

TEST_F(HfConfig, MistralWindowMustCoverTheContext) {
  EXPECT_EQ(read_config(write(mistral_7b_v01), 4096).model.seq_len, 4096);
  const std::string message = refusal(mistral_7b_v01, 8192);
  EXPECT_NE(message.find("sliding_window = 4096"), std::string::npos) << message;
  EXPECT_NE(message.find("config.json"), std::string::npos) << message;
}

TEST_F(HfConfig, MixtralIsTopTwoOfEightRenormalisedWithoutCapacity) {
  const ModelConfig m = read_config(write(mixtral_8x7b), 1024).model;
  EXPECT_EQ(m.experts, 8);
  EXPECT_EQ(m.experts_per_token, 2);
  EXPECT_EQ(m.moe_every, 1);
  EXPECT_EQ(m.expert_hidden_size(), 14336);
  EXPECT_EQ(m.capacity_factor, 0.0);
  EXPECT_TRUE(m.normalize_gates);
  EXPECT_EQ(m.aux_loss_coef, 0.0);  // output_router_logits false: transformers adds no aux loss
  json with_aux = mixtral_8x7b;
  with_aux["output_router_logits"] = true;
  // transformers' loss sums over the k choices: k = 2 times meshtrain's for the same coefficient.
  EXPECT_DOUBLE_EQ(read_config(write(with_aux), 1024).model.aux_loss_coef, 0.04);
}

TEST_F(HfConfig, Gpt2Small) {
  const ImportedConfig c = read_config(write(gpt2_small), 0);
  EXPECT_EQ(c.architecture, Architecture::gpt2);
  EXPECT_EQ(c.model.arch, Arch::gpt2);
  EXPECT_EQ(c.model.d_model, 768);
  EXPECT_EQ(c.model.heads, 12);
  EXPECT_EQ(c.model.layers, 12);
  EXPECT_EQ(c.model.vocab, 50257);
  EXPECT_EQ(c.model.seq_len, 1024);
  EXPECT_NE(refusal(gpt2_small, 2048).find("n_positions = 1024"), std::string::npos);
}

TEST_F(HfConfig, RefusesWhatTheFamiliesCannotCompute) {
  struct Case {
    json config;
    const char* key;
  };
  std::vector<Case> cases;
  auto with = [](json j, const char* key, json value) {
    if (value.is_discarded()) {
      j.erase(key);
    } else {
      j[key] = std::move(value);
    }
    return j;
  };
  cases.push_back({with(llama32_1b, "attention_bias", true), "attention_bias"});
  cases.push_back({with(llama32_1b, "mlp_bias", true), "mlp_bias"});
  cases.push_back({with(llama32_1b, "hidden_act", "gelu"), "hidden_act"});
  cases.push_back({with(llama32_1b, "rope_scaling", {{"rope_type", "yarn"}, {"factor", 4.0}}), "yarn"});
  cases.push_back({with(llama32_1b, "rope_scaling", {{"rope_type", "linear"}, {"factor", 2.0}, {"beta", 1}}), "beta"});
  cases.push_back({with(llama32_1b, "hidden_size", json(json::value_t::discarded)), "hidden_size"});
  cases.push_back({with(llama32_1b, "num_hidden_layers", "16"), "num_hidden_layers"});
  cases.push_back({with(llama32_1b, "architectures", {"GemmaForCausalLM"}), "GemmaForCausalLM"});
  cases.push_back({with(mixtral_8x7b, "router_jitter_noise", 0.1), "router_jitter_noise"});
  cases.push_back({with(gpt2_small, "activation_function", "relu"), "activation_function"});
  cases.push_back({with(gpt2_small, "n_inner", 1000), "n_inner"});
  for (const Case& c : cases) {
    const std::string message = refusal(c.config, 1024);
    EXPECT_NE(message.find(c.key), std::string::npos) << "refusal should name " << c.key << ": '" << message << "'";
    EXPECT_NE(message.find("config.json"), std::string::npos) << message;
  }
  // Broken, nested 100,000 deep in a key meshtrain never reads, and a number beyond a double's range.
  const std::string llama_text = llama32_1b.dump();
  const std::vector<std::pair<std::string, std::string>> broken = {
      {"{\"architectures\": [", "unexpected end of input"},
      {llama_text.substr(0, llama_text.size() - 1) + ", \"extra\": " + std::string(100000, '[') +
           std::string(100000, ']') + "}",
       "nest deeper than 64 levels"},
      {llama_text.substr(0, llama_text.size() - 1) + ", \"extra\": 1e999999}", "number overflow parsing '1e999999'"},
  };
  for (const auto& [text, reason] : broken) {
    std::ofstream(dir_ / "broken.json") << text;
    try {
      read_config((dir_ / "broken.json").string(), 0);
      ADD_FAILURE() << "accepted: " << reason;
    } catch (const InputError& e) {
      const std::string message = e.what();
      for (const std::string& needle : {(dir_ / "broken.json").string(), std::string("not valid JSON"), reason}) {
        EXPECT_NE(message.find(needle), std::string::npos) << message;
      }
      EXPECT_EQ(message.find("json.exception"), std::string::npos) << message;
    }
  }
}

// config.json written for a model reads back as the same model: each published one, and the head_dim,
// linear scaling and aux-loss cases.
TEST_F(HfConfig, WrittenConfigReadsBackTheSameModel) {
  for (const json& published : {llama32_1b, qwen25_05b, mistral_7b_v01, mixtral_8x7b, gpt2_small}) {
    const ImportedConfig first = read_config(write(published), 1024);
    ModelConfig m = first.model;
    std::vector<ModelConfig> models = {m};
    if (m.arch == Arch::llama && m.experts == 0) {
      m.head_dim = 48;
      m.rope_scaling = RopeScaling::linear;
      m.rope_factor = 2.5;
      models.push_back(m);
    }
    for (const ModelConfig& want : models) {
      const json written = config_json(want, "float32", first.bos_token_id, first.eos_token_id);
      const ImportedConfig again = read_config(write(written, "again.json"), 0);
      const ModelConfig& got = again.model;
      EXPECT_EQ(again.max_positions, want.seq_len);
      EXPECT_EQ(got.seq_len, want.seq_len);
      EXPECT_EQ(got.arch, want.arch);
      EXPECT_EQ(got.vocab, want.vocab);
      EXPECT_EQ(got.d_model, want.d_model);
      EXPECT_EQ(got.layers, want.layers);
      EXPECT_EQ(got.heads, want.heads);
      EXPECT_EQ(got.kv_head_count(), want.kv_head_count());
      EXPECT_EQ(got.head_size(), want.head_size());
      EXPECT_EQ(got.mlp_hidden(), want.mlp_hidden());
      EXPECT_EQ(got.norm_eps, want.norm_eps);
      EXPECT_EQ(got.rope_theta, want.rope_theta);
      EXPECT_EQ(got.rope_scaling, want.rope_scaling);
      EXPECT_EQ(got.rope_factor, want.rope_factor);
      EXPECT_EQ(got.tie_embeddings, want.tie_embeddings);
      EXPECT_EQ(got.qkv_bias, want.qkv_bias);
      EXPECT_EQ(got.experts, want.experts);
      EXPECT_EQ(got.aux_loss_coef, want.aux_loss_coef);
      EXPECT_EQ(again.bos_token_id, first.bos_token_id);
      EXPECT_EQ(written["architectures"][0], published["architectures"][0] == "MistralForCausalLM"
                                                 ? json("LlamaForCausalLM")  // the same model without a window
                                                 : published["architectures"][0]);
    }
  }
}

TEST(HfNames, EachArchitecturesOwnNamesBothWays) {
  const std::vector<std::tuple<Architecture, std::string, std::string>> names = {
      {Architecture::llama, "embed_tokens.weight", "model.embed_tokens.weight"},
      {Architecture::llama, "layers.3.self_attn.q_proj.weight", "model.layers.3.self_attn.q_proj.weight"},
      {Architecture::llama, "norm.weight", "model.norm.weight"},
      {Architecture::llama, "lm_head.weight", "lm_head.weight"},
      {Architecture::qwen2, "layers.0.self_attn.k_proj.bias", "model.layers.0.self_attn.k_proj.bias"},
      {Architecture::mixtral, "layers.2.mlp.gate.weight", "model.layers.2.block_sparse_moe.gate.weight"},
      {Architecture::mixtral, "layers.2.mlp.experts.7.gate_proj.weight",
       "model.layers.2.block_sparse_moe.experts.7.w1.weight"},
      {Architecture::mixtral, "layers.2.mlp.experts.7.up_proj.weight",
       "model.layers.2.block_sparse_moe.experts.7.w3.weight"},
      {Architecture::mixtral, "layers.12.mlp.experts.0.down_proj.weight",
       "model.layers.12.block_sparse_moe.experts.0.w2.weight"},
      {Architecture::mixtral, "layers.2.post_attention_layernorm.weight",
       "model.layers.2.post_attention_layernorm.weight"},
      {Architecture::gpt2, "wte.weight", "transformer.wte.weight"},
      {Architecture::gpt2, "h.11.attn.c_attn.weight", "transformer.h.11.attn.c_attn.weight"},
      {Architecture::gpt2, "ln_f.bias", "transformer.ln_f.bias"},
  };
  for (const auto& [a, ours, theirs] : names) {
    EXPECT_EQ(hf_tensor_name(a, ours), theirs);
    EXPECT_EQ(meshtrain_tensor_name(a, theirs), ours);
  }
  // GPT-2 files saved from GPT2Model carry no prefix; buffers that are no parameter map to nothing.
  EXPECT_EQ(meshtrain_tensor_name(Architecture::gpt2, "h.0.mlp.c_fc.weight"), "h.0.mlp.c_fc.weight");
  EXPECT_EQ(meshtrain_tensor_name(Architecture::gpt2, "h.0.attn.bias"), std::nullopt);
  EXPECT_EQ(meshtrain_tensor_name(Architecture::gpt2, "transformer.h.0.attn.masked_bias"), std::nullopt);
  EXPECT_EQ(meshtrain_tensor_name(Architecture::llama, "model.layers.0.self_attn.rotary_emb.inv_freq"), std::nullopt);
}

}  // namespace
}  // namespace meshtrain::hf
