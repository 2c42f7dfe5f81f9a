// The position kernels under context parallelism: each of cp ranks holds two load-balanced chunks of every
// sequence (ContextChunks), and its rows must take their global positions. Rotary embedding (forward and
// backward) and GPT-2's embedding forward on a rank's rows must give bitwise the whole sequence's rows; the
// embedding's backward, summed over the ranks, the whole sequence's gradients (dwpe bitwise without documents,
// each position's rows on one rank; to rounding with documents, whose position rows gather rows of several
// ranks). Documents cross the chunks' boundaries; cp 1 (both chunks on one rank), 2 and 3.
#include "kernels/encoder.hpp"
#include "kernels/rotary.hpp"

#include "ring_attention_cases.hpp"

namespace meshtrain::test {
namespace test_context_positions {

constexpr int B = 2, rows = 4, NH = 3, KV = 1, hs = 6, heads = NH + KV, width = (NH + 2 * KV) * hs;
constexpr int C = 10, V = 13;

// Sequence 0: documents [0, 3), [3, T − 2), [T − 2, T); sequence 1: [0, 2), [2, T) and an empty one.
std::vector<int> document_offsets(int T) { return {0, 3, T - 2, T, 0, 2, T, T}; }
constexpr int kDocs = 3;

struct Documents {
  Buffer<int> offsets;
  AttentionSegments segments;
  Documents(int T, bool with) : offsets(to_device(document_offsets(T))) {
    if (with) segments = {cvec(offsets), kDocs};
  }
};

std::vector<std::int32_t> tokens(int T) {
  std::vector<std::int32_t> t(std::size_t(B) * T);
  for (std::size_t n = 0; n < t.size(); ++n) t[n] = std::int32_t((n * 5 + n / 3) % V);  // repeats within a rank
  return t;
}

std::vector<std::int32_t> local_tokens(const std::vector<std::int32_t>& whole, int T, const ContextChunks& chunks) {
  Host as_double(whole.begin(), whole.end());
  const Host local = local_rows(as_double, B, T, 1, chunks);
  return std::vector<std::int32_t>(local.begin(), local.end());
}

// f(cp, T, documents) for cp 1, 2 and 3, without documents and with them.
template <class F>
void for_each_case(const F& f) {
  for (int cp : {1, 2, 3}) {
    for (bool with_documents : {false, true}) {
      const int T = 2 * cp * rows;
      SCOPED_TRACE("cp " + std::to_string(cp) + (with_documents ? " with documents" : ""));
      const Documents documents(T, with_documents);
      f(cp, T, documents);
    }
  }
}

template <class Real>
Host rotated(const Host& x, int T, const AttentionSegments& segments, const ContextChunks& chunks, bool backward,
             int table_positions) {
  ExecSpace space;
  const auto table = make_rotary_table<accum_t<Real>>(table_positions, hs, 10000.0);
  auto d_x = to_device<Real>(x);
  const int N = int(x.size() / width);
  if (backward) {
    rotary_backward(space, vec(d_x), table, N, T, width, heads, hs, segments, chunks);
  } else {
    rotary_forward(space, vec(d_x), table, N, T, width, heads, hs, segments, chunks);
  }
  return to_host(d_x);
}

template <class Real>
class ContextPositions : public ::testing::Test {};
TYPED_TEST_SUITE(ContextPositions, DoubleAndFloat);

TYPED_TEST(ContextPositions, RotaryRowsTakeTheirGlobalPositions) {
  for_each_case([](int cp, int T, const Documents& documents) {
    const Host x = random_vector(std::size_t(B) * T * width, 90 + cp);
    for (bool backward : {false, true}) {
      const Host whole = rotated<TypeParam>(x, T, documents.segments, {}, backward, T);
      for (int r = 0; r < cp; ++r) {
        const ContextChunks chunks = ContextChunks::of_rank(r, cp, T);
        const Host local = rotated<TypeParam>(local_rows(x, B, T, width, chunks), chunks.local_rows(),
                                              documents.segments, chunks, backward, T);
        EXPECT_TRUE(bitwise_equal(local, local_rows(whole, B, T, width, chunks)))
            << "rank " << r << (backward ? " backward" : " forward");
      }
    }
  });
}

struct Embedded {
  Host out, dwte, dwpe;
};

// The embedding forward and backward of B sequences of T rows (`chunks`' rows of the whole when split):
// wpe of `positions` rows, gradients from zero.
Embedded embed(const std::vector<std::int32_t>& tok, const Host& wte, const Host& wpe, const Host& dout, int T,
               int positions, const AttentionSegments& segments, const ContextChunks& chunks) {
  ExecSpace space;
  auto d_tok = to_device(tok);
  auto out = to_device<double>(nan_filled(std::size_t(B) * T * C));
  auto dwte = to_device<double>(filled(V * C, 0)), dwpe = to_device<double>(filled(std::size_t(positions) * C, 0));
  encoder_forward(space, vec(out), cvec(d_tok), cvec(to_device<double>(wte)), cvec(to_device<double>(wpe)), B, T, C, {},
                  segments, chunks);
  encoder_backward(space, vec(dwte), vec(dwpe), vec(column_partials<double>(B, std::size_t(T) * C)),
                   vec(token_order(std::size_t(B) * T)), cvec(to_device<double>(dout)), cvec(d_tok), B, T, C, V, {},
                   segments, chunks);
  return {to_host(out), to_host(dwte), to_host(dwpe)};
}

TEST(ContextPositions, EmbeddingRowsTakeTheirGlobalPositions) {
  for_each_case([](int cp, int T, const Documents& documents) {
    const auto tok = tokens(T);
    const Host wte = random_vector(V * C, 30 + cp), wpe = random_vector(std::size_t(T) * C, 40 + cp);
    const Host dout = random_vector(std::size_t(B) * T * C, 50 + cp);
    const Embedded whole = embed(tok, wte, wpe, dout, T, T, documents.segments, {});
    Host dwte(whole.dwte.size(), 0.0), dwpe(whole.dwpe.size(), 0.0);
    for (int r = 0; r < cp; ++r) {
      const ContextChunks chunks = ContextChunks::of_rank(r, cp, T);
      const int Tl = chunks.local_rows();
      const Embedded local = embed(local_tokens(tok, T, chunks), wte, wpe, local_rows(dout, B, T, C, chunks), Tl, T,
                                   documents.segments, chunks);
      EXPECT_TRUE(bitwise_equal(local.out, local_rows(whole.out, B, T, C, chunks))) << "rank " << r << " out";
      for (std::size_t i = 0; i < dwte.size(); ++i) dwte[i] += local.dwte[i];
      for (std::size_t i = 0; i < dwpe.size(); ++i) dwpe[i] += local.dwpe[i];
    }
    expect_close(dwte, whole.dwte, 1e-14, "dwte summed over the ranks");
    if (documents.segments.docs > 0) {
      expect_close(dwpe, whole.dwpe, 1e-14, "dwpe summed over the ranks");
    } else {
      EXPECT_TRUE(bitwise_equal(dwpe, whole.dwpe)) << "dwpe summed over the ranks";
    }
  });
}

}  // namespace test_context_positions
}  // namespace meshtrain::test
