// The collectives of Comm against closed forms, on every rank, over the world and over
// sub-communicators: even/odd world ranks (a group that is not the world), and the world in reverse
// order (a group whose rank order is not the world's, which allgather and reduce_scatter must follow).
//
// Every rank fills its buffers from its world rank w and the element index i; the expected results
// are sums, maxima and placements over the group's world ranks, computed arithmetically here from
// the group's shape, never through MPI. Values are small integers (or doubles exact to the last
// bit), so every comparison is exact. bf16 and fp16 sums are held to the sum in double of the same
// inputs, rounded once. The non-blocking reduce-scatter and all-gathers are held to their blocking
// twins bit for bit, on values whose sums round. All-to-all blocks arrive bit for bit where the
// displacements put them (uneven, zero and asymmetric counts, gaps left untouched). The MPI backend
// runs with the default chunk and with tiny chunks (1, 3, 1000 elements), which splits every
// message the way a >2^31-element buffer is split. Every element type (float, double, bf16, fp16,
// int64) goes through every collective by its tag, reductions (sum and max) on values exact in each
// type, moves bit for bit.
// The NCCL backend runs the same checks on device memory when built with NCCL and given a GPU per
// rank; without a GPU, making an NCCL Comm must fail with CUDA's error and a HINT.
#include "core/mpi_check.hpp"
#include "parallel/comm.hpp"

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <mpi.h>

#if defined(MESHTRAIN_HAVE_NCCL)
#include <cuda_runtime.h>
#endif

#include <algorithm>
#include <bit>
#include <chrono>
#include <climits>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

// The MPI profiling interface: this test defines the MPI calls the backend makes, records each
// call's element count while the log is on, and forwards to the library's PMPI_ entry points. So
// the chunk tests see how many MPI calls a buffer took and how long each was.
namespace {
struct CallLog {
  bool on = false;
  std::vector<std::pair<std::string, int>> calls;
};
CallLog call_log;
void record(const char* call, int count) {
  if (call_log.on) call_log.calls.emplace_back(call, count);
}
}  // namespace

extern "C" {
int MPI_Allreduce(const void* send, void* recv, int count, MPI_Datatype type, MPI_Op op, MPI_Comm comm) {
  record("MPI_Allreduce", count);
  return PMPI_Allreduce(send, recv, count, type, op, comm);
}
int MPI_Iallreduce(const void* send, void* recv, int count, MPI_Datatype type, MPI_Op op, MPI_Comm comm,
                   MPI_Request* request) {
  record("MPI_Iallreduce", count);
  return PMPI_Iallreduce(send, recv, count, type, op, comm, request);
}
int MPI_Reduce_scatter_block(const void* send, void* recv, int count, MPI_Datatype type, MPI_Op op, MPI_Comm comm) {
  record("MPI_Reduce_scatter_block", count);
  return PMPI_Reduce_scatter_block(send, recv, count, type, op, comm);
}
int MPI_Ireduce_scatter_block(const void* send, void* recv, int count, MPI_Datatype type, MPI_Op op, MPI_Comm comm,
                              MPI_Request* request) {
  record("MPI_Ireduce_scatter_block", count);
  return PMPI_Ireduce_scatter_block(send, recv, count, type, op, comm, request);
}
int MPI_Allgather(const void* send, int send_count, MPI_Datatype send_type, void* recv, int recv_count,
                  MPI_Datatype recv_type, MPI_Comm comm) {
  record("MPI_Allgather", send_count);
  return PMPI_Allgather(send, send_count, send_type, recv, recv_count, recv_type, comm);
}
int MPI_Iallgather(const void* send, int send_count, MPI_Datatype send_type, void* recv, int recv_count,
                   MPI_Datatype recv_type, MPI_Comm comm, MPI_Request* request) {
  record("MPI_Iallgather", send_count);
  return PMPI_Iallgather(send, send_count, send_type, recv, recv_count, recv_type, comm, request);
}
int MPI_Alltoallv(const void* send, const int* send_counts, const int* send_starts, MPI_Datatype send_type, void* recv,
                  const int* recv_counts, const int* recv_starts, MPI_Datatype recv_type, MPI_Comm comm) {
  int size = 1, total = 0;
  PMPI_Comm_size(comm, &size);
  for (int r = 0; r < size; ++r) total += send_counts[r];
  record("MPI_Alltoallv", total);
  return PMPI_Alltoallv(send, send_counts, send_starts, send_type, recv, recv_counts, recv_starts, recv_type, comm);
}
int MPI_Allgatherv(const void* send, int send_count, MPI_Datatype send_type, void* recv, const int* recv_counts,
                   const int* recv_starts, MPI_Datatype recv_type, MPI_Comm comm) {
  int size = 1, total = 0;
  PMPI_Comm_size(comm, &size);
  for (int r = 0; r < size; ++r) total += recv_counts[r];
  record("MPI_Allgatherv", total);
  return PMPI_Allgatherv(send, send_count, send_type, recv, recv_counts, recv_starts, recv_type, comm);
}
int MPI_Bcast(void* data, int count, MPI_Datatype type, int root, MPI_Comm comm) {
  record("MPI_Bcast", count);
  return PMPI_Bcast(data, count, type, root, comm);
}
int MPI_Send(const void* data, int count, MPI_Datatype type, int peer, int tag, MPI_Comm comm) {
  record("MPI_Send", count);
  return PMPI_Send(data, count, type, peer, tag, comm);
}
int MPI_Recv(void* data, int count, MPI_Datatype type, int peer, int tag, MPI_Comm comm, MPI_Status* status) {
  record("MPI_Recv", count);
  return PMPI_Recv(data, count, type, peer, tag, comm, status);
}
int MPI_Isend(const void* data, int count, MPI_Datatype type, int peer, int tag, MPI_Comm comm, MPI_Request* request) {
  record("MPI_Isend", count);
  return PMPI_Isend(data, count, type, peer, tag, comm, request);
}
int MPI_Irecv(void* data, int count, MPI_Datatype type, int peer, int tag, MPI_Comm comm, MPI_Request* request) {
  record("MPI_Irecv", count);
  return PMPI_Irecv(data, count, type, peer, tag, comm, request);
}
}

namespace meshtrain {
namespace {

int world_rank() {
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}
int world_size() {
  int n = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  return n;
}

// ---------------------------------------------------------------------------------------------
// Groups and their closed forms

enum class Kind { world, parity, reversed };

// One group this rank belongs to, with its shape derived from the world size alone.
struct Group {
  Kind kind;
  std::string name;
  mpi::OwnedComm comm;
  int n = 1;  // world size
  int c = 0;  // parity: this rank's colour (world rank mod 2)

  // Group size and this rank's group rank, from the world rank alone.
  int size() const {
    if (kind == Kind::parity) return c == 0 ? (n + 1) / 2 : n / 2;
    return n;
  }
  int rank() const { return int(rank_of(world_rank())); }
  // Group rank of world rank w (a member of this group).
  long rank_of(long w) const {
    if (kind == Kind::parity) return w / 2;
    if (kind == Kind::reversed) return n - 1 - w;
    return w;
  }
  // World rank of group rank g.
  long world_of(int g) const {
    if (kind == Kind::parity) return 2L * g + c;
    if (kind == Kind::reversed) return n - 1L - g;
    return g;
  }
  // Σ over the group's world ranks, max and min of them: arithmetic series.
  long sum_world() const {
    const long m = size();
    if (kind == Kind::parity) return m * (m - 1) + c * m;  // Σ (2g + c), g < m
    return m * (m - 1) / 2;
  }
  long max_world() const { return kind == Kind::parity ? 2L * (size() - 1) + c : n - 1L; }
  long min_world() const { return kind == Kind::parity ? c : 0L; }
};

std::vector<Group> make_groups() {
  const int w = world_rank(), n = world_size();
  std::vector<Group> groups;
  groups.push_back({Kind::world, "world", mpi::OwnedComm(), n, 0});
  MPI_Comm_dup(MPI_COMM_WORLD, groups.back().comm.out());
  groups.push_back({Kind::parity, w % 2 == 0 ? "even ranks" : "odd ranks", mpi::OwnedComm(), n, w % 2});
  MPI_Comm_split(MPI_COMM_WORLD, w % 2, w, groups.back().comm.out());
  groups.push_back({Kind::reversed, "world reversed", mpi::OwnedComm(), n, 0});
  MPI_Comm_split(MPI_COMM_WORLD, 0, n - 1 - w, groups.back().comm.out());
  return groups;
}

// ---------------------------------------------------------------------------------------------
// Buffers where the backend wants them: host memory for MPI, device memory for NCCL.

enum class Space { host, device };

template <class T>
class Buffer {
 public:
  Buffer(Space space, const std::vector<T>& values) : space_(space), host_(values) {
#if defined(MESHTRAIN_HAVE_NCCL)
    if (space_ == Space::device) {
      EXPECT_EQ(cudaMalloc(&device_, std::max<std::size_t>(1, values.size()) * sizeof(T)), cudaSuccess);
      EXPECT_EQ(cudaMemcpy(device_, values.data(), values.size() * sizeof(T), cudaMemcpyHostToDevice), cudaSuccess);
    }
#endif
  }
  ~Buffer() {
#if defined(MESHTRAIN_HAVE_NCCL)
    if (device_ != nullptr) cudaFree(device_);
#endif
  }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  T* data() { return space_ == Space::device ? device_ : host_.data(); }
  std::vector<T> read() {
#if defined(MESHTRAIN_HAVE_NCCL)
    if (space_ == Space::device) {
      EXPECT_EQ(cudaMemcpy(host_.data(), device_, host_.size() * sizeof(T), cudaMemcpyDeviceToHost), cudaSuccess);
    }
#endif
    return host_;
  }

