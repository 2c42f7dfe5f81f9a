// Fresh initialisation: the distribution of share/docs/usage.md, Model and optimizer, and values that depend only on
// (seed, tensor name, element index).
#include "model/init.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <map>
#include <vector>

namespace meshtrain {
namespace test_init {

std::vector<float> initial_weights(const ModelConfig& m, std::uint64_t seed) {
  ParameterLayout layout(m);
  Buffer<float> weights("weights", layout.total());
  initialize_parameters(ExecSpace(), slice(weights, 0, layout.total()), layout, seed);
  auto host = Kokkos::create_mirror_view_and_copy(HostSpace(), weights);
  return std::vector<float>(host.data(), host.data() + host.extent(0));
}

TEST(Init, DistributionPerTensorKind) {
  const ModelConfig m{4, 4, 64, 256, 32};
  const ParameterLayout layout(m);
  const auto w = initial_weights(m, 1);
  for (const TensorInfo& t : layout.tensors()) {
    double sum = 0, sq = 0;
    for (std::size_t i = 0; i < t.numel; ++i) {
      sum += w[t.offset + i];
      sq += double(w[t.offset + i]) * w[t.offset + i];
    }
    const double mean = sum / t.numel, sd = std::sqrt(sq / t.numel - mean * mean);
    const bool ln_weight = t.name.find("ln_") != std::string::npos && t.name.ends_with(".weight");
    if (ln_weight) {
      EXPECT_EQ(sum, double(t.numel)) << t.name;  // all ones
    } else if (t.shape.size() == 1) {
      EXPECT_EQ(sq, 0.0) << t.name;  // biases and LayerNorm biases are zero
    } else {
      const bool residual = t.name.ends_with("c_proj.weight");
      const double want = residual ? 0.02 / std::sqrt(2.0 * m.layers) : 0.02;
      // Sample standard deviation within 5 % and mean within 5 standard errors.
      EXPECT_NEAR(sd, want, 0.05 * want) << t.name;
      EXPECT_NEAR(mean, 0.0, 5 * want / std::sqrt(double(t.numel))) << t.name;
    }
  }
}

TEST(Init, IndependentOfTheRestOfTheModel) {
  // Block 0 of a 1-layer and of a 3-layer model hold the same values; so does wte across seq_len.
  const ModelConfig small{1, 2, 16, 50, 8}, big{3, 2, 16, 50, 12};
  const ParameterLayout ls(small), lb(big);
  const auto ws = initial_weights(small, 9), wb = initial_weights(big, 9);
  for (const char* name : {"wte.weight", "h.0.attn.c_attn.weight", "h.0.mlp.c_fc.weight"}) {
    const auto& ts = ls.find(name);
    const auto& tb = lb.find(name);
    ASSERT_EQ(ts.numel, tb.numel);
    for (std::size_t i = 0; i < ts.numel; ++i) ASSERT_EQ(ws[ts.offset + i], wb[tb.offset + i]) << name << " " << i;
  }
  // wpe's first 8 rows agree too (element index is the row-major index into [T, C]).
  const auto& ps = ls.find("wpe.weight");
  const auto& pb = lb.find("wpe.weight");
  for (std::size_t i = 0; i < ps.numel; ++i) ASSERT_EQ(ws[ps.offset + i], wb[pb.offset + i]);
}

TEST(Init, ElementFunctionAgreesAndSeedsDiffer) {
  const ModelConfig m{2, 2, 8, 20, 4};
  const ParameterLayout layout(m);
  const auto w1 = initial_weights(m, 3), w2 = initial_weights(m, 4);
  const TensorInfo& t = layout.find("h.1.mlp.c_proj.weight");
  int differing = 0;
  for (std::size_t i = 0; i < t.numel; ++i) {
    EXPECT_EQ(w1[t.offset + i], float(initial_value(3, t, i, m.layers)));
    differing += w1[t.offset + i] != w2[t.offset + i];
  }
  EXPECT_EQ(differing, int(t.numel));
  // Two tensors of equal shape draw different values.
  const TensorInfo& a = layout.find("h.0.attn.c_proj.weight");
  const TensorInfo& b = layout.find("h.1.attn.c_proj.weight");
  EXPECT_NE(w1[a.offset], w1[b.offset]);
}

}  // namespace test_init
}  // namespace meshtrain

