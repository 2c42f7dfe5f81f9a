// Every kernel, forward and backward, run on the same inputs in float and in double: the float
// results must agree with the double ones to float accuracy, and two runs must agree bitwise.
#include "kernels/attention.hpp"
#include "kernels/bias.hpp"
#include "kernels/cross_entropy.hpp"
#include "kernels/encoder.hpp"
#include "kernels/gelu.hpp"
#include "kernels/layernorm.hpp"
#include "kernels/residual.hpp"

#include "kernel_test_utils.hpp"

#include <map>

namespace meshtrain::test {
namespace test_precision_determinism {

constexpr int B = 2, T = 5, C = 12, NH = 3, V = 11, N = B * T;

// A miniature transformer layer chained from the kernels, so that errors propagate as in training.
template <class Real>
std::map<std::string, std::vector<Real>> run_all() {
  ExecSpace space;
  const std::vector<std::int32_t> tok = {3, 7, 3, 0, 10, 7, 7, 1, 3, 5};
  const std::vector<std::int32_t> tgt = {7, 3, 0, 10, 7, 7, 1, 3, 5, 2};
  auto d_tok = to_device(tok);
  auto d_tgt = to_device(tgt);
  auto wte = to_device<Real>(random_vector(V * C, 81));
  auto wpe = to_device<Real>(random_vector(T * C, 82));
  auto lnw = to_device<Real>(random_vector(C, 83, 0.5, 1.5));
  auto lnb = to_device<Real>(random_vector(C, 84));
  auto bias = to_device<Real>(random_vector(3 * C, 85));
  auto qkv_noise = to_device<Real>(random_vector(N * 3 * C, 86));
  auto logits = to_device<Real>(random_vector(N * V, 87, -3.0, 3.0));

  // forward
  auto x = to_device<Real>(filled(N * C, 0));
  auto ln = to_device<Real>(filled(N * C, 0));
  auto mean = to_device<Real>(filled(N, 0));
  auto rstd = to_device<Real>(filled(N, 0));
  auto qkv = to_device<Real>(filled(N * 3 * C, 0));
  auto att = to_device<Real>(filled(B * NH * T * T, 0));
  auto y = to_device<Real>(filled(N * C, 0));
  auto h = to_device<Real>(filled(N * C, 0));
  auto losses = to_device<Real>(filled(N, 0));
  auto dlogits = to_device<Real>(filled(N * V, 0));
  encoder_forward(space, vec(x), cvec(d_tok), cvec(wte), cvec(wpe), B, T, C);
  layernorm_forward(space, vec(ln), vec(mean), vec(rstd), cvec(x), cvec(lnw), cvec(lnb), N, C);
  // qkv = [ln | ln | ln] + noise + bias (stands in for the GEMM with c_attn)
  residual_forward(space, vec(qkv), cvec(qkv_noise), cvec(qkv_noise), long{N} * 3 * C);
  for (int p = 0; p < 3; ++p)
    for (int n = 0; n < N; ++n)
      residual_forward(space, slice(qkv, n * 3 * C + p * C, C), slice(qkv, n * 3 * C + p * C, C), slice(ln, n * C, C),
                       C);
  add_bias(space, vec(qkv), cvec(bias), N, 3 * C);
  attention_forward(space, vec(y), vec(att), cvec(qkv), B, T, C, NH);
  gelu_forward(space, vec(h), cvec(y), long{N} * C);
  softmax_cross_entropy(space, vec(losses), vec(dlogits), cvec(logits), cvec(d_tgt), N, V, Real(1) / N);

  // backward, with dout = h (any fixed tensor will do)
  auto dy = to_device<Real>(filled(N * C, 0));
  auto dqkv = to_device<Real>(filled(N * 3 * C, 0));
  auto datt = to_device<Real>(filled(B * NH * T * T, 0));
  auto dbias = to_device<Real>(filled(3 * C, 0));
  auto dln = to_device<Real>(filled(N * C, 0));
  auto dx = to_device<Real>(filled(N * C, 0));
  auto dlnw = to_device<Real>(filled(C, 0));
  auto dlnb = to_device<Real>(filled(C, 0));
  auto dwte = to_device<Real>(filled(V * C, 0));
  auto dwpe = to_device<Real>(filled(T * C, 0));
  gelu_backward(space, vec(dy), cvec(y), cvec(h), long{N} * C);
  attention_backward(space, vec(dqkv), vec(datt), cvec(dy), cvec(qkv), cvec(att), B, T, C, NH);
  bias_backward(space, vec(dbias), vec(column_partials<Real>(N, 3 * C)), cvec(dqkv), N, 3 * C);
  for (int n = 0; n < N; ++n)
    residual_forward(space, slice(dln, n * C, C), slice(dln, n * C, C), slice(dqkv, n * 3 * C, C), C);
  layernorm_backward(space, vec(dx), vec(dlnw), vec(dlnb), vec(column_partials<Real>(N, C, 2)), cvec(dln), cvec(x),
                     cvec(lnw), cvec(mean), cvec(rstd), N, C);
  encoder_backward(space, vec(dwte), vec(dwpe), vec(column_partials<Real>(B, T * C)), vec(token_order(N)), cvec(dx),
                   cvec(d_tok), B, T, C, V);
  const Real loss = sum_reduce(space, vec(losses), N);
  const double norm2 = squared_norm(space, vec(dwte), long{V} * C);

  return {{"x", raw(x)},           {"ln", raw(ln)},
          {"qkv", raw(qkv)},       {"att", raw(att)},
          {"y", raw(y)},           {"h", raw(h)},
          {"losses", raw(losses)}, {"dlogits", raw(dlogits)},
          {"dy", raw(dy)},         {"dqkv", raw(dqkv)},
          {"dbias", raw(dbias)},   {"dx", raw(dx)},
          {"dlnw", raw(dlnw)},     {"dlnb", raw(dlnb)},
          {"dwte", raw(dwte)},     {"dwpe", raw(dwpe)},
          {"loss", {loss}},        {"norm2", {static_cast<Real>(norm2)}}};
}

TEST(Precision, FloatAgreesWithDouble) {
  const auto f = run_all<float>();
  const auto d = run_all<double>();
  for (const auto& [name, dv] : d) {
    const auto& fv = f.at(name);
    expect_close_normwise(Host(fv.begin(), fv.end()), Host(dv.begin(), dv.end()), 1e-5, name);
  }
}

TEST(Determinism, TwoRunsAreBitwiseEqual) {
  const auto f1 = run_all<float>();
  const auto f2 = run_all<float>();
  for (const auto& [name, v] : f1) EXPECT_TRUE(bitwise_equal(v, f2.at(name))) << "float " << name;
  const auto d1 = run_all<double>();
  const auto d2 = run_all<double>();
  for (const auto& [name, v] : d1) EXPECT_TRUE(bitwise_equal(v, d2.at(name))) << "double " << name;
}

}  // namespace test_precision_determinism
}  // namespace meshtrain::test
