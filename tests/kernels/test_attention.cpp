// Causal self-attention against a naive loop with an explicit mask, and its gradient against
// central differences.
#include "kernels/attention.hpp"

#include "kernel_test_utils.hpp"

namespace meshtrain::test {
namespace test_attention {

constexpr int B = 2, T = 5, C = 12, NH = 3, hs = C / NH;

struct AttentionResult {
  Host out, att;
};

// For each (b, h, t): scores over every key position s, −∞ where s > t, softmax (shifted by the
// largest unmasked score), weighted sum of v.
AttentionResult attention_reference(const Host& qkv) {
  AttentionResult r{Host(B * T * C, 0.0), Host(B * NH * T * T, 0.0)};
  const double scale = 1.0 / std::sqrt(static_cast<double>(hs));
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < NH; ++h)
      for (int t = 0; t < T; ++t) {
        std::vector<double> score(T);
        for (int s = 0; s < T; ++s) {
          double d = 0;
          for (int i = 0; i < hs; ++i)
            d += qkv[(b * T + t) * 3 * C + h * hs + i] * qkv[(b * T + s) * 3 * C + C + h * hs + i];
          score[s] = s <= t ? d * scale : -std::numeric_limits<double>::infinity();
        }
        double top = -std::numeric_limits<double>::infinity();
        for (int s = 0; s < T; ++s) top = std::max(top, score[s]);
        double denom = 0;
        for (int s = 0; s < T; ++s) denom += std::exp(score[s] - top);
        for (int s = 0; s < T; ++s) {
          const double p = std::exp(score[s] - top) / denom;
          r.att[((b * NH + h) * T + t) * T + s] = p;
          for (int i = 0; i < hs; ++i)
            r.out[(b * T + t) * C + h * hs + i] += p * qkv[(b * T + s) * 3 * C + 2 * C + h * hs + i];
        }
      }
  return r;
}

AttentionResult run_forward(const Host& qkv) {
  ExecSpace space;
  auto d_qkv = to_device<double>(qkv);
  auto out = to_device<double>(nan_filled(B * T * C));
  auto att = to_device<double>(nan_filled(B * NH * T * T));
  attention_forward(space, vec(out), vec(att), cvec(d_qkv), B, T, C, NH);
  return {to_host(out), to_host(att)};
}

TEST(Attention, ForwardMatchesNaiveMaskedLoop) {
  const Host qkv = random_vector(B * T * 3 * C, 61, -2.0, 2.0);
  const auto got = run_forward(qkv);
  const auto want = attention_reference(qkv);
  expect_close(got.out, want.out, 1e-13, "out");
  expect_close(got.att, want.att, 1e-13, "att");
  for (int r = 0; r < B * NH * T; ++r)
    for (int s = r % T + 1; s < T; ++s) EXPECT_EQ(got.att[r * T + s], 0.0) << "future position";
}

// The last key of each sequence has a huge dot product with every query: it must not leak into
// earlier rows, not even through the row maximum (exp(score − max) would underflow to 0 there).
TEST(Attention, FutureKeyDoesNotLeakIntoEarlierRows) {
  Host qkv = random_vector(B * T * 3 * C, 64, -1.0, 1.0);
  for (int b = 0; b < B; ++b)
    for (int t = 0; t < T; ++t)
      for (int c = 0; c < C; ++c) {
        qkv[(b * T + t) * 3 * C + c] = 1.0 + 0.1 * qkv[(b * T + t) * 3 * C + c];  // q > 0
        if (t == T - 1) qkv[(b * T + t) * 3 * C + C + c] = 300.0;                 // last key
      }
  const auto got = run_forward(qkv);
  const auto want = attention_reference(qkv);
  expect_close(got.out, want.out, 1e-13, "out");
  expect_close(got.att, want.att, 1e-13, "att");
}

TEST(Attention, BackwardMatchesFiniteDifferences) {
  Host qkv = random_vector(B * T * 3 * C, 62, -2.0, 2.0);
  const Host r = random_vector(B * T * C, 63);
  const Host num = numeric_gradient(qkv, [&] { return dot(run_forward(qkv).out, r); });

  const auto fwd = run_forward(qkv);
  ExecSpace space;
  auto d_qkv = to_device<double>(qkv);
  auto d_att = to_device<double>(fwd.att);
  auto dout = to_device<double>(r);
  auto dqkv = to_device<double>(nan_filled(B * T * 3 * C));  // written, not accumulated
  auto datt = to_device<double>(nan_filled(B * NH * T * T));
  attention_backward(space, vec(dqkv), vec(datt), cvec(dout), cvec(d_qkv), cvec(d_att), B, T, C, NH);
  const Host got = to_host(dqkv);
  // Report q, k and v separately: a wrong stride or transpose shows up in one of them.
  const char* part[] = {"dq", "dk", "dv"};
  for (int p = 0; p < 3; ++p) {
    Host g, e;
    for (int n = 0; n < B * T; ++n)
      for (int c = 0; c < C; ++c) {
        g.push_back(got[n * 3 * C + p * C + c]);
        e.push_back(num[n * 3 * C + p * C + c]);
      }
    expect_close(g, e, 1e-6, part[p]);
  }
}

}  // namespace test_attention
}  // namespace meshtrain::test