namespace meshtrain {
namespace test_init {

// Under tensor parallelism every rank's piece holds exactly the single-rank values of the global
// elements it covers, and the ranks' pieces together cover every element of a split tensor once.
TEST(Init, TensorParallelPiecesEqualTheSingleRankTensor) {
  const ModelConfig m{2, 6, 24, 53, 8};  // vocab 53: padded for tp 2 and 4
  const ParameterLayout single(m);
  const auto whole = initial_weights(m, 17);
  for (int tp : {2, 3, 6}) {
    std::map<std::string, std::vector<int>> covered;
    for (int r = 0; r < tp; ++r) {
      const ParameterLayout layout(m, tp, r);
      Buffer<float> weights("weights", layout.total());
      initialize_parameters(ExecSpace(), slice(weights, 0, layout.total()), layout, 17);
      auto local = Kokkos::create_mirror_view_and_copy(HostSpace(), weights);
      for (const TensorInfo& t : layout.tensors()) {
        const TensorInfo& g = single.find(t.name);
        auto& seen = covered[t.name];
        seen.resize(g.numel, 0);
        for (std::size_t i = 0; i < t.numel; ++i) {
          const std::int64_t index = t.global_index(i);
          if (index < 0) {
            ASSERT_EQ(local(t.offset + i), 0.0f) << t.name << ": padding must start at zero";
            continue;
          }
          ASSERT_EQ(local(t.offset + i), whole[g.offset + index]) << "tp " << tp << " rank " << r << " " << t.name;
          seen[index] += 1;
        }
      }
    }
    for (const auto& [name, seen] : covered) {
      const bool replicated = ParameterLayout(m, tp, 0).find(name).replicated;
      for (std::size_t i = 0; i < seen.size(); ++i) {
        ASSERT_EQ(seen[i], replicated ? tp : 1) << "tp " << tp << " " << name << " element " << i;
      }
    }
  }
}

// Pipeline stages draw the same values for the tensors they hold, and together hold every block once.
TEST(Init, PipelineStagesEqualTheSingleRankTensors) {
  const ModelConfig m{5, 2, 16, 29, 8};
  const ParameterLayout single(m);
  const auto whole = initial_weights(m, 23);
  for (int tp : {1, 2}) {
    for (int pp : {2, 3, 5}) {
      std::map<std::string, int> holders;
      for (int stage = 0; stage < pp; ++stage) {
        for (int r = 0; r < tp; ++r) {
          const ParameterLayout layout(m, tp, r, StagePlace{stage, pp});
          Buffer<float> weights("weights", layout.total());
          initialize_parameters(ExecSpace(), slice(weights, 0, layout.total()), layout, 23);
          auto local = Kokkos::create_mirror_view_and_copy(HostSpace(), weights);
          for (const TensorInfo& t : layout.tensors()) {
            if (r == 0) holders[t.name] += 1;
            for (std::size_t i = 0; i < t.numel; ++i) {
              const std::int64_t index = t.global_index(i);
              if (index >= 0) {
                ASSERT_EQ(local(t.offset + i), whole[single.find(t.name).offset + index]) << t.name;
              }
            }
          }
        }
      }
      for (const TensorInfo& t : single.tensors()) {
        // wte lives on the first and the last stage (tied); everything else on exactly one.
        EXPECT_EQ(holders[t.name], t.name == "wte.weight" ? 2 : 1) << "pp " << pp << " " << t.name;
      }
    }
  }
}

TEST(Init, ColumnParallelQkvHoldsWholeHeads) {
  // tp 3 of C 24 (6 heads of 4): rank 1 holds heads 2 and 3, i.e. q columns 8..15, k 32..39, v 56..63.
  const ParameterLayout rank1(ModelConfig{1, 6, 24, 10, 4}, 3, 1), rank2(ModelConfig{1, 6, 24, 10, 4}, 3, 2);
  const TensorInfo& t = rank1.find("h.0.attn.c_attn.weight");
  ASSERT_EQ(t.local_shape, (std::vector<std::uint64_t>{24, 24}));
  EXPECT_EQ(t.global_index(0), 8);        // row 0, first q column
  EXPECT_EQ(t.global_index(8), 32);       // row 0, first k column
  EXPECT_EQ(t.global_index(23), 63);      // row 0, last v column
  EXPECT_EQ(t.global_index(24), 72 + 8);  // row 1
  const TensorInfo& w = rank2.find("wte.weight");
  EXPECT_EQ(w.local_shape[0], 4u);            // padded vocab 12 / 3
  EXPECT_EQ(w.global_index(1 * 24), 9 * 24);  // row 8 + 1
  EXPECT_EQ(w.global_index(2 * 24), -1);      // row 10: padding
}

}  // namespace test_init
}  // namespace meshtrain

