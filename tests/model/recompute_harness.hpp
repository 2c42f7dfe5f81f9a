// Shared by the recomputation tests: drives one model of either family (model.arch) the way the
// pipeline executor does (several micro-batches' forwards in their slots, then their backwards in
// another order) and records everything a caller can observe — losses, stage outputs, input
// gradients, parameter gradients — so that the runs of two recomputation modes can be compared bit
// for bit.
#pragma once

#include "model/families/gpt2.hpp"
#include "model/families/llama.hpp"
#include "model/language_model.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

namespace meshtrain::test {

// A stage to drive: the model (L H C V T …), its micro-batch, its place in the pipeline and the micro-batches
// in flight (run_pipeline_like's slots).
struct StageCase {
  ModelConfig model;
  int batch;
  StagePlace place;
  int slots;
};

// A value in [-1, 1) from (tensor name, global element index): the same on every tensor-parallel rank
// that holds the element, whatever the layout.
inline double hashed_unit(const std::string& name, std::int64_t index) {
  std::uint64_t z = std::hash<std::string>{}(name) ^ (std::uint64_t(index) * 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  return double(z >> 11) / double(1ull << 52) - 1.0;
}

// A llama of m's sizes (L H C V T) with kv_heads key/value heads and a SwiGLU width of ffn.
inline ModelConfig llama_of(ModelConfig m, int kv_heads, int ffn) {
  m.arch = Arch::llama;
  m.kv_heads = kv_heads;
  m.ffn_hidden = ffn;
  return m;
}

// Weights with non-trivial norm weights and bias values, so every gradient path carries signal.
template <class Real>
void fill_weights(LanguageModel<Real>& model) {
  auto w = Kokkos::create_mirror_view(model.weights());
  for (const TensorInfo& t : model.layout().tensors()) {
    const double base = t.init == InitKind::ones ? 1.0 : 0.0;
    const double scale = t.shape.size() >= 2 ? 0.3 : 0.1;
    for (std::size_t i = 0; i < t.numel; ++i) {
      const std::int64_t g = t.global_index(i);
      w(t.offset + i) = g < 0 ? Real(0) : Real(base + scale * hashed_unit(t.name, g));
    }
  }
  Kokkos::deep_copy(model.weights(), w);
}

template <class Real>
std::vector<Real> to_host(CVec<Real> v) {
  std::vector<Real> out(v.extent(0));
  using Host = Kokkos::View<Real*, Kokkos::HostSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>;
  Kokkos::deep_copy(Host(out.data(), out.size()), v);
  return out;
}

template <class Real>
void from_host(Vec<Real> v, const std::vector<Real>& values) {
  Kokkos::deep_copy(v, Kokkos::View<const Real*, Kokkos::HostSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>(
                           values.data(), values.size()));
}

template <class Real>
struct Observed {
  std::vector<Real> losses;                    // last stage: each micro-batch's loss
  std::vector<std::vector<Real>> outputs;      // not last: each micro-batch's stage output
  std::vector<std::vector<Real>> input_grads;  // not first: each micro-batch's input gradient
  std::vector<Real> grads;                     // the parameter gradients, accumulated over all
  ActivationSizes sizes;                       // what the model allocated
  RouterStatistics router;                     // MoE blocks: what their routers saw over both rounds
};

// Of `whole` (a micro-batch's N·C elements), the part a stage buffer of `elements` holds: all of it, or
// under sequence parallelism the tensor-parallel rank's block of rows.
template <class Real>
std::vector<Real> rows_held(const std::vector<Real>& whole, std::size_t elements, const Comm* tp) {
  if (elements == whole.size()) return whole;
  const auto first = whole.begin() + std::ptrdiff_t(std::size_t(tp->rank()) * elements);
  return {first, first + std::ptrdiff_t(elements)};
}

// Of `whole` (B sequences of T rows of `cols` elements), the rows `chunks` holds of each (all of them
// without context parallelism).
template <class T>
std::vector<T> chunk_rows(const std::vector<T>& whole, int B, int seq_len, std::size_t cols,
                          const ContextChunks& chunks) {
  if (!chunks.split()) return whole;
  const int Tl = chunks.local_rows();
  std::vector<T> out(std::size_t(B) * std::size_t(Tl) * cols);
  for (int b = 0; b < B; ++b) {
    for (int r = 0; r < Tl; ++r) {
      const auto from = whole.begin() + std::ptrdiff_t((std::size_t(b) * seq_len + chunks.position(r)) * cols);
      std::copy(from, from + std::ptrdiff_t(cols), out.begin() + std::ptrdiff_t((std::size_t(b) * Tl + r) * cols));
    }
  }
  return out;
}

// Context parallelism's part of a run (run_pipeline_like): the cp group, and the documents of every
// sequence (B·(docs+1) offsets over the whole sequence; none: one per sequence).
struct ContextSplit {
  Comm* cp = nullptr;
  std::vector<int> offsets;
  int docs = 0;
  ContextChunks chunks(const ModelConfig& m) const {
    return cp != nullptr && cp->size() > 1 ? ContextChunks::of_rank(cp->rank(), cp->size(), m.seq_len)
                                           : ContextChunks{};
  }
};

// Two rounds over `slots` micro-batches: forwards 0, 1, …, then backwards in reverse (the 1F1B/GPipe
// cool-down order), then again with backwards in forward order. Stage inputs and output gradients
// (what a pipeline neighbour would send) and tokens are drawn from fixed seeds, so they are the
// same for every mode and on every tensor-parallel rank (each rank's block of their rows under sequence
// parallelism; each context-parallel rank's chunks of the whole sequences under `context`). Every loss
// term is weighted by 1 / (the micro-batches' whole tokens), whatever the layout.
template <class Real>
Observed<Real> run_pipeline_like(const ModelConfig& m, int batch, StagePlace place, int slots, Recompute recompute,
                                 Comm* tp = nullptr, const ContextSplit& context = {}) {
  ExecSpace space;
  const auto made =
      make_language_model<Real>(space, m, batch, tp, place, slots, recompute, nullptr, nullptr, context.cp);
  LanguageModel<Real>& model = *made;
  fill_weights(model);
  model.zero_grads();
  const ContextChunks chunks = context.chunks(m);
  const int whole_tokens = batch * m.seq_len;
  const int N = chunks.split() ? batch * chunks.local_rows() : whole_tokens;
  Buffer<int> offsets("offsets", context.offsets.size());
  Kokkos::deep_copy(offsets,
                    Kokkos::View<const int*, Kokkos::HostSpace>(context.offsets.data(), context.offsets.size()));
  for (int k = 0; k < slots && context.docs > 0; ++k) model.set_documents(k, {CVec<int>(offsets), context.docs});
  std::mt19937_64 rng(21);
  std::uniform_int_distribution<int> token(0, m.vocab - 1);
  std::normal_distribution<double> normal(0.0, 1.0);
  auto draw = [&](std::size_t n, double scale) {
    std::vector<Real> v(n);
    for (auto& x : v) x = Real(scale * normal(rng));
    return v;
  };
  std::vector<Buffer<int>> inputs, targets;
  for (int k = 0; k < slots; ++k) {
    inputs.emplace_back("inputs", N);
    targets.emplace_back("targets", N);
    std::vector<int> in(whole_tokens), tg(whole_tokens);
    for (int i = 0; i < whole_tokens; ++i) {
      in[i] = token(rng);
      tg[i] = token(rng);
    }
    in = chunk_rows(in, batch, m.seq_len, 1, chunks);
    tg = chunk_rows(tg, batch, m.seq_len, 1, chunks);
    Kokkos::deep_copy(inputs.back(), Kokkos::View<const int*, Kokkos::HostSpace>(in.data(), N));
    Kokkos::deep_copy(targets.back(), Kokkos::View<const int*, Kokkos::HostSpace>(tg.data(), N));
  }
  const std::size_t NC = std::size_t(whole_tokens) * m.d_model;
  // A neighbour's rows as this rank holds them: its chunks, then its block of those under sequence parallelism.
  const auto held = [&](const std::vector<Real>& whole, Vec<Real> into) {
    from_host(into, rows_held(chunk_rows(whole, batch, m.seq_len, std::size_t(m.d_model), chunks), into.extent(0), tp));
  };
  Observed<Real> seen;
  for (int round = 0; round < 2; ++round) {
    for (int k = 0; k < slots; ++k) {
      if (!place.first()) held(draw(NC, 1.0), model.stage_input(k));
      model.stage_forward(k, CVec<int>(inputs[k].data(), N));
      if (place.last()) {
        const LossSum sum;
        sum.clear(space);
        model.stage_loss(k, CVec<int>(targets[k].data(), N), Real(1) / Real(whole_tokens * slots), sum);
        seen.losses.push_back(Real(typename LanguageModel<Real>::Accum(sum.read(space))));
      } else {
        space.fence();
        seen.outputs.push_back(to_host(model.stage_output(k)));
      }
    }
    for (int j = 0; j < slots; ++j) {
      const int k = round == 0 ? slots - 1 - j : j;
      if (!place.last()) held(draw(NC, 1e-2), model.output_gradient());
      model.stage_backward(k, CVec<int>(inputs[k].data(), N));
      space.fence();
      if (!place.first()) seen.input_grads.push_back(to_host(model.input_gradient()));
    }
  }
  space.fence();
  seen.grads = to_host(CVec<Real>(model.grads()));
  seen.sizes = model.activation_elements();
  seen.router = model.router_statistics();
  return seen;
}

// |actual − expected| ≤ tolerance · (1 + |expected|), element by element; the worst one reported (values
// of about unit size computed in two orders of summation differ by the unit's rounding).
template <class Real>
void expect_close_rows(const std::vector<Real>& expected, const std::vector<Real>& actual, double tolerance,
                       const std::string& what) {
  ASSERT_EQ(expected.size(), actual.size()) << what;
  ASSERT_FALSE(expected.empty()) << what << ": nothing was compared";
  double worst = 0;
  std::size_t at = 0;
  for (std::size_t i = 0; i < expected.size(); ++i) {
    const double e = double(expected[i]), a = double(actual[i]);
    const double excess = std::abs(a - e) / (1 + std::abs(e));
    if (!(excess <= worst)) {  // NaN counts as the worst
      worst = std::isnan(excess) ? INFINITY : excess;
      at = i;
    }
  }
  EXPECT_LE(worst, tolerance) << what << "[" << at << "]: " << double(actual[at]) << " instead of "
                              << double(expected[at]);
}

// Bitwise equality, reporting the first element that differs and by how much.
template <class Real>
void expect_identical(const std::vector<Real>& expected, const std::vector<Real>& actual, const std::string& what) {
  ASSERT_EQ(expected.size(), actual.size()) << what;
  ASSERT_FALSE(expected.empty()) << what << ": nothing was compared";
  for (std::size_t i = 0; i < expected.size(); ++i) {
    if (std::memcmp(&expected[i], &actual[i], sizeof(Real)) != 0) {
      FAIL() << what << "[" << i << "]: " << actual[i] << " instead of " << expected[i] << " (difference "
             << actual[i] - expected[i] << ")";
    }
  }
}

template <class Real>
void expect_same_run(const Observed<Real>& none, const Observed<Real>& other, StagePlace place,
                     const std::string& mode) {
  if (place.last()) {
    expect_identical(none.losses, other.losses, mode + " losses");
  } else {
    for (std::size_t k = 0; k < none.outputs.size(); ++k) {
      expect_identical(none.outputs[k], other.outputs[k], mode + " stage output " + std::to_string(k));
    }
  }
  if (!place.first()) {
    for (std::size_t k = 0; k < none.input_grads.size(); ++k) {
      expect_identical(none.input_grads[k], other.input_grads[k], mode + " input gradient " + std::to_string(k));
    }
  }
  expect_identical(none.grads, other.grads, mode + " gradients");
}

}  // namespace meshtrain::test
