// What one training step issues to Kokkos at GPT-2 124M's shape (L12 H12 C768 V50257, T64,
// micro-batch 4, bf16, one rank), beside llm.c's figures as issue 23 quotes them, and the issue's
// budgets. The counts come from the Kokkos Tools hook of tests/common/kokkos_counters.hpp over the
// step after a warm-up step (tests/common/counted_step.hpp; test_step_counts holds small models
// to the same budgets).
//
// usage: bench_step_counts [--arch gpt2|llama] [--layers 12] [--heads 12] [--d-model 768]
//                          [--vocab 50257] [--seq-len 64] [--micro-batch 4] [--accum 1]
//                          [--precision bf16] [--top 30] [--workdir /tmp]
// Kokkos' own flags (--kokkos-...) pass through. Needs ~3 GB of memory at the default shape.
#include "common/counted_step.hpp"
#include "core/config.hpp"

#include <mpi.h>

#include <Kokkos_Core.hpp>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

namespace {

using namespace meshtrain;

int usage(const char* arg) {
  std::fprintf(stderr, "bench_step_counts: unknown or incomplete argument '%s' (see the file's header)\n", arg);
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  Config cfg;
  cfg.model = ModelConfig{12, 12, 768, 50257, 64};
  cfg.train.micro_batch = 4;
  cfg.train.precision = Precision::bf16;
  int accum = 1;
  std::size_t top = 30;
  std::string workdir = "/tmp";
  for (int i = 1; i < argc; ++i) {
    const std::string key = argv[i];
    if (key.rfind("--kokkos", 0) == 0) continue;
    if (i + 1 >= argc) return usage(argv[i]);
    const char* value = argv[++i];
    if (key == "--arch") {
      cfg.model.arch = std::strcmp(value, "llama") == 0 ? Arch::llama : Arch::gpt2;
    } else if (key == "--layers") {
      cfg.model.layers = std::atoi(value);
    } else if (key == "--heads") {
      cfg.model.heads = std::atoi(value);
    } else if (key == "--d-model") {
      cfg.model.d_model = std::atoi(value);
    } else if (key == "--vocab") {
      cfg.model.vocab = std::atoi(value);
    } else if (key == "--seq-len") {
      cfg.model.seq_len = std::atoi(value);
    } else if (key == "--micro-batch") {
      cfg.train.micro_batch = std::atoi(value);
    } else if (key == "--accum") {
      accum = std::atoi(value);
    } else if (key == "--precision") {
      cfg.train.precision = parse_name<Precision>(value);
    } else if (key == "--top") {
      top = std::size_t(std::atol(value));
    } else if (key == "--workdir") {
      workdir = value;
    } else {
      return usage(argv[i - 1]);
    }
  }
  cfg.train.global_batch = cfg.train.micro_batch * accum;
  {
    Kokkos::ScopeGuard kokkos(argc, argv);
    const ModelConfig& m = cfg.model;
    const test::KokkosCounts c = test::count_training_steps(cfg, workdir + "/meshtrain_bench_step_counts").at(0);
    const test::StepBudget budget = test::step_budget(m, accum);
    const long llmc_launches = 27L * m.layers;  // ~7 forward + ~20 backward per layer
    const long llmc_syncs = 4L * accum + 2;     // ~4 host syncs per micro-batch + 2 per step
    std::printf("one training step: %s L%d H%d C%d V%d, T%d, micro-batch %d × %d, %s, one rank (GEMMs not counted)\n",
                m.arch == Arch::gpt2 ? "gpt2" : "llama", m.layers, m.heads, m.d_model, m.vocab, m.seq_len,
                cfg.train.micro_batch, accum, std::string(name_of(cfg.train.precision)).c_str());
    std::printf("%s\n", test::format_counts(c, top).c_str());
    std::printf("%-36s %10s %10s %10s\n", "per step", "meshtrain", "llm.c*", "budget");
    std::printf("%-36s %10ld %10ld %10ld\n", "Kokkos launches", c.launches(), llmc_launches, budget.launches);
    std::printf("%-36s %10.1f %10.1f %10s\n", "  per block", double(c.launches()) / m.layers,
                double(llmc_launches) / m.layers, "");
    std::printf("%-36s %10ld %10s %10s\n", "top-level reductions", c.reductions(), "", "");
    std::printf("%-36s %10ld %10s %10s\n", "  returning to the host", c.host_reductions(), "", "");
    std::printf("%-36s %10ld %10s %10s\n", "deep copies", c.deep_copy_count(), "", "");
    std::printf("%-36s %10ld %10ld %10ld\n", "reductions + deep copies (host syncs)",
                c.reductions() + c.deep_copy_count(), llmc_syncs, budget.reductions_and_copies);
    std::printf("%-36s %10ld %10s %10ld\n", "host waits (fences, request waits)", c.host_wait_count(), "",
                budget.host_waits);
    std::printf(
        "* llm.c figures as issue 23 quotes them: about 7 forward + 20 backward launches per layer,\n"
        "  independent of the micro-batch; about 4 host syncs per micro-batch + 2 per step.\n");
    if (!test::KokkosCounters::fences_reported()) {
      std::printf(
          "  This Kokkos (%d.%d) reports no fences: every top-level reduction counts as returning to "
          "the host.\n",
          KOKKOS_VERSION / 10000, KOKKOS_VERSION / 100 % 100);
    }
  }
  MPI_Finalize();
  return 0;
}
