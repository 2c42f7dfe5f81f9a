// A checkpoint's root attributes written and read back checked (checkpoint/attributes.hpp).
#include "checkpoint/attributes.hpp"

#include "checkpoint/adapter_keys.hpp"
#include "checkpoint/base_identity.hpp"
#include "core/errors.hpp"
#include "core/mpi_check.hpp"
#include "io/checkpoint/file.hpp"
#include "io/checkpoint/schema.hpp"
#include "io/tokenizer.hpp"

#include <fmt/format.h>

#include <charconv>
#include <optional>

namespace meshtrain {
namespace {

namespace attr = io::schema::attr;

std::string layout_description(MPI_Comm comm, const ParallelConfig& parallel) {
  int world = 1;
  MESHTRAIN_MPI_CHECK(MPI_Comm_size(comm, &world), "is the communicator valid?");
  const int dp = world / (parallel.tp * parallel.pp);
  std::string text =
      fmt::format("world={} dp={} tp={} pp={} zero={}", world, dp, parallel.tp, parallel.pp, parallel.zero);
  if (parallel.ep > 1) text += fmt::format(" ep={}", parallel.ep);  // expert parallelism only where it was used
  return text;
}

void require_same_model(const Config& stored, const Config& wanted, const std::string& path) {
  const auto& a = stored.model;
  const auto& b = wanted.model;
  auto check = [&](const char* key, int have, int want) {
    if (have != want) {
      input_error(
          "checkpoint '{}' holds a model with {} = {}, but the config asks for {}: set --{} {} or start "
          "from another checkpoint",
          path, key, have, want, key, have);
    }
  };
  check("model.layers", a.layers, b.layers);
  check("model.heads", a.heads, b.heads);
  check("model.d_model", a.d_model, b.d_model);
  check("model.vocab", a.vocab, b.vocab);
  check("model.seq_len", a.seq_len, b.seq_len);
}

// LoRA: adapters resume only onto the base they were trained on (checkpoint.init_weights as it is now).
void require_same_lora_base(const io::CheckpointReader& reader, const Config& config, const std::string& path) {
  if (!config.model.lora.enabled()) return;
  const auto recorded = reader.string_attribute(attr::lora_base_hash);
  if (!recorded) {
    input_error(
        "checkpoint '{}' records no {}: it holds no LoRA adapters, and lora.rank = {} resumes only "
        "adapter checkpoints",
        path, attr::lora_base_hash, config.model.lora.rank);
  }
  const std::string now = base_model_hash(config.checkpoint.init_weights);
  if (*recorded != now) {
    input_error(
        "checkpoint '{}' holds LoRA adapters trained on a base of {} {} ({} = '{}'), but checkpoint.init_weights = "
        "'{}' is now {}: adapters apply only to the weights they were trained on",
        path, attr::lora_base_hash, *recorded, attr::lora_base, reader.string_attribute(attr::lora_base).value_or("?"),
        config.checkpoint.init_weights, now);
  }
}

Config parse_stored_config(const std::string& text, const std::string& path) {
  try {
    return config_from_ini(text, fmt::format("the config stored in '{}' (attribute {})", path, attr::config));
  } catch (const InputError& e) {
    input_error(
        "{}; a checkpoint stores the resolved config of the run that wrote it as the INI meshtrain train reads "
        "(`[model]` sections of `key = value` lines): the file is damaged, or from another program",
        e.what());
  }
}

// The family a checkpoint records, checked against the model.arch of its stored config (where
// there is one); nothing for a weights file from another tool.
std::optional<Arch> recorded_family(const io::CheckpointReader& reader, const std::string& path) {
  const std::optional<std::string> name = io::schema::model_family(reader);
  if (!name) return std::nullopt;
  const std::optional<Arch> family = from_name<Arch>(*name);
  if (!family) {
    input_error("checkpoint '{}': {} = '{}' is no model family this build knows ({})", path, attr::model_family, *name,
                valid_names<Arch>());
  }
  if (const auto text = reader.string_attribute(attr::config)) {
    const Arch stored = parse_stored_config(*text, path).model.arch;
    if (stored != *family) {
      input_error("checkpoint '{}' is inconsistent: {} = '{}' but its stored config has model.arch = {}", path,
                  attr::model_family, *name, stored);
    }
  }
  return family;
}

// fp16's loss scale and its clean steps into progress, where the file has both.
void read_loss_scale(const io::CheckpointReader& reader, const std::string& path, TrainingProgress& progress) {
  const auto scale = reader.double_attribute(attr::loss_scale);
  const auto clean = reader.int_attribute(attr::loss_scale_clean_steps);
  if (!scale || !clean) return;
  if (!(*scale >= 1) || *clean < 0) {
    input_error("checkpoint '{}': {} = {} or {} = {} is invalid (a scale >= 1 and a count >= 0 are valid)", path,
                attr::loss_scale, *scale, attr::loss_scale_clean_steps, *clean);
  }
  progress.loss_scale = *scale;
  progress.loss_scale_clean_steps = *clean;
}

}  // namespace

Attributes root_attributes(const Config& config, MPI_Comm comm, const TrainingProgress& progress,
                           const TokenizerRecord& tokenizer) {
  Attributes a = {{attr::format, std::string(io::schema::format_name)},
                  {attr::version, io::schema::version},
                  {attr::step, progress.step},
                  {attr::tokens, progress.tokens},
                  {attr::samples_seen, progress.samples},
                  {attr::config, config.to_ini()},
                  {attr::layout, layout_description(comm, config.parallel)},
                  {attr::seed, std::int64_t(config.train.seed)},
                  {attr::data_order, std::string(name_of(config.data.order))},
                  {attr::model_family, std::string(name_of(config.model.arch))}};
  if (progress.loss_scale > 0) {
    a.emplace_back(attr::loss_scale, progress.loss_scale);
    a.emplace_back(attr::loss_scale_clean_steps, progress.loss_scale_clean_steps);
  }
  if (!tokenizer.path.empty()) {
    a.emplace_back(attr::tokenizer, tokenizer.path);
    a.emplace_back(attr::tokenizer_xxh64, io::hash_hex(tokenizer.hash));
  }
  return a;
}

TrainingProgress read_progress(const io::CheckpointReader& reader, const Config& config, const std::string& path) {
  const auto format = reader.string_attribute(attr::format);
  if (format != io::schema::format_name) {
    input_error("'{}' is not a meshtrain checkpoint (root attribute {} = '{}', expected '{}')", path, attr::format,
                format.value_or("<missing>"), io::schema::format_name);
  }
  const auto config_text = reader.string_attribute(attr::config);
  const auto step = reader.int_attribute(attr::step);
  const auto tokens = reader.int_attribute(attr::tokens);
  if (!config_text || !step || !tokens || *step < 0 || *tokens < 0) {
    input_error("checkpoint '{}' lacks the {}, {} or {} attribute, or they are invalid: it cannot be resumed", path,
                attr::config, attr::step, attr::tokens);
  }
  require_same_family(reader, config, path);
  const Config stored = parse_stored_config(*config_text, path);
  require_same_model(stored, config, path);
  require_same_adapter_keys(stored, config, "checkpoint.resume", path);
  TrainingProgress progress{*step, *tokens};
  // Version 1 files knew only step · global_batch.
  progress.samples = reader.int_attribute(attr::samples_seen).value_or(*step * std::int64_t(stored.train.global_batch));
  if (progress.samples < 0) {
    input_error("checkpoint '{}': {} = {} is negative", path, attr::samples_seen, progress.samples);
  }
  read_loss_scale(reader, path, progress);
  require_same_lora_base(reader, config, path);
  return progress;
}

void require_same_family(const io::CheckpointReader& reader, const Config& config, const std::string& path) {
  const std::optional<Arch> family = recorded_family(reader, path);
  if (!family || *family == config.model.arch) return;
  input_error(
      "checkpoint '{}' holds a {} model, but the config asks for model.arch = {}: a checkpoint loads only into "
      "its own family; set --model.arch {} or start from a {} checkpoint",
      path, *family, config.model.arch, *family, config.model.arch);
}

std::optional<Config> read_stored_config(const io::CheckpointReader& reader, const std::string& path) {
  const auto text = reader.string_attribute(attr::config);
  if (!text) return std::nullopt;
  recorded_family(reader, path);
  return parse_stored_config(*text, path);
}

TokenizerRecord read_tokenizer_record(const io::CheckpointReader& reader, const std::string& path) {
  const auto tokenizer = reader.string_attribute(attr::tokenizer);
  if (!tokenizer || tokenizer->empty()) return {};
  const std::string hex = reader.string_attribute(attr::tokenizer_xxh64).value_or("");
  TokenizerRecord record{*tokenizer, 0};
  const auto [end, error] = std::from_chars(hex.data(), hex.data() + hex.size(), record.hash, 16);
  if (hex.size() != 16 || error != std::errc() || end != hex.data() + hex.size()) {
    input_error("checkpoint '{}' records tokenizer '{}' but its {} is '{}', not 16 hex digits", path, *tokenizer,
                attr::tokenizer_xxh64, hex);
  }
  return record;
}

}  // namespace meshtrain