 private:
  Space space_;
  std::vector<T> host_;
  T* device_ = nullptr;
};

template <class T, class Fn>
std::vector<T> fill(std::size_t count, Fn&& fn) {
  std::vector<T> v(count);
  for (std::size_t i = 0; i < count; ++i) v[i] = static_cast<T>(fn(i));
  return v;
}

// Exact comparison of every element; reports the first mismatch and how many there are (other
// ranks also on stderr, since only rank 0 prints GoogleTest's results).
template <class T, class Fn>
void expect_all(const std::vector<T>& got, Fn&& want, const std::string& what) {
  std::size_t wrong = 0, first = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    if (got[i] != static_cast<T>(want(i))) {
      if (wrong++ == 0) first = i;
    }
  }
  if (wrong == 0) return;
  const std::string message = "rank " + std::to_string(world_rank()) + ": " + what + ": " + std::to_string(wrong) +
                              " of " + std::to_string(got.size()) + " elements wrong; first at " +
                              std::to_string(first) + ": got " + std::to_string(got[first]) + ", want " +
                              std::to_string(static_cast<T>(want(first)));
  if (world_rank() != 0) std::fprintf(stderr, "%s\n", message.c_str());
  ADD_FAILURE() << message;
}

// ---------------------------------------------------------------------------------------------
// The checks. Each one is a fixed sequence of collectives that every rank of the group runs, so
// they use EXPECT (never ASSERT): a rank that left early would leave the others waiting.

struct Case {
  Comm& comm;
  const Group& group;
  Space space;
  std::string label;  // backend, group, chunk and count, for failure messages
};

void check_shape(const Case& t) {
  EXPECT_EQ(t.comm.size(), t.group.size()) << t.label;
  EXPECT_EQ(t.comm.rank(), t.group.rank()) << t.label;
}

// x_w[i] = 1000 w + i mod 997  →  Σ = 1000 Σw + m (i mod 997).
void check_allreduce_sum(const Case& t, std::size_t count) {
  const long w = world_rank(), m = t.group.size(), s = t.group.sum_world();
  Buffer<float> x(t.space, fill<float>(count, [&](std::size_t i) { return 1000 * w + long(i % 997); }));
  t.comm.allreduce_sum(x.data(), count);
  expect_all(
      x.read(), [&](std::size_t i) { return 1000 * s + m * long(i % 997); }, t.label + " allreduce_sum");
}

// Even i: 10 w + i mod 7 − 500, odd i: −10 w + i mod 7 − 500 (doubles: plus i·2^-40, exact in
// double, lost in float); the maximum sits on the group's largest world rank for even i and its
// smallest for odd i, and every value is negative.
template <class T>
void check_allreduce_max(const Case& t, std::size_t count) {
  const long w = world_rank();
  const double fraction = std::is_same_v<T, double> ? std::ldexp(1.0, -40) : 0.0;
  auto value = [=](long rank, std::size_t i) {
    return double((i % 2 == 0 ? 10 * rank : -10 * rank) + long(i % 7) - 500) + double(i) * fraction;
  };
  Buffer<T> x(t.space, fill<T>(count, [&](std::size_t i) { return value(w, i); }));
  t.comm.allreduce_max(x.data(), count);
  expect_all(
      x.read(), [&](std::size_t i) { return value(i % 2 == 0 ? t.group.max_world() : t.group.min_world(), i); },
      t.label + (std::is_same_v<T, double> ? " allreduce_max(double)" : " allreduce_max"));
}

// x_w[i] = (w + 1)(1 + i·2^-40): exact in double (i < 2^20), lost in float.
void check_allreduce_double(const Case& t, std::size_t count) {
  const double w = world_rank(), m = t.group.size(), s = double(t.group.sum_world());
  const double ulp = std::ldexp(1.0, -40);
  Buffer<double> x(t.space, fill<double>(count, [&](std::size_t i) { return (w + 1) * (1 + double(i) * ulp); }));
  t.comm.allreduce_sum(x.data(), count);
  expect_all(
      x.read(), [&](std::size_t i) { return (s + m) * (1 + double(i) * ulp); }, t.label + " allreduce_sum(double)");
}

// An iallreduce in flight while a blocking allreduce and host work go on; then buckets of one
// buffer started together and waited in reverse order.
void check_iallreduce(const Case& t, std::size_t count) {
  const long w = world_rank(), m = t.group.size(), s = t.group.sum_world();
  Buffer<float> a(t.space, fill<float>(count, [&](std::size_t i) { return 1000 * w + long(i % 997); }));
  Buffer<float> b(t.space, fill<float>(count, [&](std::size_t i) { return 7 * w - long(i % 13); }));
  Request request = t.comm.iallreduce_sum(a.data(), count);
  EXPECT_EQ(request.pending(), count > 0) << t.label;
  t.comm.allreduce_sum(b.data(), count);
  double work = 0;
  for (int k = 1; k < 100000; ++k) work += 1.0 / k;
  request.wait();
  EXPECT_FALSE(request.pending()) << t.label;
  request.wait();  // a second wait returns at once
  EXPECT_GT(work, 1.0);
  expect_all(
      a.read(), [&](std::size_t i) { return 1000 * s + m * long(i % 997); }, t.label + " iallreduce_sum");
  expect_all(
      b.read(), [&](std::size_t i) { return 7 * s - m * long(i % 13); }, t.label + " allreduce during it");

  // Three buckets [0, q), [q, 2q + 1), [2q + 1, count), started in order, waited in reverse.
  Buffer<float> c(t.space, fill<float>(count, [&](std::size_t i) { return 3 * w + long(i % 101); }));
  const std::size_t q = count / 3, cut1 = std::min(count, q), cut2 = std::min(count, 2 * q + 1);
  std::vector<Request> buckets;
  buckets.push_back(t.comm.iallreduce_sum(c.data(), cut1));
  buckets.push_back(t.comm.iallreduce_sum(c.data() + cut1, cut2 - cut1));
  buckets.push_back(t.comm.iallreduce_sum(c.data() + cut2, count - cut2));
  for (auto it = buckets.rbegin(); it != buckets.rend(); ++it) it->wait();
  expect_all(
      c.read(), [&](std::size_t i) { return 3 * s + m * long(i % 101); }, t.label + " iallreduce buckets");
}

// send_w[b·n + i] = 1000 w + 100 b + i mod 97  →  group rank g gets 1000 Σw + m (100 g + i mod 97).
void check_reduce_scatter(const Case& t, std::size_t count) {
  const long w = world_rank(), m = t.group.size(), s = t.group.sum_world(), g = t.group.rank();
  Buffer<float> send(t.space, fill<float>(count * std::size_t(m), [&](std::size_t j) {
                       return 1000 * w + 100 * long(j / count) + long(j % count % 97);
                     }));
  Buffer<float> recv(t.space, std::vector<float>(count, -1.0f));
  t.comm.reduce_scatter_sum(send.data(), recv.data(), count);
  expect_all(
      recv.read(), [&](std::size_t i) { return 1000 * s + m * (100 * g + long(i % 97)); },
      t.label + " reduce_scatter_sum");
}

// send_w[i] = 1000 w + i mod 991  →  recv[g·n + i] = 1000 world_of(g) + i mod 991, in group order.
void check_allgather(const Case& t, std::size_t count) {
  const long w = world_rank(), m = t.group.size();
  Buffer<float> send(t.space, fill<float>(count, [&](std::size_t i) { return 1000 * w + long(i % 991); }));
  Buffer<float> recv(t.space, std::vector<float>(count * std::size_t(m), -1.0f));
  t.comm.allgather(send.data(), recv.data(), count);
  expect_all(
      recv.read(), [&](std::size_t j) { return 1000 * t.group.world_of(int(j / count)) + long(j % count % 991); },
      t.label + " allgather");
}

// The bits of a float, double, bf16, fp16 or int64, for comparisons that tell -0 from +0 (and NaNs apart).
template <class T>
std::uint64_t bits_of(T x) {
  if constexpr (std::is_integral_v<T>) {
    return std::uint64_t(std::make_unsigned_t<T>(x));
  } else if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
    std::conditional_t<std::is_same_v<T, float>, std::uint32_t, std::uint64_t> b = 0;
    std::memcpy(&b, &x, sizeof b);
    return b;
  } else {
    return x.bits;
  }
}

