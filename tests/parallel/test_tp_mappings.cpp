// The tensor-parallel mappings (parallel/tensor_parallel_mappings.hpp) over the world, run with 1,
// 2 and 4 ranks, in float and double.
//
// Adjoint: each mapping's backward is the transpose of its forward, ⟨f(x), y⟩ = ⟨x, fᵀ(y)⟩, for
// random x and y. A tensor held by each rank for itself (partial sums, the copies a copy-to-region
// hands out) is a vector per rank: its inner product is the sum over the group of the ranks' inner
// products (taken here with MPI directly, not through the Comm). A replicated tensor is one vector:
// its inner product is taken once, and every rank must hold the same bits. So a backward that
// forgot its sum or summed twice breaks the equality on more than one rank.
//
// Closed forms: every rank draws its values from (seed, rank), so each rank computes every other
// rank's inputs and checks sums (of small integers, exact) and maxima against them. Each summing or
// maximising end is one collective; the identity ends and a group of one rank do not communicate.
// Sequence parallelism's gather and scatter (two buffers, a shard and the whole) the same way, at 2 and
// 4 ranks. (The Comm's bitwise all-gathers are tests/parallel/test_comm.cpp's.)
#include "parallel/tensor_parallel_mappings.hpp"

#include "parallel/comm_decorator.hpp"

#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <random>
#include <span>
#include <vector>

namespace meshtrain {
namespace {

// n values from (seed, who) drawn by `value`; who = -1 for a replicated tensor, the same on every rank.
template <class T, class Draw>
std::vector<T> draw_with(unsigned seed, int who, std::size_t n, Draw value) {
  std::mt19937_64 engine(seed * 1000003u + unsigned(who + 1));
  std::vector<T> v(n);
  for (T& e : v) e = T(value(engine));
  return v;
}
// Values in [-1, 1).
template <class T>
std::vector<T> draw(unsigned seed, int who, std::size_t n) {
  return draw_with<T>(seed, who, n, std::uniform_real_distribution<double>(-1.0, 1.0));
}
// Values in [0.1, 1): inner products of them are far from 0, whatever the draw.
template <class T>
std::vector<T> draw_positive(unsigned seed, int who, std::size_t n) {
  return draw_with<T>(seed, who, n, std::uniform_real_distribution<double>(0.1, 1.0));
}
// Small integers: exact in float, and so are their sums over a few ranks.
template <class T>
std::vector<T> draw_integers(unsigned seed, int who, std::size_t n) {
  return draw_with<T>(seed, who, n, std::uniform_int_distribution<int>(-1000, 1000));
}

// Counts the calls it passes on.
class CallCounter final : public CommDecorator {
 public:
  CallCounter(std::unique_ptr<Comm> inner, int& calls) : CommDecorator(std::move(inner)), calls_(calls) {}

