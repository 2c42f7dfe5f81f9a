// Grouped-query attention against the multi-head kernel run on the kv heads repeated
// (torch.repeat_interleave, Hugging Face's repeat_kv): the same output, probabilities and dq, and
// dk, dv equal to the sums of the multi-head dk, dv over each group; and against central
// differences in double.
#include "kernels/attention.hpp"

#include "kernel_test_utils.hpp"

namespace meshtrain::test {
namespace test_attention_gqa {

constexpr int B = 2, T = 5, NH = 4, hs = 3, C = NH * hs;

int gqa_row(int kvh) { return (NH + 2 * kvh) * hs; }

// Column of kv head `kv`'s element i in part p (1 = k, 2 = v) of a row with kvh kv heads.
int kv_column(int kvh, int p, int kv, int i) { return NH * hs + (p - 1) * kvh * hs + kv * hs + i; }

// [B*T*(NH+2kvh)*hs] → [B*T*3C]: q as it is, multi-head k/v head h = kv head h / (NH/kvh).
Host repeat_kv(const Host& qkv, int kvh) {
  const int g = NH / kvh;
  Host mha(B * T * 3 * C);
  for (int n = 0; n < B * T; ++n) {
    for (int c = 0; c < C; ++c) mha[n * 3 * C + c] = qkv[n * gqa_row(kvh) + c];
    for (int p = 1; p <= 2; ++p)
      for (int h = 0; h < NH; ++h)
        for (int i = 0; i < hs; ++i)
          mha[n * 3 * C + p * C + h * hs + i] = qkv[n * gqa_row(kvh) + kv_column(kvh, p, h / g, i)];
  }
  return mha;
}

struct AttentionRun {
  Host out, att, dqkv;
};

// Forward and backward, through the (B, T, NH, KVH, hs) overloads, or the (B, T, C, NH) ones when
// multi_head.
template <class Real>
AttentionRun run_attention(const Host& qkv, const Host& dout, int kvh, bool multi_head) {
  ExecSpace space;
  const int row = multi_head ? 3 * C : gqa_row(kvh);
  auto d_qkv = to_device<Real>(qkv), d_dout = to_device<Real>(dout);
  auto out = to_device<Real>(nan_filled(B * T * C)), att = to_device<Real>(nan_filled(B * NH * T * T));
  auto dqkv = to_device<Real>(nan_filled(B * T * row)), datt = to_device<Real>(nan_filled(B * NH * T * T));
  if (multi_head) {
    attention_forward(space, vec(out), vec(att), cvec(d_qkv), B, T, C, NH);
    attention_backward(space, vec(dqkv), vec(datt), cvec(d_dout), cvec(d_qkv), cvec(att), B, T, C, NH);
  } else {
    attention_forward(space, vec(out), vec(att), cvec(d_qkv), B, T, NH, kvh, hs);
    attention_backward(space, vec(dqkv), vec(datt), cvec(d_dout), cvec(d_qkv), cvec(att), B, T, NH, kvh, hs);
  }
  return {to_host(out), to_host(att), to_host(dqkv)};
}

template <class Real>
class GroupedQueryAttention : public ::testing::Test {};
TYPED_TEST_SUITE(GroupedQueryAttention, DoubleAndFloat);
template <class Real>
constexpr double kTol = tolerance_for<Real>(1e-13, 1e-5);

TYPED_TEST(GroupedQueryAttention, EqualsMultiHeadOnRepeatedKvHeads) {
  for (const int kvh : {1, NH / 2, NH}) {
    SCOPED_TRACE("kv heads " + std::to_string(kvh));
    const int g = NH / kvh, row = gqa_row(kvh);
    const Host qkv = random_vector(B * T * row, 100 + kvh, -2.0, 2.0);
    const Host dout = random_vector(B * T * C, 200 + kvh);
    const auto gqa = run_attention<TypeParam>(qkv, dout, kvh, false);
    const auto mha = run_attention<TypeParam>(repeat_kv(qkv, kvh), dout, kvh, true);
    expect_close(gqa.out, mha.out, kTol<TypeParam>, "out");
    expect_close(gqa.att, mha.att, kTol<TypeParam>, "att");
    Host dq, want_dq, dk, want_dk, dv, want_dv;
    for (int n = 0; n < B * T; ++n) {
      for (int c = 0; c < C; ++c) {
        dq.push_back(gqa.dqkv[n * row + c]);
        want_dq.push_back(mha.dqkv[n * 3 * C + c]);
      }
      for (int kv = 0; kv < kvh; ++kv)
        for (int i = 0; i < hs; ++i) {
          dk.push_back(gqa.dqkv[n * row + kv_column(kvh, 1, kv, i)]);
          dv.push_back(gqa.dqkv[n * row + kv_column(kvh, 2, kv, i)]);
          double k_sum = 0, v_sum = 0;
          for (int h = kv * g; h < (kv + 1) * g; ++h) {
            k_sum += mha.dqkv[n * 3 * C + C + h * hs + i];
            v_sum += mha.dqkv[n * 3 * C + 2 * C + h * hs + i];
          }
          want_dk.push_back(k_sum);
          want_dv.push_back(v_sum);
        }
    }
    expect_close(dq, want_dq, kTol<TypeParam>, "dq");
    expect_close(dk, want_dk, 10 * kTol<TypeParam>, "dk = Σ over the group of the multi-head dk");
    expect_close(dv, want_dv, 10 * kTol<TypeParam>, "dv = Σ over the group of the multi-head dv");
  }
}

TEST(GroupedQueryAttention, BackwardMatchesFiniteDifferences) {
  for (const int kvh : {1, NH / 2}) {
    SCOPED_TRACE("kv heads " + std::to_string(kvh));
    Host qkv = random_vector(B * T * gqa_row(kvh), 300 + kvh, -2.0, 2.0);
    const Host r = random_vector(B * T * C, 400 + kvh);
    const Host num = numeric_gradient(qkv, [&] { return dot(run_attention<double>(qkv, r, kvh, false).out, r); });
    expect_close(run_attention<double>(qkv, r, kvh, false).dqkv, num, 1e-6, "dqkv");
  }
}

}  // namespace test_attention_gqa
}  // namespace meshtrain::test
