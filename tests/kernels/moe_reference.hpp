// Host references for the mixture-of-experts kernel tests, written as share/docs/usage.md states the
// rules (top-k by a stable sort, capacity by walking the priority order), in double.
#pragma once

#include "kernel_test_utils.hpp"

#include <algorithm>
#include <numeric>
#include <random>
#include <vector>

namespace meshtrain::test {

using Ints = std::vector<int>;

// The k indices of the largest values of `row` in descending order, equal values lower index first.
inline Ints top_k(const Host& row, int k) {
  Ints order(row.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return row[a] > row[b]; });
  order.resize(k);
  return order;
}

// Each token's k distinct experts, drawn from [0, E) without `excluded` (−1: none excluded).
inline Ints random_experts(int N, int E, int k, std::uint64_t seed, int excluded = -1) {
  std::mt19937_64 gen(seed);
  Ints pool;
  for (int e = 0; e < E; ++e) {
    if (e != excluded) pool.push_back(e);
  }
  Ints expert;
  for (int n = 0; n < N; ++n) {
    std::shuffle(pool.begin(), pool.end(), gen);
    expert.insert(expert.end(), pool.begin(), pool.begin() + k);
  }
  return expert;
}

struct Assignment {
  Ints slot, row_token, routed, offsets;  // row_token holds the R kept rows only
};

// Walks the assignments in priority order (choice j, then token n) and hands out each expert's rows.
inline Assignment reference_assign(const Ints& expert, int N, int E, int k, int capacity) {
  Assignment a{Ints(N * k, -1), {}, Ints(E, 0), Ints(E + 1, 0)};
  for (int q : expert) ++a.routed[q];
  for (int e = 0; e < E; ++e) {
    const int kept = capacity > 0 ? std::min(capacity, a.routed[e]) : a.routed[e];
    a.offsets[e + 1] = a.offsets[e] + kept;
  }
  a.row_token.assign(a.offsets[E], -1);
  Ints taken(E, 0);
  for (int j = 0; j < k; ++j) {
    for (int n = 0; n < N; ++n) {
      const int e = expert[n * k + j];
      if (capacity > 0 && taken[e] == capacity) continue;
      const int row = a.offsets[e] + taken[e]++;
      a.slot[n * k + j] = row;
      a.row_token[row] = n;
    }
  }
  return a;
}

}  // namespace meshtrain::test
