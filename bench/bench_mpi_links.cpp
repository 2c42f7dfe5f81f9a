// Latency and bandwidth of the MPI links between the ranks it runs on, for the planner's
// alpha-beta model (`meshtrain plan`, src/plan/cluster.cpp): a ping-pong between ranks 0 and 1
// (one-way time t(n) = α + n/β) and MPI_Allreduce over all ranks, read the same way with the
// ring's factors (t = 2(p−1)·α + 2(p−1)/p · n/β): α from the smallest message, β from the largest.
//
//   mpiexec -n 2 build/release/bench/bench_mpi_links [--repeats 20]
//
// Prints one JSON object: per message size the median times, and the fitted α (s) and β (B/s).
#include <mpi.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// t = a + b·x read off the ends: a = t(smallest), b = (t(largest) − a) / (largest − smallest).
// (A least-squares line is dominated by the large messages and gives a meaningless intercept.)
std::pair<double, double> fit_line(const std::vector<double>& x, const std::vector<double>& t) {
  const double b = (t.back() - t.front()) / (x.back() - x.front());
  return {t.front(), b};
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, world = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  int repeats = 20;
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::strcmp(argv[i], "--repeats") == 0) repeats = std::atoi(argv[i + 1]);
  }
  if (world < 2) {
    if (rank == 0) std::fprintf(stderr, "bench_mpi_links: run with at least 2 ranks\n");
    MPI_Finalize();
    return 2;
  }
  const std::vector<std::size_t> sizes = {8, 1 << 10, 1 << 14, 1 << 17, 1 << 20, 1 << 22, 1 << 24};
  std::vector<char> send(sizes.back()), recv(sizes.back());
  std::vector<float> fsend(sizes.back() / 4, 1.0f), frecv(sizes.back() / 4);

  std::vector<double> x, pingpong, allreduce;
  for (std::size_t n : sizes) {
    std::vector<double> pp, ar;
    for (int r = 0; r < repeats + 2; ++r) {
      MPI_Barrier(MPI_COMM_WORLD);
      double t0 = MPI_Wtime();
      if (rank == 0) {
        MPI_Send(send.data(), int(n), MPI_BYTE, 1, 0, MPI_COMM_WORLD);
        MPI_Recv(recv.data(), int(n), MPI_BYTE, 1, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      } else if (rank == 1) {
        MPI_Recv(recv.data(), int(n), MPI_BYTE, 0, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        MPI_Send(send.data(), int(n), MPI_BYTE, 0, 0, MPI_COMM_WORLD);
      }
      const double one_way = (MPI_Wtime() - t0) / 2;
      MPI_Barrier(MPI_COMM_WORLD);
      t0 = MPI_Wtime();
      MPI_Allreduce(fsend.data(), frecv.data(), int(std::max<std::size_t>(1, n / 4)), MPI_FLOAT, MPI_SUM,
                    MPI_COMM_WORLD);
      double t = MPI_Wtime() - t0;
      MPI_Allreduce(MPI_IN_PLACE, &t, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
      if (r >= 2) {  // the first two are warm-up
        pp.push_back(one_way);
        ar.push_back(t);
      }
    }
    x.push_back(double(n));
    pingpong.push_back(median(pp));
    allreduce.push_back(median(ar));
  }
  if (rank == 0) {
    const auto [pp_alpha, pp_inv_beta] = fit_line(x, pingpong);
    const double p = world;
    const auto [ar_a, ar_b] = fit_line(x, allreduce);
    std::printf("{\"world\": %d, \"sizes\": [", world);
    for (std::size_t i = 0; i < x.size(); ++i) std::printf("%s%.0f", i ? ", " : "", x[i]);
    std::printf("], \"pingpong_s\": [");
    for (std::size_t i = 0; i < x.size(); ++i) std::printf("%s%.3e", i ? ", " : "", pingpong[i]);
    std::printf("], \"allreduce_s\": [");
    for (std::size_t i = 0; i < x.size(); ++i) std::printf("%s%.3e", i ? ", " : "", allreduce[i]);
    std::printf(
        "],\n \"pingpong_alpha_s\": %.3e, \"pingpong_beta_Bps\": %.3e,"
        " \"allreduce_alpha_s\": %.3e, \"allreduce_beta_Bps\": %.3e}\n",
        pp_alpha, 1 / pp_inv_beta, ar_a / (2 * (p - 1)), 2 * (p - 1) / p / ar_b);
  }
  MPI_Finalize();
  return 0;
}
