// LoRA's products beside the routed experts and the router (kernels/lora_grouped.hpp, kernels/lora_router.hpp)
// against naive double loops written here: each group's rows through its expert's A and B (one expert serving
// two groups, whose dA and dB add; a group without rows; rows in a wider buffer by their stride), and the
// router's up product into fp32 logits for every compute precision (the 16-bit types on their kernel path).
#include "kernels/lora_grouped.hpp"
#include "kernels/lora_router.hpp"

#include "kernel_test_utils.hpp"

#include <vector>

namespace meshtrain::test {
namespace test_lora_moe {

constexpr int kIn = 5, kOut = 4, kRank = 3, kExperts = 3, kRows = 9;
constexpr int kLdx = kIn + 2, kLdy = kOut + 3;  // row strides wider than the columns used
constexpr double kScale = 0.75;
// Expert 1 serves two groups; expert 2's group is empty.
const std::vector<RowGroup> kGroups = {{0, 3, 1}, {3, 0, 2}, {3, 4, 0}, {7, 2, 1}};

// Every expert's A (r, in) and B (out, r) and their gradients, on the device (buffers: A, B, dA, dB of expert 0,
// then of expert 1, …) and as double.
template <class Real>
struct Experts {
  std::vector<Buffer<Real>> buffers;
  std::vector<LoraAdapter<Real>> adapters;
  std::vector<Host> A, B, dA0, dB0;
  explicit Experts(std::uint64_t seed) {
    for (int e = 0; e < kExperts; ++e) {
      A.push_back(to_host(to_device<Real>(random_vector(kRank * kIn, seed + 10 * e))));
      B.push_back(to_host(to_device<Real>(random_vector(kOut * kRank, seed + 10 * e + 1))));
      dA0.push_back(to_host(to_device<Real>(random_vector(kRank * kIn, seed + 10 * e + 2))));
      dB0.push_back(to_host(to_device<Real>(random_vector(kOut * kRank, seed + 10 * e + 3))));
      LoraAdapter<Real> a;
      for (auto [host, view] :
           {std::pair{&A.back(), &a.A}, {&B.back(), &a.B}, {&dA0.back(), &a.dA}, {&dB0.back(), &a.dB}}) {
        buffers.push_back(to_device<Real>(*host));
        *view = vec(buffers.back());
      }
      adapters.push_back(a);
    }
  }
};

template <class Real>
class LoraGrouped : public ::testing::Test {};
TYPED_TEST_SUITE(LoraGrouped, DoubleAndFloat);

TYPED_TEST(LoraGrouped, ForwardAndBackwardMatchTheDoubleLoops) {
  using Real = TypeParam;
  const double tol = tolerance_for<Real>(1e-13, 2e-5);
  const Experts<Real> experts(7);
  const Host x = to_host(to_device<Real>(random_vector(kRows * kLdx, 1)));
  const Host y0 = to_host(to_device<Real>(random_vector(kRows * kLdy, 2)));
  const Host dy = to_host(to_device<Real>(random_vector(kRows * kLdy, 3)));
  const Host dx0 = to_host(to_device<Real>(random_vector(kRows * kLdx, 4)));
  auto d_x = to_device<Real>(x), d_y = to_device<Real>(y0), d_dy = to_device<Real>(dy), d_dx = to_device<Real>(dx0);
  auto h = to_device<Real>(nan_filled(kRows * kRank)), dh = to_device<Real>(nan_filled(kRows * kRank));
  const ExecSpace space;
  lora_grouped_down_forward<Real>(space, experts.adapters, kGroups, vec(h), d_x.data(), kLdx, kIn, kRank);
  lora_grouped_up_forward<Real>(space, experts.adapters, kGroups, d_y.data(), kLdy, cvec(h), kScale, kOut, kRank);
  lora_grouped_up_backward<Real>(space, experts.adapters, kGroups, vec(dh), d_dy.data(), kLdy, cvec(h), kScale, kOut,
                                 kRank);
  lora_grouped_input_backward<Real>(space, experts.adapters, kGroups, cvec(dh), d_dx.data(), kLdx, kIn, kRank);
  lora_grouped_weight_backward<Real>(space, experts.adapters, kGroups, cvec(dh), d_x.data(), kLdx, kIn, kRank);

  // The loops: h = x Aᵀ, y += s h Bᵀ, dB += s dyᵀ h, dh = s dy B, dx += dh A, dA += dhᵀ x, per row by its expert.
  Host want_h(kRows * kRank, 0.0), want_dh(kRows * kRank, 0.0), want_y = y0, want_dx = dx0;
  std::vector<Host> want_dA = experts.dA0, want_dB = experts.dB0;
  for (const RowGroup& g : kGroups) {
    const Host &A = experts.A[std::size_t(g.weight)], &B = experts.B[std::size_t(g.weight)];
    for (int n = g.begin; n < g.begin + g.rows; ++n) {
      for (int k = 0; k < kRank; ++k) {
        for (int i = 0; i < kIn; ++i) want_h[n * kRank + k] += x[n * kLdx + i] * A[k * kIn + i];
        for (int o = 0; o < kOut; ++o) want_dh[n * kRank + k] += kScale * dy[n * kLdy + o] * B[o * kRank + k];
      }
      for (int k = 0; k < kRank; ++k) {
        for (int o = 0; o < kOut; ++o) {
          want_y[n * kLdy + o] += kScale * want_h[n * kRank + k] * B[o * kRank + k];
          want_dB[std::size_t(g.weight)][o * kRank + k] += kScale * dy[n * kLdy + o] * want_h[n * kRank + k];
        }
        for (int i = 0; i < kIn; ++i) {
          want_dx[n * kLdx + i] += want_dh[n * kRank + k] * A[k * kIn + i];
          want_dA[std::size_t(g.weight)][k * kIn + i] += want_dh[n * kRank + k] * x[n * kLdx + i];
        }
      }
    }
  }
  const Host got_h = to_host(h), got_dh = to_host(dh);
  for (const RowGroup& g : kGroups) {  // rows outside every group stay unwritten
    for (int n = g.begin; n < g.begin + g.rows; ++n) {
      for (int k = 0; k < kRank; ++k) {
        EXPECT_NEAR(got_h[n * kRank + k], want_h[n * kRank + k], tol) << "h row " << n;
        EXPECT_NEAR(got_dh[n * kRank + k], want_dh[n * kRank + k], tol) << "dh row " << n;
      }
    }
  }
  expect_close(to_host(d_y), want_y, tol, "y (the columns past out untouched)");
  expect_close(to_host(d_dx), want_dx, tol, "dx");
  for (std::size_t e = 0; e < kExperts; ++e) {
    expect_close(to_host(experts.buffers[4 * e + 2]), want_dA[e], tol, "dA");
    expect_close(to_host(experts.buffers[4 * e + 3]), want_dB[e], tol, "dB");
  }
}

constexpr int kTokens = 7, kRouted = 5;

template <class Real>
void expect_router_matches_loops(double tol_logits, double tol_grads) {
  using Acc = accum_t<Real>;
  const Host h = to_host(to_device<Real>(random_vector(kTokens * kRank, 11)));
  const Host B = to_host(to_device<Real>(random_vector(kRouted * kRank, 12)));
  const Host dB0 = to_host(to_device<Real>(random_vector(kRouted * kRank, 13)));
  const Host logits0 = random_vector(kTokens * kRouted, 14), dlogits = random_vector(kTokens * kRouted, 15);
  auto d_logits = to_device<Acc>(logits0);
  auto d_dB = to_device<Real>(dB0);
  auto d_dh = to_device<Real>(nan_filled(kTokens * kRank));
  const auto d_h = to_device<Real>(h), d_B = to_device<Real>(B);
  lora_router_up_forward<Real>(ExecSpace(), vec(d_logits), cvec(d_h), cvec(d_B), kScale, kTokens, kRouted, kRank);
  lora_router_up_backward<Real>(ExecSpace(), vec(d_dh), vec(d_dB), cvec(to_device<Acc>(dlogits)), cvec(d_h), cvec(d_B),
                                kScale, kTokens, kRouted, kRank);
  Host want_logits = logits0, want_dB = dB0, want_dh(kTokens * kRank, 0.0);
  for (int n = 0; n < kTokens; ++n) {
    for (int e = 0; e < kRouted; ++e) {
      for (int k = 0; k < kRank; ++k) {
        want_logits[n * kRouted + e] += kScale * h[n * kRank + k] * B[e * kRank + k];
        want_dB[e * kRank + k] += kScale * dlogits[n * kRouted + e] * h[n * kRank + k];
        want_dh[n * kRank + k] += kScale * dlogits[n * kRouted + e] * B[e * kRank + k];
      }
    }
  }
  expect_close(to_host(d_logits), want_logits, tol_logits, "logits");
  expect_close(to_host(d_dB), want_dB, tol_grads, "dB");
  expect_close(to_host(d_dh), want_dh, tol_grads, "dh");
}

TEST(LoraRouter, UpProductIntoTheAccumulationType) {
  expect_router_matches_loops<double>(1e-13, 1e-13);
  expect_router_matches_loops<float>(1e-5, 1e-5);
  // fp32 logits from 16-bit h and B: not rounded to 16 bits; dB and dh rounded once at the store.
  expect_router_matches_loops<bf16>(1e-5, 2e-2);
  expect_router_matches_loops<fp16>(1e-5, 3e-3);
}

}  // namespace test_lora_moe
}  // namespace meshtrain::test