template <class T>
void expect_same_bits(const std::vector<T>& got, const std::vector<T>& want, const std::string& what,
                      const char* reference = "the blocking call's") {
  std::size_t wrong = 0, first = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    if (bits_of(got[i]) != bits_of(want[i]) && wrong++ == 0) first = i;
  }
  EXPECT_EQ(got.size(), want.size()) << what;
  if (wrong == 0) return;
  const std::string message = fmt::format(
      "rank {}: {}: {} of {} elements differ from {}; first at "
      "{}: bits 0x{:x}, want 0x{:x}",
      world_rank(), what, wrong, got.size(), reference, first, bits_of(got[first]), bits_of(want[first]));
  if (world_rank() != 0) std::fprintf(stderr, "%s\n", message.c_str());
  ADD_FAILURE() << message;
}

// Values whose sums round (magnitudes 2^-10 … 2^9, both signs, differing between ranks), so a
// different summation order would show in the bits.
float rounding_value(long rank, std::size_t j) {
  return float(std::sin(0.37 * double(j) + 1.3 * double(rank)) *
               std::ldexp(1.0, int((j + 5 * std::size_t(rank)) % 20) - 10));
}

// ireduce_scatter_sum and iallgather (float, bf16, fp16; out of place and in place) all in flight
// at once, started in one order and waited in the reverse one, with a blocking allreduce and host
// work while they fly: every result bitwise the blocking call's on the same inputs.
void check_nonblocking_against_blocking(const Case& t, std::size_t count) {
  const long w = world_rank();
  const std::size_t m = std::size_t(t.group.size()), g = std::size_t(t.group.rank());
  auto values = [&](std::size_t n, long salt) {
    return fill<float>(n, [&](std::size_t j) { return rounding_value(w + 100 * salt, j); });
  };
  auto in_place_block = [&](auto zero, long salt) {
    using T = decltype(zero);
    return fill<T>(count * m,
                   [&](std::size_t j) { return j / count == g ? T(rounding_value(w + 100 * salt, j % count)) : zero; });
  };

  // The blocking calls' results.
  Buffer<float> rs_send(t.space, values(count * m, 1)), rs_want(t.space, std::vector<float>(count, -1.0f));
  Buffer<float> rs2_send(t.space, values(count * m, 2)), rs2_want(t.space, std::vector<float>(count, -1.0f));
  t.comm.reduce_scatter_sum(rs_send.data(), rs_want.data(), count);
  t.comm.reduce_scatter_sum(rs2_send.data(), rs2_want.data(), count);
  Buffer<float> ag_send(t.space, values(count, 3)), ag_want(t.space, std::vector<float>(count * m, -1.0f));
  t.comm.allgather(ag_send.data(), ag_want.data(), count);
  Buffer<bf16> h_want(t.space, in_place_block(bf16(-1.0f), 4));
  t.comm.allgather(h_want.data() + g * count, h_want.data(), count);
  Buffer<fp16> f_send(t.space, fill<fp16>(count, [&](std::size_t j) { return fp16(rounding_value(w + 500, j)); }));
  Buffer<fp16> f_want(t.space, std::vector<fp16>(count * m, fp16(-1.0f)));
  t.comm.allgather(f_send.data(), f_want.data(), count);

  // The same, non-blocking, all in flight.
  Buffer<float> rs_got(t.space, std::vector<float>(count, -1.0f)), rs2_got(t.space, std::vector<float>(count, -1.0f));
  Buffer<float> ag_got(t.space, in_place_block(-1.0f, 3));
  Buffer<bf16> h_got(t.space, in_place_block(bf16(-1.0f), 4));
  Buffer<fp16> f_got(t.space, std::vector<fp16>(count * m, fp16(-1.0f)));
  Buffer<float> during(t.space, values(count, 6));
  std::vector<Request> requests;
  requests.push_back(t.comm.ireduce_scatter_sum(rs_send.data(), rs_got.data(), count));
  requests.push_back(t.comm.iallgather(ag_got.data() + g * count, ag_got.data(), count));
  requests.push_back(t.comm.ireduce_scatter_sum(rs2_send.data(), rs2_got.data(), count));
  requests.push_back(t.comm.iallgather(h_got.data() + g * count, h_got.data(), count));
  requests.push_back(t.comm.iallgather(f_send.data(), f_got.data(), count));
  for (const Request& r : requests) EXPECT_TRUE(r.pending()) << t.label;
  t.comm.allreduce_sum(during.data(), count);
  double work = 0;
  for (int k = 1; k < 100000; ++k) work += 1.0 / k;
  EXPECT_GT(work, 1.0);
  for (auto it = requests.rbegin(); it != requests.rend(); ++it) it->wait();
  for (const Request& r : requests) EXPECT_FALSE(r.pending()) << t.label;

  expect_same_bits(rs_got.read(), rs_want.read(), t.label + " ireduce_scatter_sum");
  expect_same_bits(rs2_got.read(), rs2_want.read(), t.label + " second ireduce_scatter_sum");
  expect_same_bits(ag_got.read(), ag_want.read(), t.label + " iallgather in place");
  expect_same_bits(h_got.read(), h_want.read(), t.label + " iallgather(bf16) in place");
  expect_same_bits(f_got.read(), f_want.read(), t.label + " iallgather(fp16)");
}

// From the last rank and the middle one (both non-zero when the group has more than one rank).
void check_broadcast(const Case& t, std::size_t count) {
  const long w = world_rank(), m = t.group.size();
  for (int root : {int(m - 1), int(m / 2)}) {
    Buffer<float> x(t.space, fill<float>(count, [&](std::size_t i) {
                      return t.group.rank() == root ? 1000 * w + long(i % 89) : -1;
                    }));
    t.comm.broadcast(x.data(), count, root);
    expect_all(
        x.read(), [&](std::size_t i) { return 1000 * t.group.world_of(root) + long(i % 89); },
        t.label + " broadcast from " + std::to_string(root));
  }
}

// Messages around the ring g → g + 1; each carries its sender's world rank and a marker.
void check_ring(const Case& t, std::size_t count, bool tags_match) {
  const int m = t.group.size(), g = t.group.rank();
  const int right = (g + 1) % m, left = (g + m - 1) % m;
  const long w = world_rank(), from_left = t.group.world_of(left), from_right = t.group.world_of(right);
  auto message = [&](long sender, long marker) {
    return fill<float>(count, [&](std::size_t i) { return 1000 * sender + 100 * marker + long(i % 83); });
  };
  auto want = [&](long sender, long marker) {
    return [=](std::size_t i) { return 1000 * sender + 100 * marker + long(i % 83); };
  };

  // Blocking both ways: even group ranks send first, odd ones receive first.
  if (m >= 2) {
    Buffer<float> out(t.space, message(w, 1)), in(t.space, std::vector<float>(count, -1.0f));
    if (g % 2 == 0) {
      t.comm.send(out.data(), count, right, 11);
      t.comm.recv(in.data(), count, left, 11);
    } else {
      t.comm.recv(in.data(), count, left, 11);
      t.comm.send(out.data(), count, right, 11);
    }
    expect_all(in.read(), want(from_left, 1), t.label + " send/recv ring");
  }
  // Blocking send against a posted irecv; isend against a blocking recv.
  {
    Buffer<float> out(t.space, message(w, 2)), in(t.space, std::vector<float>(count, -1.0f));
    Request r = t.comm.irecv(in.data(), count, left, 12);
    t.comm.send(out.data(), count, right, 12);
    r.wait();
    expect_all(in.read(), want(from_left, 2), t.label + " irecv + send");
  }
  {
    Buffer<float> out(t.space, message(w, 3)), in(t.space, std::vector<float>(count, -1.0f));
    Request r = t.comm.isend(out.data(), count, right, 13);
    t.comm.recv(in.data(), count, left, 13);
    r.wait();
    expect_all(in.read(), want(from_left, 3), t.label + " isend + recv");
  }
  // Both directions at once, every call non-blocking, told apart by tag (NCCL: by order).
  {
    Buffer<float> to_right(t.space, message(w, 4)), to_left(t.space, message(w, 5));
    Buffer<float> in_left(t.space, std::vector<float>(count, -1.0f)),
        in_right(t.space, std::vector<float>(count, -1.0f));
    std::vector<Request> requests;
    requests.push_back(t.comm.isend(to_right.data(), count, right, 21));
    requests.push_back(t.comm.isend(to_left.data(), count, left, 22));
    requests.push_back(t.comm.irecv(in_left.data(), count, left, 21));
    requests.push_back(t.comm.irecv(in_right.data(), count, right, 22));
    for (auto& r : requests) r.wait();
    expect_all(in_left.read(), want(from_left, 4), t.label + " isend/irecv rightwards");
    expect_all(in_right.read(), want(from_right, 5), t.label + " isend/irecv leftwards");
  }
  // Two messages to one peer, received in the opposite order: only tags can tell them apart.
  if (tags_match) {
    Buffer<float> first(t.space, message(w, 6)), second(t.space, message(w, 7));
    Buffer<float> in_first(t.space, std::vector<float>(count, -1.0f)),
        in_second(t.space, std::vector<float>(count, -1.0f));
    Request a = t.comm.isend(first.data(), count, right, 31);
    Request b = t.comm.isend(second.data(), count, right, 32);
    t.comm.recv(in_second.data(), count, left, 32);
    t.comm.recv(in_first.data(), count, left, 31);
    a.wait();
    b.wait();
    expect_all(in_first.read(), want(from_left, 6), t.label + " tag 31");
    expect_all(in_second.read(), want(from_left, 7), t.label + " tag 32");
  }
}

