// Parsing and validation of the run configuration with Boost.ProgramOptions.
//
// One table binds each key to its field, help text and printer, so parsing, `--help` and the INI
// written into checkpoints can never disagree about the keys.
#include "core/config.hpp"

#include "core/command_line.hpp"
#include "core/errors.hpp"
#include "core/lora_targets.hpp"
#include "core/model_sizes.hpp"
#include "core/regular_file.hpp"

#include <boost/program_options.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <deque>
#include <functional>
#include <map>
#include <set>
#include <sstream>

namespace po = boost::program_options;

namespace meshtrain {

// Boost.ProgramOptions converts a key's text with validate(), found by argument-dependent lookup:
// the enums' names are checked as the text is read, so a bad name fails like any other bad value.
template <NamedEnum E>
void validate(boost::any& out, const std::vector<std::string>& values, E*, int) {
  out = parse_name<E>(po::validators::get_single_string(values));
}

void validate(boost::any& out, const std::vector<std::string>& values, ResumeFrom*, int) {
  const std::string& text = po::validators::get_single_string(values);
  if (text.empty()) input_error("checkpoint.resume is empty: valid values are auto, never or a checkpoint file");
  const std::optional<ResumeMode> mode = from_name<ResumeMode>(text);
  out = mode ? ResumeFrom{*mode, {}} : ResumeFrom{ResumeMode::file, text};
}

namespace {

struct KeyPrinter {
  std::string key;
  std::function<std::string()> value;
  const char* kind;
};

// Values as INI text: fmt's shortest round-trip form, so a stored config reproduces every double.
template <class T>
std::string show(const T& v) {
  return fmt::format("{}", v);
}

// `--help`'s list of a key's names: "none | selective (attention probabilities) | full (whole blocks)".
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

// Registers every key of share/docs/usage.md's key reference into `options`, bound to the fields of `cfg`.
class KeyTable {
 public:
  explicit KeyTable(Config& cfg) : options_("meshtrain train options") {
    add_choice("model.arch", cfg.model.arch, "model family: {}");
    add("model.layers", cfg.model.layers, "transformer blocks L");
    add("model.heads", cfg.model.heads, "attention heads (must divide d_model)");
    add("model.d_model", cfg.model.d_model, "channels C");
    add("model.vocab", cfg.model.vocab, "vocabulary size V (byte-level data: 256)");
    add("model.seq_len", cfg.model.seq_len, "context length T (gpt2: rows of wpe)");
    add_choice("model.attention", cfg.model.attention, "causal attention: {}");
    add("model.kv_heads", cfg.model.kv_heads,
        "llama: key/value heads of grouped-query attention, dividing heads (0: heads; 1: multi-query)");
    add("model.ffn_hidden", cfg.model.ffn_hidden,
        "llama: SwiGLU hidden size (0: 2/3 of 4 d_model rounded up to a multiple of model.multiple_of)");
    add("model.multiple_of", cfg.model.multiple_of, "llama: the SwiGLU hidden size's rounding when ffn_hidden is 0");
    add("model.rope_theta", cfg.model.rope_theta, "llama: rotary position embedding base theta");
    add("model.norm_eps", cfg.model.norm_eps, "llama: RMSNorm epsilon");
    add("model.tie_embeddings", cfg.model.tie_embeddings,
        "llama: the output head lm_head is the token embedding embed_tokens (one tensor)");
    add("model.qkv_bias", cfg.model.qkv_bias, "llama: q_proj, k_proj and v_proj carry biases (Qwen2)");
    add("model.head_dim", cfg.model.head_dim, "llama: channels of one attention head (0: d_model / heads)");
    add_choice("model.rope_scaling", cfg.model.rope_scaling, "llama: rotary frequency scaling: {}");
    add("model.rope_factor", cfg.model.rope_factor, "llama, rope_scaling linear or llama3: the scaling factor");
    add("model.rope_low_freq_factor", cfg.model.rope_low_freq_factor, "llama, rope_scaling llama3: low_freq_factor");
    add("model.rope_high_freq_factor", cfg.model.rope_high_freq_factor, "llama, rope_scaling llama3: high_freq_factor");
    add("model.rope_original_max_position", cfg.model.rope_original_max_position,
        "llama, rope_scaling llama3: original_max_position_embeddings, the pre-training context");
    add("model.experts", cfg.model.experts, "llama: routed experts E of each MoE block (0: dense MLPs)");
    add("model.experts_per_token", cfg.model.experts_per_token, "MoE: experts k each token is routed to");
    add("model.moe_every", cfg.model.moe_every, "MoE: block l has routed experts when l % moe_every == 0");
    add("model.shared_experts", cfg.model.shared_experts,
        "MoE: shared experts every token passes (one SwiGLU of shared_experts x expert width)");
    add("model.expert_hidden", cfg.model.expert_hidden, "MoE: SwiGLU width of one expert (0: the dense width)");
    add("model.capacity_factor", cfg.model.capacity_factor,
        "MoE: an expert takes ceil(factor x tokens x k / E) of a micro-batch's assignments (0: no drops)");
    add("model.normalize_gates", cfg.model.normalize_gates,
        "MoE: renormalise the k chosen router probabilities to sum 1 (false: the raw probabilities)");
    add("model.aux_loss_coef", cfg.model.aux_loss_coef, "MoE: weight of the load-balancing auxiliary loss");
    add("model.z_loss_coef", cfg.model.z_loss_coef, "MoE: weight of the router z-loss");
    add("train.micro_batch", cfg.train.micro_batch, "sequences per micro-batch on one data-parallel rank");
    add("train.global_batch", cfg.train.global_batch, "sequences per optimizer step over all ranks and accumulation");
    add("train.steps", cfg.train.steps, "optimizer steps in total (the schedule spans these)");
    add("train.stop_after", cfg.train.stop_after,
        "leave after this many steps in this job, saving (0: run to the end)");
    add("train.time_limit", cfg.train.time_limit, "minutes this job may run; saves and leaves in time (0: none)");
    add("train.memory_gib", cfg.train.memory_gib,
        "GiB the fit check allows one node's ranks (host builds) or one rank's GPU (0: the machine's RAM)");
    add("train.seed", cfg.train.seed, "seed for initialisation and shuffling");
    add("train.eval_every", cfg.train.eval_every,
        "steps between validation passes over data.valid (0: only after the last step)");
    add("train.eval_tokens", cfg.train.eval_tokens,
        "positions of data.valid each validation pass reads from its start, in seq_len windows (0: all)");
    add_choice("train.precision", cfg.train.precision,
               "{}: weights and activations in compute (fp32 master weights and moments always)");
    add("train.loss_scale", cfg.train.loss_scale, "fp16: initial dynamic loss scale (halved on overflow)");
    add("train.loss_scale_window", cfg.train.loss_scale_window, "fp16: clean steps before the loss scale doubles");
    add_choice("train.recompute", cfg.train.recompute, "activation recomputation: {}");
    add("train.tf32", cfg.train.tf32,
        "fp32 runs on CUDA builds: GEMMs on TF32 tensor cores (10-bit mantissa inputs; host builds stay exact)");
    add("train.deterministic", cfg.train.deterministic,
        "false lets CUDA builds with cuDNN run attention's backward on cuDNN (dQ added with atomics: faster, no "
        "longer bitwise from run to run or across a resume); host builds are deterministic either way");
    add("train.vocab_multiple", cfg.train.vocab_multiple,
        "pad the vocabulary to a multiple of this (x tp) for the GEMMs; the pad is out of the loss and of "
        "checkpoints (0: 128 on CUDA builds, 1 on host builds)");
    add_choice("train.nonfinite", cfg.train.nonfinite,
               "a non-finite loss or gradient norm (under fp16 a non-finite loss): {}");
    add("train.nonfinite_skips", cfg.train.nonfinite_skips,
        "train.nonfinite = skip: consecutive skipped steps before the run stops (exit 6)");
    add("optim.lr", cfg.optim.lr, "peak learning rate");
    add("optim.min_lr", cfg.optim.min_lr, "final learning rate of the cosine decay");
    add("optim.warmup_steps", cfg.optim.warmup_steps, "linear warm-up steps");
    add_choice("optim.decay", cfg.optim.decay, "{}");
    add("optim.weight_decay", cfg.optim.weight_decay, "AdamW decoupled weight decay (matrices and embeddings)");
    add("optim.beta1", cfg.optim.beta1, "AdamW beta1");
    add("optim.beta2", cfg.optim.beta2, "AdamW beta2");
    add("optim.eps", cfg.optim.eps, "AdamW epsilon");
    add("optim.grad_clip", cfg.optim.grad_clip, "clip the global gradient norm to this (0: off)");
    add("parallel.dp", cfg.parallel.dp, "data-parallel degree (0: world / (tp x pp))");
    add("parallel.tp", cfg.parallel.tp, "tensor-parallel degree");
    add("parallel.pp", cfg.parallel.pp, "pipeline-parallel degree");
    add("parallel.ep", cfg.parallel.ep,
        "expert-parallel degree: the experts sharded over ep ranks of each data-parallel group (divides dp)");
    add("parallel.zero", cfg.parallel.zero,
        "ZeRO stage: 0 none, 1 optimizer state sharded over dp, 2 + gradients, 3 + parameters");
    add_choice("parallel.schedule", cfg.parallel.schedule, "pipeline schedule: {}");
    add_choice("parallel.backend", cfg.parallel.backend, "collectives: {}");
    add("parallel.bucket_mb", cfg.parallel.bucket_mb,
        "data-parallel gradient bucket size in MiB (reduced while backward runs)");
    add("parallel.timeout", cfg.parallel.timeout,
        "seconds a collective may wait for its group before the job ends with exit 5 (0: off)");
    add("data.train", cfg.data.train, "token shard, or a glob of shards (sorted order)");
    add("data.tokenizer", cfg.data.tokenizer,
        "SentencePiece model or tokenizer.json the shards were made with (prepare --tokenizer); empty: byte-level");
    add_choice("data.tokenizer_change", cfg.data.tokenizer_change,
               "a checkpoint that records another tokenizer than data.tokenizer (or none): {}");
    add_choice("data.order", cfg.data.order, "{}");
    add_choice("data.overlong", cfg.data.overlong, "fine-tuning records longer than model.seq_len + 1 tokens: {}");
    add("data.valid", cfg.data.valid, "validation shards (token or fine-tuning shards, a glob; empty: no validation)");
    add("checkpoint.dir", cfg.checkpoint.dir, "directory of step_XXXXXXXX.h5 and latest");
    add("checkpoint.every", cfg.checkpoint.every, "steps between checkpoints (0: only when the job leaves)");
    add("checkpoint.keep", cfg.checkpoint.keep, "newest checkpoints kept (0: all)");
    add("checkpoint.init_weights", cfg.checkpoint.init_weights, "HDF5 file with a /model group to start from");
    add_choice("checkpoint.resume", cfg.checkpoint.resume, "{} | a checkpoint file");
    add("checkpoint.async", cfg.checkpoint.async, "snapshot to host memory and write while training goes on");
    add_choice("checkpoint.io", cfg.checkpoint.io, "{}: how ranks write tensor data (MPI-IO)");
    add("lora.rank", cfg.model.lora.rank,
        "LoRA: adapters' rank r on lora.targets, the base frozen (0: off, full training)");
    add("lora.alpha", cfg.model.lora.alpha, "LoRA: scaling alpha / r of the adapters' output (PEFT's lora_alpha)");
    add("lora.dropout", cfg.model.lora.dropout, "LoRA: dropout probability on the adapters' input");
    add("lora.targets", cfg.model.lora.targets,
        "LoRA: Hugging Face module names adapted, comma-separated (q_proj,v_proj; gpt2 c_attn), or all-linear");
    add("lora.rslora", cfg.model.lora.rslora, "LoRA: rank-stabilised scaling alpha / sqrt(r)");
    add("log.metrics", cfg.log.metrics, "JSON-lines metrics file, one object per step");
    add("log.every", cfg.log.every, "steps between progress lines");
    add("log.peak_tflops", cfg.log.peak_tflops, "peak TFLOP/s per rank for MFU (0: not shown)");
    add("log.timing_every", cfg.log.timing_every, "steps between per-rank timing tables (0: only at the end)");
    add("log.traffic", cfg.log.traffic,
        "JSON file of every rank's communication in the run's last step: calls and bytes per group and kind");
  }

