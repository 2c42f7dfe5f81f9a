// What one training step issues to Kokkos — launches, reductions, deep copies, fences, by kernel
// name — for gpt2, llama and an MoE llama, fp32 and bf16, at micro-batch 4 and 8 on one rank,
// counted by the Kokkos Tools hook (common/kokkos_counters.hpp) over the step after a warm-up
// step, and held to issue 23's budgets (common/counted_step.hpp):
//   launches ≤ 30 per dense block + 50 per MoE block + 20, and the same at micro-batch 4 and 8;
//   top-level reductions + deep copies ≤ 3 per micro-batch + 3, + 1 per MoE block and micro-batch;
//   host waits (fences and request waits meshtrain reports, core/host_waits.hpp) ≤ 1 + 1 per MoE
//   block and micro-batch, the collectives ordered as on a device (the stream stand-in): the step's
//   one read, and the routing reads issue 42's device-side MoE is to remove.
// MESHTRAIN_STEP_BUDGETS=report prints each excess ("over budget by N") without failing; unset or
// `enforce` fails on it. The tables print either way. Whatever the mode, two consecutive steps
// must issue the same counts (the counts are the step's, not the step index's).
#include "common/counted_step.hpp"
#include "common/small_moe.hpp"

#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <string>

namespace meshtrain::test {
namespace test_step_counts {

bool enforcing() {
  const char* mode = std::getenv("MESHTRAIN_STEP_BUDGETS");
  return mode == nullptr || std::string(mode) != "report";
}

// T 40: micro-batches of 4 and 8 give 160 and 320 rows, more than one chunk of the column sums
// (kernels/column_sum.hpp, 128 rows) either way, as at real shapes; a single chunk skips a launch.
constexpr int kSeqLen = 40;

ModelConfig dense(Arch arch) {
  ModelConfig m{3, 4, 32, 67, kSeqLen};  // 3 blocks, 4 heads, C 32, V 67
  m.arch = arch;
  if (arch == Arch::llama) {
    m.kv_heads = 2;
    m.ffn_hidden = 48;
  }
  return m;
}

const char* precision_name(Precision p) {
  return p == Precision::fp32 ? "fp32" : p == Precision::bf16 ? "bf16" : "fp16";
}

// One model in fp32 and bf16 at micro-batch 4 and 8: the tables, then the budgets.
void check_family(const char* family, const ModelConfig& model) {
  const bool enforce = enforcing();
  for (const Precision precision : {Precision::fp32, Precision::bf16}) {
    long launches_at_4 = -1;
    for (const int micro_batch : {4, 8}) {
      const std::string name =
          std::string(family) + " " + precision_name(precision) + " mb" + std::to_string(micro_batch);
      SCOPED_TRACE(name);
      Config cfg;
      cfg.model = model;
      cfg.train.micro_batch = micro_batch;
      cfg.train.global_batch = micro_batch;  // one micro-batch a step
      cfg.train.precision = precision;
      const auto counts = count_training_steps(cfg, testing::TempDir() + "meshtrain_step_counts", 1, 2);
      ASSERT_EQ(counts.size(), 2u);
      const KokkosCounts& c = counts[0];
      EXPECT_EQ(c.launches(), counts[1].launches()) << "a later step issues other launches";
      EXPECT_EQ(c.reductions(), counts[1].reductions());
      EXPECT_EQ(c.deep_copy_count(), counts[1].deep_copy_count());
      EXPECT_EQ(c.host_waits, counts[1].host_waits);
      EXPECT_GT(c.host_wait_count(), 0) << "no host wait reported: is the observer installed?";
      EXPECT_GT(c.launches(), 0) << "the hook saw no launch: is it installed?";

      const StepBudget budget = step_budget(model, 1);
      const BudgetExcess excess = budget_excess(c, budget);
      std::printf("\n== %s: one step (%d blocks, %d MoE) ==\n%s", name.c_str(), model.layers, model.moe_blocks(),
                  format_counts(c, 25).c_str());
      const auto verdict = [](long over) {
        return over > 0 ? "over budget by " + std::to_string(over) : "within, " + std::to_string(-over) + " to spare";
      };
      std::printf("  budget: %ld launches (%s), %ld reductions + deep copies (%s), %ld host waits (%s)\n",
                  budget.launches, verdict(excess.launches).c_str(), budget.reductions_and_copies,
                  verdict(excess.reductions_and_copies).c_str(), budget.host_waits, verdict(excess.host_waits).c_str());
      if (enforce) {
        EXPECT_LE(c.launches(), budget.launches) << "over budget by " << excess.launches;
        EXPECT_LE(c.reductions() + c.deep_copy_count(), budget.reductions_and_copies)
            << "over budget by " << excess.reductions_and_copies;
        EXPECT_LE(c.host_wait_count(), budget.host_waits) << "over budget by " << excess.host_waits;
      }
      if (micro_batch == 4) {
        launches_at_4 = c.launches();
      } else {
        const long change = c.launches() - launches_at_4;
        if (change != 0) std::printf("  micro-batch 8 issues %+ld launches against micro-batch 4\n", change);
        if (enforce) {
          EXPECT_EQ(c.launches(), launches_at_4) << "launches depend on the micro-batch";
        }
      }
    }
  }
  std::fflush(stdout);
}

TEST(StepCounts, Gpt2) { check_family("gpt2", dense(Arch::gpt2)); }

TEST(StepCounts, Llama) { check_family("llama", dense(Arch::llama)); }

TEST(StepCounts, MoeLlama) {
  ModelConfig m = small_moe(4, 12);  // 3 blocks, the first and the last MoE (4 experts of width 12, k 2)
  m.seq_len = kSeqLen;
  check_family("moe llama", m);
}

}  // namespace test_step_counts
}  // namespace meshtrain::test
