// The model's sizes in checked 64-bit arithmetic (core/model_sizes.hpp; share/docs/usage.md, Faults:
// Sizes that do not fit): saturating products, the widths at the keys' extremes worked out by hand,
// the closed-form parameter count against the layout's own sum, the capacity bounded by the tokens,
// and the refusals of parse_config naming the key and the tensor (the values that wrapped an int
// before: the LLaMA rule's round-up, shared_experts × expert_hidden, vocab × d_model).
#include "core/config.hpp"
#include "core/errors.hpp"
#include "core/model_sizes.hpp"
#include "model/families/gpt2.hpp"
#include "model/families/llama.hpp"
#include "model/impl/carver.hpp"
#include "model/language_model.hpp"
#include "model/parameters.hpp"

#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

namespace meshtrain {
namespace test_model_sizes {

constexpr std::int64_t int_max = std::numeric_limits<int>::max();
constexpr std::int64_t int64_max = std::numeric_limits<std::int64_t>::max();

TEST(Size, ProductsAndSumsSaturateInsteadOfWrapping) {
  EXPECT_EQ((Size(int_max) * Size(32)).value(), int_max * 32);
  EXPECT_FALSE((Size(int_max) * Size(int_max) * Size(2)).overflowed());  // 2^63 − 2^33 + 2: just fits
  EXPECT_TRUE((Size(int_max) * Size(int_max) * Size(int_max)).overflowed());
  EXPECT_TRUE((Size(int64_max) + Size(1)).overflowed());
  EXPECT_TRUE((Size::overflow() * Size(0)).overflowed());  // an overflow stays one
  EXPECT_FALSE(Size::overflow().at_most(int64_max));
  EXPECT_EQ(size_text(Size(4294967296)), "4294967296");
  EXPECT_EQ(size_text(Size::overflow()), "more than 9.2e+18");
}

ModelConfig llama(int d_model = 64) {
  ModelConfig m{2, 4, d_model, 256, 16};
  m.arch = Arch::llama;
  return m;
}

TEST(Widths, TheLlamaRuleAndTheSharedExpertsAtTheKeysExtremes) {
  ModelConfig m = llama();
  EXPECT_EQ(mlp_width(m).value(), 256);  // ⌊8·64/3⌋ = 170 → 256
  m.multiple_of = int(int_max);          // 170 + 2^31 − 2 wrapped an int
  EXPECT_EQ(mlp_width(m).value(), int_max);
  m.multiple_of = 1 << 30;
  EXPECT_EQ(mlp_width(m).value(), 1 << 30);
  m = llama();
  m.experts = 4;
  m.shared_experts = 32;
  m.expert_hidden = int(int_max);
  EXPECT_EQ(shared_width(m).value(), 32 * int_max);  // wrapped to −32
  m.shared_experts = 4;
  m.expert_hidden = 1 << 30;
  EXPECT_EQ(shared_width(m).value(), std::int64_t(1) << 32);  // wrapped to 0
}

TEST(Capacity, BoundedByTheTokensThereAre) {
  ModelConfig m = llama();
  m.experts = 4;
  m.experts_per_token = 2;
  m.capacity_factor = 1.25;
  EXPECT_EQ(expert_capacity(m, 64), 40);  // 1.25 · 64 · 2 / 4, whole: not rounded up
  m.capacity_factor = 1e-6;
  EXPECT_EQ(expert_capacity(m, 64), 1);
  m.capacity_factor = 2e8;  // ⌈2e8 · 128 · 2 / 4⌉ overflowed the int and kept 1
  EXPECT_EQ(expert_capacity(m, 128), 128);
  EXPECT_EQ(m.expert_capacity(128), 128);
  m.capacity_factor = 2.5;  // 2.5 · 64 · 2 / 4 = 80 > 64: no expert is offered more than 64
  EXPECT_EQ(expert_capacity(m, 64), 64);
  m.capacity_factor = 0;
  EXPECT_EQ(expert_capacity(m, 64), 0);
}

TEST(ParameterCount, EqualsTheLayoutsSum) {
  std::vector<ModelConfig> models = {ModelConfig{12, 12, 768, 50257, 1024}, ModelConfig{2, 3, 12, 37, 9}, llama()};
  ModelConfig gqa = llama(40);
  gqa.heads = 4;
  gqa.kv_heads = 2;
  gqa.multiple_of = 12;
  models.push_back(gqa);
  ModelConfig moe = llama();
  moe.layers = 5;
  moe.kv_heads = 2;
  moe.experts = 6;
  moe.moe_every = 2;
  moe.shared_experts = 2;
  moe.expert_hidden = 20;
  models.push_back(moe);
  moe.shared_experts = 0;
  moe.expert_hidden = 0;
  moe.moe_every = 1;
  models.push_back(moe);
  ModelConfig qwen = gqa;  // a tied head, q|k|v biases and query heads wider than d_model
  qwen.tie_embeddings = true;
  qwen.qkv_bias = true;
  qwen.head_dim = 16;
  models.push_back(qwen);
  for (const ModelConfig& m : models) {
    EXPECT_EQ(parameter_count(m).value(), std::int64_t(ParameterLayout(m).total()))
        << name_of(m.arch) << " layers " << m.layers << " experts " << m.experts;
  }
}

// activation_elements extrapolates over the slots a pipeline stage keeps (affine: every slot carves
// the same tensors); the families' own carving of every slot gives the same, under each recomputation.
TEST(ActivationElements, ExtrapolatedOverSlotsIsTheCarvings) {
  ModelConfig moe = llama();
  moe.experts = 4;
  moe.moe_every = 2;
  moe.shared_experts = 1;
  for (const ModelConfig& m : {ModelConfig{4, 4, 32, 67, 16}, llama(), moe}) {
    for (Recompute recompute : {Recompute::none, Recompute::selective, Recompute::full}) {
      for (int slots = 1; slots <= 6; ++slots) {
        for (const StagePlace place : {StagePlace{0, 2}, StagePlace{1, 2}}) {
          const ActivationSizes got = activation_elements<float>(m, 2, 1, place, slots, recompute);
          const ActivationSizes want =
              m.arch == Arch::llama
                  ? decoder_activation_elements<float, LlamaFamily>(m, 2, 1, place, slots, recompute, 1)
                  : decoder_activation_elements<float, Gpt2Family>(m, 2, 1, place, slots, recompute);
          EXPECT_EQ(got.kept, want.kept) << name_of(m.arch) << " slots " << slots;
          EXPECT_EQ(got.scratch, want.scratch) << name_of(m.arch) << " slots " << slots;
        }
      }
    }
  }
}

// Carver::overlay (the context ring's buffers over the MLP's hidden gradients): both parts start where the
// first began, the carver moves on by the larger, and the count pass and the carving pass agree.
TEST(Carver, OverlaySharesElementsAndMovesOnByTheLarger) {
  std::vector<float> storage(64);
  for (float* base : {static_cast<float*>(nullptr), storage.data()}) {
    carving::Carver<float> c(base);
    c.take(3);
    Vec<float> small, large_first;
    Vec<double> wide;
    c.overlay([&](carving::Carver<float>& over) { small = over.take(5); },
              [&](carving::Carver<float>& over) {
                large_first = over.take(2);
                wide = over.take_as<double>(4);  // aligned to 2 floats: starts at 6, ends at 14
              });
    EXPECT_EQ(c.used(), 14u) << "the larger part's end";
    const Vec<float> after = c.take(1);
    EXPECT_EQ(c.used(), 15u);
    if (base != nullptr) {
      EXPECT_EQ(small.data(), base + 3);
      EXPECT_EQ(large_first.data(), base + 3) << "the second part starts where the first began";
      EXPECT_EQ(reinterpret_cast<float*>(wide.data()), base + 6);
      EXPECT_EQ(after.data(), base + 14);
    }
    carving::Carver<float> d(base);
    d.overlay([&](carving::Carver<float>& over) { over.take(9); }, [](carving::Carver<float>&) {});
    EXPECT_EQ(d.used(), 9u) << "an empty second part leaves the first's end";
  }
}

// parse_config's message for `args`, or "" when it accepts them.
std::string refusal(std::vector<std::string> args) {
  try {
    parse_config(args);
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

// The checkpoint keys of published llama models (share/docs/usage.md, Model families): each rope
// parameter only under the scaling that reads it, llama3's band ordered, an even head_dim, none of them
// under gpt2; head_dim frees heads from dividing d_model, and its query width is what the sizes count.
TEST(Refusals, LlamaCheckpointKeys) {
  const std::vector<std::string> llama = {"--model.arch", "llama"};
  auto with = [&](std::vector<std::string> more) {
    more.insert(more.begin(), llama.begin(), llama.end());
    return refusal(more);
  };
  std::string why = with({"--model.rope_factor", "4"});
  EXPECT_NE(why.find("model.rope_factor"), std::string::npos) << why;
  EXPECT_NE(why.find("model.rope_scaling"), std::string::npos) << why;
  why = with({"--model.rope_scaling", "linear", "--model.rope_factor", "4", "--model.rope_low_freq_factor", "2"});
  EXPECT_NE(why.find("model.rope_low_freq_factor"), std::string::npos) << why;
  why = with({"--model.rope_scaling", "llama3", "--model.rope_factor", "8", "--model.rope_high_freq_factor", "1"});
  EXPECT_NE(why.find("model.rope_high_freq_factor = 1"), std::string::npos) << why;
  why = with({"--model.rope_scaling", "linear", "--model.rope_factor", "0"});
  EXPECT_NE(why.find("model.rope_factor"), std::string::npos) << why;
  why = with({"--model.rope_scaling", "yarn"});
  EXPECT_NE(why.find("yarn"), std::string::npos) << why;
  why = with({"--model.head_dim", "7"});
  EXPECT_NE(why.find("model.head_dim = 7 is odd"), std::string::npos) << why;
  why = refusal({"--model.qkv_bias", "true"});
  EXPECT_NE(why.find("model.qkv_bias is a llama key"), std::string::npos) << why;
  EXPECT_EQ(with({"--model.rope_scaling", "llama3", "--model.rope_factor", "8"}), "");
  // 3 heads of 16 channels on d_model 64: heads need not divide d_model once head_dim says the width.
  EXPECT_NE(with({"--model.heads", "3"}).find("or set model.head_dim"), std::string::npos);
  EXPECT_EQ(with({"--model.heads", "3", "--model.kv_heads", "1", "--model.head_dim", "16"}), "");
}

TEST(Refusals, NameTheKeyAndTheTensorWithExactNumbers) {
  std::string why = refusal({"--model.d_model", "65536", "--model.vocab", "65536", "--model.heads", "1"});
  EXPECT_NE(why.find("wte.weight [65536, 65536]"), std::string::npos) << why;
  EXPECT_NE(why.find("4294967296 elements"), std::string::npos) << why;
  EXPECT_NE(why.find("make model.d_model or model.vocab smaller"), std::string::npos) << why;

  why = refusal({"--model.arch", "llama", "--model.multiple_of", "1073741824"});
  EXPECT_NE(why.find("layers.*.mlp.gate_proj|up_proj.weight [2147483648, 64]"), std::string::npos) << why;
  EXPECT_NE(why.find("model.multiple_of = 1073741824"), std::string::npos) << why;

  why = refusal({"--model.arch", "llama", "--model.multiple_of", "2147483647"});
  EXPECT_NE(why.find("model.multiple_of"), std::string::npos) << why;

  why = refusal({"--model.arch", "llama", "--model.experts", "2", "--model.shared_experts", "32",
                 "--model.expert_hidden", "2147483647"});
  EXPECT_NE(why.find("68719476704"), std::string::npos) << why;  // 32 × (2^31 − 1), not a wrapped −32
  EXPECT_NE(why.find("model.shared_experts"), std::string::npos) << why;
  EXPECT_NE(why.find("model.expert_hidden"), std::string::npos) << why;

  why = refusal({"--model.arch", "llama", "--model.experts", "2", "--model.shared_experts", "4",
                 "--model.expert_hidden", "1073741824"});
  EXPECT_NE(why.find("model.shared_experts"), std::string::npos) << why;  // 2^32: wrapped to a zero width

  // Activations may pass 2^31 elements (the kernels index them in 64 bits): 2·10^10 probabilities pass
  // the size checks (memory is the trainer's and the planner's check, plan/fit.hpp).
  EXPECT_EQ(refusal({"--model.seq_len", "100000", "--train.micro_batch", "1", "--train.global_batch", "1"}), "");
  // What stays int is refused: one team per attention row, a GEMM dimension of B·T rows.
  why = refusal({"--model.seq_len", "65536", "--train.micro_batch", "16384", "--train.global_batch", "16384",
                 "--model.heads", "2", "--model.d_model", "16"});
  EXPECT_NE(why.find("the attention rows would be 2147483648 (train.micro_batch 16384 × model.heads 2 × "
                     "model.seq_len 65536)"),
            std::string::npos)
      << why;
  EXPECT_NE(why.find("make model.heads, model.seq_len or train.micro_batch smaller"), std::string::npos) << why;
  why = refusal({"--model.seq_len", "65536", "--train.micro_batch", "32768", "--train.global_batch", "32768",
                 "--model.heads", "1", "--model.d_model", "16"});
  EXPECT_NE(why.find("the token rows would be 2147483648"), std::string::npos) << why;
  // 2^30 rows of 2 blocks of 64 channels: one team per row and block.
  why = refusal({"--model.seq_len", "65536", "--train.micro_batch", "16384", "--train.global_batch", "16384",
                 "--model.heads", "1", "--model.d_model", "128"});
  EXPECT_NE(why.find("the embedding gradient's teams would be 2147483648"), std::string::npos) << why;

  EXPECT_EQ(refusal({"--model.arch", "llama", "--model.experts", "4", "--model.capacity_factor", "2e8"}), "");
}

TEST(Refusals, LlamaKeysUnderGpt2EvenAtTheirDefaults) {
  for (const char* key : {"--model.kv_heads", "--model.multiple_of", "--model.experts", "--model.capacity_factor"}) {
    const ModelConfig d;
    const std::string value = std::string(key) == "--model.multiple_of" ? std::to_string(d.multiple_of) : "0";
    const std::string why = refusal({key, value});
    EXPECT_NE(why.find(std::string(key).substr(2) + " is a llama key"), std::string::npos) << key << ": " << why;
  }
  EXPECT_NE(refusal({"--model.capacity_factor", "1.5"}).find("llama key"), std::string::npos);
  EXPECT_EQ(refusal({"--model.arch", "llama", "--model.kv_heads", "0"}), "");
  EXPECT_EQ(refusal({"--model.arch", "gpt2"}), "");
  // A stored config lists every key: its llama keys at their defaults are not a gpt2 run's mistake.
  EXPECT_NO_THROW(config_from_ini(Config{}.to_ini(), "a stored config"));
}

}  // namespace test_model_sizes
}  // namespace meshtrain