  const po::options_description& options() const { return options_; }

  // What a key's value must be, for error messages: "an integer", "a number" or "text".
  std::string kind(const std::string& key) const {
    for (const auto& p : printers_) {
      if (p.key == key) return p.kind;
    }
    return "a value";
  }

  std::string to_ini() const {
    std::map<std::string, std::vector<std::string>> sections;
    for (const auto& p : printers_) {
      const auto dot = p.key.find('.');
      sections[p.key.substr(0, dot)].push_back(fmt::format("{} = {}", p.key.substr(dot + 1), p.value()));
    }
    std::string out;
    for (const auto& [section, lines] : sections) {
      out += fmt::format("[{}]\n", section);
      for (const auto& line : lines) out += line + "\n";
    }
    return out;
  }

 private:
  template <class T>
  void add(const char* key, T& field, const char* help) {
    options_.add_options()(key, po::value<T>(&field)->default_value(field, show(field)), help);
    const char* kind = std::is_same_v<T, bool>       ? "true or false"
                       : std::is_integral_v<T>       ? "an integer"
                       : std::is_floating_point_v<T> ? "a number"
                                                     : "text";
    printers_.push_back({key, [&field] { return show(field); }, kind});
  }

  // A key whose value is one of an enum's names; `help` has a {} where the names go.
  template <class T>
  void add_choice(const char* key, T& field, const char* help) {
    help_texts_.push_back(fmt::format(fmt::runtime(help), choices_help<T>()));
    add(key, field, help_texts_.back().c_str());
  }