// Group rank g enters 30·g ms late; nobody may leave before the last one has entered. Ranks of one
// node share the steady clock, which is where ctest runs them.
void check_barrier(const Case& t) {
  using clock = std::chrono::steady_clock;
  const int g = t.group.rank(), m = t.group.size();
  std::this_thread::sleep_for(std::chrono::milliseconds(30 * g));
  const double entered = std::chrono::duration<double>(clock::now().time_since_epoch()).count();
  t.comm.barrier();
  const double left = std::chrono::duration<double>(clock::now().time_since_epoch()).count();
  std::vector<double> entries(std::size_t(m), 0.0);
  MPI_Allgather(&entered, 1, MPI_DOUBLE, entries.data(), 1, MPI_DOUBLE, t.group.comm.get());
  const double last = *std::max_element(entries.begin(), entries.end());
  EXPECT_GE(left, last) << t.label << ": group rank " << g << " left the barrier " << (last - left)
                        << " s before the last rank entered it";
}

// ---------------------------------------------------------------------------------------------
// The 16-bit types. The reference sum of a group is taken in double over the same rounded inputs
// (every rank rebuilds each group member's inputs from its world rank) and rounded once to T.

// Distance in units in the last place of T between two finite values (±0 are one value).
template <class T>
long ulps_apart(T a, T b) {
  auto ordered = [](T x) { return (x.bits & 0x8000u) ? -long(x.bits & 0x7fffu) : long(x.bits & 0x7fffu); };
  return std::labs(ordered(a) - ordered(b));
}

template <class T>
std::string show(T x) {
  return std::to_string(float(x)) + " (bits 0x" + fmt::format("{:04x}", x.bits) + ")";
}

// got[i] within `tolerance(i)` of want(i) (in T's ulps, or absolute for NCCL's sums); the first
// miss reported as in expect_all.
template <class T, class Want, class Fits>
void expect_all_16(const std::vector<T>& got, Want&& want, Fits&& fits, const std::string& what) {
  std::size_t wrong = 0, first = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    if (!fits(got[i], want(i), i) && wrong++ == 0) first = i;
  }
  if (wrong == 0) return;
  const std::string message = "rank " + std::to_string(world_rank()) + ": " + what + ": " + std::to_string(wrong) +
                              " of " + std::to_string(got.size()) + " elements wrong; first at " +
                              std::to_string(first) + ": got " + show(got[first]) + ", want " + show(want(first));
  if (world_rank() != 0) std::fprintf(stderr, "%s\n", message.c_str());
  ADD_FAILURE() << message;
}

// The rounded sum in double of f(world rank of g, i) over the group's ranks g.
template <class T, class Fn>
T once_rounded_sum(const Group& group, std::size_t i, Fn&& f) {
  double sum = 0;
  for (int g = 0; g < group.size(); ++g) sum += double(float(f(group.world_of(g), i)));
  return T(sum);
}

template <class T>
void check_allreduce_16(const Case& t, std::size_t count) {
  const long w = world_rank(), m = t.group.size();
  const std::string type = precision_name<T>();
  const bool nccl = t.space == Space::device;

  // Small integers: every partial sum is exact in T (|Σ| ≤ 10 · 6), so the sum must be too.
  auto small = [](long rank, std::size_t i) { return T((rank + 1) * (long(i % 13) - 6)); };
  Buffer<T> a(t.space, fill<T>(count, [&](std::size_t i) { return small(w, i); }));
  t.comm.allreduce_sum(a.data(), count);
  expect_all_16(
      a.read(), [&](std::size_t i) { return once_rounded_sum<T>(t.group, i, small); },
      [](T got, T want, std::size_t) { return got.bits == want.bits; },
      t.label + " allreduce_sum(" + type + ") integers");

  // Values of magnitudes 2^-12 … 8 that differ between ranks, one sign per element (so no
  // cancellation): the fp32 sum may round (relative error below (P − 1)·2^-24), then the result
  // once more, so within 1 ulp of the once-rounded sum (NCCL: within its P − 1 roundings of
  // partials, each at most u · Σ|x|).
  auto mixed = [](long rank, std::size_t i) {
    const double magnitude = 1 + std::fabs(std::sin(0.37 * double(i) + 1.3 * double(rank)));
    return T((i % 2 == 0 ? 1 : -1) * std::ldexp(magnitude, 2 - int((i + 3 * std::size_t(rank)) % 15)));
  };
  Buffer<T> b(t.space, fill<T>(count, [&](std::size_t i) { return mixed(w, i); }));
  t.comm.allreduce_sum(b.data(), count);
  expect_all_16(
      b.read(), [&](std::size_t i) { return once_rounded_sum<T>(t.group, i, mixed); },
      [&](T got, T want, std::size_t i) {
        if (!nccl) return ulps_apart(got, want) <= 1;
        double magnitude = 0;
        for (int g = 0; g < m; ++g) magnitude += std::fabs(float(mixed(t.group.world_of(g), i)));
        return std::fabs(double(float(got)) - double(float(want))) <= double(m) * unit_roundoff<T>() * magnitude;
      },
      t.label + " allreduce_sum(" + type + ") mixed values");

  // fp32 accumulation: one rank adds 1, every other rank 3/8 of an ulp of 1. Rounded once, the sum
  // is 1 + ulp for 3 or more ranks; a 16-bit partial 1 + 3/8 ulp would round back to 1 and stay
  // there. The 1 sits on group rank i mod m, so every position in the reduction order is tried.
  // (NCCL's 16-bit partials may lose the small terms: only the MPI backend is held to this.)
  if (!nccl) {
    const double ulp = std::ldexp(1.0, std::is_same_v<T, bf16> ? -7 : -10);
    auto one_and_tiny = [&](long rank, std::size_t i) {
      return T(long(i % std::size_t(m)) == t.group.rank_of(rank) ? 1.0 : 0.375 * ulp);
    };
    const T want = once_rounded_sum<T>(t.group, 0, one_and_tiny);
    // The test can fail: rounding after every add in rank order, starting at the 1, gives 1.
    if (m >= 3) {
      T naive = T(1.0);
      for (long k = 1; k < m; ++k) naive = T(float(naive) + float(T(0.375 * ulp)));
      EXPECT_EQ(naive.bits, T(1.0).bits) << t.label;
      EXPECT_EQ(want.bits, T(1.0 + ulp).bits) << t.label;
    }
    Buffer<T> c(t.space, fill<T>(count, [&](std::size_t i) { return one_and_tiny(w, i); }));
    t.comm.allreduce_sum(c.data(), count);
    expect_all_16(
        c.read(), [&](std::size_t) { return want; },
        [](T got, T want_i, std::size_t) { return got.bits == want_i.bits; },
        t.label + " allreduce_sum(" + type + ") 1 + tiny terms, fp32 accumulation");
  }
}

// Bit patterns, not values: every one of the 2^16 (NaNs included) must travel unchanged.
template <class T>
T pattern(long sender, long marker, std::size_t i) {
  return T::from_bits(static_cast<std::uint16_t>((sender * 7919 + marker * 104729 + long(i) * 40503) & 0xffff));
}

template <class T>
void check_moves_16(const Case& t, std::size_t count) {
  const int m = t.group.size(), g = t.group.rank();
  const long w = world_rank();
  const std::string type = precision_name<T>();
  auto same_bits = [](T got, T want, std::size_t) { return got.bits == want.bits; };

  // allgather, out of place and in place.
  Buffer<T> send(t.space, fill<T>(count, [&](std::size_t i) { return pattern<T>(w, 1, i); }));
  Buffer<T> recv(t.space, std::vector<T>(count * std::size_t(m), T::from_bits(0xdead)));
  t.comm.allgather(send.data(), recv.data(), count);
  auto gathered = [&](long marker) {
    return
        [&t, marker, count](std::size_t j) { return pattern<T>(t.group.world_of(int(j / count)), marker, j % count); };
  };
  expect_all_16(recv.read(), gathered(1), same_bits, t.label + " allgather(" + type + ")");
  Buffer<T> inplace(t.space, fill<T>(count * std::size_t(m), [&](std::size_t j) {
                      return j / count == std::size_t(g) ? pattern<T>(w, 2, j % count) : T::from_bits(0xdead);
                    }));
  t.comm.allgather(inplace.data() + std::size_t(g) * count, inplace.data(), count);
  expect_all_16(inplace.read(), gathered(2), same_bits, t.label + " allgather(" + type + ") in place");

  // Around the ring: irecv + blocking send, then isend + blocking recv.
  const int right = (g + 1) % m, left = (g + m - 1) % m;
  const long from_left = t.group.world_of(left);
  {
    Buffer<T> out(t.space, fill<T>(count, [&](std::size_t i) { return pattern<T>(w, 3, i); }));
    Buffer<T> in(t.space, std::vector<T>(count, T::from_bits(0xdead)));
    Request r = t.comm.irecv(in.data(), count, left, 41);
    t.comm.send(out.data(), count, right, 41);
    r.wait();
    expect_all_16(
        in.read(), [&](std::size_t i) { return pattern<T>(from_left, 3, i); }, same_bits,
        t.label + " irecv + send(" + type + ")");
  }
  {
    Buffer<T> out(t.space, fill<T>(count, [&](std::size_t i) { return pattern<T>(w, 4, i); }));
    Buffer<T> in(t.space, std::vector<T>(count, T::from_bits(0xdead)));
    Request r = t.comm.isend(out.data(), count, right, 42);
    t.comm.recv(in.data(), count, left, 42);
    r.wait();
    expect_all_16(
        in.read(), [&](std::size_t i) { return pattern<T>(from_left, 4, i); }, same_bits,
        t.label + " isend + recv(" + type + ")");
  }
}

