// The vocabulary padded for the GEMMs (train.vocab_multiple; share/docs/design.md, Vocabulary
// padding) against the same model unpadded: a vocabulary of 300 padded to 384 (multiple 128) gives
// the same loss, logits and gradients of every real element, while the pad rows of wte / lm_head
// (and llama's embed_tokens) start at exactly 0 and get a gradient of exactly 0, so AdamW keeps
// them 0; the logits' pad columns are 0 and their gradient 0. The tensors keep the model's shape
// [V, C] (what checkpoints store), and the 16-bit GEMM workspace sized ahead covers the padded
// products. gpt2 (tied wte) and llama (untied lm_head), fp32 and bf16.
#include "core/model_sizes.hpp"
#include "kernels/cross_entropy.hpp"
#include "model/gemm_workspace.hpp"
#include "model/init.hpp"
#include "model/language_model.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

namespace meshtrain {
namespace test_vocab_padding {

constexpr int kBatch = 2;
constexpr std::uint64_t kSeed = 11;

ModelConfig small(Arch arch, int multiple) {
  ModelConfig m{2, 2, 16, 300, 8};  // L H C V T: V 300 is no multiple of 128
  m.arch = arch;
  if (arch == Arch::llama) {
    m.kv_heads = 1;
    m.ffn_hidden = 24;
  }
  m.vocab_multiple = multiple;
  return m;
}

const char* family(Arch arch) { return arch == Arch::llama ? "llama" : "gpt2"; }

// The vocabulary tables of the family (each padded alike).
std::vector<std::string> tables(Arch arch) {
  if (arch == Arch::llama) return {"embed_tokens.weight", "lm_head.weight"};
  return {"wte.weight"};
}

TEST(VocabPadding, OneRuleForLayoutSizesAndWorkspace) {
  EXPECT_EQ(padded_vocab(small(Arch::gpt2, 1)).value(), 300);
  EXPECT_EQ(padded_vocab(small(Arch::gpt2, 128)).value(), 384);
  EXPECT_EQ(padded_vocab(small(Arch::gpt2, 128), 2).value(), 512);  // each of 2 ranks 256 rows: 2 × 128
  EXPECT_EQ(padded_vocab(small(Arch::gpt2, 128), 3).value(), 384);
  EXPECT_EQ(padded_vocab(small(Arch::gpt2, 1), 7).value(), 301);  // tp alone, as before
  for (Arch arch : {Arch::gpt2, Arch::llama}) {
    SCOPED_TRACE(family(arch));
    for (int tp : {1, 2}) {
      const ModelConfig m = small(arch, 128);
      for (int r = 0; r < tp; ++r) {
        const ParameterLayout layout(m, tp, r);
        EXPECT_EQ(layout.padded_vocab(), padded_vocab(m, tp).value());
        for (const std::string& name : tables(arch)) {
          const TensorInfo& t = layout.find(name);
          EXPECT_EQ(t.shape, (std::vector<std::uint64_t>{300, 16})) << name;  // the model's shape, as stored
          EXPECT_EQ(t.local_shape[0], std::uint64_t(layout.padded_vocab() / tp)) << name;
          EXPECT_EQ(t.local_shape[0] % 128, 0u) << name;
        }
      }
    }
    // The counts are the model's, not the padded arrays'.
    EXPECT_EQ(parameter_count_text(small(arch, 128)), parameter_count_text(small(arch, 1)));
  }
}

// flat weights of `layout` set from the unpadded layout's values by global index (pad elements: `pad`).
template <class Real>
void copy_by_global_index(Vec<Real> to, const ParameterLayout& layout, CVec<Real> from, const ParameterLayout& whole,
                          Real pad) {
  auto host_from = Kokkos::create_mirror_view_and_copy(HostSpace(), from);
  auto host_to = Kokkos::create_mirror_view(to);
  for (const TensorInfo& t : layout.tensors()) {
    const TensorInfo& w = whole.find(t.name);
    for (std::size_t i = 0; i < t.numel; ++i) {
      const std::int64_t g = t.global_index(i);
      host_to(t.offset + i) = g < 0 ? pad : host_from(w.offset + std::size_t(g));
    }
  }
  Kokkos::deep_copy(to, host_to);
}

double to_double(float x) { return x; }
double to_double(bf16 x) { return double(float(x)); }

struct Pass {
  double loss;
  std::vector<double> logits;  // N rows of the padded width
  std::vector<double> weights, grads;
};

template <class Real>
Pass forward_backward(LanguageModel<Real>& model, const std::vector<int>& host_tokens) {
  ExecSpace space;
  const int N = int(host_tokens.size());
  Buffer<int> tokens("tokens", N);
  auto host = Kokkos::create_mirror_view(tokens);
  for (int i = 0; i < N; ++i) host(i) = host_tokens[i];
  Kokkos::deep_copy(tokens, host);
  const CVec<int> in(tokens.data(), N);
  Pass p;
  {
    auto logits = Kokkos::create_mirror_view_and_copy(HostSpace(), model.forward_logits(in));
    for (std::size_t i = 0; i < logits.extent(0); ++i) p.logits.push_back(to_double(logits(i)));
  }
  model.zero_grads();
  // The inputs as targets: every row's target is a real token.
  p.loss = double(model.forward(in, in, 1.0f / float(N)));
  model.backward(in);
  space.fence();
  auto w = Kokkos::create_mirror_view_and_copy(HostSpace(), model.weights());
  auto g = Kokkos::create_mirror_view_and_copy(HostSpace(), model.grads());
  for (std::size_t i = 0; i < w.extent(0); ++i) {
    p.weights.push_back(to_double(w(i)));
    p.grads.push_back(to_double(g(i)));
  }
  return p;
}

template <class Real>
void expect_padding_invisible(Arch arch, double rtol) {
  SCOPED_TRACE(std::string(family(arch)) + (is_low_precision_v<Real> ? " bf16" : " fp32"));
  ExecSpace space;
  const ModelConfig plain = small(arch, 1), padded = small(arch, 128);
  const auto unpadded_model = make_language_model<Real>(space, plain, kBatch);
  release_gemm_workspace();
  const auto padded_model = make_language_model<Real>(space, padded, kBatch);
  const ParameterLayout &whole = unpadded_model->layout(), &layout = padded_model->layout();
  ASSERT_EQ(layout.padded_vocab(), 384);

  // The initialisation writes 0 into the pad rows (whatever the memory held) and the real rows'
  // values by global index, so both models start from the same weights.
  {
    Buffer<float> init("init", layout.total()), init_whole("init_whole", whole.total());
    Kokkos::deep_copy(init, 1.0f);
    initialize_parameters(space, Vec<float>(init), layout, kSeed);
    initialize_parameters(space, Vec<float>(init_whole), whole, kSeed);
    auto a = Kokkos::create_mirror_view_and_copy(HostSpace(), init);
    auto b = Kokkos::create_mirror_view_and_copy(HostSpace(), init_whole);
    for (const std::string& name : tables(arch)) {
      const TensorInfo& t = layout.find(name);
      for (std::size_t i = 0; i < t.numel; ++i) {
        const std::int64_t g = t.global_index(i);
        if (g < 0) {
          ASSERT_EQ(a(t.offset + i), 0.0f) << name << " pad element " << i;
        } else {
          ASSERT_EQ(a(t.offset + i), b(whole.find(name).offset + std::size_t(g))) << name << " element " << i;
        }
      }
    }
    auto w = Kokkos::create_mirror_view(unpadded_model->weights());
    for (std::size_t i = 0; i < w.extent(0); ++i) w(i) = Real(b(i));
    Kokkos::deep_copy(unpadded_model->weights(), w);
  }
  copy_by_global_index<Real>(padded_model->weights(), layout, unpadded_model->weights(), whole, Real(0));

  std::vector<int> tokens(std::size_t(kBatch) * plain.seq_len);
  std::mt19937 rng(5);
  for (int& t : tokens) t = int(rng() % 300u);
  release_gemm_workspace();
  const Pass a = forward_backward(*unpadded_model, tokens);
  const Pass b = forward_backward(*padded_model, tokens);
  // The 16-bit host GEMMs' workspace, reserved ahead from the config, covers the padded products.
  EXPECT_EQ(gemm_workspace_bytes(), model_gemm_workspace_bytes<Real>(padded, kBatch));

  EXPECT_NEAR(b.loss, a.loss, rtol * std::abs(a.loss));
  const bool bitwise_loss = b.loss == a.loss;
  // Logits: each row 384 wide, its first 300 columns the unpadded row's, the rest 0.
  const std::size_t N = tokens.size(), V = 300, Vp = 384;
  ASSERT_EQ(b.logits.size(), N * Vp);
  bool bitwise_logits = true;
  for (std::size_t n = 0; n < N; ++n) {
    for (std::size_t v = 0; v < Vp; ++v) {
      const double got = b.logits[n * Vp + v];
      if (v >= V) {
        ASSERT_EQ(got, 0.0) << "pad logit " << n << ", " << v;
        continue;
      }
      const double want = a.logits[n * V + v];
      ASSERT_NEAR(got, want, rtol * (1 + std::abs(want))) << "logit " << n << ", " << v;
      bitwise_logits = bitwise_logits && got == want;
    }
  }
  // Gradients: every real element the unpadded model's, every pad element exactly 0.
  bool bitwise_grads = true;
  double scale = 0;
  for (double g : a.grads) scale = std::max(scale, std::abs(g));
  for (const TensorInfo& t : layout.tensors()) {
    const TensorInfo& w = whole.find(t.name);
    for (std::size_t i = 0; i < t.numel; ++i) {
      const std::int64_t g = t.global_index(i);
      if (g < 0) {
        ASSERT_EQ(b.weights[t.offset + i], 0.0) << t.name << " pad weight " << i;
        ASSERT_EQ(b.grads[t.offset + i], 0.0) << t.name << " pad gradient " << i;
        continue;
      }
      const double want = a.grads[w.offset + std::size_t(g)], got = b.grads[t.offset + i];
      ASSERT_NEAR(got, want, rtol * scale) << t.name << " element " << g;
      bitwise_grads = bitwise_grads && got == want;
    }
  }
  std::printf("[ %s %s ] padded against unpadded: loss %s, logits %s, gradients %s\n", family(arch),
              is_low_precision_v<Real> ? "bf16" : "fp32", bitwise_loss ? "bitwise" : "close",
              bitwise_logits ? "bitwise" : "close", bitwise_grads ? "bitwise" : "close");
  release_gemm_workspace();
}

TEST(VocabPadding, Gpt2SameLossAndGradientsZeroPad) {
  expect_padding_invisible<float>(Arch::gpt2, 1e-5);
  expect_padding_invisible<bf16>(Arch::gpt2, 1e-2);
}

TEST(VocabPadding, LlamaSameLossAndGradientsZeroPad) {
  expect_padding_invisible<float>(Arch::llama, 1e-5);
  expect_padding_invisible<bf16>(Arch::llama, 1e-2);
}

// The loss kernel on rows wider than the vocabulary: the loss of the first V columns, and a
// gradient of exactly 0 in the rest whatever they held (the pad logits are 0 in a model, but the
// kernel does not rely on it).
TEST(VocabPadding, CrossEntropyIgnoresPadColumns) {
  ExecSpace space;
  constexpr int N = 3, V = 5, W = 8;
  Buffer<float> narrow("narrow", N * V), wide("wide", N * W);
  Buffer<float> losses_narrow("ln", N), losses_wide("lw", N);
  Buffer<int> targets("targets", N);
  auto hn = Kokkos::create_mirror_view(narrow);
  auto hw = Kokkos::create_mirror_view(wide);
  auto ht = Kokkos::create_mirror_view(targets);
  for (int n = 0; n < N; ++n) {
    ht(n) = (2 * n + 1) % V;
    for (int v = 0; v < W; ++v) {
      const float x = 0.3f * float((n + 1) * (v + 2) % 7) - 0.5f;
      if (v < V) hn(n * V + v) = x;
      hw(n * W + v) = v < V ? x : 100.0f;  // large garbage past V: must not count
    }
  }
  Kokkos::deep_copy(narrow, hn);
  Kokkos::deep_copy(wide, hw);
  Kokkos::deep_copy(targets, ht);
  const CVec<int> t(targets.data(), N);
  softmax_cross_entropy<float>(space, Vec<float>(losses_narrow), Vec<float>(narrow), CVec<float>(narrow), t, N, V,
                               0.5f);
  softmax_cross_entropy<float>(space, Vec<float>(losses_wide), Vec<float>(wide), CVec<float>(wide), t, N, V, 0.5f, W);
  auto ln = Kokkos::create_mirror_view_and_copy(HostSpace(), losses_narrow);
  auto lw = Kokkos::create_mirror_view_and_copy(HostSpace(), losses_wide);
  hn = Kokkos::create_mirror_view_and_copy(HostSpace(), narrow);
  hw = Kokkos::create_mirror_view_and_copy(HostSpace(), wide);
  for (int n = 0; n < N; ++n) {
    EXPECT_EQ(lw(n), ln(n)) << "row " << n;  // the same sums in the same order
    for (int v = 0; v < W; ++v) {
      EXPECT_EQ(hw(n * W + v), v < V ? hn(n * V + v) : 0.0f) << "row " << n << ", column " << v;
    }
  }
}

}  // namespace test_vocab_padding
}  // namespace meshtrain