namespace meshtrain {
namespace test_init {

std::uint32_t bits(float f) { return std::bit_cast<std::uint32_t>(f); }

// What flat element `flat` of `layout` must hold, from the host reference one element at a time:
// initial_value of its tensor's global index, 0 for vocabulary padding and between tensors.
std::vector<float> reference_weights(const ParameterLayout& layout, std::uint64_t seed) {
  std::vector<float> want(layout.total(), 0.0f);
  for (const TensorInfo& t : layout.tensors()) {
    for (std::size_t i = 0; i < t.numel; ++i) {
      const std::int64_t g = t.global_index(i);
      if (g >= 0) want[t.offset + i] = float(initial_value(seed, t, std::uint64_t(g), layout.model().layers));
    }
  }
  return want;
}

// The initialisation kernel against the host reference, bit for bit, for every element: whole
// layouts and ranges cut anywhere (ZeRO shards start and end inside tensors), tensor-parallel
// pieces with a padded vocabulary, pipeline stages, shard units padded to a multiple of dp.
TEST(Init, KernelEqualsTheHostReferenceForEveryElement) {
  const ModelConfig m{3, 6, 24, 53, 8};  // vocab 53: padded to 54 rows for tp 2, 3 and 6
  const std::uint64_t seed = 29;
  int layouts = 0, checked = 0;
  for (int tp : {1, 2, 3, 6}) {
    for (int pp : {1, 2}) {
      for (int align : {1, 4}) {
        for (int stage = 0; stage < pp; ++stage) {
          for (int r = 0; r < tp; r += std::max(1, tp - 1)) {  // first and last tp rank
            const ParameterLayout layout(m, tp, r, StagePlace{stage, pp}, align);
            const std::vector<float> want = reference_weights(layout, seed);
            const std::size_t total = layout.total();
            Buffer<float> weights("weights", total);
            Kokkos::deep_copy(weights, -1.0f);  // every element must be written, padding included
            initialize_parameters(ExecSpace(), slice(weights, 0, total), layout, seed);
            auto whole = Kokkos::create_mirror_view_and_copy(HostSpace(), weights);
            for (std::size_t i = 0; i < total; ++i) {
              ASSERT_EQ(bits(whole(i)), bits(want[i])) << "tp " << tp << " rank " << r << " stage " << stage << "/"
                                                       << pp << " align " << align << " element " << i;
            }
            // Ranges of uneven lengths, each its own kernel, tile the flat buffer.
            for (std::size_t begin = 0, k = 0; begin < total; ++k) {
              const std::size_t n = std::min(total - begin, std::size_t(1 + (k * 7919 + 13) % 3001));
              Buffer<float> part("part", n);
              Kokkos::deep_copy(part, -1.0f);
              initialize_range(ExecSpace(), slice(part, 0, n), layout, seed, begin);
              auto got = Kokkos::create_mirror_view_and_copy(HostSpace(), part);
              for (std::size_t i = 0; i < n; ++i) {
                ASSERT_EQ(bits(got(i)), bits(want[begin + i])) << "tp " << tp << " range at " << begin << " + " << i;
              }
              begin += n;
              checked += int(n);
            }
            ++layouts;
          }
        }
      }
    }
  }
  EXPECT_EQ(layouts, 1 * 2 * (1 + 2) + 3 * 2 * 2 * (1 + 2));  // tp 1: one rank; tp 2, 3, 6: two
  EXPECT_GT(checked, 0);
}

// Millions of elements (GPT-2's vocabulary, narrow): enough that the kernel's library-function
// fallback (about 4 elements in 10^4) runs hundreds of times, each bitwise the reference.
TEST(Init, KernelEqualsTheHostReferenceOnMillionsOfElements) {
  const ParameterLayout layout(ModelConfig{1, 1, 64, 50257, 16});
  const std::vector<float> want = reference_weights(layout, 1337);
  Buffer<float> weights("weights", layout.total());
  initialize_parameters(ExecSpace(), slice(weights, 0, layout.total()), layout, 1337);
  auto got = Kokkos::create_mirror_view_and_copy(HostSpace(), weights);
  ASSERT_GT(layout.total(), 3000000u);
  for (std::size_t i = 0; i < layout.total(); ++i) ASSERT_EQ(bits(got(i)), bits(want[i])) << "element " << i;
}

}  // namespace test_init
}  // namespace meshtrain
