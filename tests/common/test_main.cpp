// GoogleTest entry point for every meshtrain test binary: MPI and Kokkos live for the whole run,
// as they do in the trainer, MPI at the thread level the trainer asks for (src/main.cpp: its background
// saves and its watchdog call MPI from threads of their own; test_step_waits runs the trainer in-process).
#include <gtest/gtest.h>
#include <mpi.h>

#include <Kokkos_Core.hpp>

int main(int argc, char** argv) {
  int threads = MPI_THREAD_SINGLE;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &threads);
  ::testing::InitGoogleTest(&argc, argv);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  if (rank != 0) {
    // Only rank 0 prints results; failures on other ranks still fail the exit code.
    auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
  }
  int result = 0;
  {
    Kokkos::ScopeGuard kokkos(argc, argv);
    result = RUN_ALL_TESTS();
  }
  int worst = 0;
  MPI_Allreduce(&result, &worst, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  MPI_Finalize();
  return worst;
}