// ---------------------------------------------------------------------------------------------
// All-to-all. Group rank s sends group rank q a block of blocks(s, q) · n elements,
// blocks(s, q) = (2s + q + 1) mod 3 ∈ {0, 1, 2}: uneven, zero for some pairs (the rank itself
// among them), and not symmetric (blocks(0, 1) = 2, blocks(1, 0) = 0), so swapped send and
// receive counts show. The send buffer holds the blocks in reverse peer order with a one-element
// gap after each, the receive buffer in peer order after a gap of two each: displacements that
// are neither the counts' prefix sums nor in rank order, and gaps that must stay untouched.

int blocks(int sender, int receiver) { return (2 * sender + receiver + 1) % 3; }

// Element i of the block world rank `sender` sends group rank `to`: integers exact in float
// (doubles: plus a fraction float cannot hold; int64: more bits than a double holds; int32: all 32 bits), or
// for the 16-bit types a bit pattern.
template <class T>
T exchanged(long sender, int to, std::size_t i) {
  if constexpr (std::is_same_v<T, std::int64_t>) {
    return (std::int64_t(sender) << 40) + (std::int64_t(to) << 20) + std::int64_t(i);
  } else if constexpr (std::is_same_v<T, std::int32_t>) {
    return std::int32_t((std::uint32_t(sender) << 26) ^ (std::uint32_t(to) << 16) ^ std::uint32_t(i) ^ 0x80000000u);
  } else if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
    const double fraction = std::is_same_v<T, double> ? std::ldexp(double(i % 4096), -30) : 0.0;
    return T(100000.0 * double(sender) + 1000.0 * to + double(i % 997) + fraction);
  } else {
    return pattern<T>(sender, 10 + to, i);
  }
}

template <class T>
T untouched() {
  if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double> || std::is_integral_v<T>) {
    return T(-1);
  } else {
    return T::from_bits(0xdead);
  }
}

// Displacements of blocks of counts[p] elements each followed by `gap` (after `lead` elements),
// laid out in the order `order` lists the peers; returns the buffer's length.
std::size_t lay_out(const std::vector<std::size_t>& counts, const std::vector<int>& order, std::size_t lead,
                    std::size_t gap, std::vector<std::size_t>& displs) {
  displs.assign(counts.size(), 0);
  std::size_t at = lead;
  for (const int p : order) {
    displs[std::size_t(p)] = at;
    at += counts[std::size_t(p)] + gap;
  }
  return at;
}

template <class T>
void check_alltoallv(const Case& t, std::size_t n) {
  const int m = t.group.size(), g = t.group.rank();
  const long w = world_rank();
  const std::size_t ranks = std::size_t(m);
  std::vector<std::size_t> send_counts(ranks), recv_counts(ranks), send_displs, recv_displs;
  std::vector<int> up(ranks), down(ranks);
  for (int p = 0; p < m; ++p) {
    send_counts[std::size_t(p)] = std::size_t(blocks(g, p)) * n;
    recv_counts[std::size_t(p)] = std::size_t(blocks(p, g)) * n;
    up[std::size_t(p)] = p;
    down[std::size_t(p)] = m - 1 - p;
  }
  const std::size_t send_size = lay_out(send_counts, down, 0, 1, send_displs);
  const std::size_t recv_size = lay_out(recv_counts, up, 2, 2, recv_displs);

  std::vector<T> out(send_size, untouched<T>()), want(recv_size, untouched<T>());
  for (int p = 0; p < m; ++p) {
    for (std::size_t i = 0; i < send_counts[std::size_t(p)]; ++i)
      out[send_displs[std::size_t(p)] + i] = exchanged<T>(w, p, i);
    for (std::size_t i = 0; i < recv_counts[std::size_t(p)]; ++i)
      want[recv_displs[std::size_t(p)] + i] = exchanged<T>(t.group.world_of(p), g, i);
  }
  Buffer<T> send(t.space, out), recv(t.space, std::vector<T>(recv_size, untouched<T>()));
  t.comm.alltoallv(send.data(), send_counts.data(), send_displs.data(), recv.data(), recv_counts.data(),
                   recv_displs.data());
  const std::string type = element_name(element_type_of<T>);
  expect_same_bits(recv.read(), want, t.label + " alltoallv(" + type + ")", "the closed form");
  expect_same_bits(send.read(), out, t.label + " alltoallv(" + type + ") send buffer", "what it held before");
}

// Block q of world rank w's send: w·2^40 + q·2^20 + i, which only 64 bits hold. In the backend's
// memory, as every collective's buffers.
void check_alltoall(const Case& t, std::size_t n) {
  const int m = t.group.size(), g = t.group.rank();
  auto value = [](long sender, long to, std::size_t i) {
    return (std::int64_t(sender) << 40) + (std::int64_t(to) << 20) + std::int64_t(i);
  };
  std::vector<std::int64_t> told(n * std::size_t(m));
  for (std::size_t j = 0; j < told.size(); ++j) told[j] = value(world_rank(), long(j / n), j % n);
  Buffer<std::int64_t> send(t.space, told), recv(t.space, std::vector<std::int64_t>(told.size(), -1));
  t.comm.alltoall(send.data(), recv.data(), n);
  const std::vector<std::int64_t> heard = recv.read();
  std::size_t wrong = 0;
  for (std::size_t j = 0; j < heard.size(); ++j) wrong += heard[j] != value(t.group.world_of(int(j / n)), g, j % n);
  EXPECT_EQ(wrong, 0u) << t.label << " alltoall: rank " << world_rank();
}

// ---------------------------------------------------------------------------------------------
// Every element type through every collective, by its tag (parallel/comm.hpp): the reductions on
// values exact in every type, x_w[i] = (w + 1)(i mod 5 + 1), whose sum over the group is
// (Σ (w + 1))(i mod 5 + 1) and whose maximum is the largest world rank's; the moves on values an
// arithmetic path would change (for the floating types -0, a subnormal, ±Inf and a NaN's payload;
// the 16-bit types travel as bit patterns; the integers need all their bits), bit for bit.

template <class T>
T exact(long v) {
  if constexpr (std::is_integral_v<T>) {
    return T(v);
  } else {
    return T(float(v));
  }
}

template <class T>
T awkward(long sender, std::size_t i) {
  if constexpr (std::is_same_v<T, std::int64_t>) {
    return std::int64_t((std::uint64_t(sender + 1) << 52) ^ (std::uint64_t(i) * 0x9E3779B97F4A7C15ull));
  } else if constexpr (std::is_same_v<T, std::int32_t>) {
    return std::int32_t((std::uint32_t(sender + 1) << 24) ^ (std::uint32_t(i) * 0x9E3779B9u));
  } else if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
    using Bits = std::conditional_t<std::is_same_v<T, float>, std::uint32_t, std::uint64_t>;
    const Bits quiet_nan = std::is_same_v<T, float> ? Bits(0x7fa00000u) : Bits(0x7ff4000000000000ull);
    switch (i % 5) {
      case 0: return -T(0);
      case 1: return std::numeric_limits<T>::denorm_min() * T(sender + 1);
      case 2: return sender % 2 ? std::numeric_limits<T>::infinity() : -std::numeric_limits<T>::infinity();
      case 3: return std::bit_cast<T>(Bits(quiet_nan + Bits(sender) + Bits(i)));  // a payload
      default: return T(1000 * sender) + T(i);
    }
  } else {
    return pattern<T>(sender, 9, i);
  }
}

