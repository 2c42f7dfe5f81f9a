// The LoRA keys of stored adapters against the run's (checkpoint/adapter_keys.hpp).
#include "checkpoint/adapter_keys.hpp"

#include "core/errors.hpp"
#include "core/lora_targets.hpp"

#include <fmt/format.h>

namespace meshtrain {
namespace {

// "lora.rank = 8" or, for a full model, "lora.rank = 0 (full training)".
std::string rank_text(int rank) { return fmt::format("lora.rank = {}{}", rank, rank == 0 ? " (full training)" : ""); }

}  // namespace

void require_same_adapter_keys(const Config& stored, const Config& run, std::string_view key, const std::string& path) {
  const LoraConfig& have = stored.model.lora;
  const LoraConfig& want = run.model.lora;
  if (!have.enabled() && !want.enabled()) return;
  // Ranks equal from here on, both adapter runs.
  auto refuse = [&](std::string_view name, const std::string& stored_value, const std::string& run_value) {
    input_error(
        "{} '{}' holds LoRA adapters trained with {} = {}, but this run has {} = {}: set --{} {} to continue them{}",
        key, path, name, stored_value, name, run_value, name, stored_value,
        key == "checkpoint.resume" ? ", or give the run another checkpoint.dir (or checkpoint.resume never)" : "");
  };
  if (have.rank != want.rank) {
    // A full model and an adapter run: the message says which side is which.
    if (!have.enabled() || !want.enabled()) {
      input_error("{} '{}' holds {}, but this run has {}: {}", key, path,
                  have.enabled() ? fmt::format("LoRA adapters of {}", rank_text(have.rank))
                                 : "a full model (lora.rank = 0, no adapters)",
                  rank_text(want.rank),
                  have.enabled() ? fmt::format("set --lora.rank {} to continue them", have.rank)
                                 : std::string("a LoRA run resumes only its own adapter checkpoints; give it another "
                                               "checkpoint.dir, and this file as checkpoint.init_weights to adapt it"));
    }
    refuse("lora.rank", fmt::format("{}", have.rank), fmt::format("{}", want.rank));
  }
  if (have.alpha != want.alpha) refuse("lora.alpha", fmt::format("{}", have.alpha), fmt::format("{}", want.alpha));
  if (lora_target_names(stored.model) != lora_target_names(run.model)) {
    refuse("lora.targets", have.targets, want.targets);
  }
  if (have.rslora != want.rslora) {
    refuse("lora.rslora", fmt::format("{}", have.rslora), fmt::format("{}", want.rslora));
  }
}

}  // namespace meshtrain
