// Helpers for the kernel tests: host data in double, device copies in any precision, central
// finite differences and a gradient comparison that reports the worst element.
#pragma once

#include "core/exec.hpp"
#include "kernels/column_sum.hpp"
#include "kernels/encoder.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

namespace meshtrain::test {

using Host = std::vector<double>;

inline Host random_vector(std::size_t n, std::uint64_t seed, double lo = -1.0, double hi = 1.0) {
  std::mt19937_64 gen(seed);
  std::uniform_real_distribution<double> dist(lo, hi);
  Host v(n);
  for (auto& x : v) x = dist(gen);
  return v;
}

inline Host filled(std::size_t n, double value) { return Host(n, value); }

inline Host nan_filled(std::size_t n) { return Host(n, std::numeric_limits<double>::quiet_NaN()); }

// A device buffer holding `host` rounded to Real.
template <class Real>
Buffer<Real> to_device(const Host& host) {
  Buffer<Real> buf("meshtrain::test::buffer", host.size());
  auto mirror = Kokkos::create_mirror_view(buf);
  for (std::size_t i = 0; i < host.size(); ++i) mirror(i) = static_cast<Real>(host[i]);
  Kokkos::deep_copy(buf, mirror);
  return buf;
}

inline Buffer<std::int32_t> to_device(const std::vector<std::int32_t>& host) {
  Buffer<std::int32_t> buf("meshtrain::test::tokens", host.size());
  auto mirror = Kokkos::create_mirror_view(buf);
  for (std::size_t i = 0; i < host.size(); ++i) mirror(i) = host[i];
  Kokkos::deep_copy(buf, mirror);
  return buf;
}

template <class Real>
Host to_host(const Buffer<Real>& buf) {
  Kokkos::fence();
  auto mirror = Kokkos::create_mirror_view(buf);
  Kokkos::deep_copy(mirror, buf);
  Host host(buf.extent(0));
  for (std::size_t i = 0; i < host.size(); ++i) host[i] = static_cast<double>(mirror(i));
  return host;
}

// The raw values, for bitwise comparisons.
template <class Real>
std::vector<Real> raw(const Buffer<Real>& buf) {
  Kokkos::fence();
  auto mirror = Kokkos::create_mirror_view(buf);
  Kokkos::deep_copy(mirror, buf);
  return std::vector<Real>(mirror.data(), mirror.data() + mirror.extent(0));
}

template <class Real>
Vec<Real> vec(const Buffer<Real>& buf) {
  return Vec<Real>(buf.data(), buf.extent(0));
}

template <class Real>
CVec<Real> cvec(const Buffer<Real>& buf) {
  return CVec<Real>(buf.data(), buf.extent(0));
}

inline double dot(const Host& a, const Host& b) {
  double s = 0;
  for (std::size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

inline Host minus(const Host& a, const Host& b) {
  Host d(a.size());
  for (std::size_t i = 0; i < a.size(); ++i) d[i] = a[i] - b[i];
  return d;
}

// Central differences of loss() with respect to every element of x (perturbed in place).
// Error ≈ h²·f'''/6 (truncation) + 1e-16·|L|/h (round-off); h = 1e-5 sits near the optimum
// (∛eps ≈ 6e-6) and leaves the worst element of every check 30× under a 1e-6 tolerance.
inline Host numeric_gradient(Host& x, const std::function<double()>& loss, double h = 1e-5) {
  Host grad(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) {
    const double saved = x[i];
    x[i] = saved + h;
    const double up = loss();
    x[i] = saved - h;
    const double down = loss();
    x[i] = saved;
    grad[i] = (up - down) / (2 * h);
  }
  return grad;
}

// Elementwise |a − e| / max(|a|, |e|, floor) ≤ tol, floor = 1e-2 · max|e| so that elements whose
// true value is near zero (where finite differences carry only their round-off, ~1e-16·|L|/h) are
// judged against the tensor's scale. Reports the worst element.
inline void expect_close(const Host& actual, const Host& expected, double tol, const std::string& what) {
  ASSERT_EQ(actual.size(), expected.size()) << what;
  double scale = 0;
  for (double e : expected) scale = std::max(scale, std::fabs(e));
  ASSERT_GT(scale, 0.0) << what << ": the expected values are all zero, the check would be empty";
  const double floor = 1e-2 * scale;
  double worst = 0;
  std::size_t worst_i = 0;
  for (std::size_t i = 0; i < actual.size(); ++i) {
    const double denom = std::max({std::fabs(actual[i]), std::fabs(expected[i]), floor});
    const double err = std::fabs(actual[i] - expected[i]) / denom;
    if (!(err <= worst) || std::isnan(err)) {
      worst = std::isnan(err) ? std::numeric_limits<double>::infinity() : err;
      worst_i = i;
    }
  }
  EXPECT_LE(worst, tol) << what << ": worst relative error at element " << worst_i << ": actual " << actual[worst_i]
                        << ", expected " << expected[worst_i];
}

// max |a − e| / max |e| ≤ tol: for comparing precisions, where an element that cancels to ~0
// carries the round-off of its summands rather than of its own size.
inline void expect_close_normwise(const Host& actual, const Host& expected, double tol, const std::string& what) {
  ASSERT_EQ(actual.size(), expected.size()) << what;
  double scale = 0, worst = 0;
  std::size_t worst_i = 0;
  for (std::size_t i = 0; i < actual.size(); ++i) {
    scale = std::max(scale, std::fabs(expected[i]));
    const double err = std::fabs(actual[i] - expected[i]);
    if (!(err <= worst)) {
      worst = std::isnan(err) ? std::numeric_limits<double>::infinity() : err;
      worst_i = i;
    }
  }
  ASSERT_GT(scale, 0.0) << what << ": the expected values are all zero, the check would be empty";
  EXPECT_LE(worst / scale, tol) << what << ": worst error at element " << worst_i << ": actual " << actual[worst_i]
                                << ", expected " << expected[worst_i] << ", largest expected magnitude " << scale;
}

// The precisions a kernel is checked in against a double reference (typed suites), and the
// tolerance of each.
using DoubleAndFloat = ::testing::Types<double, float>;
template <class Real>
constexpr double tolerance_for(double in_double, double in_float) {
  return std::is_same_v<Real, double> ? in_double : in_float;
}

template <class Real>
bool bitwise_equal(const std::vector<Real>& a, const std::vector<Real>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(Real)) == 0;
}

// The workspaces the column sums take (kernels/column_sum.hpp, encoder.hpp), as a model carves them.
template <class Real>
Buffer<accum_t<Real>> column_partials(std::size_t N, std::size_t C, std::size_t S = 1) {
  return Buffer<accum_t<Real>>("meshtrain::test::column_partials", column_sum_workspace(N, C, S));
}
inline Buffer<std::int32_t> token_order(std::size_t N) {
  return Buffer<std::int32_t>("meshtrain::test::token_order", token_order_workspace(N));
}

}  // namespace meshtrain::test