template <class T>
void check_element_type(const Case& t, std::size_t count) {
  const ElementType type = element_type_of<T>;
  const std::string label = t.label + " " + element_name(type);
  const long w = world_rank(), m = t.group.size(), g = t.group.rank();
  const std::size_t blocks_of = count * std::size_t(m);
  auto exact_values = [](std::size_t n, auto value) {
    std::vector<T> v(n);
    for (std::size_t i = 0; i < n; ++i) v[i] = exact<T>(value(i));
    return v;
  };

  for (const ReduceOp op : {ReduceOp::sum, ReduceOp::max}) {
    const char* name = op == ReduceOp::sum ? " sum" : " max";
    const long factor = op == ReduceOp::sum ? t.group.sum_world() + m : t.group.max_world() + 1;
    const std::vector<T> want = exact_values(count, [&](std::size_t i) { return factor * long(i % 5 + 1); });
    const std::vector<T> mine = exact_values(count, [&](std::size_t i) { return (w + 1) * long(i % 5 + 1); });
    Buffer<T> a(t.space, mine), b(t.space, mine);
    t.comm.allreduce(a.data(), count, type, op);
    expect_same_bits(a.read(), want, label + " allreduce" + name, "the closed form");
    t.comm.iallreduce(b.data(), count, type, op).wait();
    expect_same_bits(b.read(), want, label + " iallreduce" + name, "the closed form");

    // Block b of the send buffer: (w + 1)((b + i) mod 5 + 1); group rank g gets block g's reduction.
    const std::vector<T> blocks =
        exact_values(blocks_of, [&](std::size_t j) { return (w + 1) * long((j / count + j % count) % 5 + 1); });
    const std::vector<T> want_block =
        exact_values(count, [&](std::size_t i) { return factor * long((std::size_t(g) + i) % 5 + 1); });
    Buffer<T> send(t.space, blocks), recv(t.space, std::vector<T>(count, untouched<T>()));
    t.comm.reduce_scatter(send.data(), recv.data(), count, type, op);
    expect_same_bits(recv.read(), want_block, label + " reduce_scatter" + name, "the closed form");
    Buffer<T> irecv(t.space, std::vector<T>(count, untouched<T>()));
    t.comm.ireduce_scatter(send.data(), irecv.data(), count, type, op).wait();
    expect_same_bits(irecv.read(), want_block, label + " ireduce_scatter" + name, "the closed form");
  }

  // Moves: all-gathers (out of place and in place), a broadcast from the last rank, the ring.
  const std::vector<T> mine = fill<T>(count, [&](std::size_t i) { return awkward<T>(w, i); });
  std::vector<T> gathered(blocks_of);
  for (std::size_t j = 0; j < blocks_of; ++j) gathered[j] = awkward<T>(t.group.world_of(int(j / count)), j % count);
  Buffer<T> send(t.space, mine), recv(t.space, std::vector<T>(blocks_of, untouched<T>()));
  t.comm.allgather(send.data(), recv.data(), count);
  expect_same_bits(recv.read(), gathered, label + " allgather", "the closed form");
  std::vector<T> around(blocks_of, untouched<T>());
  std::copy(mine.begin(), mine.end(), around.begin() + std::ptrdiff_t(std::size_t(g) * count));
  Buffer<T> in_place(t.space, around);
  t.comm.iallgather(in_place.data() + std::size_t(g) * count, in_place.data(), count).wait();
  expect_same_bits(in_place.read(), gathered, label + " iallgather in place", "the closed form");

  const int root = int(m - 1);
  Buffer<T> broadcast(t.space, g == root ? mine : std::vector<T>(count, untouched<T>()));
  t.comm.broadcast(broadcast.data(), count, root);
  expect_same_bits(broadcast.read(),
                   fill<T>(count, [&](std::size_t i) { return awkward<T>(t.group.world_of(root), i); }),
                   label + " broadcast", "the closed form");

  const int right = int((g + 1) % m), left = int((g + m - 1) % m);
  const std::vector<T> from_left = fill<T>(count, [&](std::size_t i) { return awkward<T>(t.group.world_of(left), i); });
  {
    Buffer<T> in(t.space, std::vector<T>(count, untouched<T>()));
    Request r = t.comm.irecv(in.data(), count, left, 51);
    t.comm.send(send.data(), count, right, 51);
    r.wait();
    expect_same_bits(in.read(), from_left, label + " irecv + send", "the closed form");
  }
  {
    Buffer<T> in(t.space, std::vector<T>(count, untouched<T>()));
    Request r = t.comm.isend(send.data(), count, right, 52);
    t.comm.recv(in.data(), count, left, 52);
    r.wait();
    expect_same_bits(in.read(), from_left, label + " isend + recv", "the closed form");
  }

  check_alltoallv<T>(t, count);
  {
    std::vector<T> told(blocks_of), want_heard(blocks_of);
    for (std::size_t j = 0; j < blocks_of; ++j) {
      told[j] = exchanged<T>(w, int(j / count), j % count);
      want_heard[j] = exchanged<T>(t.group.world_of(int(j / count)), int(g), j % count);
    }
    Buffer<T> told_buffer(t.space, told), heard(t.space, std::vector<T>(blocks_of, untouched<T>()));
    t.comm.alltoall(told_buffer.data(), heard.data(), count);
    expect_same_bits(heard.read(), want_heard, label + " alltoall", "the closed form");
  }
}

void check_every_element_type(const Case& t, std::size_t count) {
  check_element_type<float>(t, count);
  check_element_type<double>(t, count);
  check_element_type<bf16>(t, count);
  check_element_type<fp16>(t, count);
  check_element_type<std::int64_t>(t, count);
  check_element_type<std::int32_t>(t, count);
}

void check_everything(Comm& comm, const Group& group, Space space, const std::string& label,
                      const std::vector<std::size_t>& counts, bool tags_match) {
  Case base{comm, group, space, label};
  check_shape(base);
  for (std::size_t count : counts) {
    const Case t{comm, group, space, label + " count " + std::to_string(count)};
    check_allreduce_sum(t, count);
    check_allreduce_max<float>(t, count);
    check_allreduce_max<double>(t, count);
    check_allreduce_double(t, count);
    check_iallreduce(t, count);
    check_reduce_scatter(t, count);
    check_allgather(t, count);
    check_nonblocking_against_blocking(t, count);
    check_broadcast(t, count);
    check_ring(t, count, tags_match);
    check_allreduce_16<bf16>(t, count);
    check_allreduce_16<fp16>(t, count);
    check_moves_16<bf16>(t, count);
    check_moves_16<fp16>(t, count);
    check_alltoallv<float>(t, count);
    check_alltoallv<double>(t, count);
    check_alltoallv<bf16>(t, count);
    check_alltoallv<fp16>(t, count);
    check_alltoall(t, count);
  }
  check_barrier(base);
}

// ---------------------------------------------------------------------------------------------
// The MPI backend

TEST(MpiComm, BackendNameAndShape) {
  for (const Group& group : make_groups()) {
    auto comm = make_mpi_comm(group.comm.get());
    EXPECT_EQ(comm->backend(), "mpi");
    check_shape({*comm, group, Space::host, group.name});
  }
}

// Counts of one, a few, and a quarter of a million elements (1 MB of floats: past MPICH's short-message
// algorithms; a quarter of the 10^6 this used, whose closed-form checks took most of the sanitizer
// pass's MPI time). Not 100003: there MPICH 4.0's ireduce_scatter rounds otherwise than its blocking
// reduce_scatter on 3 and 4 ranks (the nonblocking and blocking calls must agree bitwise, below).
TEST(MpiComm, CollectivesAndMessagesMatchClosedForms) {
  for (const Group& group : make_groups()) {
    auto comm = make_mpi_comm(group.comm.get());
    check_everything(*comm, group, Space::host, "mpi " + group.name, {1, 7, 250007}, true);
  }
}

// Chunks of 1000, 3 and 1 element: every count around a chunk boundary, counts that need many
// chunks, and (reduce_scatter) staging rounds smaller than a chunk, as a buffer of more than 2^31
// elements is split with the default chunk.
TEST(MpiComm, SplitsMessagesIntoChunks) {
  struct Chunking {
    std::size_t max_chunk;
    std::vector<std::size_t> counts;
  };
  const std::vector<Chunking> chunkings = {{1000, {999, 1000, 1001, 4321}}, {3, {1, 2, 3, 4, 10}}, {1, {1, 7}}};
  for (const Group& group : make_groups()) {
    for (const Chunking& c : chunkings) {
      auto comm = make_mpi_comm(group.comm.get(), c.max_chunk);
      check_everything(*comm, group, Space::host, "mpi " + group.name + " max_chunk " + std::to_string(c.max_chunk),
                       c.counts, true);
    }
  }
}

// Each element type's tag through each collective of the MPI backend, with the default chunk and
// with chunks of 3 elements (the 16-bit reduce-scatter then reduces in staged rounds). Few counts:
// the test runs every type, and oversubscribed ranks make each collective slow.
TEST(MpiComm, EveryElementTypeThroughEveryCollective) {
  struct Chunking {
    std::size_t max_chunk;
    std::vector<std::size_t> counts;
  };
  const std::vector<Chunking> chunkings = {{mpi_default_max_chunk, {1, 1003}}, {3, {7}}};
  for (const Group& group : make_groups()) {
    for (const Chunking& c : chunkings) {
      auto comm = make_mpi_comm(group.comm.get(), c.max_chunk);
      const std::string label = "mpi " + group.name + " max_chunk " + std::to_string(c.max_chunk);
      for (const std::size_t count : c.counts) {
        check_every_element_type({*comm, group, Space::host, label + " count " + std::to_string(count)}, count);
      }
    }
  }
}

// The MPI calls one operation makes, as (call, count) in order, with the log on.
template <class Fn>
std::vector<std::pair<std::string, int>> calls_of(Fn&& fn) {
  call_log.calls.clear();
  call_log.on = true;
  fn();
  call_log.on = false;
  return call_log.calls;
}

