// The step's state kernels over all tensors at once (state/owned_chunks.hpp), under mpiexec at 1
// and 2 ranks, for ZeRO 0–3, the master weights held whole and as a shard, and three layouts: a
// gpt2, the same with padding (units padded to 3·dp, and tensor-parallel rank 1 of 2, whose wte
// holds a padding row past the vocabulary and whose replicated tensors do not count), an MoE llama:
//   - AdamW in one launch against the same buffers updated tensor by tensor (adamw_update with the
//     tensor's own decay, what the optimizer ran before), every element bitwise, padding and the
//     other ranks' slices included (untouched);
//   - the gradient norm over the world against Σ g² in double over the whole model's counted
//     tensors, from values given by global index (so each element must count exactly once);
//     NormDigest writes its bits for the ctest runs at other team sizes and thread counts;
//   - the 16-bit gradient hand-off of two backward passes against the per-tensor accumulate_into
//     and zero fill, reduced the same way: the fp32 owned runs bitwise, every 16-bit gradient zero;
//   - the launches, as Kokkos Tools' callbacks count them: AdamW one, the norm two and one deep
//     copy, the rounding into 16 bits one, the hand-off one per ready range, for 2 and 6 blocks.
#include "kernels/convert.hpp"
#include "kernels/cross_entropy.hpp"
#include "parallel/comm.hpp"
#include "state/optimizer_state.hpp"
#include "state/working_copy.hpp"

#include "common/kokkos_counters.hpp"
#include "common/small_moe.hpp"

