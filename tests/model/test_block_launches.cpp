// Kokkos launches (parallel_for, parallel_reduce, parallel_scan) per transformer block of one
// micro-batch's forward, loss and backward, counted through Kokkos Tools' in-process callbacks:
// the count of an L+1-block model less that of an L-block one is what one block adds, recomputation
// included (train.recompute full re-runs a block's forward). Budgets (issue 23): at most 30 per dense
// block, 50 per MoE block, and the same count at micro-batch 4 and 8 (no kernel launched per
// sequence). GEMM calls are not Kokkos launches; the host's 16-bit GEMMs launch none.
// MESHTRAIN_PRINT_LAUNCHES=1 prints each count by kernel name.
#include "model/language_model.hpp"

#include "common/kokkos_counters.hpp"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <Kokkos_Core.hpp>

#include <cstdlib>
#include <map>
#include <random>
#include <string>
#include <vector>

namespace meshtrain {
namespace test_block_launches {

int total(const std::map<std::string, int>& counts) {
  int sum = 0;
  for (const auto& [name, n] : counts) sum += n;
  return sum;
}

bool print_requested() {
  const char* v = std::getenv("MESHTRAIN_PRINT_LAUNCHES");
  return v != nullptr && std::string(v) == "1";
}

// FNV-1a of the gradients' bytes: compared by hand before and after a change that should keep them.
template <class Real>
void print_digest(const LanguageModel<Real>& model, const ModelConfig& m, int batch, Recompute r) {
  const auto grads = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), model.grads());
  std::uint64_t h = 1469598103934665603ull;
  const auto* bytes = reinterpret_cast<const unsigned char*>(grads.data());
  for (std::size_t i = 0; i < grads.extent(0) * sizeof(Real); ++i) h = (h ^ bytes[i]) * 1099511628211ull;
  std::printf("digest arch %d L%d E%d B%d bits %zu recompute %d: %016llx\n", int(m.arch), m.layers, m.experts, batch,
              sizeof(Real) * 8, int(r), static_cast<unsigned long long>(h));
}

// The launches of the second of two micro-batches (forward, loss, backward), so that nothing
// done once on first use is counted.
template <class Real>
std::map<std::string, int> launches_per_micro_batch(const ModelConfig& m, int batch, Recompute recompute) {
  ExecSpace space;
  const auto model = make_language_model<Real>(space, m, batch, nullptr, StagePlace{}, 1, recompute);
  model->zero_grads();
  const int N = batch * m.seq_len;
  Buffer<int> inputs("inputs", N), targets("targets", N);
  std::vector<int> in(N), tg(N);
  std::mt19937 rng(5);
  for (int i = 0; i < N; ++i) {
    in[i] = int(rng() % unsigned(m.vocab));
    tg[i] = int(rng() % unsigned(m.vocab));
  }
  Kokkos::deep_copy(inputs, Kokkos::View<const int*, Kokkos::HostSpace>(in.data(), N));
  Kokkos::deep_copy(targets, Kokkos::View<const int*, Kokkos::HostSpace>(tg.data(), N));
  const accum_t<Real> scale = accum_t<Real>(1) / accum_t<Real>(N);
  auto step = [&] {
    model->forward(CVec<int>(inputs.data(), N), CVec<int>(targets.data(), N), scale);
    model->backward(CVec<int>(inputs.data(), N));
    space.fence();
  };
  step();
  const test::KokkosCounts counted = test::count_kokkos(step);
  if (print_requested()) print_digest(*model, m, batch, recompute);
  std::map<std::string, int> launches;
  for (const auto& [name, kernel] : counted.kernels) launches[name] = int(kernel.launches());
  return launches;
}

std::map<std::string, int> difference(const std::map<std::string, int>& more, const std::map<std::string, int>& less) {
  std::map<std::string, int> d;
  for (const auto& [name, n] : more) d[name] = n;
  for (const auto& [name, n] : less) d[name] -= n;
  std::erase_if(d, [](const auto& entry) { return entry.second == 0; });
  return d;
}

// One block of model `m` (its layers count of blocks, one more) at micro-batch 4 and 8: at most
// `budget` launches, the same at both.
template <class Real>
void expect_block_budget(ModelConfig m, const std::string& what, int budget) {
  for (Recompute r : {Recompute::none, Recompute::full}) {
    const std::string mode =
        fmt::format("{} {} recompute {}", what, sizeof(Real) * 8, r == Recompute::none ? "none" : "full");
    std::vector<int> per_block;
    for (int batch : {4, 8}) {
      const auto fewer = launches_per_micro_batch<Real>(m, batch, r);
      ModelConfig more = m;
      more.layers += m.moe_every;  // the added blocks: one more of the kind block 0 is (then dense ones)
      const auto block = difference(launches_per_micro_batch<Real>(more, batch, r), fewer);
      const int count = total(block);
      per_block.push_back(count);
      if (print_requested()) {
        std::printf("%s, micro-batch %d: %d per micro-batch for %d blocks, %d for %d more block(s)\n", mode.c_str(),
                    batch, total(fewer), m.layers, count, m.moe_every);
        for (const auto& [name, n] : block) std::printf("  %4d  %s\n", n, name.c_str());
      }
    }
    EXPECT_LE(per_block[0], budget) << mode;
    EXPECT_EQ(per_block[0], per_block[1]) << mode << ": the launches must not depend on the micro-batch";
    EXPECT_GT(per_block[0], 0) << mode << ": nothing was counted (Kokkos Tools callbacks inactive?)";
  }
}

// T 64: micro-batches of 4 and 8 are 256 and 512 rows, both several column-sum chunks.
ModelConfig gpt2() { return ModelConfig{2, 2, 16, 37, 64}; }

ModelConfig llama(int experts) {
  ModelConfig m{2, 4, 16, 37, 64};
  m.arch = Arch::llama;
  m.kv_heads = 2;
  m.ffn_hidden = 24;
  if (experts > 0) {
    m.experts = experts;
    m.experts_per_token = 2;
    m.moe_every = 2;  // block 0 MoE, block 1 dense: one more MoE and one more dense block are added
    m.shared_experts = 1;
    m.expert_hidden = 8;
  }
  return m;
}

TEST(BlockLaunches, Gpt2Float) { expect_block_budget<float>(gpt2(), "gpt2", 30); }
TEST(BlockLaunches, Gpt2Bf16) { expect_block_budget<bf16>(gpt2(), "gpt2", 30); }
TEST(BlockLaunches, LlamaFloat) { expect_block_budget<float>(llama(0), "llama", 30); }
TEST(BlockLaunches, LlamaBf16) { expect_block_budget<bf16>(llama(0), "llama", 30); }
// One MoE block and one dense block together: 50 + 30.
TEST(BlockLaunches, MoeLlamaFloat) { expect_block_budget<float>(llama(4), "moe llama", 80); }
TEST(BlockLaunches, MoeLlamaBf16) { expect_block_budget<bf16>(llama(4), "moe llama", 80); }

}  // namespace test_block_launches
}  // namespace meshtrain