 private:
  void around(const CallShape&, CallRef<void> call) override {
    ++calls_;
    call();
  }
  Request started(const CallShape&, CallRef<Request> call) override {
    ++calls_;
    return call();
  }
  int& calls_;
};

// A world group that counts its collectives.
struct Fixture {
  int collectives = 0;
  std::unique_ptr<Comm> comm = std::make_unique<CallCounter>(make_mpi_comm(MPI_COMM_WORLD), collectives);
  TensorParallelGroup group{comm.get()};
  int rank() const { return comm->rank(); }
  int size() const { return comm->size(); }
};

// Who holds a tensor: each rank its own (inner products summed over the group) or all the same.
enum class Held { per_rank, replicated };

// ⟨a, b⟩ over the group as `held` says, and Σ |a_i b_i| likewise (the scale of its rounding).
struct Dot {
  double value, scale;
};
template <class T>
Dot group_dot(Held held, std::span<const T> a, std::span<const T> b) {
  double local[2] = {0, 0};
  for (std::size_t i = 0; i < a.size(); ++i) {
    local[0] += double(a[i]) * double(b[i]);
    local[1] += std::abs(double(a[i]) * double(b[i]));
  }
  if (held == Held::per_rank) {
    double sum[2];
    MPI_Allreduce(local, sum, 2, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    return {sum[0], sum[1]};
  }
  double lo = 0, hi = 0;  // a replicated tensor's inner product is the same on every rank
  MPI_Allreduce(&local[0], &lo, 1, MPI_DOUBLE, MPI_MIN, MPI_COMM_WORLD);
  MPI_Allreduce(&local[0], &hi, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  EXPECT_EQ(lo, hi) << "a replicated tensor differs between ranks";
  return {local[0], local[1]};
}

template <class T>
std::span<T> span_of(std::vector<T>& v) {
  return {v.data(), v.size()};
}

template <class T>
class TpMappings : public ::testing::Test {};
using Reals = ::testing::Types<float, double>;
TYPED_TEST_SUITE(TpMappings, Reals);

constexpr std::size_t n_rows = 13;  // a replicated or per-rank tensor's length

// One side of ⟨f(x), y⟩ = ⟨x, fᵀ(y)⟩: the tensor, who holds it, and the buffer the mapping is handed
// (a copy of the tensor: the mappings work in place).
template <class T>
struct Operand {
  Held held;
  std::vector<T> value;
  std::vector<T> buffer;
};
template <class T>
Operand<T> operand(Held held, std::vector<T> value) {
  return {held, value, value};
}

template <class T, class Mapping>
void expect_adjoint(const Mapping& mapping, Operand<T> x, Operand<T> y, int p, const char* name) {
  const Dot lhs = group_dot<T>(y.held, mapping.forward(span_of(x.buffer)), y.value);
  const Dot rhs = group_dot<T>(x.held, x.value, mapping.backward(span_of(y.buffer)));
  const double eps = std::numeric_limits<T>::epsilon();
  const double tolerance = 4 * double(p + x.value.size()) * eps * std::max(lhs.scale, rhs.scale);
  EXPECT_NEAR(lhs.value, rhs.value, tolerance) << name << ": ⟨f(x), y⟩ ≠ ⟨x, fᵀ(y)⟩";
  EXPECT_GT(std::abs(lhs.value), 100 * tolerance) << name << ": too small to tell";
}

TYPED_TEST(TpMappings, CopyToRegionIsAdjoint) {
  using T = TypeParam;
  Fixture f;
  expect_adjoint(CopyToRegion(f.group), operand(Held::replicated, draw<T>(1, -1, n_rows)),
                 operand(Held::per_rank, draw<T>(2, f.rank(), n_rows)), f.size(), "copy-to-region");
}

TYPED_TEST(TpMappings, ReduceFromRegionIsAdjoint) {
  using T = TypeParam;
  Fixture f;
  expect_adjoint(ReduceFromRegion(f.group), operand(Held::per_rank, draw<T>(3, f.rank(), n_rows)),
                 operand(Held::replicated, draw<T>(4, -1, n_rows)), f.size(), "reduce-from-region");
}

// Copy-to's backward and reduce-from's forward are the sum over the ranks; their other ends return
// their argument untouched; the vocabulary statistics are the maximum and the sum.
TYPED_TEST(TpMappings, SumsAndIdentitiesAsClosedForms) {
  using T = TypeParam;
  Fixture f;
  const int r = f.rank(), p = f.size();
  const bool communicates = p > 1;
  std::vector<T> sum(n_rows, T(0)), max(n_rows, -std::numeric_limits<T>::infinity());
  for (int s = 0; s < p; ++s) {
    const std::vector<T> xs = draw_integers<T>(9, s, n_rows);
    for (std::size_t i = 0; i < n_rows; ++i) {
      sum[i] += xs[i];
      max[i] = std::max(max[i], xs[i]);
    }
  }
  const std::vector<T> mine = draw_integers<T>(9, r, n_rows);
  std::vector<T> x = mine;
  EXPECT_EQ(CopyToRegion(f.group).forward(span_of(x)).data(), x.data());
  EXPECT_EQ(ReduceFromRegion(f.group).backward(span_of(x)).data(), x.data());
  EXPECT_EQ(x, mine);
  EXPECT_EQ(f.collectives, 0) << "an identity end communicated";

  CopyToRegion(f.group).backward(span_of(x));
  EXPECT_EQ(x, sum) << "copy-to-region's backward";
  EXPECT_EQ(f.collectives, communicates ? 1 : 0);
  x = mine;
  ReduceFromRegion(f.group).forward(span_of(x));
  EXPECT_EQ(x, sum) << "reduce-from-region's forward";
  x = mine;
  VocabParallelStatistics(f.group).sum_over_vocabulary(span_of(x));
  EXPECT_EQ(x, sum) << "the vocabulary statistics' sum";
  x = mine;
  VocabParallelStatistics(f.group).max_over_vocabulary(span_of(x));
  EXPECT_EQ(x, max) << "the vocabulary statistics' maximum";
  EXPECT_EQ(f.collectives, communicates ? 4 : 0);
}

// Without a group every mapping is the identity.
TYPED_TEST(TpMappings, NoGroupIsTheIdentity) {
  using T = TypeParam;
  const TensorParallelGroup none(nullptr);
  EXPECT_FALSE(none.active());
  const std::vector<T> mine = draw<T>(11, 0, n_rows);
  std::vector<T> x = mine;
  CopyToRegion(none).backward(span_of(x));
  ReduceFromRegion(none).forward(span_of(x));
  VocabParallelStatistics(none).max_over_vocabulary(span_of(x));
  EXPECT_EQ(x, mine);
}

// Sequence parallelism's mappings: a shard (n_rows) per rank and the whole (size · n_rows rows) each
// rank computes with or holds partial sums of, so every operand is a vector per rank.
template <class T, class Mapping>
void expect_sequence_adjoint(const Mapping& mapping, std::vector<T> x, std::size_t y_size, std::vector<T> y, int p,
                             const char* name) {
  std::vector<T> fx(y_size), fty(x.size());
  mapping.forward(std::span<const T>(x), span_of(fx));
  mapping.backward(std::span<const T>(y), span_of(fty));
  const Dot lhs = group_dot<T>(Held::per_rank, std::span<const T>(fx), std::span<const T>(y));
  const Dot rhs = group_dot<T>(Held::per_rank, std::span<const T>(x), std::span<const T>(fty));
  const double eps = std::numeric_limits<T>::epsilon();
  const double tolerance = 4 * double(p + x.size() + y.size()) * eps * std::max(lhs.scale, rhs.scale);
  EXPECT_NEAR(lhs.value, rhs.value, tolerance) << name << ": ⟨f(x), y⟩ ≠ ⟨x, fᵀ(y)⟩";
  EXPECT_GT(std::abs(lhs.value), 100 * tolerance) << name << ": too small to tell";
}

TYPED_TEST(TpMappings, GatherToRegionIsAdjoint) {
  using T = TypeParam;
  Fixture f;
  if (f.size() == 1) GTEST_SKIP() << "one rank holds the whole: no shard (SequenceMappingsWithoutAGroupKeepOneBuffer)";
  const std::size_t whole = n_rows * std::size_t(f.size());
  expect_sequence_adjoint(GatherToRegion(f.group), draw_positive<T>(12, f.rank(), n_rows), whole,
                          draw_positive<T>(13, f.rank(), whole), f.size(), "gather-to-region");
}

TYPED_TEST(TpMappings, ScatterFromRegionIsAdjoint) {
  using T = TypeParam;
  Fixture f;
  if (f.size() == 1) GTEST_SKIP() << "one rank holds the whole: no shard";
  const std::size_t whole = n_rows * std::size_t(f.size());
  expect_sequence_adjoint(ScatterFromRegion(f.group), draw_positive<T>(14, f.rank(), whole), n_rows,
                          draw_positive<T>(15, f.rank(), n_rows), f.size(), "scatter-from-region");
}

// The gather is every rank's shard in rank order, the scatter this rank's block of the sum; one
// collective each. A gather's output is the same bits on every rank.
TYPED_TEST(TpMappings, GatherAndScatterAsClosedForms) {
  using T = TypeParam;
  Fixture f;
  if (f.size() == 1) GTEST_SKIP() << "one rank holds the whole: no shard";
  const int r = f.rank(), p = f.size();
  const std::size_t whole = n_rows * std::size_t(p);
  std::vector<T> concatenated, sum(whole, T(0));
  for (int s = 0; s < p; ++s) {
    const std::vector<T> shard = draw_integers<T>(16, s, n_rows), partial = draw_integers<T>(17, s, whole);
    concatenated.insert(concatenated.end(), shard.begin(), shard.end());
    for (std::size_t i = 0; i < whole; ++i) sum[i] += partial[i];
  }
  std::vector<T> gathered(whole);
  GatherToRegion(f.group).forward(std::span<const T>(draw_integers<T>(16, r, n_rows)), span_of(gathered));
  EXPECT_EQ(gathered, concatenated) << "gather-to-region's forward";
  std::vector<T> block(n_rows);
  ScatterFromRegion(f.group).forward(std::span<const T>(draw_integers<T>(17, r, whole)), span_of(block));
  const auto mine = sum.begin() + std::ptrdiff_t(std::size_t(r) * n_rows);
  EXPECT_EQ(block, std::vector<T>(mine, mine + std::ptrdiff_t(n_rows))) << "scatter-from-region's forward";
  const int calls = p > 1 ? 2 : 0;
  EXPECT_EQ(f.collectives, calls);
  group_dot<T>(Held::replicated, std::span<const T>(gathered), std::span<const T>(gathered));
}

// Without a group (or in a group of one) the shard is the whole: one buffer passes untouched, two are a
// caller's mistake.
TYPED_TEST(TpMappings, SequenceMappingsWithoutAGroupKeepOneBuffer) {
  using T = TypeParam;
  const TensorParallelGroup none(nullptr);
  const std::vector<T> mine = draw<T>(18, 0, n_rows);
  std::vector<T> x = mine, other(n_rows);
  GatherToRegion(none).forward(std::span<const T>(x), span_of(x));
  ScatterFromRegion(none).backward(std::span<const T>(x), span_of(x));
  EXPECT_EQ(x, mine);
  EXPECT_THROW(GatherToRegion(none).forward(std::span<const T>(x), span_of(other)), std::logic_error);
  EXPECT_THROW(ScatterFromRegion(none).forward(std::span<const T>(x), span_of(other)), std::logic_error);
}

}  // namespace
}  // namespace meshtrain