// `count` elements in pieces of at most `piece`, as `call`.
std::vector<std::pair<std::string, int>> pieces(const std::string& call, std::size_t count, std::size_t piece) {
  std::vector<std::pair<std::string, int>> out;
  for (std::size_t offset = 0; offset < count; offset += piece)
    out.emplace_back(call, int(std::min(piece, count - offset)));
  return out;
}

template <class T>
std::vector<T> concat(std::vector<T> a, const std::vector<T>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// Each operation goes out in consecutive pieces of at most max_chunk elements, the last one the
// remainder; reduce_scatter in rounds of max_chunk / size elements of every block; a buffer within
// one chunk in one call.
TEST(MpiComm, MakesOneMpiCallPerChunk) {
  const std::size_t chunk = 1000, count = 4321;
  auto comm = make_mpi_comm(MPI_COMM_WORLD, chunk);
  const int me = comm->rank();
  const std::size_t m = std::size_t(comm->size()), round = std::max<std::size_t>(1, chunk / m);
  std::vector<float> a(count * m, 1.0f), b(count * m, 0.0f);
  std::vector<double> d(count, 1.0);

  EXPECT_EQ(calls_of([&] { comm->allreduce_sum(a.data(), count); }), pieces("MPI_Allreduce", count, chunk));
  EXPECT_EQ(calls_of([&] { comm->allreduce_max(a.data(), count); }), pieces("MPI_Allreduce", count, chunk));
  EXPECT_EQ(calls_of([&] { comm->allreduce_sum(d.data(), count); }), pieces("MPI_Allreduce", count, chunk));
  EXPECT_EQ(calls_of([&] { comm->allreduce_max(d.data(), count); }), pieces("MPI_Allreduce", count, chunk));
  EXPECT_EQ(calls_of([&] { comm->iallreduce_sum(a.data(), count).wait(); }), pieces("MPI_Iallreduce", count, chunk));
  EXPECT_EQ(calls_of([&] { comm->reduce_scatter_sum(a.data(), b.data(), count); }),
            pieces("MPI_Reduce_scatter_block", count, round));
  EXPECT_EQ(calls_of([&] { comm->allgather(a.data(), b.data(), count); }), pieces("MPI_Allgather", count, chunk));
  EXPECT_EQ(calls_of([&] { comm->ireduce_scatter_sum(a.data(), b.data(), count).wait(); }),
            pieces("MPI_Ireduce_scatter_block", count, round));
  EXPECT_EQ(calls_of([&] { comm->iallgather(a.data(), b.data(), count).wait(); }),
            pieces("MPI_Iallgather", count, chunk));
  EXPECT_EQ(calls_of([&] { comm->broadcast(a.data(), count, 0); }), pieces("MPI_Bcast", count, chunk));
  // 16-bit: each piece of the sum is one all-to-all and one allgather of the piece's blocks.
  std::vector<bf16> h(count * m, bf16(1.0f)), k(count * m);
  std::vector<std::pair<std::string, int>> sum16;
  for (const auto& piece : pieces("", count, chunk)) {
    sum16.emplace_back("MPI_Alltoallv", piece.second);
    sum16.emplace_back("MPI_Allgatherv", piece.second);
  }
  EXPECT_EQ(calls_of([&] { comm->allreduce_sum(h.data(), count); }), sum16);
  EXPECT_EQ(calls_of([&] { comm->allgather(h.data(), k.data(), count); }), pieces("MPI_Allgather", count, chunk));
  EXPECT_EQ(calls_of([&] { comm->iallgather(h.data(), k.data(), count).wait(); }),
            pieces("MPI_Iallgather", count, chunk));
  EXPECT_EQ(calls_of([&] {
              Request r = comm->irecv(k.data(), count, me, 6);
              comm->send(h.data(), count, me, 6);
              r.wait();
            }),
            concat(pieces("MPI_Irecv", count, chunk), pieces("MPI_Send", count, chunk)));
  EXPECT_EQ(calls_of([&] {
              Request r = comm->irecv(b.data(), count, me, 4);
              comm->send(a.data(), count, me, 4);
              r.wait();
            }),
            concat(pieces("MPI_Irecv", count, chunk), pieces("MPI_Send", count, chunk)));
  EXPECT_EQ(calls_of([&] {
              Request r = comm->isend(a.data(), count, me, 5);
              comm->recv(b.data(), count, me, 5);
              r.wait();
            }),
            concat(pieces("MPI_Isend", count, chunk), pieces("MPI_Recv", count, chunk)));

  // All-to-all: a message per other rank, all receives posted before the sends, each in chunks;
  // the rank's own block is copied.
  const std::vector<std::size_t> counts(m, count);
  std::vector<std::size_t> displs(m);
  for (std::size_t p = 0; p < m; ++p) displs[p] = p * count;
  std::vector<std::pair<std::string, int>> receives, sends;
  for (std::size_t peer = 1; peer < m; ++peer) {
    receives = concat(receives, pieces("MPI_Irecv", count, chunk));
    sends = concat(sends, pieces("MPI_Isend", count, chunk));
  }
  EXPECT_EQ(calls_of([&] {
              comm->alltoallv(a.data(), counts.data(), displs.data(), b.data(), counts.data(), displs.data());
            }),
            concat(receives, sends));
  std::vector<std::int64_t> tokens(count * m, 1), told(count * m);
  EXPECT_EQ(calls_of([&] { comm->alltoall(tokens.data(), told.data(), count); }), concat(receives, sends));

  auto whole = make_mpi_comm(MPI_COMM_WORLD);
  EXPECT_EQ(calls_of([&] { whole->allreduce_sum(a.data(), count); }), pieces("MPI_Allreduce", count, count));
  EXPECT_EQ(calls_of([&] { whole->reduce_scatter_sum(a.data(), b.data(), count); }),
            pieces("MPI_Reduce_scatter_block", count, count));
  EXPECT_EQ(calls_of([&] { whole->allgather(a.data(), b.data(), count); }), pieces("MPI_Allgather", count, count));
  EXPECT_EQ(calls_of([&] { whole->ireduce_scatter_sum(a.data(), b.data(), count).wait(); }),
            pieces("MPI_Ireduce_scatter_block", count, count));
  EXPECT_EQ(calls_of([&] { whole->iallgather(a.data(), b.data(), count).wait(); }),
            pieces("MPI_Iallgather", count, count));
}

TEST(MpiComm, ZeroCountsAreNoOps) {
  auto comm = make_mpi_comm(MPI_COMM_WORLD);
  float x = 5.0f;
  double d = 6.0;
  comm->allreduce_sum(&x, 0);
  comm->allreduce_max(&x, 0);
  comm->allreduce_max(&d, 0);
  comm->allreduce_sum(&d, 0);
  comm->reduce_scatter_sum(&x, &x, 0);
  comm->allgather(&x, &x, 0);
  comm->broadcast(&x, 0, 0);
  bf16 h = bf16(5.0f);
  fp16 f = fp16(5.0f);
  comm->allreduce_sum(&h, 0);
  comm->allreduce_sum(&f, 0);
  comm->allgather(&h, &h, 0);
  EXPECT_FALSE(comm->isend(&f, 0, comm->rank(), 0).pending());
  EXPECT_EQ(float(h), 5.0f);
  EXPECT_EQ(float(f), 5.0f);
  Request r = comm->iallreduce_sum(&x, 0);
  EXPECT_FALSE(r.pending());
  EXPECT_FALSE(comm->ireduce_scatter_sum(&x, &x, 0).pending());
  EXPECT_FALSE(comm->iallgather(&x, &x, 0).pending());
  EXPECT_FALSE(comm->iallgather(&h, &h, 0).pending());
  EXPECT_FALSE(comm->iallgather(&f, &f, 0).pending());
  EXPECT_FALSE(comm->isend(&x, 0, comm->rank(), 0).pending());
  EXPECT_FALSE(comm->irecv(&x, 0, comm->rank(), 0).pending());
  const std::vector<std::size_t> none(std::size_t(comm->size()), 0);
  float y = 7.0f;
  comm->alltoallv(&x, none.data(), none.data(), &y, none.data(), none.data());
  std::int64_t told = 8;
  comm->alltoall(&told, &told, 0);
  EXPECT_EQ(x, 5.0f);
  EXPECT_EQ(y, 7.0f);
  EXPECT_EQ(told, 8);
  EXPECT_EQ(d, 6.0);
}

TEST(MpiComm, DefaultRequestIsNotPending) {
  Request r;
  EXPECT_FALSE(r.pending());
  r.wait();
  EXPECT_FALSE(r.pending());
}

// The Comm talks on its own duplicate: a receive posted on the caller's communicator, with the
// same peer and tag, must not catch the Comm's message.
TEST(MpiComm, MessagesStayOnItsOwnCommunicator) {
  auto comm = make_mpi_comm(MPI_COMM_WORLD);
  const int me = comm->rank();
  float outside = -1.0f, inside = -1.0f, sent = 42.0f;
  MPI_Request stray;
  MPI_Irecv(&outside, 1, MPI_FLOAT, world_rank(), 5, MPI_COMM_WORLD, &stray);
  Request r = comm->isend(&sent, 1, me, 5);
  comm->recv(&inside, 1, me, 5);
  r.wait();
  int caught = 1;
  MPI_Test(&stray, &caught, MPI_STATUS_IGNORE);
  EXPECT_EQ(inside, 42.0f);
  EXPECT_FALSE(caught) << "the caller's receive caught the Comm's message";
  if (!caught) {
    MPI_Cancel(&stray);
    MPI_Wait(&stray, MPI_STATUS_IGNORE);
  }
  EXPECT_EQ(outside, -1.0f);
}

template <class Exception, class Fn>
std::string message_of(Fn&& fn) {
  try {
    fn();
  } catch (const Exception& e) {
    return e.what();
  }
  ADD_FAILURE() << "no exception";
  return "";
}

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

TEST(MpiComm, RejectsBadArgumentsWithTheNumbers) {
  const int n = world_size();
  EXPECT_TRUE(contains(message_of<std::invalid_argument>([] { make_mpi_comm(MPI_COMM_WORLD, 0); }), "max_chunk 0"));
  EXPECT_TRUE(
      contains(message_of<std::invalid_argument>([] { make_mpi_comm(MPI_COMM_WORLD, std::size_t(INT_MAX) + 1); }),
               "max_chunk 2147483648"));
  EXPECT_TRUE(contains(message_of<std::invalid_argument>([] { make_mpi_comm(MPI_COMM_NULL); }), "MPI_COMM_NULL"));
  auto comm = make_mpi_comm(MPI_COMM_WORLD);
  float x = 0;
  const std::string ranks = "ranks 0.." + std::to_string(n - 1);
  const std::string peer = message_of<std::invalid_argument>([&] { comm->send(&x, 1, n, 0); });
  EXPECT_TRUE(contains(peer, "peer " + std::to_string(n)) && contains(peer, ranks)) << peer;
  EXPECT_TRUE(contains(message_of<std::invalid_argument>([&] { comm->irecv(&x, 1, -1, 0); }), "peer -1"));
  EXPECT_TRUE(contains(message_of<std::invalid_argument>([&] { comm->isend(&x, 1, 0, -3); }), "tag -3"));
  const std::string root = message_of<std::invalid_argument>([&] { comm->broadcast(&x, 1, n + 2); });
  EXPECT_TRUE(contains(root, "root " + std::to_string(n + 2)) && contains(root, ranks)) << root;
  // A rank's block to itself is copied: its send and receive count must agree.
  std::vector<std::size_t> counts(std::size_t(n), 0), displs(std::size_t(n), 0);
  std::vector<std::size_t> expected = counts;
  counts[std::size_t(comm->rank())] = 1;
  const std::string self = message_of<std::invalid_argument>(
      [&] { comm->alltoallv(&x, counts.data(), displs.data(), &x, expected.data(), displs.data()); });
  EXPECT_TRUE(contains(self, "sends itself 1 floats but expects 0")) << self;
  // Beyond INT_MAX a count is split into chunks; only a total that no memory can hold is refused.
  const std::size_t huge = std::numeric_limits<std::size_t>::max() / 2;
  EXPECT_TRUE(contains(message_of<std::length_error>([&] { comm->allgather(&x, &x, huge); }), "do not fit"));
  EXPECT_TRUE(
      contains(message_of<std::length_error>([&] { comm->reduce_scatter_sum(&x, &x, huge); }), std::to_string(huge)));
}

// A request dropped without wait() completes before its destructor returns: the receive below is
// complete once its scope closes, also on the even ranks, whose (odd) left peer sends 100 ms late.
TEST(MpiComm, DroppedRequestCompletesItsOperation) {
  auto comm = make_mpi_comm(MPI_COMM_WORLD);
  const int m = comm->size(), g = comm->rank(), left = (g + m - 1) % m, right = (g + 1) % m;
  std::vector<float> in(1000, -1.0f), out(1000, float(world_rank()));
  {
    Request dropped = comm->irecv(in.data(), in.size(), left, 8);
    std::this_thread::sleep_for(std::chrono::milliseconds(100 * (g % 2)));  // odd ranks send late
    comm->isend(out.data(), out.size(), right, 8).wait();
  }
  EXPECT_EQ(in, std::vector<float>(1000, float(left)));
}

// A receive that gets fewer elements than it asked for, or more, fails with the numbers and a HINT
// (each rank talks to itself, so no other rank is involved).
TEST(MpiComm, MismatchedMessagesFailWithAHint) {
  auto comm = make_mpi_comm(MPI_COMM_WORLD);
  const int me = comm->rank();
  std::vector<float> out(7, 1.0f), in(7, 0.0f);

  Request short_send = comm->isend(out.data(), 5, me, 1);
  const std::string shorter = message_of<mpi::Error>([&] { comm->recv(in.data(), 7, me, 1); });
  short_send.wait();
  EXPECT_TRUE(contains(shorter, "brought 5 elements where 7 were expected") && contains(shorter, "HINT:")) << shorter;

  Request async_send = comm->isend(out.data(), 5, me, 2);
  Request async_recv = comm->irecv(in.data(), 7, me, 2);
  const std::string async = message_of<mpi::Error>([&] { async_recv.wait(); });
  async_send.wait();
  EXPECT_TRUE(contains(async, "brought 5 elements where 7 were expected") && contains(async, "irecv")) << async;

  Request long_send = comm->isend(out.data(), 7, me, 3);
  const std::string longer = message_of<mpi::Error>([&] { comm->recv(in.data(), 5, me, 3); });
  long_send.wait();
  EXPECT_TRUE(contains(longer, "MPI_Recv") && contains(longer, "HINT:")) << longer;
}

// ---------------------------------------------------------------------------------------------
// The NCCL backend

#if defined(MESHTRAIN_HAVE_NCCL)

bool gpu_present() {
  int devices = 0;
  return cudaGetDeviceCount(&devices) == cudaSuccess && devices > 0;
}

TEST(NcclComm, FailsWithCudasErrorAndAHintWithoutAGpu) {
  if (gpu_present()) GTEST_SKIP() << "a GPU is present; the NCCL collective tests cover this build";
  const std::string message = message_of<std::runtime_error>([] { make_nccl_comm(MPI_COMM_WORLD, nullptr); });
  EXPECT_TRUE(contains(message, "CUDA call")) << message;
  EXPECT_TRUE(contains(message, "HINT:")) << message;
  EXPECT_TRUE(contains(message, "make_nccl_comm")) << message;
}

// One GPU per rank (NCCL refuses two ranks of a group on one GPU), agreed by every rank; returns
// the reason to skip, or "" with this rank's device selected.
std::string select_gpu() {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess) devices = 0;
  MPI_Comm node;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, world_rank(), MPI_INFO_NULL, &node);
  int local_rank = 0, local_size = 1;
  MPI_Comm_rank(node, &local_rank);
  MPI_Comm_size(node, &local_size);
  MPI_Comm_free(&node);
  int short_of_gpus = local_size > devices ? 1 : 0;
  MPI_Allreduce(MPI_IN_PLACE, &short_of_gpus, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (short_of_gpus) {
    return devices == 0 ? "no GPU on this machine"
                        : std::to_string(local_size) + " ranks share " + std::to_string(devices) +
                              " GPU(s) on a node; NCCL needs one GPU per rank";
  }
  EXPECT_EQ(cudaSetDevice(local_rank), cudaSuccess);
  return "";
}

