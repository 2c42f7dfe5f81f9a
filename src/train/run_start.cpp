// Resuming a run: the checkpoint candidates in turn, or initial weights, or a fresh start.
#include "train/run_start.hpp"

#include "checkpoint/base_identity.hpp"
#include "checkpoint/dir_checks.hpp"
#include "checkpoint/lora_contents.hpp"
#include "checkpoint/tokenizer_identity.hpp"
#include "core/agreement.hpp"
#include "core/elapsed.hpp"
#include "core/errors.hpp"
#include "core/mpi_check.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <chrono>
#include <cstdio>

namespace meshtrain {
namespace {

// Loads the first candidate that loads and verifies. Under checkpoint.resume = auto a checkpoint
// that cannot be used (corrupt, truncated, missing) gives way to the next newest, saying so; a named
// one is used or refused. Collective; a refusal is an AgreedInputError on every rank.
TrainingProgress resume(Checkpointer& checkpointer, const std::vector<std::string>& candidates, const Config& cfg,
                        const TrainingTensors& tensors, bool leader) {
  std::vector<std::string> refused;
  for (std::size_t i = 0; i < candidates.size(); ++i) {
    try {
      const auto start = Clock::now();
      const TrainingProgress progress = checkpointer.load(candidates[i], tensors);
      if (leader) {
        fmt::print("resumed from {} at step {} (read and verified in {:.3f}s)\n", candidates[i], progress.step,
                   seconds_since(start));
        if (progress.samples != progress.step * std::int64_t(cfg.train.global_batch)) {
          fmt::print(
              "train.global_batch = {} differs from the checkpoint's run: the data continues at sample {} of "
              "the data order\n",
              cfg.train.global_batch, progress.samples);
        }
      }
      return progress;
    } catch (const TokenizerMismatch&) {
      throw;  // the run's tokenizer, not the file, is at odds: an older checkpoint would drop the steps since
    } catch (const AgreedInputError& e) {
      if (cfg.checkpoint.resume.mode != ResumeMode::automatic) throw;
      refused.push_back(fmt::format("{}: {}", candidates[i], e.what()));
      if (leader && i + 1 < candidates.size()) {
        fmt::print("checkpoint.resume = auto: {} is unusable ({}); falling back to {}\n", candidates[i], e.what(),
                   candidates[i + 1]);
        std::fflush(stdout);
      }
    }
  }
  input_error(
      "checkpoint.resume = auto: no checkpoint in {} can be used:\n  {}\nHINT: move them away to start "
      "afresh, or name one with checkpoint.resume",
      cfg.checkpoint.dir, fmt::join(refused, "\n  "));
}

// A rank above min(in, out) of an adapted weight adds parameters and no expressiveness (B·A has rank
// min(in, out) at most): said with the figures, not refused, as PEFT trains it too.
void warn_rank_above_shape(const ModelConfig& model) {
  const std::uint64_t rank = std::uint64_t(model.lora.rank);
  std::size_t wider = 0;
  const AdaptedWeight* first = nullptr;
  const std::vector<AdaptedWeight> adapted = adapted_weights(model);
  for (const AdaptedWeight& w : adapted) {
    if (rank <= std::min(w.a.shape[1], w.b.shape[0])) continue;
    if (first == nullptr) first = &w;
    ++wider;
  }
  if (first == nullptr) return;
  const std::uint64_t in = first->a.shape[1], out = first->b.shape[0], bound = std::min(in, out);
  fmt::print(stderr,
             "meshtrain train: warning: lora.rank = {} exceeds min(in, out) = {} of {} (out {} x in {}){}: its "
             "adapter adds parameters and no expressiveness beyond rank {}\n",
             rank, bound, first->base.name, out, in,
             wider > 1 ? fmt::format(" and {} more of the {} adapted weights", wider - 1, adapted.size()) : "", bound);
}

}  // namespace

RunStart start_run(const Config& cfg, MPI_Comm comm, Checkpointer& checkpointer, ModelState& state, DataOrder& order) {
  int rank = 0;
  MESHTRAIN_MPI_CHECK(MPI_Comm_rank(comm, &rank), "is MPI initialized, and the communicator valid?");
  const bool leader = rank == 0;
  RunStart start;
  bool fresh = true;  // neither resumed nor given initial weights (under LoRA: initial adapters)
  start.progress = agree_on_input(comm, [&] {
    TrainingProgress progress;
    const std::vector<std::string> candidates = checkpointer.resume_candidates();
    fresh = candidates.empty() && cfg.checkpoint.init_weights.empty();
    if (state.frozen_layout() != nullptr) {
      // LoRA: the frozen base from init_weights, resumed or not; the adapters from a checkpoint, from
      // init_weights where it holds them (a PEFT adapter imported), or fresh.
      state.load_frozen_base([&](const ParameterLayout& base, StateSource& weights) {
        checkpointer.load_base_weights(cfg.checkpoint.init_weights, base, weights);
      });
      // Saves record the base's identity: a base without it (no checksums) is refused now, not at the first save.
      const std::string base_hash = base_model_hash(cfg.checkpoint.init_weights);
      if (leader) {
        fmt::print("frozen base weights from {} (identity {})\n", cfg.checkpoint.init_weights, base_hash);
        warn_rank_above_shape(cfg.model);
      }
      fresh = candidates.empty() && !checkpointer.holds_adapters(cfg.checkpoint.init_weights);
      if (!candidates.empty()) {
        progress = resume(checkpointer, candidates, cfg, state.checkpoint_tensors(), leader);
      } else if (!fresh) {
        checkpointer.load_weights(cfg.checkpoint.init_weights, state.checkpoint_tensors().weights);
        if (leader) fmt::print("initial LoRA adapters from {}\n", cfg.checkpoint.init_weights);
      }
    } else if (!candidates.empty()) {
      progress = resume(checkpointer, candidates, cfg, state.checkpoint_tensors(), leader);
    } else if (!cfg.checkpoint.init_weights.empty()) {
      checkpointer.load_weights(cfg.checkpoint.init_weights, state.checkpoint_tensors().weights);
      if (leader) fmt::print("initial weights from {}\n", cfg.checkpoint.init_weights);
    }
    // The checkpoint directory must be usable before any work is done that would need saving
    // (after the loads, whose refusals name the file at fault).
    if (leader) check_checkpoint_dir(cfg, checkpointer.file_bytes());
    return progress;
  });
  // Collective under ZeRO (gathers), so outside the agreement above, which may leave early on one rank's error.
  if (fresh) {
    const auto initialization_start = Clock::now();
    state.initialize(cfg.train.seed);
    start.initialization_s = seconds_since(initialization_start);
  } else {
    state.loaded();
  }
  state.restore_scaler(start.progress);
  order.continue_from(start.progress.step, std::uint64_t(start.progress.samples));
  return start;
}

}  // namespace meshtrain
