// The run configuration: every key of share/docs/usage.md's key reference, parsed from an INI file
// and the command line (command line wins), validated, and printable back as INI for checkpoints
// and logs. Keys that name one of a few choices are enums, parsed once here.
#pragma once

#include "core/errors.hpp"
#include "core/families.hpp"

#include <fmt/format.h>

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace meshtrain {

// --- the choices a key can name ----------------------------------------------------------------
// Each enum's names live in one table (EnumNames<E> below); parsing, `--help`, the error that lists
// the valid values and the INI stored in checkpoints all read that table.

enum class Precision { fp32, bf16, fp16 };  // train.precision
// Bytes of one element of the type the model computes in (weights, activations, their gradients).
constexpr int compute_bytes(Precision p) { return p == Precision::fp32 ? 4 : 2; }
// train.recompute: which activations a block keeps for backward (see model/decoder_stage.hpp, Recompute).
enum class Recompute { none, selective, full };
// model.attention: how a block computes causal attention (see kernels/fused_attention.hpp).
enum class AttentionKernel { fused, materialized };
enum class RopeScaling { none, linear, llama3 };
enum class LrDecay { cosine, constant };                             // optim.decay
enum class PipelineSchedule { gpipe, one_f_one_b, zero_bubble_h1 };  // parallel.schedule
enum class CommBackend { mpi, nccl, automatic };                     // parallel.backend
enum class SampleOrder { sequential, shuffle };                      // data.order
enum class CheckpointIo { independent, collective };                 // checkpoint.io
enum class ResumeMode { automatic, never, file };                    // checkpoint.resume: auto | never | a file
enum class NonFinite { stop, skip };  // train.nonfinite: what a non-finite loss or grad norm does
// data.tokenizer_change: whether a checkpoint of another tokenizer than data.tokenizer may be loaded.
enum class TokenizerChange { refuse, allow };
// data.overlong: a fine-tuning record with more positions than model.seq_len keeps its first seq_len
// (train/packed_windows.hpp) or is left out.
enum class OverlongRecords { truncate, drop };

template <class E>
struct EnumName {
  E value;
  std::string_view name;
  std::string_view note = {};  // shown after the name in `--help`, in parentheses
};

// Specialised for every enum above: the key it belongs to and its names, in `--help` order.
template <class E>
struct EnumNames;

template <>
struct EnumNames<Precision> {
  static constexpr std::string_view key = "train.precision";
  static constexpr std::array<EnumName<Precision>, 3> all{
      {{Precision::fp32, "fp32"}, {Precision::bf16, "bf16"}, {Precision::fp16, "fp16"}}};
};
template <>
struct EnumNames<Recompute> {
  static constexpr std::string_view key = "train.recompute";
  static constexpr std::array<EnumName<Recompute>, 3> all{
      {{Recompute::none, "none"},
       {Recompute::selective, "selective", "attention probabilities"},
       {Recompute::full, "full", "whole blocks"}}};
};
template <>
struct EnumNames<AttentionKernel> {
  static constexpr std::string_view key = "model.attention";
  static constexpr std::array<EnumName<AttentionKernel>, 2> all{
      {{AttentionKernel::fused, "fused", "flash-style: memory linear in seq_len"},
       {AttentionKernel::materialized, "materialized", "the B x heads x T x T probabilities kept"}}};
};
template <>
struct EnumNames<RopeScaling> {
  static constexpr std::string_view key = "model.rope_scaling";
  static constexpr std::array<EnumName<RopeScaling>, 3> all{
      {{RopeScaling::none, "none", "the frequencies theta^(-2i/hs)"},
       {RopeScaling::linear, "linear", "every frequency divided by rope_factor"},
       {RopeScaling::llama3, "llama3", "Llama 3.1's: long wavelengths divided by rope_factor, a smooth band between"}}};
};
template <>
struct EnumNames<LrDecay> {
  static constexpr std::string_view key = "optim.decay";
  static constexpr std::array<EnumName<LrDecay>, 2> all{{{LrDecay::cosine, "cosine"}, {LrDecay::constant, "constant"}}};
};
template <>
struct EnumNames<PipelineSchedule> {
  static constexpr std::string_view key = "parallel.schedule";
  static constexpr std::array<EnumName<PipelineSchedule>, 3> all{{{PipelineSchedule::gpipe, "gpipe"},
                                                                  {PipelineSchedule::one_f_one_b, "1f1b"},
                                                                  {PipelineSchedule::zero_bubble_h1, "zb-h1"}}};
};
template <>
struct EnumNames<CommBackend> {
  static constexpr std::string_view key = "parallel.backend";
  static constexpr std::array<EnumName<CommBackend>, 3> all{
      {{CommBackend::mpi, "mpi"}, {CommBackend::nccl, "nccl"}, {CommBackend::automatic, "auto"}}};
};
template <>
struct EnumNames<SampleOrder> {
  static constexpr std::string_view key = "data.order";
  static constexpr std::array<EnumName<SampleOrder>, 2> all{
      {{SampleOrder::sequential, "sequential"}, {SampleOrder::shuffle, "shuffle"}}};
};
template <>
struct EnumNames<OverlongRecords> {
  static constexpr std::string_view key = "data.overlong";
  static constexpr std::array<EnumName<OverlongRecords>, 2> all{
      {{OverlongRecords::truncate, "truncate", "keep the first model.seq_len + 1 tokens"},
       {OverlongRecords::drop, "drop", "leave the record out"}}};
};
template <>
struct EnumNames<CheckpointIo> {
  static constexpr std::string_view key = "checkpoint.io";
  static constexpr std::array<EnumName<CheckpointIo>, 2> all{
      {{CheckpointIo::independent, "independent"}, {CheckpointIo::collective, "collective"}}};
};
template <>
struct EnumNames<NonFinite> {
  static constexpr std::string_view key = "train.nonfinite";
  static constexpr std::array<EnumName<NonFinite>, 2> all{
      {{NonFinite::stop, "stop", "exit 6, nothing saved over latest"},
       {NonFinite::skip, "skip", "drop the step's update, up to train.nonfinite_skips in a row"}}};
};
template <>
struct EnumNames<TokenizerChange> {
  static constexpr std::string_view key = "data.tokenizer_change";
  static constexpr std::array<EnumName<TokenizerChange>, 2> all{
      {{TokenizerChange::refuse, "refuse", "exit 2"},
       {TokenizerChange::allow, "allow", "a warning; every id then means the new tokenizer's piece"}}};
};
// model.arch: the names of core/families.hpp's rows.
template <>
struct EnumNames<Arch> {
  static constexpr std::string_view key = "model.arch";
  static constexpr std::array<EnumName<Arch>, families.size()> all = [] {
    std::array<EnumName<Arch>, families.size()> names{};
    for (std::size_t i = 0; i < families.size(); ++i)
      names[i] = {families[i].arch, families[i].name, families[i].description};
    return names;
  }();
};
// The mode words only: any other value of checkpoint.resume names a file (ResumeFrom).
template <>
struct EnumNames<ResumeMode> {
  static constexpr std::string_view key = "checkpoint.resume";
  static constexpr std::array<EnumName<ResumeMode>, 2> all{
      {{ResumeMode::automatic, "auto"}, {ResumeMode::never, "never"}}};
};

template <class E>
concept NamedEnum = requires {
  EnumNames<E>::all;
};

// The name a config file uses for `value`.
template <NamedEnum E>
constexpr std::string_view name_of(E value) {
  for (const auto& n : EnumNames<E>::all) {
    if (n.value == value) return n.name;
  }
  return "?";
}

// The value named `name` exactly (case matters), or nothing.
template <NamedEnum E>
constexpr std::optional<E> from_name(std::string_view name) {
  for (const auto& n : EnumNames<E>::all) {
    if (n.name == name) return n.value;
  }
  return std::nullopt;
}

// The valid names joined by `separator`: "fp32, bf16, fp16".
template <NamedEnum E>
std::string valid_names(std::string_view separator = ", ") {
  std::string out;
  for (const auto& n : EnumNames<E>::all) {
    if (!out.empty()) out += separator;
    out += n.name;
  }
  return out;
}

// Parses `name` for E's key; anything else is an InputError that names the key and the valid values.
template <NamedEnum E>
E parse_name(std::string_view name) {
  if (const auto value = from_name<E>(name)) return *value;
  input_error("{} = '{}' is invalid: valid values are {}", EnumNames<E>::key, name, valid_names<E>());
}

// checkpoint.resume: `auto`, `never`, or the checkpoint file to resume from.
struct ResumeFrom {
  ResumeMode mode = ResumeMode::automatic;
  std::string file;  // under ResumeMode::file
  bool operator==(const ResumeFrom&) const = default;
};

// LoRA (share/docs/usage.md, LoRA): low-rank adapters beside the named linear layers, the base
// frozen. rank 0: off (full fine-tuning). The model's forward changes, so ModelConfig carries it
// (model.lora below), but its keys are the [lora] section's.
struct LoraConfig {
  int rank = 0;                        // r: the adapters' inner width
  double alpha = 8;                    // scaling s = alpha / r (alpha / sqrt(r) under rslora), PEFT's lora_alpha
  double dropout = 0;                  // dropout on the adapters' input (PEFT's lora_dropout)
  std::string targets = "all-linear";  // Hugging Face module names, comma-separated, or all-linear
  bool rslora = false;                 // rank-stabilised scaling
  bool enabled() const { return rank > 0; }
  double scaling() const;
};

// The model's shape (share/docs/usage.md, Model families). The keys after arch are llama's
// (arch = llama): a gpt2 config must not give them at all.
struct ModelConfig {
  int layers = 2;
  int heads = 2;
  int d_model = 64;
  int vocab = 256;
  int seq_len = 64;  // T: context length (gpt2: also the rows of wpe)
  Arch arch = Arch::gpt2;
  int kv_heads = 0;         // key/value heads of grouped-query attention (0: heads, multi-head)
  int ffn_hidden = 0;       // SwiGLU hidden size (0: the LLaMA rule, see mlp_hidden())
  int multiple_of = 256;    // the LLaMA rule rounds the SwiGLU hidden size up to a multiple of this
  double rope_theta = 1e4;  // rotary position embedding base θ
  double norm_eps = 1e-5;   // RMSNorm epsilon
  // What published llama-family checkpoints carry (share/docs/usage.md, Model families).
  bool tie_embeddings = false;  // lm_head is embed_tokens (a pipeline's first and last stage hold it)
  bool qkv_bias = false;        // q_proj, k_proj and v_proj have biases (Qwen2)
  int head_dim = 0;             // a head's channels (0: d_model / heads)
  // Rotary frequencies rescaled for contexts longer than the pre-training one (kernels/rotary.hpp).
  RopeScaling rope_scaling = RopeScaling::none;
  double rope_factor = 1;                 // linear, llama3: the factor long wavelengths are stretched by
  double rope_low_freq_factor = 1;        // llama3: wavelengths above original / low_freq_factor are divided
  double rope_high_freq_factor = 4;       // llama3: wavelengths below original / high_freq_factor are kept
  int rope_original_max_position = 8192;  // llama3: the pre-training context
  // Mixture of experts (llama; share/docs/usage.md, Mixture of experts). experts = 0: every MLP dense.
  int experts = 0;             // E routed experts of each MoE block
  int experts_per_token = 2;   // k: experts each token is routed to
  int moe_every = 1;           // block l is MoE when l % moe_every == 0
  int shared_experts = 0;      // S: a dense SwiGLU of width S · expert hidden that every token passes
  int expert_hidden = 0;       // SwiGLU width of one expert (0: mlp_hidden())
  double capacity_factor = 0;  // tokens an expert takes: ⌈factor · N · k / E⌉ of a micro-batch's N (0: no drops)
  // Each expert's rows padded to its capacity (needs capacity_factor > 0): the grouped products and the
  // exchange have sizes fixed before the routing, so no routing count is read by the host in the step.
  bool pad_to_capacity = false;
  bool normalize_gates = true;  // gate weights: the k probabilities renormalised to sum 1 (Mixtral)
  double aux_loss_coef = 0.01;  // weight of the Switch/GShard load-balancing loss
  double z_loss_coef = 0;       // weight of the router z-loss
  // Not a [model] key: train.vocab_multiple as resolved for this build (parse_config, config_from_ini), the
  // multiple the vocabulary is padded to for the GEMMs (padded_vocab, core/model_sizes.hpp). It leaves the
  // model itself (its tensors, checkpoints, exports) unchanged. 1, no padding, in a ModelConfig built in code.
  int vocab_multiple = 1;
  // Not a [model] key: parallel.sequence_parallel as resolved for this run (parse_config, config_from_ini;
  // parallel/tensor_parallel_mappings.hpp's GatherToRegion and ScatterFromRegion): between the
  // tensor-parallel regions each tp rank holds its block of the token rows. The model's tensors and
  // checkpoints are the same either way; without a tensor-parallel group of two or more it changes nothing.
  bool sequence_parallel = false;
  // Not a [model] key: the context-parallel degree of this run (parallel.cp; model/impl/context_ring.hpp):
  // each rank holds seq_len / context_parallel positions of every sequence, two load-balanced chunks of
  // it (local_positions, core/model_sizes.hpp). The model's tensors and checkpoints are the same either way.
  int context_parallel = 1;
  // Not part of the model's parameters (a checkpoint of either loads under the other): which kernels
  // compute attention, and so which activations a block keeps (output and log-sum-exp, or P).
  AttentionKernel attention = AttentionKernel::fused;
  // The [lora] keys: adapters, or none (rank 0). The base model's tensors and checkpoints are the same either way.
  LoraConfig lora = {};

  // Key/value heads: kv_heads, or heads when it is 0 (always heads in a family without the llama keys).
  int kv_head_count() const { return family_shape(arch).llama_keys && kv_heads > 0 ? kv_heads : heads; }
  // The MLP's hidden width: gpt2 4·C; llama ffn_hidden, or the LLaMA rule: ⌊2/3·4C⌋ rounded up to a
  // multiple of multiple_of. This and the other widths are computed in 64 bits by core/model_sizes,
  // which validation checks fit an int.
  int mlp_hidden() const;
  // A head's channels: head_dim, or d_model / heads (always that in a family without the llama keys).
  int head_size() const { return family_shape(arch).llama_keys && head_dim > 0 ? head_dim : d_model / heads; }
  // Channels of all query heads together (d_model unless head_dim says otherwise): o_proj's inputs.
  int query_width() const { return heads * head_size(); }
  // Whether block l's MLP is routed experts (always false when experts = 0).
  bool is_moe_block(int l) const { return experts > 0 && l % moe_every == 0; }
  int moe_blocks() const { return experts > 0 ? (layers - 1) / moe_every + 1 : 0; }  // no overflow at any moe_every
  int expert_hidden_size() const;                                                    // expert_hidden, or mlp_hidden()
  int shared_hidden() const;  // shared_experts × expert_hidden_size()
  // Assignments an expert keeps out of a micro-batch of `tokens` tokens (0: no limit; at most tokens).
  int expert_capacity(int tokens) const;
  // gpt2's output head is its token embedding wte: with a pipeline the first and the last stage
  // both hold it and sum its gradient. llama's lm_head is a matrix of its own unless
  // model.tie_embeddings, which makes it the same.
  bool ties_output_head() const {
    return family_shape(arch).tied_head || (family_shape(arch).llama_keys && tie_embeddings);
  }
  // Whether q, k and v carry biases: always in gpt2's c_attn, in llama with model.qkv_bias.
  bool has_qkv_bias() const { return family_shape(arch).biases || (family_shape(arch).llama_keys && qkv_bias); }
};

struct TrainConfig {
  int micro_batch = 4;
  int global_batch = 4;
  std::int64_t steps = 10;
  std::int64_t stop_after = 0;  // leave after this many steps in this job (0: run to the end)
  double time_limit = 0;        // minutes this job may run (0: no limit)
  // GiB the fit check (plan/fit.hpp) allows one node's ranks (host builds) or one rank's device
  // (CUDA builds); 0: this machine's RAM (host), no check (CUDA: the device check passes it).
  double memory_gib = 0;
  std::int64_t seed = 1337;
  Precision precision = Precision::fp32;
  Recompute recompute = Recompute::none;
  bool tf32 = false;  // fp32 GEMMs on CUDA builds through TF32 tensor cores (kernels/gemm.hpp)
  // Vocabulary padding for the GEMMs (0: 128 on CUDA builds, 1 on the host); the layouts read ModelConfig's.
  int vocab_multiple = 0;
  double loss_scale = 65536;              // fp16: initial dynamic loss scale
  std::int64_t loss_scale_window = 1000;  // fp16: clean steps before the scale doubles
  NonFinite nonfinite = NonFinite::stop;  // fp16: its loss only (the scaler handles its gradients)
  std::int64_t nonfinite_skips = 3;       // consecutive skipped steps before train.nonfinite = skip stops
  // false: kernels that add in a run-dependent order may run (CUDA builds with cuDNN: attention's backward,
  // kernels/fused_attention.hpp); true keeps every run, and a resumed one, bitwise the same.
  bool deterministic = true;
  // Validation (share/docs/usage.md, Validation): steps between passes over data.valid (0: only after
  // the last step), and the positions of data.valid a pass reads from its start (0: all of it).
  std::int64_t eval_every = 0;
  std::int64_t eval_tokens = 0;
};

struct OptimConfig {
  double lr = 3e-4;
  double min_lr = 3e-5;
  std::int64_t warmup_steps = 2;
  LrDecay decay = LrDecay::cosine;
  double weight_decay = 0.1;
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1e-8;
  double grad_clip = 1.0;
};

struct ParallelConfig {
  int dp = 0;  // 0: world / (cp × tp × pp)
  int tp = 1;
  int pp = 1;
  int zero = 0;
  int ep = 1;  // expert-parallel degree: experts sharded over ep ranks inside each dp group
  // Megatron's sequence parallelism (needs tp > 1): between the tensor-parallel regions each tp rank holds
  // its block of a micro-batch's token rows. Resolved into ModelConfig::sequence_parallel.
  bool sequence_parallel = false;
  // Context parallelism: each sequence's positions split over cp ranks (two load-balanced chunks each),
  // attention around a ring. Resolved into ModelConfig::context_parallel.
  int cp = 1;
  PipelineSchedule schedule = PipelineSchedule::one_f_one_b;
  CommBackend backend = CommBackend::automatic;
  double bucket_mb = 25;  // data-parallel gradient bucket size, MiB
  double timeout = 600;   // seconds a collective may wait before the watchdog ends the job (0: off)
};

struct DataConfig {
  std::string train;      // a token shard or a glob of them
  std::string tokenizer;  // the SentencePiece model the shards were made with (empty: byte-level)
  // Whether a checkpoint (resumed, or checkpoint.init_weights) that records another tokenizer loads.
  TokenizerChange tokenizer_change = TokenizerChange::refuse;
  SampleOrder order = SampleOrder::sequential;
  OverlongRecords overlong = OverlongRecords::truncate;  // fine-tuning records longer than a window
  std::string valid;  // validation shards of either kind, or a glob of them (empty: no validation)
};

struct CheckpointConfig {
  std::string dir = "checkpoints";
  std::int64_t every = 0;  // steps between saves (0: only when the job leaves)
  int keep = 3;            // newest checkpoints kept (0: all)
  std::string init_weights;
  ResumeFrom resume;
  bool async = false;                           // write checkpoints on a background thread while training goes on
  CheckpointIo io = CheckpointIo::independent;  // how ranks write tensor data (MPI-IO)
};

struct LogConfig {
  std::string metrics;              // JSON-lines file (empty: none)
  std::int64_t every = 1;           // steps between progress lines on stdout
  double peak_tflops = 0;           // per-rank peak for MFU (0: MFU not shown)
  std::int64_t timing_every = 100;  // steps between per-rank timing tables (0: only at the end)
  std::string traffic;              // JSON file of every rank's traffic in the last step (empty: none)
};

struct Config {
  ModelConfig model;
  TrainConfig train;
  OptimConfig optim;
  ParallelConfig parallel;
  DataConfig data;
  CheckpointConfig checkpoint;
  LogConfig log;
  // The --config file read, if any: not a key (to_ini leaves it out), but an input of the run that
  // no output may replace (train/run_outputs.hpp).
  std::string config_file;

  // The full resolved configuration as INI text (every key, sorted by section).
  std::string to_ini() const;
};

// Parses `--config FILE` and `--section.key value` arguments (the command's arguments only, no
// program name) and checks every value on its own (types, ranges, names). Throws InputError naming the key on any
// problem. Checks that depend on the world size (dp, tp, pp) are the Topology's.
Config parse_config(const std::vector<std::string>& args);

// Parses INI text as stored in a checkpoint (same keys, same checks).
Config config_from_ini(const std::string& ini_text, const std::string& origin);

// The option table as `meshtrain train --help` prints it.
std::string config_help();

// The value of the key named `key` ("checkpoint.dir") in `c`, as to_ini() writes it; nothing for no such key.
std::optional<std::string> config_value(const Config& c, std::string_view key);

}  // namespace meshtrain

// Config enums print by their names: fmt::format("{}", cfg.train.precision) is "bf16".
template <meshtrain::NamedEnum E>
struct fmt::formatter<E> : fmt::formatter<std::string_view> {
  template <class Context>
  auto format(E value, Context& ctx) const {
    return fmt::formatter<std::string_view>::format(meshtrain::name_of(value), ctx);
  }
};

template <>
struct fmt::formatter<meshtrain::ResumeFrom> : fmt::formatter<std::string_view> {
  template <class Context>
  auto format(const meshtrain::ResumeFrom& r, Context& ctx) const {
    return fmt::formatter<std::string_view>::format(
        r.mode == meshtrain::ResumeMode::file ? std::string_view(r.file) : meshtrain::name_of(r.mode), ctx);
  }
};
