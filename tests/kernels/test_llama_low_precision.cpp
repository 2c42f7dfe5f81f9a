// LLaMA's kernels (RMSNorm, SwiGLU, rotary embedding, grouped-query attention) in bf16 and fp16
// against the same kernels in float, on inputs rounded to the 16-bit type once. The bounds are
// test_low_precision.cpp's: one ulp where a kernel computes in float and rounds once; attention's
// chain of stored intermediates held normwise to 8·u.
#include "kernels/attention.hpp"
#include "kernels/rmsnorm.hpp"
#include "kernels/rotary.hpp"
#include "kernels/swiglu.hpp"

#include "kernel_test_utils.hpp"
#include "low_precision_utils.hpp"

#include <map>

namespace meshtrain::test {
namespace test_llama_low_precision {

constexpr int B = 2, T = 5, N = B * T, C = 12, HID = 7, NH = 4, KVH = 2, hs = 4;
constexpr int kQkvRow = (NH + 2 * KVH) * hs;

template <class H>
class LlamaLowPrecision : public ::testing::Test {};
using Halves = ::testing::Types<bf16, fp16>;
TYPED_TEST_SUITE(LlamaLowPrecision, Halves);

template <class Real>
std::map<std::string, Host> run_rmsnorm(const std::map<std::string, Host>& in) {
  ExecSpace space;
  auto x = to_device<Real>(in.at("x")), w = to_device<Real>(in.at("w")), dout = to_device<Real>(in.at("dout"));
  auto out = to_device<Real>(nan_filled(N * C));
  auto rstd = to_device<accum_t<Real>>(nan_filled(N));
  rmsnorm_forward(space, vec(out), vec(rstd), cvec(x), cvec(w), N, C, 1e-6);
  auto dinp = to_device<Real>(in.at("dinp0")), dw = to_device<Real>(in.at("dw0"));
  rmsnorm_backward(space, vec(dinp), vec(dw), vec(column_partials<Real>(N, C)), cvec(dout), cvec(x), cvec(w),
                   cvec(rstd), N, C);
  return {{"out", to_host(out)}, {"rstd", to_host(rstd)}, {"dinp", to_host(dinp)}, {"dweight", to_host(dw)}};
}

TYPED_TEST(LlamaLowPrecision, RmsNormComputesInFloatAndRoundsOnce) {
  using H = TypeParam;
  const std::map<std::string, Host> in = {{"x", rounded<H>(random_vector(N * C, 1, -3, 3))},
                                          {"w", rounded<H>(random_vector(C, 2, 0.5, 1.5))},
                                          {"dout", rounded<H>(random_vector(N * C, 3))},
                                          {"dinp0", rounded<H>(random_vector(N * C, 4))},
                                          {"dw0", rounded<H>(random_vector(C, 5))}};
  const auto f = run_rmsnorm<float>(in);
  const auto h = run_rmsnorm<H>(in);
  expect_close(h.at("rstd"), f.at("rstd"), 1e-6, "rstd");
  for (const char* name : {"out", "dinp", "dweight"}) expect_within_ulps<H>(h.at(name), f.at(name), kOneUlp, name);
}

template <class Real>
std::map<std::string, Host> run_swiglu_and_rotary(const std::map<std::string, Host>& in) {
  ExecSpace space;
  auto gate_up = to_device<Real>(in.at("gate_up")), dout = to_device<Real>(in.at("dout"));
  auto out = to_device<Real>(nan_filled(N * HID)), dgate_up = to_device<Real>(nan_filled(N * 2 * HID));
  swiglu_forward(space, vec(out), cvec(gate_up), N, HID);
  swiglu_backward(space, vec(dgate_up), cvec(dout), cvec(gate_up), N, HID);
  const auto table = make_rotary_table<accum_t<Real>>(T, hs, 10000.0);
  auto x = to_device<Real>(in.at("qkv")), dx = to_device<Real>(in.at("qkv"));
  rotary_forward(space, vec(x), table, N, T, kQkvRow, NH + KVH, hs);
  rotary_backward(space, vec(dx), table, N, T, kQkvRow, NH + KVH, hs);
  return {{"swiglu_forward", to_host(out)},
          {"swiglu_backward", to_host(dgate_up)},
          {"rotary_forward", to_host(x)},
          {"rotary_backward", to_host(dx)}};
}

TYPED_TEST(LlamaLowPrecision, SwiGluAndRotaryRoundTheFloatResultOnce) {
  using H = TypeParam;
  const std::map<std::string, Host> in = {{"gate_up", rounded<H>(random_vector(N * 2 * HID, 6, -5, 5))},
                                          {"dout", rounded<H>(random_vector(N * HID, 7))},
                                          {"qkv", rounded<H>(random_vector(N * kQkvRow, 8))}};
  const auto f = run_swiglu_and_rotary<float>(in);
  const auto h = run_swiglu_and_rotary<H>(in);
  for (const auto& [name, values] : f) expect_within_ulps<H>(h.at(name), values, kOneUlp, name);
}

template <class Real>
std::map<std::string, Host> run_gqa(const std::map<std::string, Host>& in) {
  ExecSpace space;
  auto qkv = to_device<Real>(in.at("qkv")), dout = to_device<Real>(in.at("dout"));
  auto out = to_device<Real>(nan_filled(N * NH * hs)), att = to_device<Real>(nan_filled(B * NH * T * T));
  attention_forward(space, vec(out), vec(att), cvec(qkv), B, T, NH, KVH, hs);
  auto dqkv = to_device<Real>(nan_filled(N * kQkvRow)), datt = to_device<Real>(nan_filled(B * NH * T * T));
  attention_backward(space, vec(dqkv), vec(datt), cvec(dout), cvec(qkv), cvec(att), B, T, NH, KVH, hs);
  return {{"out", to_host(out)}, {"att", to_host(att)}, {"dqkv", to_host(dqkv)}};
}

// As multi-head attention in test_low_precision.cpp, plus one rounding of dK and dV per extra query
// head of a group (beta = 1 accumulation): still inside 8·u.
TYPED_TEST(LlamaLowPrecision, GroupedQueryAttentionWithinTheChainOfRoundings) {
  using H = TypeParam;
  const std::map<std::string, Host> in = {{"qkv", rounded<H>(random_vector(N * kQkvRow, 9))},
                                          {"dout", rounded<H>(random_vector(N * NH * hs, 10))}};
  const auto f = run_gqa<float>(in);
  const auto h = run_gqa<H>(in);
  for (const char* name : {"out", "att", "dqkv"})
    expect_close_normwise(h.at(name), f.at(name), 8 * unit_roundoff<H>(), name);
}

}  // namespace test_llama_low_precision
}  // namespace meshtrain::test
