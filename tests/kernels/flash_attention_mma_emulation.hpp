// The tensor-core attention backward (kernels/flash_attention_mma.cpp) emulated on the host: its three
// kernels' loops in their order (kernels/flash_attention_mma_plan.hpp's tile walk, mask and score
// gradient, the same functions the CUDA kernels call), tiles of 64 with rows past T as zeros, P and dS
// rounded to Real before the second products, sums in float. Only the order of the terms inside one
// tensor-core product differs from the device (the hardware's own), so the CPU tests check the algorithm
// against the materialised path here, and the device test checks the kernel against this to rounding.
#pragma once

#include "kernel_test_utils.hpp"
#include "kernels/flash_attention_mma_plan.hpp"

#include <cmath>
#include <vector>

namespace meshtrain::test {

struct MmaBackwardInputs {
  int B, T, NH, KVH, hs;
  const Host& qkv;   // [B,T,(NH+2KVH)·hs], values Real holds
  const Host& dout;  // [B,T,NH·hs]
  const Host& out;   // the forward's, rounded to Real
  const Host& lse;   // [B,NH,T], float values
  const std::vector<int>& offsets;
  int docs;
};

// dqkv as the tensor-core kernels write it: every value rounded to Real.
template <class Real>
Host emulate_mma_backward(const MmaBackwardInputs& in) {
  using namespace flash_mma;
  const int B = in.B, T = in.T, NH = in.NH, KVH = in.KVH, hs = in.hs;
  const detail::DocumentBounds bounds{in.offsets.empty() ? nullptr : in.offsets.data(), in.docs, T};
  const int g = NH / KVH, tiles = tile_count(T);
  const long row = long(NH + 2 * KVH) * hs, q_cols = long(NH) * hs;
  const float scale = float(1.0 / std::sqrt(double(hs)));
  auto value = [](const Host& x, long i) { return static_cast<float>(x[std::size_t(i)]); };
  auto q = [&](int b, int h, int i, int d) { return value(in.qkv, (long(b) * T + i) * row + long(h) * hs + d); };
  auto k = [&](int b, int kv, int j, int d) { return value(in.qkv, (long(b) * T + j) * row + long(NH + kv) * hs + d); };
  auto v = [&](int b, int kv, int j, int d) {
    return value(in.qkv, (long(b) * T + j) * row + long(NH + KVH + kv) * hs + d);
  };
  auto dout = [&](int b, int h, int i, int d) { return value(in.dout, (long(b) * T + i) * q_cols + long(h) * hs + d); };

  // The D kernel.
  std::vector<float> D(std::size_t(B) * NH * T);
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < NH; ++h)
      for (int t = 0; t < T; ++t) {
        float sum = 0.0f;
        for (int d = 0; d < hs; ++d) sum += dout(b, h, t, d) * value(in.out, (long(b) * T + t) * q_cols + h * hs + d);
        D[(std::size_t(b) * NH + h) * T + t] = sum;
      }

  // P and dS of a tile pair, [64][64], rounded to Real as the kernels round them.
  std::vector<float> P(kTile * kTile), dS(kTile * kTile);
  auto tile_pair = [&](int b, int h, int qt, int kt) {
    const int i0 = qt * kTile, j0 = kt * kTile, kv = h / g;
    for (int r = 0; r < kTile; ++r)
      for (int c = 0; c < kTile; ++c) {
        const int i = i0 + r, j = j0 + c;
        float qk = 0.0f, dov = 0.0f;
        if (i < T && j < T) {
          for (int d = 0; d < hs; ++d) {
            qk += q(b, h, i, d) * k(b, kv, j, d);
            dov += dout(b, h, i, d) * v(b, kv, j, d);
          }
        }
        const long at = (long(b) * NH + h) * T + i;
        const bool row_in = i < T;
        const ScoreGradient sg =
            score_gradient(qk, dov, row_in ? value(in.lse, at) : 0.0f, row_in ? D[std::size_t(at)] : 0.0f, scale,
                           visible(i, j, row_in ? bounds.start(b, i) : i, T));
        P[r * kTile + c] = float(Real(sg.p));
        dS[r * kTile + c] = float(Real(sg.ds));
      }
  };

  Host dqkv(in.qkv.size(), std::nan(""));
  std::vector<float> acc1(std::size_t(kTile) * hs), acc2(std::size_t(kTile) * hs);
  // The dK/dV kernel.
  for (int b = 0; b < B; ++b)
    for (int kv = 0; kv < KVH; ++kv)
      for (int kt = 0; kt < tiles; ++kt) {
        std::fill(acc1.begin(), acc1.end(), 0.0f);  // dK
        std::fill(acc2.begin(), acc2.end(), 0.0f);  // dV
        for (int jh = 0; jh < g; ++jh) {
          const int h = kv * g + jh;
          for (int qt = kt; qt <= last_query_tile(bounds, b, kt); ++qt) {
            tile_pair(b, h, qt, kt);
            for (int c = 0; c < kTile; ++c)
              for (int d = 0; d < hs; ++d)
                for (int r = 0; r < kTile && qt * kTile + r < T; ++r) {
                  acc2[c * hs + d] += P[r * kTile + c] * dout(b, h, qt * kTile + r, d);
                  acc1[c * hs + d] += dS[r * kTile + c] * q(b, h, qt * kTile + r, d);
                }
          }
        }
        for (int c = 0; c < kTile && kt * kTile + c < T; ++c)
          for (int d = 0; d < hs; ++d) {
            const long at = (long(b) * T + kt * kTile + c) * row + d;
            dqkv[std::size_t(at + long(NH + kv) * hs)] = double(Real(scale * acc1[c * hs + d]));
            dqkv[std::size_t(at + long(NH + KVH + kv) * hs)] = double(Real(acc2[c * hs + d]));
          }
      }
  // The dQ kernel.
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < NH; ++h)
      for (int qt = 0; qt < tiles; ++qt) {
        std::fill(acc1.begin(), acc1.end(), 0.0f);
        for (int kt = first_kv_tile(bounds, b, qt); kt <= qt; ++kt) {
          tile_pair(b, h, qt, kt);
          for (int r = 0; r < kTile; ++r)
            for (int d = 0; d < hs; ++d)
              for (int c = 0; c < kTile && kt * kTile + c < T; ++c)
                acc1[r * hs + d] += dS[r * kTile + c] * k(b, h / g, kt * kTile + c, d);
        }
        for (int r = 0; r < kTile && qt * kTile + r < T; ++r)
          for (int d = 0; d < hs; ++d)
            dqkv[std::size_t((long(b) * T + qt * kTile + r) * row + long(h) * hs + d)] =
                double(Real(scale * acc1[r * hs + d]));
      }
  return dqkv;
}

}  // namespace meshtrain::test