  po::options_description options_;
  std::vector<KeyPrinter> printers_;
  std::deque<std::string> help_texts_;  // stable addresses: Boost keeps the pointers
};

// --- checks on single values -------------------------------------------------

void require_positive(const char* key, std::int64_t v) {
  if (v <= 0) input_error("{} = {} is invalid: it must be a positive integer", key, v);
}
void require_non_negative(const char* key, double v) {
  if (!std::isfinite(v) || v < 0) input_error("{} = {} is invalid: it must be a finite number >= 0", key, v);
}
void require_positive_real(const char* key, double v) {
  if (!std::isfinite(v) || v <= 0) input_error("{} = {} is invalid: it must be a finite number > 0", key, v);
}

// Keys that mean something only under another setting, each with whether it is at its default.
using KeyDefaults = std::vector<std::pair<const char*, bool>>;

// Such keys stay at their defaults without the setting; `what` says what they are and how to use them.
void require_at_defaults(const KeyDefaults& keys, const char* what) {
  for (const auto& [key, is_default] : keys) {
    if (!is_default) input_error("{} is {}, or leave {} out", key, what, key);
  }
}

// The keys given on the command line or in the config file, whatever their values (empty for a
// stored config, which lists every key).
using GivenKeys = std::set<std::string, std::less<>>;

KeyDefaults moe_keys(const ModelConfig& m) {
  const ModelConfig d;
  return {{"model.experts_per_token", m.experts_per_token == d.experts_per_token},
          {"model.moe_every", m.moe_every == d.moe_every},
          {"model.shared_experts", m.shared_experts == d.shared_experts},
          {"model.expert_hidden", m.expert_hidden == d.expert_hidden},
          {"model.capacity_factor", m.capacity_factor == d.capacity_factor},
          {"model.normalize_gates", m.normalize_gates == d.normalize_gates},
          {"model.aux_loss_coef", m.aux_loss_coef == d.aux_loss_coef},
          {"model.z_loss_coef", m.z_loss_coef == d.z_loss_coef}};
}

// The rotary scaling's parameters: each given only where model.rope_scaling uses it.
KeyDefaults rope_scaling_keys(const ModelConfig& m) {
  const ModelConfig d;
  return {{"model.rope_factor", m.rope_factor == d.rope_factor},
          {"model.rope_low_freq_factor", m.rope_low_freq_factor == d.rope_low_freq_factor},
          {"model.rope_high_freq_factor", m.rope_high_freq_factor == d.rope_high_freq_factor},
          {"model.rope_original_max_position", m.rope_original_max_position == d.rope_original_max_position}};
}

// model.rope_scaling's parameters: positive, ordered as Llama 3.1's definition needs (the smooth band's
// denominator high − low nonzero), and left at their defaults where the scaling does not read them.
void validate_rope_scaling(const ModelConfig& m) {
  if (m.rope_scaling == RopeScaling::none) {
    require_at_defaults(rope_scaling_keys(m), "a rotary scaling key: set model.rope_scaling = linear or llama3");
    return;
  }
  require_positive_real("model.rope_factor", m.rope_factor);
  if (m.rope_scaling == RopeScaling::linear) {
    KeyDefaults llama3_only = rope_scaling_keys(m);
    llama3_only.erase(llama3_only.begin());
    require_at_defaults(llama3_only, "a key of model.rope_scaling = llama3 only");
    return;
  }
  require_positive_real("model.rope_low_freq_factor", m.rope_low_freq_factor);
  require_positive_real("model.rope_high_freq_factor", m.rope_high_freq_factor);
  if (!(m.rope_high_freq_factor > m.rope_low_freq_factor)) {
    input_error(
        "model.rope_high_freq_factor = {} must be larger than model.rope_low_freq_factor = {} (llama3 "
        "scaling blends the frequencies between the two wavelengths they mark)",
        m.rope_high_freq_factor, m.rope_low_freq_factor);
  }
  require_positive("model.rope_original_max_position", m.rope_original_max_position);
}

// Every key of the llama family, the mixture-of-experts ones included.
KeyDefaults llama_keys(const ModelConfig& m) {
  const ModelConfig d;
  KeyDefaults keys = {{"model.kv_heads", m.kv_heads == d.kv_heads},
                      {"model.ffn_hidden", m.ffn_hidden == d.ffn_hidden},
                      {"model.multiple_of", m.multiple_of == d.multiple_of},
                      {"model.rope_theta", m.rope_theta == d.rope_theta},
                      {"model.norm_eps", m.norm_eps == d.norm_eps},
                      {"model.experts", m.experts == d.experts},
                      {"model.tie_embeddings", m.tie_embeddings == d.tie_embeddings},
                      {"model.qkv_bias", m.qkv_bias == d.qkv_bias},
                      {"model.head_dim", m.head_dim == d.head_dim}};
  const KeyDefaults rope = rope_scaling_keys(m);
  keys.insert(keys.end(), rope.begin(), rope.end());
  keys.push_back({"model.rope_scaling", m.rope_scaling == d.rope_scaling});
  const KeyDefaults moe = moe_keys(m);
  keys.insert(keys.end(), moe.begin(), moe.end());
  return keys;
}

// The MoE keys: valid values when model.experts > 0, their defaults otherwise.
void validate_experts(const ModelConfig& m) {
  if (m.experts < 0) input_error("model.experts = {} is invalid: it must be >= 0 (0: dense MLPs)", m.experts);
  if (m.experts == 0) {
    require_at_defaults(moe_keys(m), "a mixture-of-experts key: set model.experts > 0");
    return;
  }
  if (m.experts > 1024) input_error("model.experts = {} is invalid: at most 1024 experts", m.experts);
  if (m.experts_per_token < 1 || m.experts_per_token > m.experts) {
    input_error("model.experts_per_token = {} is invalid: it must lie in 1 .. model.experts = {}", m.experts_per_token,
                m.experts);
  }
  require_positive("model.moe_every", m.moe_every);
  if (m.shared_experts < 0) input_error("model.shared_experts = {} is invalid: it must be >= 0", m.shared_experts);
  if (m.expert_hidden < 0) {
    input_error("model.expert_hidden = {} is invalid: it must be >= 0 (0: the dense SwiGLU width)", m.expert_hidden);
  }
  require_non_negative("model.capacity_factor", m.capacity_factor);
  require_non_negative("model.aux_loss_coef", m.aux_loss_coef);
  require_non_negative("model.z_loss_coef", m.z_loss_coef);
}

// The llama keys (the mixture-of-experts ones included): valid values under llama; under gpt2,
// which has no use for them, not given at all — even at its default value, a llama key in a gpt2
// run says the run is not the model its author meant (share/docs/usage.md, Model families).
void validate_family(const ModelConfig& m, const GivenKeys& given) {
  const FamilyShape& family = family_shape(m.arch);
  if (!family.llama_keys) {
    for (const auto& [key, is_default] : llama_keys(m)) {
      if (!is_default || given.contains(key)) {
        input_error(
            "{} is a llama key and model.arch is {}: set model.arch = llama, or leave {} out{}", key, family.name, key,
            is_default ? fmt::format(" (even at its default value: a {} model has no {})", family.name, key) : "");
      }
    }
    return;
  }
  if (m.kv_heads < 0 || (m.kv_heads > 0 && m.heads % m.kv_heads != 0)) {
    input_error("model.kv_heads = {} is invalid: it must divide model.heads = {} (0: heads)", m.kv_heads, m.heads);
  }
  if (m.ffn_hidden < 0)
    input_error("model.ffn_hidden = {} is invalid: it must be >= 0 (0: the LLaMA rule)", m.ffn_hidden);
  require_positive("model.multiple_of", m.multiple_of);
  require_positive_real("model.rope_theta", m.rope_theta);
  require_positive_real("model.norm_eps", m.norm_eps);
  validate_experts(m);
  validate_rope_scaling(m);
  if (m.head_dim < 0 || m.head_dim > 1024) {
    input_error("model.head_dim = {} is invalid: it must lie in 0..1024 (0: d_model / heads)", m.head_dim);
  }
  if (!family.learned_positions && m.head_size() % 2 != 0) {
    input_error(
        "{} = {} is odd: rotary position embedding rotates pairs of a head's channels, so the head size must be even",
        m.head_dim > 0 ? "model.head_dim" : "model.d_model / model.heads", m.head_size());
  }
}

// The [lora] keys; the target names are the family's (model/lora_sites.cpp checks them).
// A [lora] key given without lora.rank (even at its default) would train the full model the author
// meant to adapt: refused, as a llama key under gpt2 is.
void validate_lora(const Config& c, const GivenKeys& given) {
  const LoraConfig& l = c.model.lora;
  if (l.rank < 0 || l.rank > 65536) input_error("lora.rank = {} is invalid: it must lie in 0..65536 (0: off)", l.rank);
  if (!l.enabled()) {
    for (const char* key : {"lora.alpha", "lora.dropout", "lora.targets", "lora.rslora"}) {
      if (given.contains(key)) {
        input_error(
            "{} is a LoRA key and lora.rank = 0 (full training): set lora.rank > 0 to train adapters, or leave {} out",
            key, key);
      }
    }
    return;
  }
  require_positive_real("lora.alpha", l.alpha);
  if (!std::isfinite(l.dropout) || l.dropout < 0 || l.dropout >= 1) {
    input_error("lora.dropout = {} is invalid: it must lie in [0, 1)", l.dropout);
  }
  if (c.checkpoint.init_weights.empty()) {
    input_error(
        "lora.rank = {} needs the base model to adapt: set checkpoint.init_weights (meshtrain import writes it from a "
        "Hugging Face directory)",
        l.rank);
  }
  lora_target_names(c.model);  // throws InputError naming lora.targets
}

void validate(const Config& c, const GivenKeys& given) {
  require_positive("model.layers", c.model.layers);
  if (c.model.layers > 4096) input_error("model.layers = {} is invalid: at most 4096 layers", c.model.layers);
  require_positive("model.heads", c.model.heads);
  require_positive("model.d_model", c.model.d_model);
  require_positive("model.vocab", c.model.vocab);
  require_positive("model.seq_len", c.model.seq_len);
  // model.head_dim frees a llama's heads from dividing d_model (Gemma's, Qwen3's shapes).
  const bool own_head_dim = family_shape(c.model.arch).llama_keys && c.model.head_dim > 0;
  if (c.model.d_model % c.model.heads != 0 && !own_head_dim) {
    input_error("model.heads = {} does not divide model.d_model = {}: choose heads among the divisors of d_model{}",
                c.model.heads, c.model.d_model, family_shape(c.model.arch).llama_keys ? ", or set model.head_dim" : "");
  }
  validate_family(c.model, given);
  // Token shards hold uint16 or uint32 ids; tokenizer.json ids stop below 2^24 (io/tokenizer_json.cpp).
  if (c.model.vocab > (1 << 24)) {
    input_error("model.vocab = {} is invalid: at most 16777216 (2^24) token ids", c.model.vocab);
  }
  require_positive("train.micro_batch", c.train.micro_batch);
  require_positive("train.global_batch", c.train.global_batch);
  require_positive("train.steps", c.train.steps);
  if (c.train.stop_after < 0) input_error("train.stop_after = {} is invalid: it must be >= 0", c.train.stop_after);
  require_non_negative("train.time_limit", c.train.time_limit);
  if (c.train.seed < 0) input_error("train.seed = {} is invalid: it must be an integer >= 0", c.train.seed);
  if (c.train.eval_every < 0) input_error("train.eval_every = {} is invalid: it must be >= 0", c.train.eval_every);
  if (c.train.eval_tokens < 0) input_error("train.eval_tokens = {} is invalid: it must be >= 0", c.train.eval_tokens);
  if (c.data.valid.empty() && (c.train.eval_every > 0 || c.train.eval_tokens > 0)) {
    input_error("train.{} is set but data.valid is not: give validation shards to evaluate on",
                c.train.eval_every > 0 ? "eval_every" : "eval_tokens");
  }
  if (!(c.train.loss_scale >= 1)) {
    input_error("train.loss_scale = {} is invalid: it must be >= 1 (fp16's initial loss scale, e.g. 65536)",
                c.train.loss_scale);
  }
  require_positive("train.loss_scale_window", c.train.loss_scale_window);
  if (c.train.vocab_multiple < 0 || c.train.vocab_multiple > 65536) {
    input_error("train.vocab_multiple = {} is invalid: it must lie in 0..65536 (0: the build's choice)",
                c.train.vocab_multiple);
  }

  require_positive_real("optim.lr", c.optim.lr);
  require_non_negative("optim.min_lr", c.optim.min_lr);
  if (c.optim.min_lr > c.optim.lr) {
    input_error("optim.min_lr = {} is larger than optim.lr = {}: the decay goes from lr down to min_lr", c.optim.min_lr,
                c.optim.lr);
  }
  if (c.optim.warmup_steps < 0) {
    input_error("optim.warmup_steps = {} is invalid: it must be >= 0", c.optim.warmup_steps);
  }
  require_non_negative("optim.weight_decay", c.optim.weight_decay);
  for (auto [key, beta] : {std::pair{"optim.beta1", c.optim.beta1}, std::pair{"optim.beta2", c.optim.beta2}}) {
    if (!std::isfinite(beta) || beta < 0 || beta >= 1) {
      input_error("{} = {} is invalid: it must lie in [0, 1)", key, beta);
    }
  }
  require_positive_real("optim.eps", c.optim.eps);
  require_non_negative("optim.grad_clip", c.optim.grad_clip);

  if (c.parallel.dp < 0)
    input_error("parallel.dp = {} is invalid: it must be >= 0 (0: world / (tp x pp))", c.parallel.dp);
  if (c.parallel.tp < 1) input_error("parallel.tp = {} is invalid: it must be >= 1", c.parallel.tp);
  if (c.parallel.pp < 1) input_error("parallel.pp = {} is invalid: it must be >= 1", c.parallel.pp);
  if (c.parallel.ep < 1) input_error("parallel.ep = {} is invalid: it must be >= 1", c.parallel.ep);
  if (c.parallel.zero < 0 || c.parallel.zero > 3) {
    input_error(
        "parallel.zero = {} is invalid: valid stages are 0 (none), 1 (optimizer state sharded over dp), "
        "2 (+ gradients), 3 (+ parameters)",
        c.parallel.zero);
  }
  require_positive_real("parallel.bucket_mb", c.parallel.bucket_mb);
  require_non_negative("parallel.timeout", c.parallel.timeout);
  require_positive("train.nonfinite_skips", c.train.nonfinite_skips);
  require_non_negative("train.memory_gib", c.train.memory_gib);

  if (c.checkpoint.dir.empty()) input_error("checkpoint.dir is empty: give a directory for checkpoints");
  if (c.checkpoint.every < 0) input_error("checkpoint.every = {} is invalid: it must be >= 0", c.checkpoint.every);
  if (c.checkpoint.keep < 0)
    input_error("checkpoint.keep = {} is invalid: it must be >= 0 (0 keeps all)", c.checkpoint.keep);
  require_positive("log.every", c.log.every);
  require_non_negative("log.peak_tflops", c.log.peak_tflops);
  if (c.log.timing_every < 0) input_error("log.timing_every = {} is invalid: it must be >= 0", c.log.timing_every);
  validate_lora(c, given);
  // Last: every size the keys imply, now that each key is valid on its own.
  require_sizes_fit(c.model, c.train.micro_batch, c.parallel.ep);
}

// The multiple the layouts pad the vocabulary to, from train.vocab_multiple and this build (validate()
// refuses a key out of range; the layouts never see less than 1).
void resolve_vocab_multiple(Config& c) {
  c.model.vocab_multiple = std::max(1, resolved_vocab_multiple(c.train.vocab_multiple));
}

// Boost's messages name the option as "--model.layers"; ours say the key.
[[noreturn]] void rethrow_as_input_error(const po::error& e, const std::string& origin, const KeyTable& table) {
  std::string hint;
  if (dynamic_cast<const po::unknown_option*>(&e) != nullptr) {
    hint = " (`meshtrain train --help` lists the valid keys)";
  } else if (const auto* bad = dynamic_cast<const po::invalid_option_value*>(&e)) {
    std::string key = bad->get_option_name();
    key.erase(0, key.find_first_not_of('-'));
    hint = fmt::format(": {} takes {}", key, table.kind(key));
  }
  input_error("{}: {}{}", origin, e.what(), hint);
}

void parse_ini_stream(std::istream& in, const KeyTable& table, po::variables_map& vm, const std::string& origin) {
  try {
    po::store(po::parse_config_file(in, table.options(), /*allow_unregistered=*/false), vm);
  } catch (const po::error& e) {
    rethrow_as_input_error(e, origin, table);
  }
}

}  // namespace

Config parse_config(const std::vector<std::string>& args) {
  Config cfg;
  KeyTable table(cfg);
  po::options_description cli;
  std::string config_file;
  cli.add_options()("config", po::value<std::string>(&config_file), "INI file of keys");
  cli.add(table.options());

  po::variables_map vm;
  try {
    po::parsed_options parsed =
        parse_command_line(args, cli, "meshtrain train [--config FILE.ini] [--section.key VALUE ...]");
    // A key given twice takes its last value, so scripts can append overrides to a base command.
    auto& options = parsed.options;
    for (auto it = options.begin(); it != options.end();) {
      const bool repeated = std::any_of(std::next(it), options.end(),
                                        [&](const po::option& later) { return later.string_key == it->string_key; });
      it = repeated ? options.erase(it) : std::next(it);
    }
    // Command line first: Boost keeps the first value stored for a key, so it wins over the file.
    po::store(parsed, vm);
  } catch (const po::error& e) {
    rethrow_as_input_error(e, "command line", table);
  }
  if (vm.count("config")) {
    const std::string path = vm["config"].as<std::string>();
    // A directory would read as an empty file and a FIFO would block: regular files only.
    std::istringstream in(read_regular_file(path, "config file"));
    parse_ini_stream(in, table, vm, fmt::format("config file '{}'", path));
    cfg.config_file = path;
  }
  try {
    po::notify(vm);
  } catch (const po::error& e) {
    rethrow_as_input_error(e, "configuration", table);
  }
  GivenKeys given;
  for (const auto& [key, value] : vm) {
    if (!value.defaulted()) given.insert(key);
  }
  resolve_vocab_multiple(cfg);
  validate(cfg, given);
  return cfg;
}

Config config_from_ini(const std::string& ini_text, const std::string& origin) {
  Config cfg;
  KeyTable table(cfg);
  po::variables_map vm;
  std::istringstream in(ini_text);
  parse_ini_stream(in, table, vm, origin);
  po::notify(vm);
  resolve_vocab_multiple(cfg);
  // The checks name keys, not where they were read: a stored config's refusal names its file too.
  try {
    validate(cfg, {});
  } catch (const InputError& e) {
    input_error("{}: {}", origin, e.what());
  }
  return cfg;
}

double LoraConfig::scaling() const { return rslora ? alpha / std::sqrt(double(rank)) : alpha / double(rank); }

std::string Config::to_ini() const {
  Config copy = *this;
  return KeyTable(copy).to_ini();
}

std::string config_help() {
  Config cfg;
  std::ostringstream out;
  out << KeyTable(cfg).options();
  return out.str();
}

}  // namespace meshtrain