class Stream {
 public:
  Stream() { EXPECT_EQ(cudaStreamCreate(&stream_), cudaSuccess); }
  ~Stream() { cudaStreamDestroy(stream_); }
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  void* get() const { return stream_; }

 private:
  cudaStream_t stream_ = nullptr;
};

TEST(NcclComm, CollectivesAndMessagesMatchClosedForms) {
  if (const std::string reason = select_gpu(); !reason.empty()) GTEST_SKIP() << reason;
  Stream stream;
  for (const Group& group : make_groups()) {
    auto comm = make_nccl_comm(group.comm.get(), stream.get());
    EXPECT_EQ(comm->backend(), "nccl");
    // NCCL matches messages between two ranks in issue order and has no tags: the out-of-order
    // tag check does not apply.
    check_everything(*comm, group, Space::device, "nccl " + group.name, {1, 7, 1000003}, false);
  }
}

TEST(NcclComm, RejectsBadArgumentsWithTheNumbers) {
  if (const std::string reason = select_gpu(); !reason.empty()) GTEST_SKIP() << reason;
  Stream stream;
  auto comm = make_nccl_comm(MPI_COMM_WORLD, stream.get());
  const int n = comm->size();
  Buffer<float> x(Space::device, std::vector<float>(1, 0.0f));
  EXPECT_TRUE(
      contains(message_of<std::invalid_argument>([&] { comm->send(x.data(), 1, n, 0); }), "peer " + std::to_string(n)));
  EXPECT_TRUE(contains(message_of<std::invalid_argument>([&] { comm->broadcast(x.data(), 1, -1); }), "root -1"));
}

#else

TEST(NcclComm, CollectivesAndMessagesMatchClosedForms) {
  GTEST_SKIP() << "built without NCCL (configure with -DMESHTRAIN_ENABLE_NCCL=ON)";
}

#endif

}  // namespace
}  // namespace meshtrain
