// The model's sizes in checked 64-bit arithmetic, and the one check that they fit.
#include "core/model_sizes.hpp"

#include "core/errors.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <vector>

namespace meshtrain {

Size operator+(Size a, Size b) {
  std::int64_t sum = 0;
  if (a.overflowed_ || b.overflowed_ || __builtin_add_overflow(a.value_, b.value_, &sum)) return Size::overflow();
  return sum;
}

Size operator*(Size a, Size b) {
  std::int64_t product = 0;
  if (a.overflowed_ || b.overflowed_ || __builtin_mul_overflow(a.value_, b.value_, &product)) {
    return Size::overflow();
  }
  return product;
}

std::string size_text(Size s) {
  return s.overflowed() ? fmt::format("more than {:.2g}", double(std::numeric_limits<std::int64_t>::max()))
                        : fmt::format("{}", s.value());
}

namespace {

// ⌊8·C/3⌋ rounded up to a multiple of multiple_of: at most 2^34 + 2^31, no overflow in int64.
Size llama_rule(const ModelConfig& m) {
  const std::int64_t two_thirds = 8 * std::int64_t(m.d_model) / 3, multiple = std::max(1, m.multiple_of);
  return (two_thirds + multiple - 1) / multiple * multiple;
}

// A width the accessors hand out as int; validate() has checked it fits, so failing here is a bug.
int narrow(Size s, const char* what) {
  if (!s.at_most(std::numeric_limits<int>::max())) {
    throw std::logic_error(
        fmt::format("{} {} does not fit an int: the config was not validated (require_sizes_fit)", what, size_text(s)));
  }
  return int(s.value());
}

// One dimension of a tensor: its size, what it is in words (with the keys it comes from) and those keys.
struct Dim {
  Size size;
  std::string text;
  std::vector<std::string> keys;
};

// A key's own value as a dimension: "model.vocab 65536".
Dim key_dim(const char* key, std::int64_t value) { return {value, fmt::format("{} {}", key, value), {key}}; }

Dim scaled(std::int64_t factor, Dim d) {
  return {Size(factor) * d.size, fmt::format("{} × {}", factor, d.text), std::move(d.keys)};
}

Dim product(Dim a, Dim b) {
  a.keys.insert(a.keys.end(), b.keys.begin(), b.keys.end());
  return {a.size * b.size, fmt::format("{} × {}", a.text, b.text), std::move(a.keys)};
}

// The MLP width and where it comes from.
Dim mlp_dim(const ModelConfig& m) {
  const Size width = mlp_width(m);
  if (family_shape(m.arch).mlp == MlpKind::gelu) {
    return {width, fmt::format("4 × model.d_model {}", m.d_model), {"model.d_model"}};
  }
  if (m.ffn_hidden > 0) return key_dim("model.ffn_hidden", m.ffn_hidden);
  return {width,
          fmt::format("the SwiGLU width {} (the LLaMA rule: ⌊8 × model.d_model / 3⌋ = {} rounded up to a multiple "
                      "of model.multiple_of = {})",
                      size_text(width), 8 * std::int64_t(m.d_model) / 3, m.multiple_of),
          {"model.d_model", "model.multiple_of"}};
}

Dim expert_dim(const ModelConfig& m) {
  if (m.expert_hidden > 0) return key_dim("model.expert_hidden", m.expert_hidden);
  Dim d = mlp_dim(m);
  d.text = "the expert width = " + d.text;
  return d;
}

Dim shared_dim(const ModelConfig& m) {
  return product(key_dim("model.shared_experts", m.shared_experts), expert_dim(m));
}

// q|k|v, one matrix: query heads C rows (heads × head_dim with model.head_dim), key and value heads
// kv_heads · head size each.
Dim query_dim(const ModelConfig& m) {
  if (m.head_size() * m.heads == m.d_model) return key_dim("model.d_model", m.d_model);
  return {Size(m.heads) * Size(m.head_size()),
          fmt::format("model.heads {} × model.head_dim {}", m.heads, m.head_size()),
          {"model.heads", "model.head_dim"}};
}

Dim qkv_dim(const ModelConfig& m) {
  const std::int64_t kv_rows = std::int64_t(m.kv_head_count()) * m.head_size();
  if (!family_shape(m.arch).llama_keys) return scaled(3, key_dim("model.d_model", m.d_model));
  const Dim q = query_dim(m);
  return {q.size + Size(2 * kv_rows),
          fmt::format("{} + 2 × model.kv_heads {} × the head size {}", q.text, m.kv_head_count(), m.head_size()),
          {q.keys.front(), "model.kv_heads"}};
}

struct Tensor {
  std::string name;
  std::vector<Dim> dims;
};

// The weights of the largest shapes. Their kernels (initialisation, the per-tensor views of
// checkpoints, the tensor-parallel pieces) still count a tensor's elements in int.
std::vector<Tensor> largest_weights(const ModelConfig& m) {
  const FamilyShape& f = family_shape(m.arch);
  const Dim C = key_dim("model.d_model", m.d_model), V = key_dim("model.vocab", m.vocab);
  const Dim T = key_dim("model.seq_len", m.seq_len);
  const auto block = [&](std::string_view name) { return fmt::format("{}{}", f.block_prefix, name); };
  std::vector<Tensor> t;
  t.push_back({std::string(m.ties_output_head() ? f.token_embedding_name : f.embedding_names), {V, C}});
  if (f.learned_positions) t.push_back({std::string(f.position_name), {T, C}});
  t.push_back({block(f.qkv_names), {qkv_dim(m), C}});
  t.push_back({block(f.attention_out_name), {C, query_dim(m)}});
  const bool dense_blocks = m.moe_blocks() < m.layers;
  if (f.mlp == MlpKind::gelu) t.push_back({block(f.mlp_in_names), {C, mlp_dim(m)}});
  if (f.mlp == MlpKind::swiglu && dense_blocks) t.push_back({block(f.mlp_in_names), {scaled(2, mlp_dim(m)), C}});
  if (m.experts > 0) {
    t.push_back({block("mlp.gate.weight"), {key_dim("model.experts", m.experts), C}});
    if (m.shared_experts > 0) {
      t.push_back({block("mlp.shared_experts.gate_proj|up_proj.weight"), {scaled(2, shared_dim(m)), C}});
    }
    t.push_back({block("mlp.experts.*.gate_proj|up_proj.weight"), {scaled(2, expert_dim(m)), C}});
  }
  return t;
}

// A count of one micro-batch's activations that the kernels keep in an int, whatever the
// elements of the tensors (which they index in 64 bits, so a tensor may pass 2^31): rows that are
// a GEMM's dimension, and rows or teams that are a Kokkos launch's league (one team per row).
struct Count {
  std::string name;  // "the token rows"
  std::string why;   // "a GEMM dimension and one team per row"
  std::vector<Dim> dims;
};

std::vector<Count> activation_counts(const ModelConfig& m, int micro_batch, int ep) {
  const Dim T = key_dim("model.seq_len", m.seq_len), B = key_dim("train.micro_batch", micro_batch);
  const Dim N = product(B, T);
  std::vector<Count> c;
  c.push_back({"the token rows", "a GEMM dimension (the logits' rows) and one team per row", {N}});
  c.push_back({"the attention rows",
               "one team per row of the attention probabilities [B, heads, T, T]",
               {B, key_dim("model.heads", m.heads), T}});
  // The embedding gradient runs one team per (token row × block of 64 channels).
  const std::int64_t blocks = (std::int64_t(m.d_model) + 63) / 64;
  c.push_back({"the embedding gradient's teams",
               "one team per token row and block of 64 channels",
               {N, Dim{blocks, fmt::format("⌈model.d_model {} / 64⌉", m.d_model), {"model.d_model"}}}});
  if (m.experts > 0) {
    c.push_back({"the expert assignments",
                 "one team per assignment",
                 {product(N, key_dim("model.experts_per_token", m.experts_per_token))}});
    // The rows an ep rank's experts may receive: every assignment of its ep group's micro-batches
    // (at most capacity per expert; model.pad_to_capacity: exactly that) — LlamaFamily::dims' buffers.
    const Size tokens = N.size, assignments = tokens * Size(m.experts_per_token);
    const Size capacity = tokens.overflowed() ? Size::overflow() : Size(expert_capacity(m, tokens.value()));
    Size per_sender = assignments;
    if (m.capacity_factor > 0 && !capacity.overflowed()) {
      const Size capped = Size(m.experts / std::max(1, ep)) * capacity;
      if (!capped.overflowed() && !assignments.overflowed() &&
          (m.pad_to_capacity || capped.value() < assignments.value())) {
        per_sender = capped;
      }
    }
    const char* capped_text = m.pad_to_capacity       ? " (padded to the capacity per expert)"
                              : m.capacity_factor > 0 ? " (at most the capacity per expert)"
                                                      : "";
    Dim rows{Size(std::max(1, ep)) * per_sender,
             fmt::format("{} × model.experts_per_token {}{}", N.text, m.experts_per_token, capped_text),
             {"train.micro_batch", "model.seq_len", "model.experts_per_token"}};
    if (ep > 1) rows = product(key_dim("parallel.ep", ep), rows);
    c.push_back({"the expert rows", "a GEMM dimension of the experts' products", {rows}});
  }
  return c;
}

// "model.vocab or model.d_model", each key once.
std::string keys_text(const std::vector<Dim>& dims) {
  std::vector<std::string> keys;
  for (const Dim& d : dims) {
    for (const std::string& k : d.keys) {
      if (std::find(keys.begin(), keys.end(), k) == keys.end()) keys.push_back(k);
    }
  }
  std::sort(keys.begin(), keys.end());
  std::string out;
  for (std::size_t i = 0; i < keys.size(); ++i) {
    out += (i == 0 ? "" : i + 1 == keys.size() ? " or " : ", ") + keys[i];
  }
  return out;
}

void require_fits(const Tensor& t) {
  Size elements = 1;
  std::string shape, factors;
  for (const Dim& d : t.dims) {
    elements = elements * d.size;
    shape += (shape.empty() ? "" : ", ") + size_text(d.size);
    factors += (factors.empty() ? "" : " by ") + d.text;
  }
  if (elements.at_most(max_weight_elements)) return;
  input_error(
      "{} [{}] would hold {} elements, more than the 2^31 − 1 one tensor may hold (its shape: {}): make {} smaller",
      t.name, shape, size_text(elements), factors, keys_text(t.dims));
}

void require_count_fits(const Count& c) {
  Size value = 1;
  std::string factors;
  for (const Dim& d : c.dims) {
    value = value * d.size;
    factors += (factors.empty() ? "" : " × ") + d.text;
  }
  if (value.at_most(max_int_count)) return;
  input_error("{} would be {} ({}), more than the 2^31 − 1 of {}: make {} smaller", c.name, size_text(value), factors,
              c.why, keys_text(c.dims));
}

// A width handed out as an int must fit one, whether or not a tensor of it is built.
void require_width_fits(const char* what, const Dim& d) {
  if (d.size.at_most(std::numeric_limits<int>::max())) return;
  input_error("{} {} is more than 2^31 − 1 (it is {}): make {} smaller", what, size_text(d.size), d.text,
              keys_text({d}));
}

}  // namespace

Size mlp_width(const ModelConfig& m) {
  if (family_shape(m.arch).mlp == MlpKind::gelu) return Size(4) * Size(m.d_model);
  if (m.ffn_hidden > 0) return m.ffn_hidden;
  return llama_rule(m);
}

Size expert_width(const ModelConfig& m) { return m.expert_hidden > 0 ? Size(m.expert_hidden) : mlp_width(m); }

Size shared_width(const ModelConfig& m) { return Size(m.shared_experts) * expert_width(m); }

std::int64_t expert_capacity(const ModelConfig& m, std::int64_t tokens) {
  if (m.experts == 0 || m.capacity_factor == 0) return 0;
  // The tolerance keeps a quotient that is whole in exact arithmetic (1.25 · 64 · 2 / 4 = 40) from
  // rounding up to the next integer; the oracle's rule is the same.
  const double want = m.capacity_factor * double(tokens) * double(m.experts_per_token) / double(m.experts);
  if (!(want < double(tokens))) return tokens;  // compared in double: no conversion can overflow
  return std::max<std::int64_t>(1, std::int64_t(std::ceil(want - 1e-9)));
}

std::size_t expert_rows(const ModelConfig& m, std::size_t tokens) {
  const std::size_t E = std::size_t(m.experts), k = E > 0 ? std::size_t(m.experts_per_token) : 0;
  const std::size_t capacity = std::size_t(expert_capacity(m, std::int64_t(tokens)));
  if (capacity == 0) return tokens * k;
  return m.pad_to_capacity ? E * capacity : std::min(tokens * k, E * capacity);
}

std::size_t residual_rows(const ModelConfig& m, std::size_t tokens, int tp) {
  if (!m.sequence_parallel || tp <= 1) return tokens;
  if (tokens % std::size_t(tp) != 0) {
    throw std::invalid_argument(fmt::format(
        "sequence parallelism splits the {} token rows of a micro-batch over tp = {} ranks: they must divide evenly",
        tokens, tp));
  }
  return tokens / std::size_t(tp);
}

bool context_chunks_divide(int seq_len, int cp) { return cp >= 1 && seq_len % (2 * cp) == 0; }

std::size_t local_positions(const ModelConfig& m) {
  const int cp = m.context_parallel;
  if (cp <= 1) return std::size_t(m.seq_len);
  if (!context_chunks_divide(m.seq_len, cp)) {
    throw std::invalid_argument(fmt::format(
        "context parallelism splits each sequence of {} positions into 2 × cp = {} chunks: they must divide evenly",
        m.seq_len, 2 * cp));
  }
  return std::size_t(m.seq_len / cp);
}

std::size_t expert_rows_received(const ModelConfig& m, std::size_t tokens, int ep) {
  const std::size_t E = std::size_t(m.experts), k = E > 0 ? std::size_t(m.experts_per_token) : 0;
  const std::size_t capacity = std::size_t(expert_capacity(m, std::int64_t(tokens)));
  const std::size_t R = expert_rows(m, tokens);
  if (ep <= 1 || m.pad_to_capacity) return R;  // padded: each sender's E / ep · capacity rows, ep of them
  const std::size_t per_sender = capacity > 0 ? std::min(tokens * k, E / std::size_t(ep) * capacity) : tokens * k;
  return std::size_t(ep) * per_sender;
}

Size parameter_count(const ModelConfig& m) {
  const FamilyShape& f = family_shape(m.arch);
  const Size C = m.d_model, V = m.vocab;
  const Size bias = f.biases ? Size(1) : Size(0);
  const Size norm = (Size(1) + bias) * C;  // a weight, and a shift where the family has biases
  // A block: two norms, q|k|v (kv_heads' rows for k and v), the attention's output, and its MLP.
  const Size kv_rows = Size(m.kv_head_count()) * Size(m.head_size()), q_rows = Size(m.query_width());
  const Size qkv_rows = q_rows + Size(2) * kv_rows;
  const Size qkv_bias = m.has_qkv_bias() ? qkv_rows : Size(0);
  const Size attention = Size(2) * norm + (qkv_rows * C + qkv_bias) + (C * q_rows + bias * C);
  const Size hidden = mlp_width(m);
  const Size dense = f.mlp == MlpKind::gelu ? Size(2) * hidden * C + bias * (hidden + C)
                                            : Size(3) * hidden * C + bias * (Size(2) * hidden + C);
  Size moe = Size(m.experts) * C + Size(m.experts) * Size(3) * expert_width(m) * C;  // router, SwiGLU experts
  if (m.shared_experts > 0) moe += Size(3) * shared_width(m) * C;
  const Size moe_blocks = m.moe_blocks(), dense_blocks = Size(m.layers - m.moe_blocks());
  // The token embedding (and an untied head), the position table, the final norm.
  const Size outer =
      (m.ties_output_head() ? Size(1) : Size(2)) * V * C + (f.learned_positions ? Size(m.seq_len) * C : Size(0)) + norm;
  return outer + Size(m.layers) * attention + dense_blocks * dense + moe_blocks * moe;
}

int automatic_vocab_multiple() { return MESHTRAIN_AUTO_VOCAB_MULTIPLE; }

int resolved_vocab_multiple(int key) { return key > 0 ? key : automatic_vocab_multiple(); }

Size padded_vocab(const ModelConfig& m, int tp) {
  const Size multiple = Size(std::max(1, m.vocab_multiple)) * Size(std::max(1, tp));
  if (multiple.overflowed()) return multiple;
  return Size((std::int64_t(m.vocab) + multiple.value() - 1) / multiple.value()) * multiple;
}

void require_sizes_fit(const ModelConfig& m, int micro_batch, int ep) {
  require_width_fits(family_shape(m.arch).mlp == MlpKind::swiglu ? "the SwiGLU width" : "the MLP width", mlp_dim(m));
  if (m.experts > 0) {
    require_width_fits("the expert SwiGLU width", expert_dim(m));
    if (m.shared_experts > 0) require_width_fits("the shared experts' SwiGLU width", shared_dim(m));
  }
  for (const Tensor& t : largest_weights(m)) require_fits(t);
  for (const Count& c : activation_counts(m, micro_batch, ep)) require_count_fits(c);
}

// ModelConfig's widths (core/config.hpp), narrowed once the sizes are known to fit.
int ModelConfig::mlp_hidden() const { return narrow(mlp_width(*this), "the MLP width"); }
int ModelConfig::expert_hidden_size() const { return narrow(expert_width(*this), "the expert width"); }
int ModelConfig::shared_hidden() const { return narrow(shared_width(*this), "the shared experts' width"); }
int ModelConfig::expert_capacity(int tokens) const { return int(meshtrain::expert_capacity(*this, tokens)); }

}  // namespace meshtrain
