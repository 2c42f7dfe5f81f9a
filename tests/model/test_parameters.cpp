// The parameter layout against Hugging Face GPT-2's names and shapes (share/docs/usage.md, Checkpoints) and its
// known parameter count.
#include "model/parameters.hpp"

#include <gtest/gtest.h>

namespace meshtrain {
namespace {

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

}  // namespace
}  // namespace meshtrain
