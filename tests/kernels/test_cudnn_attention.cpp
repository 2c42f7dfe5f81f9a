// cuDNN's fused attention behind meshtrain's fused-attention call (kernels/cudnn_attention.hpp). Everywhere:
// which calls it takes (16-bit types, head sizes, GQA groups, no documents). Without a GPU (CI): a call
// fails with the shape, cuDNN's or CUDA's message and a HINT instead of crashing. With one: forward (out,
// lse) and backward (dqkv) against a causal attention written here in double on the same rounded inputs,
// for grouped-query and multi-head shapes with T not a multiple of any tile, bf16 and fp16.
#include "kernels/cudnn_attention.hpp"

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

namespace meshtrain {
namespace test_cudnn_attention {

using cudnn::AttentionShape;

bool gpu_present() {
  int devices = 0;
  return cudaGetDeviceCount(&devices) == cudaSuccess && devices > 0;
}

TEST(CudnnAttention, TakesSixteenBitTypesOnly) {
  const AttentionShape gpt2{4, 1024, 12, 12, 64};
  EXPECT_TRUE(cudnn::attention_supported<bf16>(gpt2, 0));
  EXPECT_TRUE(cudnn::attention_supported<fp16>(gpt2, 0));
  EXPECT_FALSE(cudnn::attention_supported<float>(gpt2, 0));
  EXPECT_FALSE(cudnn::attention_supported<double>(gpt2, 0));
}

TEST(CudnnAttention, TakesHeadSizesInEightsUpTo128) {
  for (int hs : {8, 16, 64, 72, 80, 128}) {
    EXPECT_TRUE(cudnn::attention_supported<bf16>({2, 256, 4, 4, hs}, 0)) << "hs " << hs;
  }
  for (int hs : {1, 4, 12, 60, 65, 136, 256}) {
    EXPECT_FALSE(cudnn::attention_supported<bf16>({2, 256, 4, 4, hs}, 0)) << "hs " << hs;
  }
}

TEST(CudnnAttention, TakesGroupedQueryShapesWhoseGroupsDivide) {
  EXPECT_TRUE(cudnn::attention_supported<bf16>({1, 4096, 32, 8, 128}, 0));  // llama-style GQA
  EXPECT_TRUE(cudnn::attention_supported<bf16>({1, 4096, 32, 1, 128}, 0));  // multi-query
  EXPECT_FALSE(cudnn::attention_supported<bf16>({1, 4096, 12, 5, 64}, 0));
  EXPECT_FALSE(cudnn::attention_supported<bf16>({1, 4096, 12, 0, 64}, 0));
}

TEST(CudnnAttention, LeavesDocumentsAndEmptyShapesToTheKokkosKernel) {
  EXPECT_FALSE(cudnn::attention_supported<bf16>({2, 512, 4, 4, 64}, 1));
  EXPECT_FALSE(cudnn::attention_supported<fp16>({2, 512, 4, 4, 64}, 8));
  EXPECT_FALSE(cudnn::attention_supported<bf16>({0, 512, 4, 4, 64}, 0));
  EXPECT_FALSE(cudnn::attention_supported<bf16>({2, 0, 4, 4, 64}, 0));
  EXPECT_TRUE(cudnn::attention_supported<bf16>({1, 131072, 4, 4, 64}, 0));
  EXPECT_TRUE(cudnn::attention_supported<bf16>({3, 1, 4, 4, 64}, 0));
}

void expect_clear_error(const std::runtime_error& e, const std::string& direction) {
  const std::string message = e.what();
  EXPECT_NE(message.find("cuDNN attention " + direction + " bf16 B=2 T=37 NH=4 KVH=2 hs=64"), std::string::npos)
      << message;
  EXPECT_NE(message.find("failed: "), std::string::npos) << message;
  EXPECT_NE(message.find("HINT:"), std::string::npos) << message;
}

TEST(CudnnAttention, FailsWithTheShapeAndAHintWithoutAGpu) {
  if (gpu_present()) GTEST_SKIP() << "a GPU is present; the comparisons cover this build";
  const AttentionShape shape{2, 37, 4, 2, 64};
  try {
    cudnn::attention_forward<bf16>(nullptr, nullptr, nullptr, nullptr, shape);
    FAIL() << "cuDNN ran without a GPU";
  } catch (const std::runtime_error& e) {
    expect_clear_error(e, "forward");
  }
  try {
    cudnn::attention_backward<bf16>(nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, shape);
    FAIL() << "cuDNN ran without a GPU";
  } catch (const std::runtime_error& e) {
    expect_clear_error(e, "backward");
  }
}

TEST(CudnnAttention, RefusesAShapeItDoesNotTake) {
  try {
    cudnn::attention_forward<bf16>(nullptr, nullptr, nullptr, nullptr, {2, 37, 4, 3, 64});
    FAIL() << "a shape attention_supported refuses was run";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("KVH=3"), std::string::npos) << e.what();
  }
}

// Causal attention in double over kernels/flash_attention.hpp's layouts (the equations of its header).
struct Reference {
  std::vector<double> out, lse, dqkv;
};

Reference reference(const AttentionShape& s, const std::vector<double>& qkv, const std::vector<double>& dout) {
  const int C3 = (s.NH + 2 * s.KVH) * s.hs, C = s.NH * s.hs, group = s.NH / s.KVH;
  const double scale = 1.0 / std::sqrt(double(s.hs));
  Reference r{std::vector<double>(std::size_t(s.B) * s.T * C), std::vector<double>(std::size_t(s.B) * s.NH * s.T),
              std::vector<double>(qkv.size(), 0.0)};
  std::vector<double> p(s.T), dp(s.T);
  for (int b = 0; b < s.B; ++b) {
    for (int h = 0; h < s.NH; ++h) {
      const int kq = h * s.hs, kk = s.NH * s.hs + (h / group) * s.hs, kv = (s.NH + s.KVH) * s.hs + (h / group) * s.hs;
      for (int i = 0; i < s.T; ++i) {
        const double* q = &qkv[(std::size_t(b) * s.T + i) * C3 + kq];
        double top = -INFINITY;
        for (int j = 0; j <= i; ++j) {
          const double* k = &qkv[(std::size_t(b) * s.T + j) * C3 + kk];
          double dot = 0;
          for (int d = 0; d < s.hs; ++d) dot += q[d] * k[d];
          p[j] = scale * dot;
          top = std::max(top, p[j]);
        }
        double sum = 0;
        for (int j = 0; j <= i; ++j) sum += std::exp(p[j] - top);
        const double lse = top + std::log(sum);
        r.lse[(std::size_t(b) * s.NH + h) * s.T + i] = lse;
        double* o = &r.out[(std::size_t(b) * s.T + i) * C + h * s.hs];
        const double* d_o = &dout[(std::size_t(b) * s.T + i) * C + h * s.hs];
        for (int j = 0; j <= i; ++j) {
          p[j] = std::exp(p[j] - lse);
          const double* v = &qkv[(std::size_t(b) * s.T + j) * C3 + kv];
          for (int d = 0; d < s.hs; ++d) o[d] += p[j] * v[d];
        }
        double D = 0;
        for (int d = 0; d < s.hs; ++d) D += d_o[d] * o[d];
        for (int j = 0; j <= i; ++j) {
          const double* v = &qkv[(std::size_t(b) * s.T + j) * C3 + kv];
          double dot = 0;
          for (int d = 0; d < s.hs; ++d) dot += d_o[d] * v[d];
          dp[j] = p[j] * (dot - D);  // dS
        }
        double* dq = &r.dqkv[(std::size_t(b) * s.T + i) * C3 + kq];
        for (int j = 0; j <= i; ++j) {
          const double* k = &qkv[(std::size_t(b) * s.T + j) * C3 + kk];
          double* dk = &r.dqkv[(std::size_t(b) * s.T + j) * C3 + kk];
          double* dv = &r.dqkv[(std::size_t(b) * s.T + j) * C3 + kv];
          for (int d = 0; d < s.hs; ++d) {
            dq[d] += scale * dp[j] * k[d];
            dk[d] += scale * dp[j] * q[d];
            dv[d] += p[j] * d_o[d];
          }
        }
      }
    }
  }
  return r;
}

template <class T>
T* to_device(const std::vector<T>& host) {
  T* device = nullptr;
  EXPECT_EQ(cudaMalloc(&device, host.size() * sizeof(T)), cudaSuccess);
  EXPECT_EQ(cudaMemcpy(device, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice), cudaSuccess);
  return device;
}

template <class T>
std::vector<T> to_host(const T* device, std::size_t n) {
  std::vector<T> host(n);
  EXPECT_EQ(cudaMemcpy(host.data(), device, n * sizeof(T), cudaMemcpyDeviceToHost), cudaSuccess);
  return host;
}

template <class H>
double unit_roundoff() {
  return std::is_same_v<H, bf16> ? std::ldexp(1.0, -8) : std::ldexp(1.0, -11);
}

// The largest |got − want| over `want`'s range, against `bound`·max(1, max|want|).
template <class G>
void expect_close(const std::vector<G>& got, const std::vector<double>& want, double bound, const char* what) {
  double largest = 1, error = 0;
  std::size_t worst = 0;
  for (std::size_t e = 0; e < want.size(); ++e) {
    largest = std::max(largest, std::fabs(want[e]));
    const double d = std::fabs(double(float(got[e])) - want[e]);
    if (d > error) {
      error = d;
      worst = e;
    }
  }
  EXPECT_LE(error, bound * largest) << what << ": worst element " << worst << " of " << want.size();
}

// Inputs in [-1, 1] rounded to H once; the reference runs on the rounded values. cuDNN keeps P in 16 bits
// for its products, so out is within a few units of H's roundoff and the gradients within about ten
// (relative to their largest magnitude); a wrong stride or head mapping is off by O(1).
template <class H>
void compare_with_reference(const AttentionShape& s) {
  std::mt19937 rng(11);
  std::uniform_real_distribution<double> u(-1, 1);
  const std::size_t C3 = std::size_t(s.NH + 2 * s.KVH) * s.hs, C = std::size_t(s.NH) * s.hs;
  const std::size_t tokens = std::size_t(s.B) * s.T;
  std::vector<H> qkv(tokens * C3), dout(tokens * C);
  std::vector<double> qkv_d(qkv.size()), dout_d(dout.size());
  for (std::size_t i = 0; i < qkv.size(); ++i) qkv_d[i] = float(qkv[i] = H(u(rng)));
  for (std::size_t i = 0; i < dout.size(); ++i) dout_d[i] = float(dout[i] = H(u(rng)));
  const Reference want = reference(s, qkv_d, dout_d);

  H* d_qkv = to_device(qkv);
  H* d_dout = to_device(dout);
  H* d_out = to_device(std::vector<H>(tokens * C));
  H* d_dqkv = to_device(std::vector<H>(qkv.size()));
  float* d_lse = to_device(std::vector<float>(std::size_t(s.B) * s.NH * s.T));

  // True: cuDNN built these graphs and ran them (false would mean the dispatch's Kokkos fallback).
  ASSERT_TRUE(cudnn::attention_forward<H>(nullptr, d_out, d_lse, d_qkv, s));
  ASSERT_TRUE(cudnn::attention_backward<H>(nullptr, d_dqkv, d_dout, d_qkv, d_out, d_lse, s));
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const double unit = unit_roundoff<H>();
  const auto out = to_host(d_out, tokens * C);
  expect_close(out, want.out, 4 * unit, "out");
  expect_close(to_host(d_lse, want.lse.size()), want.lse, 1e-4, "lse");
  expect_close(to_host(d_dqkv, qkv.size()), want.dqkv, 16 * unit, "dqkv");

  // The cached graph, again: the forward gives the same bits.
  ASSERT_TRUE(cudnn::attention_forward<H>(nullptr, d_out, d_lse, d_qkv, s));
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const auto again = to_host(d_out, tokens * C);
  for (std::size_t e = 0; e < out.size(); ++e) ASSERT_EQ(out[e].bits, again[e].bits) << "element " << e;

  for (void* p : {static_cast<void*>(d_qkv), static_cast<void*>(d_dout), static_cast<void*>(d_out),
                  static_cast<void*>(d_dqkv), static_cast<void*>(d_lse)}) {
    cudaFree(p);
  }
}

TEST(CudnnAttention, MatchesACausalReferenceInDouble) {
  if (!gpu_present()) GTEST_SKIP() << "no GPU on this machine";
  for (const AttentionShape& s :
       {AttentionShape{2, 37, 4, 2, 64}, AttentionShape{1, 130, 3, 3, 128}, AttentionShape{2, 65, 4, 1, 32}}) {
    SCOPED_TRACE("B " + std::to_string(s.B) + " T " + std::to_string(s.T) + " NH " + std::to_string(s.NH) + " KVH " +
                 std::to_string(s.KVH) + " hs " + std::to_string(s.hs));
    compare_with_reference<bf16>(s);
    compare_with_reference<fp16>(s);
  }
}

}  // namespace test_cudnn_attention
}  // namespace meshtrain
