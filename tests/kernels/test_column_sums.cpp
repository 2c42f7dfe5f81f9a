// The column sums (kernels/column_sum.hpp) and the embedding gradient over many chunks of rows: bitwise
// equal to the fixed order the header documents, computed here on the host (sums only: the products
// of the norms' terms are left to the digest, as a compiler may contract them), and a digest of every
// result for the ctest runs under other team sizes and thread counts to compare bitwise
// (tests/kernels/CMakeLists.txt: column_sums_digest_*). The position table's gradient with documents
// (a sum by position within the document, not a column sum) is among them.
#include "kernels/bias.hpp"
#include "kernels/encoder.hpp"
#include "kernels/layernorm.hpp"
#include "kernels/rmsnorm.hpp"

#include "common/kokkos_counters.hpp"
#include "kernel_test_utils.hpp"

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>

namespace meshtrain::test {
namespace test_column_sums {

// Several chunks with a short last one, several column blocks with a short last one; a batch of
// more than one chunk for dwpe; a vocabulary of two digit passes with one token in ~40 % of places.
constexpr int N = 3 * kColumnSumRows + 17, C = 2 * kColumnSumBlock + 9;
constexpr int B = kColumnSumRows + 5, T = 3, Ce = kColumnSumBlock + 3, V = 300;

std::vector<std::int32_t> skewed_tokens(int count) {
  std::vector<std::int32_t> tok(count);
  std::mt19937 gen(91);
  std::uniform_int_distribution<int> any(0, V - 1);
  for (auto& t : tok) t = gen() % 5 < 2 ? 7 : any(gen);
  return tok;
}

// out[c] += Σ_n x[n,c] in the documented order: chunk 0 from out, the others from 0, then in order.
template <class Real>
Host fixed_order_column_sum(const std::vector<Real>& out, const std::vector<Real>& x, int rows, int cols) {
  using A = accum_t<Real>;
  Host result(cols);
  for (int c = 0; c < cols; ++c) {
    A total = 0;
    for (int k = 0; k * kColumnSumRows < rows; ++k) {
      A partial = k == 0 ? A(out[c]) : A(0);
      for (int n = k * kColumnSumRows; n < rows && n < (k + 1) * kColumnSumRows; ++n) partial += A(x[n * cols + c]);
      total = k == 0 ? partial : total + partial;
    }
    result[c] = double(Real(total));
  }
  return result;
}

// Two documents per sequence, cut in one of three places (an empty first document among them).
constexpr int kDocs = 2;
std::vector<int> document_offsets() {
  std::vector<int> offsets;
  for (int b = 0; b < B; ++b) offsets.insert(offsets.end(), {0, (b % 3 == 0) ? 1 : (b % 3 == 1 ? T : 0), T});
  return offsets;
}
// Position n's row of wpe: t less the start of its document.
int position_in_document(const std::vector<int>& offsets, int n) {
  const int t = n % T, cut = offsets[(n / T) * (kDocs + 1) + 1];
  return t >= cut ? t - cut : t;
}

template <class Real>
Host as_host(const std::vector<Real>& v) {
  Host h(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) h[i] = double(v[i]);
  return h;
}

template <class Real>
std::map<std::string, std::vector<Real>> run_column_sums() {
  ExecSpace space;
  std::map<std::string, std::vector<Real>> got;
  const Host dout = random_vector(N * C, 201), x = random_vector(N * C, 202), w = random_vector(C, 203, 0.5, 1.5);
  const Host g0 = random_vector(C, 204), mean = random_vector(N, 205), rstd = random_vector(N, 206, 0.5, 2.0);
  {
    auto db = to_device<Real>(g0);
    bias_backward(space, vec(db), vec(column_partials<Real>(N, C)), cvec(to_device<Real>(dout)), N, C);
    got["bias"] = raw(db);
  }
  {
    auto dinp = to_device<Real>(filled(N * C, 0));
    auto dw = to_device<Real>(g0);
    auto db = to_device<Real>(g0);
    const auto m = to_device<accum_t<Real>>(mean), s = to_device<accum_t<Real>>(rstd);
    layernorm_backward(space, vec(dinp), vec(dw), vec(db), vec(column_partials<Real>(N, C, 2)),
                       cvec(to_device<Real>(dout)), cvec(to_device<Real>(x)), cvec(to_device<Real>(w)), cvec(m),
                       cvec(s), N, C);
    got["layernorm_dweight"] = raw(dw);
    got["layernorm_dbias"] = raw(db);
  }
  {
    auto dinp = to_device<Real>(filled(N * C, 0));
    auto dw = to_device<Real>(g0);
    const auto s = to_device<accum_t<Real>>(rstd);
    rmsnorm_backward(space, vec(dinp), vec(dw), vec(column_partials<Real>(N, C)), cvec(to_device<Real>(dout)),
                     cvec(to_device<Real>(x)), cvec(to_device<Real>(w)), cvec(s), N, C);
    got["rmsnorm_dweight"] = raw(dw);
  }
  const auto tok = to_device(skewed_tokens(B * T));
  const Host edout = random_vector(B * T * Ce, 207);
  for (const VocabRange range : {VocabRange{}, VocabRange{5, 40, false}}) {
    auto dwte = to_device<Real>(random_vector(V * Ce, 208));
    auto dwpe = to_device<Real>(random_vector(T * Ce, 209));
    encoder_backward(space, vec(dwte), range.with_positions ? vec(dwpe) : Vec<Real>(),
                     vec(column_partials<Real>(B, T * Ce)), vec(token_order(B * T)), cvec(to_device<Real>(edout)),
                     cvec(tok), B, T, Ce, V, range);
    const std::string name = range.with_positions ? "encoder" : "encoder_range";
    got[name + "_dwte"] = raw(dwte);
    got[name + "_dwpe"] = raw(dwpe);
  }
  {
    const auto offsets = document_offsets();
    Buffer<int> seg("meshtrain::test::documents", offsets.size());
    auto mirror = Kokkos::create_mirror_view(seg);
    for (std::size_t i = 0; i < offsets.size(); ++i) mirror(i) = offsets[i];
    Kokkos::deep_copy(seg, mirror);
    auto dwte = to_device<Real>(random_vector(V * Ce, 208));
    auto dwpe = to_device<Real>(random_vector(T * Ce, 209));
    encoder_backward(space, vec(dwte), vec(dwpe), vec(column_partials<Real>(B, T * Ce)), vec(token_order(B * T)),
                     cvec(to_device<Real>(edout)), cvec(tok), B, T, Ce, V, {}, AttentionSegments{cvec(seg), kDocs});
    got["encoder_documents_dwpe"] = raw(dwpe);
  }
  return got;
}

template <class Real>
void expect_fixed_order() {
  const auto got = run_column_sums<Real>();
  auto rounded = [](const Host& h) {
    std::vector<Real> v(h.size());
    for (std::size_t i = 0; i < h.size(); ++i) v[i] = Real(h[i]);
    return v;
  };
  const auto dout = rounded(random_vector(N * C, 201)), g0 = rounded(random_vector(C, 204));
  const Host bias = fixed_order_column_sum(g0, dout, N, C);
  EXPECT_TRUE(bitwise_equal(got.at("bias"), rounded(bias))) << "bias_backward";
  EXPECT_TRUE(bitwise_equal(got.at("layernorm_dbias"), rounded(bias))) << "layernorm dbias";

  // dwpe: B rows of T·Ce; dwte: each token's rows in position order from its row, rounded once.
  const auto edout = rounded(random_vector(B * T * Ce, 207)), wte0 = rounded(random_vector(V * Ce, 208));
  const auto wpe0 = rounded(random_vector(T * Ce, 209));
  EXPECT_TRUE(bitwise_equal(got.at("encoder_dwpe"), rounded(fixed_order_column_sum(wpe0, edout, B, T * Ce))));
  {
    // With documents: each row of wpe from its start, its positions' rows in position order, rounded once.
    using A = accum_t<Real>;
    const auto offsets = document_offsets();
    std::vector<A> acc(wpe0.begin(), wpe0.end());
    for (int n = 0; n < B * T; ++n)
      for (int c = 0; c < Ce; ++c) acc[position_in_document(offsets, n) * Ce + c] += A(edout[n * Ce + c]);
    EXPECT_TRUE(bitwise_equal(got.at("encoder_documents_dwpe"), std::vector<Real>(acc.begin(), acc.end())))
        << "dwpe with documents";
  }
  const auto tok = skewed_tokens(B * T);
  for (const VocabRange range : {VocabRange{}, VocabRange{5, 40, false}}) {
    using A = accum_t<Real>;
    std::vector<A> acc(wte0.begin(), wte0.end());
    for (int n = 0; n < B * T; ++n) {
      const int row = tok[n] - range.first;
      if (row < 0 || row >= range.rows) continue;
      for (int c = 0; c < Ce; ++c) acc[row * Ce + c] += A(edout[n * Ce + c]);
    }
    std::vector<Real> want(acc.begin(), acc.end());
    const std::string name = range.with_positions ? "encoder" : "encoder_range";
    EXPECT_TRUE(bitwise_equal(got.at(name + "_dwte"), want)) << name;
  }
}

TEST(ColumnSums, BitwiseTheDocumentedOrderFloat) { expect_fixed_order<float>(); }
TEST(ColumnSums, BitwiseTheDocumentedOrderBf16) { expect_fixed_order<bf16>(); }

// Every result against the naive double loop (in double), so the order above sums the right things.
TEST(ColumnSums, DoubleMatchesNaiveSums) {
  const auto got = run_column_sums<double>();
  const Host dout = random_vector(N * C, 201), x = random_vector(N * C, 202), g0 = random_vector(C, 204);
  const Host mean = random_vector(N, 205), rstd = random_vector(N, 206, 0.5, 2.0);
  Host bias = g0, lnw = g0, rmsw = g0;
  for (int n = 0; n < N; ++n)
    for (int c = 0; c < C; ++c) {
      bias[c] += dout[n * C + c];
      lnw[c] += dout[n * C + c] * (x[n * C + c] - mean[n]) * rstd[n];
      rmsw[c] += dout[n * C + c] * x[n * C + c] * rstd[n];
    }
  expect_close(as_host(got.at("bias")), bias, 1e-13, "bias");
  expect_close(as_host(got.at("layernorm_dbias")), bias, 1e-13, "layernorm dbias");
  expect_close(as_host(got.at("layernorm_dweight")), lnw, 1e-13, "layernorm dweight");
  expect_close(as_host(got.at("rmsnorm_dweight")), rmsw, 1e-13, "rmsnorm dweight");
  const auto tok = skewed_tokens(B * T);
  const Host edout = random_vector(B * T * Ce, 207);
  Host wte = random_vector(V * Ce, 208), wpe = random_vector(T * Ce, 209);
  Host wte_range = wte, wpe_documents = wpe;
  const auto offsets = document_offsets();
  for (int n = 0; n < B * T; ++n)
    for (int c = 0; c < Ce; ++c) {
      wte[tok[n] * Ce + c] += edout[n * Ce + c];
      wpe[(n % T) * Ce + c] += edout[n * Ce + c];
      wpe_documents[position_in_document(offsets, n) * Ce + c] += edout[n * Ce + c];
      if (tok[n] >= 5 && tok[n] < 45) wte_range[(tok[n] - 5) * Ce + c] += edout[n * Ce + c];
    }
  expect_close(as_host(got.at("encoder_dwte")), wte, 1e-13, "dwte");
  expect_close(as_host(got.at("encoder_dwpe")), wpe, 1e-13, "dwpe");
  expect_close(as_host(got.at("encoder_range_dwte")), wte_range, 1e-13, "dwte of rows 5..44");
  expect_close(as_host(got.at("encoder_documents_dwpe")), wpe_documents, 1e-13, "dwpe with documents");
}

// Phase 2 runs in phase 1's launch (its last team combines), whatever the number of chunks: one launch a
// call, and the ticket back at zero after it. A ticket left over would keep every later call's last team
// from combining (the calls of the tests above, one after another, would then miss their sums).
TEST(ColumnSums, OneLaunchACallAndTheTicketBackAtZero) {
  ExecSpace space;
  for (const int rows : {kColumnSumRows, 4 * kColumnSumRows + 1}) {
    SCOPED_TRACE(std::to_string(rows) + " rows");
    const Host dout = random_vector(std::size_t(rows) * C, 301);
    auto db = to_device<float>(filled(C, 0));
    auto partials = column_partials<float>(rows, C);
    const auto d_dout = to_device<float>(dout);
    const auto call = [&] {
      bias_backward(space, vec(db), vec(partials), cvec(d_dout), rows, C);
      space.fence();
    };
    call();  // once uncounted: the ticket is made on first use
    const KokkosCounts counts = count_kokkos(call);
    EXPECT_EQ(counts.launches(), 1) << format_counts(counts);
    const auto ticket = Kokkos::create_mirror_view_and_copy(HostSpace(), column_sum_ticket());
    EXPECT_EQ(ticket(0), 0u);
    Host want(C, 0.0);
    for (int n = 0; n < rows; ++n)
      for (int c = 0; c < C; ++c) want[c] += 2 * double(float(dout[std::size_t(n) * C + c]));
    expect_close(to_host(db), want, 1e-4, "two calls' sums");
  }
}

// FNV-1a over the bytes of every result, float, bf16 and double, written to the file that
// MESHTRAIN_COLUMN_SUM_DIGEST names (the ctest runs under other team sizes and threads compare them).
TEST(ColumnSums, Digest) {
  const char* path = std::getenv("MESHTRAIN_COLUMN_SUM_DIGEST");
  if (path == nullptr) GTEST_SKIP() << "MESHTRAIN_COLUMN_SUM_DIGEST is not set";
  std::uint64_t h = 1469598103934665603ull;
  auto add = [&](const auto& results) {
    for (const auto& [name, values] : results) {
      for (char ch : name) h = (h ^ std::uint8_t(ch)) * 1099511628211ull;
      const auto* bytes = reinterpret_cast<const unsigned char*>(values.data());
      for (std::size_t i = 0; i < values.size() * sizeof(values[0]); ++i) h = (h ^ bytes[i]) * 1099511628211ull;
    }
  };
  add(run_column_sums<float>());
  add(run_column_sums<bf16>());
  add(run_column_sums<double>());
  std::ofstream(path) << std::hex << h << '\n';
  std::printf("column sums digest %016llx (team size asked %d)\n", static_cast<unsigned long long>(h),
              requested_team_size());
}

}  // namespace test_column_sums
}  // namespace meshtrain::test
