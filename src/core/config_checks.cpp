// Validation of the run configuration: one pass over the key table checks every key on its own
// (its range where its family is on, its default where it is off), then a few rules check keys
// against each other, now that each is valid alone.
#include "core/config_checks.hpp"

#include "core/config_keys.hpp"
#include "core/errors.hpp"
#include "core/lora_targets.hpp"
#include "core/model_sizes.hpp"

#include <fmt/format.h>

#include <cmath>
#include <optional>
#include <string>
#include <type_traits>
#include <variant>
#include <vector>

namespace meshtrain {

namespace {

// --- one key at a time ---------------------------------------------------------------------------

bool family_is_on(KeyFamily family, const Config& c) {
  switch (family) {
    case KeyFamily::always: return true;
    case KeyFamily::llama: return family_shape(c.model.arch).llama_keys;
    case KeyFamily::moe: return c.model.experts > 0;
    case KeyFamily::rope_scaling: return c.model.rope_scaling != RopeScaling::none;
    case KeyFamily::rope_llama3: return c.model.rope_scaling == RopeScaling::llama3;
    case KeyFamily::lora: return c.model.lora.enabled();
  }
  return true;
}

// The family whose setting has to be on before `family`'s means anything.
KeyFamily enclosing_family(KeyFamily family) {
  switch (family) {
    case KeyFamily::moe:
    case KeyFamily::rope_scaling: return KeyFamily::llama;
    case KeyFamily::rope_llama3: return KeyFamily::rope_scaling;
    default: return KeyFamily::always;
  }
}

// The outermost family around `family` (itself included) that `c` leaves off, or none: an MoE key
// under gpt2 is refused as a llama key, a llama3-only key under rope_scaling = none as a scaling key.
std::optional<KeyFamily> outermost_off(KeyFamily family, const Config& c) {
  if (family == KeyFamily::always) return std::nullopt;
  if (const auto outer = outermost_off(enclosing_family(family), c)) return outer;
  if (family_is_on(family, c)) return std::nullopt;
  return family;
}

// A key whose family `off` is off keeps its default. A llama key under gpt2 and a [lora] key under
// lora.rank = 0 must not be given at all, even at the default: it says the author meant another model,
// or to adapt one that would now be trained in full. A stored config lists every key (given is empty
// there), so its [lora] keys are not held to their defaults.
void check_outside_family(const ConfigKey& key, KeyFamily off, const Config& c, const GivenKeys& given) {
  const bool is_default = at_default(key, c);
  const bool is_given = given.contains(key.name);
  switch (off) {
    case KeyFamily::llama:
      if (!is_default || is_given) {
        const std::string_view arch = family_shape(c.model.arch).name;
        input_error(
            "{} is a llama key and model.arch is {}: set model.arch = llama, or leave {} out{}", key.name, arch,
            key.name,
            is_default ? fmt::format(" (even at its default value: a {} model has no {})", arch, key.name) : "");
      }
      return;
    case KeyFamily::moe:
      if (!is_default) {
        input_error("{} is a mixture-of-experts key: set model.experts > 0, or leave {} out", key.name, key.name);
      }
      return;
    case KeyFamily::rope_scaling:
      if (!is_default) {
        input_error("{} is a rotary scaling key: set model.rope_scaling = linear or llama3, or leave {} out", key.name,
                    key.name);
      }
      return;
    case KeyFamily::rope_llama3:
      if (!is_default)
        input_error("{} is a key of model.rope_scaling = llama3 only, or leave {} out", key.name, key.name);
      return;
    case KeyFamily::lora:
      if (is_given) {
        input_error(
            "{} is a LoRA key and lora.rank = 0 (full training): set lora.rank > 0 to train adapters, or leave {} out",
            key.name, key.name);
      }
      return;
    case KeyFamily::always: return;
  }
}

bool in_range(double v, const KeyRange& r) {
  if (r.finite && !std::isfinite(v)) return false;
  const bool above_min = r.min_open ? v > r.min : v >= r.min;
  const bool below_max = r.max_open ? v < r.max : v <= r.max;
  return above_min && below_max;  // both false for NaN
}

// What the value must be, after "it must": "lie in 1..4096", "lie in [0, 1)", "be a finite number > 0",
// "be >= 0".
std::string range_text(const KeyRange& r, bool integer) {
  const bool has_min = r.min > -KeyRange::unbounded;
  const bool has_max = r.max < KeyRange::unbounded;
  if (has_min && has_max) {
    if (integer) return fmt::format("lie in {}..{}", r.min, r.max);
    return fmt::format("lie in {}{}, {}{}", r.min_open ? "(" : "[", r.min, r.max, r.max_open ? ")" : "]");
  }
  if (integer && has_min && r.min == 1) return "be a positive integer";
  const char* what = r.finite && !integer ? "a finite number " : "";
  if (has_min) return fmt::format("be {}{} {}", what, r.min_open ? ">" : ">=", r.min);
  return fmt::format("be {}{} {}", what, r.max_open ? "<" : "<=", r.max);
}

void check_range(const ConfigKey& key, const Config& c) {
  std::visit(
      [&](const auto* field) {
        using T = std::remove_cvref_t<decltype(*field)>;
        if constexpr (std::is_arithmetic_v<T> && !std::is_same_v<T, bool>) {
          if (!in_range(static_cast<double>(*field), key.range)) {
            input_error("{} = {} is invalid: it must {}{}{}", key.name, *field,
                        range_text(key.range, std::is_integral_v<T>), *key.range.note ? " " : "", key.range.note);
          }
        }
      },
      key.value(c));
}

// --- keys against each other ---------------------------------------------------------------------

void check_model_shape(const ModelConfig& m) {
  const FamilyShape& family = family_shape(m.arch);
  // model.head_dim frees a llama's heads from dividing d_model (Gemma's, Qwen3's shapes).
  const bool own_head_dim = family.llama_keys && m.head_dim > 0;
  if (m.d_model % m.heads != 0 && !own_head_dim) {
    input_error("model.heads = {} does not divide model.d_model = {}: choose heads among the divisors of d_model{}",
                m.heads, m.d_model, family.llama_keys ? ", or set model.head_dim" : "");
  }
  if (!family.llama_keys) return;
  if (m.kv_heads > 0 && m.heads % m.kv_heads != 0) {
    input_error("model.kv_heads = {} is invalid: it must divide model.heads = {} (0: heads)", m.kv_heads, m.heads);
  }
  if (m.experts > 0 && m.experts_per_token > m.experts) {
    input_error("model.experts_per_token = {} is invalid: it must lie in 1 .. model.experts = {}", m.experts_per_token,
                m.experts);
  }
  if (m.pad_to_capacity && m.capacity_factor == 0) {
    input_error(
        "model.pad_to_capacity = true needs a capacity: set model.capacity_factor > 0 (dropless routing has no "
        "size to pad to), or pad_to_capacity = false");
  }
  // Llama 3.1's smooth band divides by high − low.
  if (m.rope_scaling == RopeScaling::llama3 && !(m.rope_high_freq_factor > m.rope_low_freq_factor)) {
    input_error(
        "model.rope_high_freq_factor = {} must be larger than model.rope_low_freq_factor = {} (llama3 "
        "scaling blends the frequencies between the two wavelengths they mark)",
        m.rope_high_freq_factor, m.rope_low_freq_factor);
  }
  if (!family.learned_positions && m.head_size() % 2 != 0) {
    input_error(
        "{} = {} is odd: rotary position embedding rotates pairs of a head's channels, so the head size must be even",
        m.head_dim > 0 ? "model.head_dim" : "model.d_model / model.heads", m.head_size());
  }
}

// Sequence parallelism splits a micro-batch's token rows over the tp ranks: there must be two or more,
// and they must divide the rows.
void check_sequence_parallel(const Config& c) {
  if (!c.parallel.sequence_parallel) return;
  if (c.parallel.tp < 2) {
    input_error(
        "parallel.sequence_parallel = true needs tensor parallelism: set parallel.tp > 1 (it splits the token rows "
        "between the tensor-parallel regions over the tp ranks), or sequence_parallel = false");
  }
  const std::int64_t rows = std::int64_t{c.train.micro_batch} * c.model.seq_len;
  if (rows % c.parallel.tp != 0) {
    input_error(
        "parallel.sequence_parallel = true splits the {} token rows of a micro-batch (train.micro_batch {} × "
        "model.seq_len {}) over parallel.tp = {} ranks: choose a micro-batch or seq_len whose product tp divides",
        rows, c.train.micro_batch, c.model.seq_len, c.parallel.tp);
  }
}

}  // namespace

// Context parallelism splits every sequence into 2·cp load-balanced chunks and runs the fused attention
// around a ring; what cannot run so is refused by name.
void check_context_parallel(const Config& c) {
  const int cp = c.parallel.cp;
  if (cp <= 1) return;
  if (!context_chunks_divide(c.model.seq_len, cp)) {
    std::vector<int> valid;
    for (int d = 1; d <= c.model.seq_len / 2; ++d) {
      if (context_chunks_divide(c.model.seq_len, d)) valid.push_back(d);
    }
    input_error(
        "parallel.cp = {} splits each sequence of model.seq_len = {} positions into 2 × cp = {} chunks (each rank one "
        "early and one late chunk): choose parallel.cp among {}, or a seq_len that {} divides",
        cp, c.model.seq_len, 2 * cp, fmt::join(valid, ", "), 2 * cp);
  }
  if (c.model.attention != AttentionKernel::fused) {
    input_error(
        "parallel.cp = {} runs the fused attention around a ring of K/V blocks: model.attention = materialized has "
        "no such kernel; set model.attention = fused, or parallel.cp = 1",
        cp);
  }
}

// ZB-H1 defers each backward's weight gradients (parallel/pipeline_schedule.hpp): the dense blocks' products and
// norms, the head and the embedding split so, under every recomputation; what does not is refused by name.
void check_pipeline_schedule(const Config& c) {
  if (c.parallel.schedule != PipelineSchedule::zero_bubble_h1) return;
  const auto refuse = [](const std::string& what) {
    input_error(
        "parallel.schedule = zb-h1 runs each backward's weight gradients later than its input gradient, which {} "
        "does not split into: set parallel.schedule = 1f1b (or gpipe)",
        what);
  };
  if (c.model.experts > 0) refuse(fmt::format("model.experts = {} (mixture-of-experts blocks)", c.model.experts));
}

namespace {

void check_run(const Config& c) {
  if (c.data.valid.empty() && (c.train.eval_every > 0 || c.train.eval_tokens > 0)) {
    input_error("train.{} is set but data.valid is not: give validation shards to evaluate on",
                c.train.eval_every > 0 ? "eval_every" : "eval_tokens");
  }
  if (c.optim.min_lr > c.optim.lr) {
    input_error("optim.min_lr = {} is larger than optim.lr = {}: the decay goes from lr down to min_lr", c.optim.min_lr,
                c.optim.lr);
  }
  if (c.checkpoint.dir.empty()) input_error("checkpoint.dir is empty: give a directory for checkpoints");
  check_sequence_parallel(c);
  check_context_parallel(c);
  check_pipeline_schedule(c);
  if (c.model.lora.enabled()) {
    if (c.checkpoint.init_weights.empty()) {
      input_error(
          "lora.rank = {} needs the base model to adapt: set checkpoint.init_weights (meshtrain import writes it from "
          "a Hugging Face directory)",
          c.model.lora.rank);
    }
    lora_target_names(c.model);  // throws InputError naming lora.targets
  }
}

}  // namespace

void check_config(const Config& c, const GivenKeys& given) {
  for (const ConfigKey& key : config_keys()) {
    if (const std::optional<KeyFamily> off = outermost_off(key.family, c)) {
      check_outside_family(key, *off, c, given);
    } else {
      check_range(key, c);
    }
  }
  check_model_shape(c.model);
  check_run(c);
  // Last: every size the keys imply.
  require_sizes_fit(c.model, c.train.micro_batch, c.parallel.ep);
}

}  // namespace meshtrain