#include <gtest/gtest.h>
#include <mpi.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace meshtrain {
namespace {

template <class T>
using HostView = Kokkos::View<T*, HostSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>;

template <class T>
std::vector<T> to_host(const T* data, std::size_t n) {
  std::vector<T> host(n);
  Kokkos::fence();
  Kokkos::deep_copy(HostView<T>(host.data(), n), CVec<T>(data, n));
  return host;
}
template <class T>
void from_host(T* data, const std::vector<T>& host) {
  Kokkos::deep_copy(Vec<T>(data, host.size()), HostView<const T>(host.data(), host.size()));
}

ModelConfig small_gpt2() { return ModelConfig{2, 2, 64, 301, 16}; }

struct Case {
  std::string name;
  ModelConfig model;
  int tp = 1, tp_rank = 0, align_factor = 1;
};
std::vector<Case> cases() {
  return {{"gpt2", small_gpt2()}, {"gpt2 padded, tp rank 1 of 2", small_gpt2(), 2, 1, 3}, {"moe", small_moe(4, 6)}};
}

// Runs `body` for every case, ZeRO 0–3, and master weights that the model computes on or not.
void for_each_state(const std::function<void(const Case&, const ParameterLayout&, OptimizerState&)>& body) {
  const std::unique_ptr<Comm> dp = make_mpi_comm(MPI_COMM_WORLD);
  for (const Case& c : cases()) {
    for (int zero = 0; zero <= 3; ++zero) {
      for (bool master_computes : {true, false}) {
        SCOPED_TRACE(testing::Message() << c.name << ", zero " << zero << ", master computes " << master_computes);
        const ZeroStage stage{zero};
        const ParameterLayout layout(c.model, c.tp, c.tp_rank, StagePlace{},
                                     c.align_factor * stage.shard_group_size(dp->size()));
        OptimizerState state(ExecSpace(), layout, stage, *dp, *dp, master_computes, 4096);
        body(c, layout, state);
      }
    }
  }
}

// A value for element i of a buffer, different in every buffer `salt` and never zero.
float pattern(std::size_t i, int salt) { return float((i * 7 + std::size_t(salt) * 13) % 23 + 1) / 16.0f; }

void fill(const PlacedState<float>& s, int salt) {
  const Vec<float> all = s.accumulated();
  std::vector<float> host(all.extent(0));
  for (std::size_t i = 0; i < host.size(); ++i) host[i] = pattern(i, salt) * (salt == 3 && i % 3 == 0 ? -1 : 1);
  from_host(all.data(), host);
}

TEST(OwnedLaunches, AdamWInOneLaunchIsBitwiseTheUpdateTensorByTensor) {
  for_each_state([](const Case&, const ParameterLayout& layout, OptimizerState& state) {
    const ExecSpace space;
    const PlacedState<float>* states[4] = {&state.master(), &state.exp_avg(), &state.exp_avg_sq(), &state.grads()};
    std::vector<Buffer<float>> reference;
    for (int k = 0; k < 4; ++k) {
      fill(*states[k], k);
      reference.emplace_back("reference", states[k]->accumulated().extent(0));
      Kokkos::deep_copy(reference.back(), states[k]->accumulated());
    }
    // The reference's view of tensor t's owned run in state k: the same offset in its copy.
    const auto run_in = [&](int k, const TensorInfo& t, const io::ElementRange& run) {
      const std::size_t at = std::size_t(states[k]->element(t, run.first) - states[k]->accumulated().data());
      return Vec<float>(reference[std::size_t(k)].data() + at, run.count);
    };
    for (std::int64_t i = 0; i < 2; ++i) {
      const AdamWStep step{1e-2 * double(i + 1), 0.1, 0.9, 0.95, 1e-8, i + 1, 0.75};
      state.update(step);
      for (const TensorInfo& t : layout.tensors()) {
        const io::ElementRange run = state.map().owned_run(t);
        if (run.count == 0) continue;
        AdamWStep own = step;
        own.weight_decay = t.decays ? step.weight_decay : 0.0;
        adamw_update<float>(space, run_in(0, t, run), run_in(1, t, run), run_in(2, t, run), run_in(3, t, run),
                            run.count, own);
      }
    }
    const char* names[4] = {"master", "exp_avg", "exp_avg_sq", "grads"};
    for (int k = 0; k < 4; ++k) {
      const std::size_t n = reference[std::size_t(k)].extent(0);
      const std::vector<float> got = to_host(states[k]->accumulated().data(), n);
      const std::vector<float> want = to_host(reference[std::size_t(k)].data(), n);
      std::size_t differ = 0;
      for (std::size_t i = 0; i < n; ++i) differ += std::memcmp(&got[i], &want[i], sizeof(float)) != 0;
      EXPECT_EQ(differ, 0u) << names[k] << ": elements not bitwise the per-tensor update's, of " << n;
    }
  });
}

// The gradient of global element e of tensor t: the same on every rank and in every layout, with
// squares of many magnitudes, so that another order of the sums would round otherwise.
float gradient_of(const TensorInfo& t, std::int64_t e) {
  return float(std::sin(0.37 * double(e) + 1.3 * double(t.name.size())) * std::exp(double(e % 7) - 3.0));
}

// Every rank's owned runs set from the global values (the rest of the buffer poisoned with NaN:
// the norm must not read it).
void set_gradients(const ParameterLayout& layout, OptimizerState& state) {
  const Vec<float> all = state.grads().accumulated();
  from_host(all.data(), std::vector<float>(all.extent(0), std::nanf("")));
  for (const TensorInfo& t : layout.tensors()) {
    const io::ElementRange run = state.map().owned_run(t);
    std::vector<float> g(run.count);
    for (std::size_t j = 0; j < run.count; ++j) g[j] = gradient_of(t, t.global_index(run.first + j));
    from_host(state.grads().element(t, run.first), g);
  }
}

// Σ g² in double over the global elements of the layout's tensors that `counted` admits: each
// element once, whatever the ZeRO stage, the ranks and the padding.
double piece_sum(const ParameterLayout& layout, const std::function<bool(const TensorInfo&)>& counted) {
  double sum = 0;
  for (const TensorInfo& t : layout.tensors()) {
    if (!counted(t)) continue;
    for (std::size_t i = 0; i < t.numel; ++i) {
      const std::int64_t e = t.global_index(i);
      if (e < 0) continue;  // a padding row
      const double g = gradient_of(t, e);
      sum += g * g;
    }
  }
  return sum;
}

TEST(OwnedLaunches, GradNormCountsEveryCountedElementOnceOverTheWorld) {
  for_each_state([&](const Case& c, const ParameterLayout& layout, OptimizerState& state) {
    set_gradients(layout, state);
    const auto world_norm = [&](const std::function<bool(const TensorInfo&)>& counted) {
      double norm = state.grad_squared_norm(counted);
      MPI_Allreduce(MPI_IN_PLACE, &norm, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
      return norm;
    };
    // The trainer's predicate; then (the runs listed again) every tensor, and the trainer's again.
    const std::function<bool(const TensorInfo&)> counted = [&](const TensorInfo& t) {
      return layout.holds_counted_copy(t);
    };
    const std::function<bool(const TensorInfo&)> every = [](const TensorInfo&) { return true; };
    const double want = piece_sum(layout, counted), want_every = piece_sum(layout, every);
    ASSERT_GT(want, 0.0);
    EXPECT_NEAR(world_norm(counted), want, 1e-12 * want);
    if (c.tp > 1) {
      EXPECT_GT(want_every, want * (1 + 1e-6)) << "tp rank 1 should not count its replicated tensors";
    }
    EXPECT_NEAR(world_norm(every), want_every, 1e-12 * want_every);
    EXPECT_NEAR(world_norm(counted), want, 1e-12 * want);
    // The same sum as the per-tensor reductions it replaces, to rounding.
    double per_tensor = 0;
    if (state.replicas().rank(false) == 0) {
      for (const TensorInfo& t : layout.tensors()) {
        const io::ElementRange run = state.map().owned_run(t);
        if (run.count == 0 || !counted(t)) continue;
        per_tensor += squared_norm<float>(ExecSpace(), Vec<float>(state.grads().element(t, run.first), run.count),
                                          long(run.count));
      }
    }
    EXPECT_NEAR(state.grad_squared_norm(counted), per_tensor, 1e-13 * want);
  });
}

// The norms' bits, for the ctest runs under other team sizes and thread counts to compare
// (tests/train/CMakeLists.txt: owned_norm_digest_*).
TEST(OwnedLaunches, NormDigest) {
  const char* path = std::getenv("MESHTRAIN_OWNED_NORM_DIGEST");
  if (path == nullptr) GTEST_SKIP() << "MESHTRAIN_OWNED_NORM_DIGEST is not set";
  std::ofstream out(path);
  for_each_state([&](const Case&, const ParameterLayout& layout, OptimizerState& state) {
    set_gradients(layout, state);
    const double norm = state.grad_squared_norm([&](const TensorInfo& t) { return layout.holds_counted_copy(t); });
    std::uint64_t bits = 0;
    std::memcpy(&bits, &norm, sizeof(bits));
    out << std::hex << bits << '\n';
  });
}

// Backward's ready points, from the end: the head's units, each block from the last, the rest.
std::vector<std::size_t> ready_points(const ParameterLayout& layout) {
  std::vector<std::size_t> points{layout.head_begin()};
  for (int l = layout.stage_layers() - 1; l >= 0; --l) points.push_back(layout.block_begin(l));
  points.push_back(0);
  return points;
}

// The 16-bit gradient of local element i of tensor t in backward pass p on rank `rank`.
bf16 low_gradient(const TensorInfo& t, std::size_t i, int pass, int rank) {
  return bf16(float(std::int64_t((i * 5 + t.offset + std::size_t(pass * 3 + rank)) % 19) - 9) * 0.375f);
}

TEST(OwnedLaunches, GradientHandOffIsBitwiseThePerTensorAccumulateAndZero) {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  constexpr double loss_scale = 3.0;  // 1/3 is inexact: the products round
  for_each_state([&](const Case&, const ParameterLayout& layout, OptimizerState& state) {
    const ExecSpace space;
    WorkingCopy<bf16> copy(space, state);
    const ZeroStage stage = state.stage();
    // The reference: per tensor, accumulate_into the fp32 sum of this pass, then (as the stage
    // reduces) summed over the ranks each pass (ZeRO 2–3) or once at the end.
    Buffer<float> pass_sum("pass", layout.total()), total("total", layout.total());
    Buffer<bf16> low("low", layout.total());
    state.reduction().start_step();
    for (int pass = 0; pass < 2; ++pass) {
      if (pass == 1) state.reduction().arm();
      std::size_t done = layout.tensors().size();
      for (const std::size_t point : ready_points(layout)) {
        while (done > 0 && layout.tensors()[done - 1].offset >= point) {
          const TensorInfo& t = layout.tensors()[--done];
          std::vector<bf16> g(t.numel);
          for (std::size_t i = 0; i < t.numel; ++i) g[i] = low_gradient(t, i, pass, rank);
          from_host(copy.grad(t), g);
          from_host(low.data() + t.offset, g);
          accumulate_into<float, bf16>(space, Vec<float>(pass_sum.data() + t.offset, t.numel),
                                       CVec<bf16>(low.data() + t.offset, t.numel), float(1.0 / loss_scale),
                                       long(t.numel));
        }
        copy.ready_from(point, loss_scale);
      }
      if (stage.reduces_every_pass() || pass == 1) {
        std::vector<float> sum = to_host(pass_sum.data(), layout.total());
        MPI_Allreduce(MPI_IN_PLACE, sum.data(), int(sum.size()), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        std::vector<float> acc = to_host(total.data(), layout.total());
        for (std::size_t i = 0; i < acc.size(); ++i) acc[i] += sum[i];
        from_host(total.data(), acc);
        Kokkos::deep_copy(pass_sum, 0.0f);
      }
    }
    state.reduction().finish(nullptr);
    const std::vector<float> want = to_host(total.data(), layout.total());
    std::size_t differ = 0, nonzero = 0;
    for (const TensorInfo& t : layout.tensors()) {
      const io::ElementRange run = state.map().owned_run(t);
      const std::vector<float> got = to_host(state.grads().element(t, run.first), run.count);
      for (std::size_t j = 0; j < run.count; ++j) {
        differ += std::memcmp(&got[j], &want[t.offset + run.first + j], sizeof(float)) != 0;
      }
      // Whole 16-bit gradients (ZeRO 0–1) are all zero again; working ones only while their room
      // holds the unit, so those are checked where they are: wherever at() points now.
      for (const bf16 g : to_host(copy.grad(t), t.numel)) nonzero += float(g) != 0.0f;
    }
    EXPECT_EQ(differ, 0u) << "fp32 gradients not bitwise the per-tensor hand-off's";
    EXPECT_EQ(nonzero, 0u) << "16-bit gradients left after the hand-off";
  });
}

TEST(OwnedLaunches, LaunchesDoNotGrowWithTheTensors) {
  const std::unique_ptr<Comm> dp = make_mpi_comm(MPI_COMM_WORLD);
  for (int layers : {2, 6}) {
    for (int zero = 0; zero <= 3; ++zero) {
      SCOPED_TRACE(testing::Message() << layers << " blocks, zero " << zero);
      ModelConfig model = small_gpt2();
      model.layers = layers;
      const ZeroStage stage{zero};
      const ParameterLayout layout(model, 1, 0, StagePlace{}, stage.shard_group_size(dp->size()));
      OptimizerState state(ExecSpace(), layout, stage, *dp, *dp, false, 1 << 30);
      WorkingCopy<bf16> copy(ExecSpace(), state);
      const auto counted = [&](const TensorInfo& t) { return layout.holds_counted_copy(t); };
      state.grad_squared_norm(counted);  // lists the runs (once)
      {
        const test::KokkosCounts c = test::count_kokkos([&] {
          state.update(AdamWStep{1e-3, 0.1, 0.9, 0.95, 1e-8, 1, 1.0});
        });
        EXPECT_EQ(c.launches(), 1) << "AdamW";
        EXPECT_EQ(c.deep_copy_count(), 0) << "AdamW";
      }
      {
        const test::KokkosCounts c = test::count_kokkos([&] { state.grad_squared_norm(counted); });
        EXPECT_EQ(c.launches(), 2) << "norm";
        EXPECT_EQ(c.deep_copy_count(), 1) << "norm";
      }
      {
        const test::KokkosCounts c = test::count_kokkos([&] { copy.publish(); });
        EXPECT_EQ(c.launches(), 1) << "rounding into 16 bits";
        EXPECT_EQ(c.deep_copy_count(), 0) << "rounding into 16 bits";
      }
      {
        // One backward pass's hand-off (its reduction is the stage's, per unit from ZeRO 1).
        const std::vector<std::size_t> points = ready_points(layout);
        const test::KokkosCounts c = test::count_kokkos([&] {
          for (const std::size_t point : points) copy.ready_from(point, 1.0);
        });
        const int units = int(layout.units().size());
        EXPECT_LE(c.launches(), zero >= 2 ? 2 * units : int(points.size())) << "hand-off";
        EXPECT_EQ(c.deep_copy_count(), 0) << "hand-off";
      }
    }
  }
}

}  // namespace
}  // namespace meshtrain
