// The table of the run configuration's keys (core/config_keys.hpp): one row per key of
// share/docs/usage.md's key reference, in `--help` order.
#include "core/config_keys.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cstddef>
#include <optional>
#include <type_traits>
#include <vector>

namespace meshtrain {

namespace {

// The row of key `name`, bound to the field that the member pointers `path` lead to from a Config:
// key_at<&Config::model, &ModelConfig::layers> for cfg.model.layers (the fold reads c.*p1.*p2…).
template <auto... path>
constexpr ConfigKey key_at(const char* name, KeyRange range, KeyFamily family, const char* help) {
  return {name,
          [](Config& c) -> KeyFieldTypes::Pointer { return &(c.*....*path); },
          [](const Config& c) -> KeyFieldTypes::ConstPointer { return &(c.*....*path); },
          range,
          family,
          help};
}

// The ranges the rows use most, by what they admit.
constexpr KeyRange any_value = {};
constexpr KeyRange at_least(double min, const char* note = "") { return {.min = min, .note = note}; }
constexpr KeyRange from_to(double min, double max, const char* note = "") {
  return {.min = min, .max = max, .note = note};
}
constexpr KeyRange finite_at_least(double min) { return {.min = min, .finite = true}; }
constexpr KeyRange finite_above(double min) { return {.min = min, .min_open = true, .finite = true}; }
constexpr KeyRange zero_to_below_one = {.min = 0, .max = 1, .max_open = true, .finite = true};  // [0, 1)

// Built in a lambda so that its short names (the sections' members, the families) stay inside it.
constexpr auto table = [] {
  using enum KeyFamily;
  constexpr auto model = &Config::model;
  constexpr auto train = &Config::train;
  constexpr auto optim = &Config::optim;
  constexpr auto parallel = &Config::parallel;
  constexpr auto data = &Config::data;
  constexpr auto checkpoint = &Config::checkpoint;
  constexpr auto log = &Config::log;
  using M = ModelConfig;
  using L = LoraConfig;
  return std::to_array<ConfigKey>({
      key_at<model, &M::arch>("model.arch", any_value, always, "model family: {}"),
      key_at<model, &M::layers>("model.layers", from_to(1, 4096), always, "transformer blocks L"),
      key_at<model, &M::heads>("model.heads", at_least(1), always, "attention heads (must divide d_model)"),
      key_at<model, &M::d_model>("model.d_model", at_least(1), always, "channels C"),
      // Token shards hold uint16 or uint32 ids; tokenizer.json ids stop below 2^24 (io/tokenizer_json.cpp).
      key_at<model, &M::vocab>("model.vocab", from_to(1, 1 << 24, "(2^24 token ids)"), always,
                               "vocabulary size V (byte-level data: 256)"),
      key_at<model, &M::seq_len>("model.seq_len", at_least(1), always, "context length T (gpt2: rows of wpe)"),
      key_at<model, &M::attention>("model.attention", any_value, always, "causal attention: {}"),
      key_at<model, &M::kv_heads>(
          "model.kv_heads", at_least(0, "(0: heads)"), llama,
          "llama: key/value heads of grouped-query attention, dividing heads (0: heads; 1: multi-query)"),
      key_at<model, &M::ffn_hidden>(
          "model.ffn_hidden", at_least(0, "(0: the LLaMA rule)"), llama,
          "llama: SwiGLU hidden size (0: 2/3 of 4 d_model rounded up to a multiple of model.multiple_of)"),
      key_at<model, &M::multiple_of>("model.multiple_of", at_least(1), llama,
                                     "llama: the SwiGLU hidden size's rounding when ffn_hidden is 0"),
      key_at<model, &M::rope_theta>("model.rope_theta", finite_above(0), llama,
                                    "llama: rotary position embedding base theta"),
      key_at<model, &M::norm_eps>("model.norm_eps", finite_above(0), llama, "llama: RMSNorm epsilon"),
      key_at<model, &M::tie_embeddings>(
          "model.tie_embeddings", any_value, llama,
          "llama: the output head lm_head is the token embedding embed_tokens (one tensor)"),
      key_at<model, &M::qkv_bias>("model.qkv_bias", any_value, llama,
                                  "llama: q_proj, k_proj and v_proj carry biases (Qwen2)"),
      key_at<model, &M::head_dim>("model.head_dim", from_to(0, 1024, "(0: d_model / heads)"), llama,
                                  "llama: channels of one attention head (0: d_model / heads)"),
      key_at<model, &M::rope_scaling>("model.rope_scaling", any_value, llama, "llama: rotary frequency scaling: {}"),
      key_at<model, &M::rope_factor>("model.rope_factor", finite_above(0), rope_scaling,
                                     "llama, rope_scaling linear or llama3: the scaling factor"),
      key_at<model, &M::rope_low_freq_factor>("model.rope_low_freq_factor", finite_above(0), rope_llama3,
                                              "llama, rope_scaling llama3: low_freq_factor"),
      key_at<model, &M::rope_high_freq_factor>("model.rope_high_freq_factor", finite_above(0), rope_llama3,
                                               "llama, rope_scaling llama3: high_freq_factor"),
      key_at<model, &M::rope_original_max_position>(
          "model.rope_original_max_position", at_least(1), rope_llama3,
          "llama, rope_scaling llama3: original_max_position_embeddings, the pre-training context"),
      key_at<model, &M::experts>("model.experts", from_to(0, 1024, "(0: dense MLPs)"), llama,
                                 "llama: routed experts E of each MoE block (0: dense MLPs)"),
      key_at<model, &M::experts_per_token>("model.experts_per_token", at_least(1), moe,
                                           "MoE: experts k each token is routed to"),
      key_at<model, &M::moe_every>("model.moe_every", at_least(1), moe,
                                   "MoE: block l has routed experts when l % moe_every == 0"),
      key_at<model, &M::shared_experts>("model.shared_experts", at_least(0), moe,
                                        "MoE: shared experts every token passes (one SwiGLU of shared_experts x expert "
                                        "width)"),
      key_at<model, &M::expert_hidden>("model.expert_hidden", at_least(0, "(0: the dense SwiGLU width)"), moe,
                                       "MoE: SwiGLU width of one expert (0: the dense width)"),
      key_at<model, &M::capacity_factor>(
          "model.capacity_factor", finite_at_least(0), moe,
          "MoE: an expert takes ceil(factor x tokens x k / E) of a micro-batch's assignments (0: no drops)"),
      key_at<model, &M::pad_to_capacity>(
          "model.pad_to_capacity", any_value, moe,
          "MoE: pad each expert's rows to its capacity, so the step never reads the routing on the host "
          "(needs model.capacity_factor > 0)"),
      key_at<model, &M::normalize_gates>(
          "model.normalize_gates", any_value, moe,
          "MoE: renormalise the k chosen router probabilities to sum 1 (false: the raw probabilities)"),
      key_at<model, &M::aux_loss_coef>("model.aux_loss_coef", finite_at_least(0), moe,
                                       "MoE: weight of the load-balancing auxiliary loss"),
      key_at<model, &M::z_loss_coef>("model.z_loss_coef", finite_at_least(0), moe, "MoE: weight of the router z-loss"),
      key_at<train, &TrainConfig::micro_batch>("train.micro_batch", at_least(1), always,
                                               "sequences per micro-batch on one data-parallel rank"),
      key_at<train, &TrainConfig::global_batch>("train.global_batch", at_least(1), always,
                                                "sequences per optimizer step over all ranks and accumulation"),
      key_at<train, &TrainConfig::steps>("train.steps", at_least(1), always,
                                         "optimizer steps in total (the schedule spans these)"),
      key_at<train, &TrainConfig::stop_after>("train.stop_after", at_least(0), always,
                                              "leave after this many steps in this job, saving (0: run to the end)"),
      key_at<train, &TrainConfig::time_limit>("train.time_limit", finite_at_least(0), always,
                                              "minutes this job may run; saves and leaves in time (0: none)"),
      key_at<train, &TrainConfig::memory_gib>(
          "train.memory_gib", finite_at_least(0), always,
          "GiB the fit check allows one node's ranks (host builds) or one rank's GPU (0: the machine's RAM)"),
      key_at<train, &TrainConfig::seed>("train.seed", at_least(0), always, "seed for initialisation and shuffling"),
      key_at<train, &TrainConfig::eval_every>("train.eval_every", at_least(0), always,
                                              "steps between validation passes over data.valid (0: only after the last "
                                              "step)"),
      key_at<train, &TrainConfig::eval_tokens>(
          "train.eval_tokens", at_least(0), always,
          "positions of data.valid each validation pass reads from its start, in seq_len windows (0: all)"),
      key_at<train, &TrainConfig::precision>(
          "train.precision", any_value, always,
          "{}: weights and activations in compute (fp32 master weights and moments always)"),
      // Infinity is a valid start: the scaler halves it on the first overflow.
      key_at<train, &TrainConfig::loss_scale>("train.loss_scale",
                                              at_least(1, "(fp16's initial loss scale, e.g. 65536)"), always,
                                              "fp16: initial dynamic loss scale (halved on overflow)"),
      key_at<train, &TrainConfig::loss_scale_window>("train.loss_scale_window", at_least(1), always,
                                                     "fp16: clean steps before the loss scale doubles"),
      key_at<train, &TrainConfig::recompute>("train.recompute", any_value, always, "activation recomputation: {}"),
      key_at<train, &TrainConfig::tf32>(
          "train.tf32", any_value, always,
          "fp32 runs on CUDA builds: GEMMs on TF32 tensor cores (10-bit mantissa inputs; host builds stay exact)"),
      key_at<train, &TrainConfig::deterministic>(
          "train.deterministic", any_value, always,
          "false lets CUDA builds with cuDNN run attention's backward on cuDNN (dQ added with atomics: faster, no "
          "longer bitwise from run to run or across a resume); host builds are deterministic either way"),
      key_at<train, &TrainConfig::vocab_multiple>(
          "train.vocab_multiple", from_to(0, 65536, "(0: the build's choice)"), always,
          "pad the vocabulary to a multiple of this (x tp) for the GEMMs; the pad is out of the loss and of "
          "checkpoints (0: 128 on CUDA builds, 1 on host builds)"),
      key_at<train, &TrainConfig::nonfinite>("train.nonfinite", any_value, always,
                                             "a non-finite loss or gradient norm (under fp16 a non-finite loss): {}"),
      key_at<train, &TrainConfig::nonfinite_skips>(
          "train.nonfinite_skips", at_least(1), always,
          "train.nonfinite = skip: consecutive skipped steps before the run stops (exit 6)"),
      key_at<optim, &OptimConfig::lr>("optim.lr", finite_above(0), always, "peak learning rate"),
      key_at<optim, &OptimConfig::min_lr>("optim.min_lr", finite_at_least(0), always,
                                          "final learning rate of the cosine decay"),
      key_at<optim, &OptimConfig::warmup_steps>("optim.warmup_steps", at_least(0), always, "linear warm-up steps"),
      key_at<optim, &OptimConfig::decay>("optim.decay", any_value, always, "{}"),
      key_at<optim, &OptimConfig::weight_decay>("optim.weight_decay", finite_at_least(0), always,
                                                "AdamW decoupled weight decay (matrices and embeddings)"),
      key_at<optim, &OptimConfig::beta1>("optim.beta1", zero_to_below_one, always, "AdamW beta1"),
      key_at<optim, &OptimConfig::beta2>("optim.beta2", zero_to_below_one, always, "AdamW beta2"),
      key_at<optim, &OptimConfig::eps>("optim.eps", finite_above(0), always, "AdamW epsilon"),
      key_at<optim, &OptimConfig::grad_clip>("optim.grad_clip", finite_at_least(0), always,
                                             "clip the global gradient norm to this (0: off)"),
      key_at<parallel, &ParallelConfig::dp>("parallel.dp", at_least(0, "(0: world / (cp x tp x pp))"), always,
                                            "data-parallel degree (0: world / (cp x tp x pp))"),
      key_at<parallel, &ParallelConfig::tp>("parallel.tp", at_least(1), always, "tensor-parallel degree"),
      key_at<parallel, &ParallelConfig::pp>("parallel.pp", at_least(1), always, "pipeline-parallel degree"),
      key_at<parallel, &ParallelConfig::ep>(
          "parallel.ep", at_least(1), always,
          "expert-parallel degree: the experts sharded over ep ranks of each data-parallel group (divides dp)"),
      key_at<parallel, &ParallelConfig::cp>(
          "parallel.cp", at_least(1), always,
          "context-parallel degree: each sequence's positions split over cp ranks, attention around a ring: "
          "activations / cp"),
      key_at<parallel, &ParallelConfig::sequence_parallel>(
          "parallel.sequence_parallel", any_value, always,
          "split the norms' and residual stream's token rows over the tp ranks (needs tp > 1): activations / tp"),
      key_at<parallel, &ParallelConfig::zero>(
          "parallel.zero",
          from_to(0, 3, "(0: none, 1: optimizer state sharded over dp, 2: + gradients, 3: + parameters)"), always,
          "ZeRO stage: 0 none, 1 optimizer state sharded over dp, 2 + gradients, 3 + parameters"),
      key_at<parallel, &ParallelConfig::schedule>("parallel.schedule", any_value, always, "pipeline schedule: {}"),
      key_at<parallel, &ParallelConfig::backend>("parallel.backend", any_value, always, "collectives: {}"),
      key_at<parallel, &ParallelConfig::bucket_mb>("parallel.bucket_mb", finite_above(0), always,
                                                   "data-parallel gradient bucket size in MiB (reduced while backward "
                                                   "runs)"),
      key_at<parallel, &ParallelConfig::timeout>(
          "parallel.timeout", finite_at_least(0), always,
          "seconds a collective may wait for its group before the job ends with exit 5 (0: off)"),
      key_at<data, &DataConfig::train>("data.train", any_value, always,
                                       "token shard, or a glob of shards (sorted order)"),
      key_at<data, &DataConfig::tokenizer>(
          "data.tokenizer", any_value, always,
          "SentencePiece model or tokenizer.json the shards were made with (prepare --tokenizer); empty: byte-level"),
      key_at<data, &DataConfig::tokenizer_change>(
          "data.tokenizer_change", any_value, always,
          "a checkpoint that records another tokenizer than data.tokenizer (or none): {}"),
      key_at<data, &DataConfig::order>("data.order", any_value, always, "{}"),
      key_at<data, &DataConfig::overlong>("data.overlong", any_value, always,
                                          "fine-tuning records longer than model.seq_len + 1 tokens: {}"),
      key_at<data, &DataConfig::valid>("data.valid", any_value, always,
                                       "validation shards (token or fine-tuning shards, a glob; empty: no validation)"),
      key_at<checkpoint, &CheckpointConfig::dir>("checkpoint.dir", any_value, always,
                                                 "directory of step_XXXXXXXX.h5 and latest"),
      key_at<checkpoint, &CheckpointConfig::every>("checkpoint.every", at_least(0), always,
                                                   "steps between checkpoints (0: only when the job leaves)"),
      key_at<checkpoint, &CheckpointConfig::keep>("checkpoint.keep", at_least(0, "(0 keeps all)"), always,
                                                  "newest checkpoints kept (0: all)"),
      key_at<checkpoint, &CheckpointConfig::init_weights>("checkpoint.init_weights", any_value, always,
                                                          "HDF5 file with a /model group to start from"),
      key_at<checkpoint, &CheckpointConfig::resume>("checkpoint.resume", any_value, always, "{} | a checkpoint file"),
      key_at<checkpoint, &CheckpointConfig::async>("checkpoint.async", any_value, always,
                                                   "snapshot to host memory and write while training goes on"),
      key_at<checkpoint, &CheckpointConfig::io>("checkpoint.io", any_value, always,
                                                "{}: how ranks write tensor data (MPI-IO)"),
      key_at<model, &M::lora, &L::rank>("lora.rank", from_to(0, 65536, "(0: off)"), always,
                                        "LoRA: adapters' rank r on lora.targets, the base frozen (0: off, full "
                                        "training)"),
      key_at<model, &M::lora, &L::alpha>("lora.alpha", finite_above(0), lora,
                                         "LoRA: scaling alpha / r of the adapters' output (PEFT's lora_alpha)"),
      key_at<model, &M::lora, &L::dropout>("lora.dropout", zero_to_below_one, lora,
                                           "LoRA: dropout probability on the adapters' input"),
      // The names are the family's: model/lora_sites.cpp checks them (config_checks.cpp calls it).
      key_at<model, &M::lora, &L::targets>(
          "lora.targets", any_value, lora,
          "LoRA: Hugging Face module names adapted, comma-separated (q_proj,v_proj; gpt2 c_attn), or all-linear"),
      key_at<model, &M::lora, &L::rslora>("lora.rslora", any_value, lora,
                                          "LoRA: rank-stabilised scaling alpha / sqrt(r)"),
      key_at<log, &LogConfig::metrics>("log.metrics", any_value, always,
                                       "JSON-lines metrics file, one object per step"),
      key_at<log, &LogConfig::every>("log.every", at_least(1), always, "steps between progress lines"),
      key_at<log, &LogConfig::peak_tflops>("log.peak_tflops", finite_at_least(0), always,
                                           "peak TFLOP/s per rank for MFU (0: not shown)"),
      key_at<log, &LogConfig::timing_every>("log.timing_every", at_least(0), always,
                                            "steps between per-rank timing tables (0: only at the end)"),
      key_at<log, &LogConfig::traffic>(
          "log.traffic", any_value, always,
          "JSON file of every rank's communication in the run's last step: calls and bytes per group and kind"),
  });
}();

// `--help`'s list of a choice key's names: "none | selective (attention probabilities) | full (whole blocks)".
template <class T>
std::string choices_help() {
  if constexpr (std::is_same_v<T, ResumeFrom>) {
    return valid_names<ResumeMode>(" | ");
  } else {
    std::string out;
    for (const auto& n : EnumNames<T>::all) {
      if (!out.empty()) out += " | ";
      out += n.note.empty() ? std::string(n.name) : fmt::format("{} ({})", n.name, n.note);
    }
    return out;
  }
}

template <class T>
constexpr bool is_choice = NamedEnum<T> || std::is_same_v<T, ResumeFrom>;

}  // namespace

std::span<const ConfigKey> config_keys() { return table; }

const ConfigKey* find_config_key(std::string_view name) {
  const auto found = std::find_if(table.begin(), table.end(), [&](const ConfigKey& k) { return k.name == name; });
  return found == table.end() ? nullptr : &*found;
}

std::string key_value_text(const ConfigKey& key, const Config& c) {
  return std::visit([](const auto* field) { return fmt::format("{}", *field); }, key.value(c));
}

bool at_default(const ConfigKey& key, const Config& c) {
  static const Config defaults;
  const KeyFieldTypes::ConstPointer default_field = key.value(defaults);
  return std::visit(
      [&](const auto* field) { return *field == *std::get<std::remove_cvref_t<decltype(field)>>(default_field); },
      key.value(c));
}

const char* key_help(const ConfigKey& key) {
  static const std::vector<std::string> texts = [] {
    const Config defaults;
    std::vector<std::string> out;
    for (const ConfigKey& k : table) {
      out.push_back(std::visit(
          [&](const auto* field) {
            using T = std::remove_cvref_t<decltype(*field)>;
            if constexpr (is_choice<T>) {
              return fmt::format(fmt::runtime(k.help), choices_help<T>());
            } else {
              return std::string(k.help);
            }
          },
          k.value(defaults)));
    }
    return out;
  }();
  return texts[static_cast<std::size_t>(&key - table.data())].c_str();  // `key` is one of the table's rows
}

std::optional<std::string> config_value(const Config& c, std::string_view key) {
  const ConfigKey* found = find_config_key(key);
  if (found == nullptr) return std::nullopt;
  return key_value_text(*found, c);
}

}  // namespace meshtrain
