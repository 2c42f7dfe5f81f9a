// The parameter layout against Hugging Face GPT-2's names and shapes (share/docs/usage.md, Checkpoints) and its
// known parameter count; the llama layout against Hugging Face Llama's (share/docs/usage.md, Model
// families), counted by hand: names in order, torch Linear shapes [out, in], each tensor-parallel
// rank's piece, the shard units, and q|k|v and gate|up lying contiguous.
#include "model/parameters.hpp"

#include "common/small_moe.hpp"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <string>

namespace meshtrain {
namespace test_parameters {

TEST(ParameterLayout, Gpt2SmallHasItsKnownParameterCount) {
  // GPT-2 124M: 124,439,808 parameters with the head tied to wte.
  const ParameterLayout layout(ModelConfig{12, 12, 768, 50257, 1024});
  EXPECT_EQ(layout.total(), 124439808u);
  EXPECT_EQ(layout.tensors().size(), 2u + 12u * 12u + 2u);
}

TEST(ParameterLayout, NamesShapesAndDecay) {
  const ParameterLayout layout(ModelConfig{2, 3, 12, 37, 9});
  using Shape = std::vector<std::uint64_t>;
  EXPECT_EQ(layout.find("wte.weight").shape, (Shape{37, 12}));
  EXPECT_EQ(layout.find("wpe.weight").shape, (Shape{9, 12}));
  EXPECT_EQ(layout.find("h.1.attn.c_attn.weight").shape, (Shape{12, 36}));
  EXPECT_EQ(layout.find("h.1.attn.c_attn.bias").shape, (Shape{36}));
  EXPECT_EQ(layout.find("h.0.attn.c_proj.weight").shape, (Shape{12, 12}));
  EXPECT_EQ(layout.find("h.0.mlp.c_fc.weight").shape, (Shape{12, 48}));
  EXPECT_EQ(layout.find("h.0.mlp.c_proj.weight").shape, (Shape{48, 12}));
  EXPECT_EQ(layout.find("ln_f.bias").shape, (Shape{12}));
  int decaying = 0;
  std::size_t next = 0;
  for (const TensorInfo& t : layout.tensors()) {
    EXPECT_EQ(t.offset, next) << t.name;  // contiguous, in order
    next += t.numel;
    decaying += t.decays;
  }
  EXPECT_EQ(decaying, 2 + 4 * 2);  // wte, wpe and four matrices per block
  EXPECT_DOUBLE_EQ(flops_per_token(layout), 6.0 * layout.total() + 6.0 * 2 * 12 * 9);
}

// 3 layers, 6 query heads over 2 kv heads of head size 4 (C 24), SwiGLU width 36, vocabulary 37
// (odd: padded to 38 under tp 2), context 9.
ModelConfig small_llama() {
  ModelConfig m{3, 6, 24, 37, 9};
  m.arch = Arch::llama;
  m.kv_heads = 2;
  m.ffn_hidden = 36;
  return m;
}

using Shape = std::vector<std::uint64_t>;

TEST(LlamaLayout, NamesShapesInitAndCountByHand) {
  const ParameterLayout layout(small_llama());
  std::vector<std::string> names;
  for (const TensorInfo& t : layout.tensors()) names.push_back(t.name);
  std::vector<std::string> want = {"embed_tokens.weight"};
  for (int l = 0; l < 3; ++l) {
    for (const char* n :
         {"input_layernorm", "self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
          "post_attention_layernorm", "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj"}) {
      want.push_back(fmt::format("layers.{}.{}.weight", l, n));
    }
  }
  want.insert(want.end(), {"norm.weight", "lm_head.weight"});
  EXPECT_EQ(names, want);
  EXPECT_EQ(layout.find("embed_tokens.weight").shape, (Shape{37, 24}));
  EXPECT_EQ(layout.find("layers.2.input_layernorm.weight").shape, (Shape{24}));
  EXPECT_EQ(layout.find("layers.1.self_attn.q_proj.weight").shape, (Shape{24, 24}));  // [NH·hs, C]
  EXPECT_EQ(layout.find("layers.1.self_attn.k_proj.weight").shape, (Shape{8, 24}));   // [KV·hs, C]
  EXPECT_EQ(layout.find("layers.1.self_attn.v_proj.weight").shape, (Shape{8, 24}));
  EXPECT_EQ(layout.find("layers.1.self_attn.o_proj.weight").shape, (Shape{24, 24}));  // [C, NH·hs]
  EXPECT_EQ(layout.find("layers.0.mlp.gate_proj.weight").shape, (Shape{36, 24}));     // [H, C]
  EXPECT_EQ(layout.find("layers.0.mlp.up_proj.weight").shape, (Shape{36, 24}));
  EXPECT_EQ(layout.find("layers.0.mlp.down_proj.weight").shape, (Shape{24, 36}));  // [C, H]
  EXPECT_EQ(layout.find("norm.weight").shape, (Shape{24}));
  EXPECT_EQ(layout.find("lm_head.weight").shape, (Shape{37, 24}));  // untied
  EXPECT_EQ(layout.find("layers.0.self_attn.o_proj.weight").init, InitKind::normal_residual);
  EXPECT_EQ(layout.find("layers.0.mlp.down_proj.weight").init, InitKind::normal_residual);
  EXPECT_EQ(layout.find("layers.0.mlp.up_proj.weight").init, InitKind::normal);
  EXPECT_EQ(layout.find("layers.0.post_attention_layernorm.weight").init, InitKind::ones);
  // Per block: two norms 2·24, q and o 2·576, k and v 2·192, gate, up and down 3·864 = 4176.
  const std::size_t embed = 37 * 24, block = 2 * 24 + 2 * 576 + 2 * 192 + 3 * 864;
  EXPECT_EQ(layout.total(), embed + 3 * block + 24 + embed);
  int decaying = 0;
  for (const TensorInfo& t : layout.tensors()) decaying += t.decays;
  EXPECT_EQ(decaying, 2 + 3 * 7);  // embed_tokens, lm_head and seven matrices per block
  // embed_tokens only looks rows up: every other parameter is a product's matrix.
  EXPECT_DOUBLE_EQ(flops_per_token(layout), 6.0 * (3 * block + 24 + embed) + 6.0 * 3 * 24 * 9);
}

// The first global element and the local shape of a tensor's piece on tp rank `rank` of 2.
struct HandPiece {
  const char* name;
  Shape local;
  std::int64_t first;  // global row-major index of local element 0
};

TEST(LlamaLayout, TensorParallelPiecesByHand) {
  const ParameterLayout rank1(small_llama(), 2, 1);
  // Rank 1 of 2: query heads 3..5 (rows 12..23), kv head 1 (rows 4..7) — the kv head those query
  // heads read (h / (NH/KV) = 1); SwiGLU columns 18..35; vocabulary rows 19..36 of the padded 38.
  const HandPiece pieces[] = {
      {"layers.0.self_attn.q_proj.weight", {12, 24}, 12 * 24},
      {"layers.0.self_attn.k_proj.weight", {4, 24}, 4 * 24},
      {"layers.0.self_attn.v_proj.weight", {4, 24}, 4 * 24},
      {"layers.0.self_attn.o_proj.weight", {24, 12}, 12},
      {"layers.0.mlp.gate_proj.weight", {18, 24}, 18 * 24},
      {"layers.0.mlp.up_proj.weight", {18, 24}, 18 * 24},
      {"layers.0.mlp.down_proj.weight", {24, 18}, 18},
      {"embed_tokens.weight", {19, 24}, 19 * 24},
      {"lm_head.weight", {19, 24}, 19 * 24},
      {"norm.weight", {24}, 0},
  };
  for (const HandPiece& p : pieces) {
    const TensorInfo& t = rank1.find(p.name);
    EXPECT_EQ(t.local_shape, p.local) << p.name;
    EXPECT_EQ(t.global_index(0), p.first) << p.name;
    EXPECT_EQ(t.replicated, std::string(p.name) == "norm.weight") << p.name;
  }
  // A row-parallel piece's second row starts one global row further: o_proj row 1, column 12.
  EXPECT_EQ(rank1.find("layers.0.self_attn.o_proj.weight").global_index(12), 24 + 12);
  // The padded vocabulary row (38th) is no element of the tensor.
  EXPECT_EQ(rank1.find("lm_head.weight").global_index(18 * 24), -1);
  EXPECT_EQ(rank1.find("embed_tokens.weight").piece.elements(), 18u * 24);
  // Both ranks' pieces of every tensor cover it exactly once.
  const ParameterLayout rank0(small_llama(), 2, 0), whole(small_llama());
  for (const TensorInfo& t : whole.tensors()) {
    std::vector<int> seen(t.numel, 0);
    for (const ParameterLayout* r : {&rank0, &rank1}) {
      const TensorInfo& piece = r->find(t.name);
      for (std::size_t i = 0; i < piece.numel; ++i) {
        if (const std::int64_t g = piece.global_index(i); g >= 0) ++seen[std::size_t(g)];
      }
    }
    const int copies = t.name.find("layernorm") != std::string::npos || t.name == "norm.weight" ? 2 : 1;
    EXPECT_EQ(std::count(seen.begin(), seen.end(), copies), std::ptrdiff_t(t.numel)) << t.name;
  }
}

TEST(LlamaLayout, FusedProductsAreContiguous) {
  for (int rank : {0, 1}) {
    const ParameterLayout layout(small_llama(), 2, rank);
    for (int l = 0; l < 3; ++l) {
      const std::string h = fmt::format("layers.{}.", l);
      auto end = [&](const char* n) { return layout.find(h + n).offset + layout.find(h + n).numel; };
      EXPECT_EQ(end("self_attn.q_proj.weight"), layout.find(h + "self_attn.k_proj.weight").offset);
      EXPECT_EQ(end("self_attn.k_proj.weight"), layout.find(h + "self_attn.v_proj.weight").offset);
      EXPECT_EQ(end("mlp.gate_proj.weight"), layout.find(h + "mlp.up_proj.weight").offset);
    }
  }
}

TEST(LlamaLayout, ShardUnitsPerStage) {
  auto unit_names = [](const ParameterLayout& layout) {
    std::vector<std::string> names;
    std::size_t next = 0;
    for (const ShardUnit& u : layout.units()) {
      EXPECT_EQ(u.begin, next) << u.name;  // contiguous, padding included
      EXPECT_EQ(u.size() % std::size_t(layout.unit_align()), 0u) << u.name;
      next = u.end;
      names.push_back(u.name);
    }
    EXPECT_EQ(next, layout.total());
    return names;
  };
  using Names = std::vector<std::string>;
  // Stage 0 of 2 holds block 0 (3/2 = 1) and the embedding; stage 1 the rest and the head.
  const ParameterLayout first(small_llama(), 1, 0, StagePlace{0, 2}, 4), last(small_llama(), 1, 0, StagePlace{1, 2}, 4);
  EXPECT_EQ(unit_names(first), (Names{"embed_tokens", "layers.0"}));
  EXPECT_EQ(unit_names(last), (Names{"layers.1", "layers.2", "norm", "lm_head"}));
  EXPECT_EQ(last.units()[1].block, 2);
  EXPECT_EQ(last.units()[3].block, -1);
  EXPECT_EQ(first.find_if_held("lm_head.weight"), nullptr);
  EXPECT_EQ(last.find_if_held("embed_tokens.weight"), nullptr);
  // Every size above is a multiple of 4; under unit_align 5 embed_tokens' 888 elements pad to 890.
  const ParameterLayout odd(small_llama(), 1, 0, StagePlace{0, 2}, 5);
  EXPECT_EQ(odd.units()[0].size(), 890u);
  EXPECT_EQ(odd.units()[1].begin, 890u);
}

// Expert parallelism by hand on small_moe(6, 8), E = 6: ep rank r holds experts [r·E/ep, (r+1)·E/ep) of each MoE block
// in a unit of their own after the block's, the router and the shared expert staying in the block's.
TEST(LlamaLayout, ExpertParallelTensorsAndUnitsByHand) {
  struct Case {
    int ep;
    std::vector<int> experts;  // those of ep rank 1
  };
  for (const Case& c : {Case{2, {3, 4, 5}}, Case{3, {2, 3}}}) {
    SCOPED_TRACE(testing::Message() << "ep " << c.ep);
    const ParameterLayout layout(small_moe(6, 8), 1, 0, StagePlace{}, 1, c.ep, 1);
    EXPECT_EQ(layout.local_experts(), int(c.experts.size()));
    EXPECT_EQ(layout.first_expert(), c.experts.front());
    std::vector<std::string> want = {"embed_tokens.weight"};
    const char* attention[] = {"input_layernorm",  "self_attn.q_proj", "self_attn.k_proj",
                               "self_attn.v_proj", "self_attn.o_proj", "post_attention_layernorm"};
    for (int l = 0; l < 3; ++l) {
      for (const char* n : attention) want.push_back(fmt::format("layers.{}.{}.weight", l, n));
      const bool moe = l != 1;
      for (const char* n : {"gate_proj", "up_proj", "down_proj"}) {
        if (!moe) want.push_back(fmt::format("layers.{}.mlp.{}.weight", l, n));
      }
      if (!moe) continue;
      want.push_back(fmt::format("layers.{}.mlp.gate.weight", l));
      for (const char* n : {"gate_proj", "up_proj", "down_proj"}) {
        want.push_back(fmt::format("layers.{}.mlp.shared_experts.{}.weight", l, n));
      }
      for (int e : c.experts) {
        for (const char* n : {"gate_proj", "up_proj", "down_proj"}) {
          want.push_back(fmt::format("layers.{}.mlp.experts.{}.{}.weight", l, e, n));
        }
      }
    }
    want.insert(want.end(), {"norm.weight", "lm_head.weight"});
    std::vector<std::string> names;
    for (const TensorInfo& t : layout.tensors()) {
      names.push_back(t.name);
      const std::size_t at = t.name.find("mlp.experts.");
      EXPECT_EQ(t.expert, at == std::string::npos ? -1 : std::stoi(t.name.substr(at + 12))) << t.name;
    }
    EXPECT_EQ(names, want);

    // Units: the block's own (attention 1584 + router 6·24 + shared expert 3·8·24 = 2304, or
    // attention + dense SwiGLU 3·36·24 = 4176), each expert 3·8·24 = 576.
    struct HandUnit {
      std::string name;
      int block;
      bool experts;
      std::size_t size;
    };
    const std::size_t experts_unit = 576 * c.experts.size();
    const std::vector<HandUnit> units = {
        {"embed_tokens", -1, false, 888}, {"layers.0", 0, false, 2304}, {"layers.0.mlp.experts", 0, true, experts_unit},
        {"layers.1", 1, false, 4176},     {"layers.2", 2, false, 2304}, {"layers.2.mlp.experts", 2, true, experts_unit},
        {"norm", -1, false, 24},          {"lm_head", -1, false, 888}};
    ASSERT_EQ(layout.units().size(), units.size());
    std::size_t begin = 0;
    for (std::size_t u = 0; u < units.size(); ++u) {
      const ShardUnit& got = layout.units()[u];
      EXPECT_EQ(got.name, units[u].name);
      EXPECT_EQ(got.block, units[u].block) << got.name;
      EXPECT_EQ(got.experts, units[u].experts) << got.name;
      EXPECT_EQ(got.begin, begin) << got.name;
      EXPECT_EQ(got.size(), units[u].size) << got.name;
      begin += units[u].size;
    }
    EXPECT_EQ(layout.block_begin(0), 888u);
    EXPECT_EQ(layout.block_begin(2), 888u + 2304 + experts_unit + 4176);
    EXPECT_EQ(layout.head_begin(), layout.units()[6].begin);
    // FLOPs stay the whole model's.
    EXPECT_DOUBLE_EQ(flops_per_token(layout), flops_per_token(ParameterLayout(small_moe(6, 8))));
  }
}

TEST(LlamaLayout, ExpertRanksHoldEveryExpertOnceAndTheRestAlike) {
  const ParameterLayout whole(small_moe(6, 8));
  for (int ep : {1, 2, 3, 6}) {
    std::map<std::string, int> held;
    for (int r = 0; r < ep; ++r) {
      const ParameterLayout rank(small_moe(6, 8), 1, 0, StagePlace{}, 1, ep, r);
      for (const TensorInfo& t : rank.tensors()) ++held[t.name];
    }
    for (const TensorInfo& t : whole.tensors()) {
      EXPECT_EQ(held[t.name], t.expert >= 0 ? 1 : ep) << "ep " << ep << " " << t.name;
    }
    EXPECT_EQ(held.size(), whole.tensors().size()) << "ep " << ep;
  }
}

}  // namespace test_parameters
}  // namespace meshtrain
