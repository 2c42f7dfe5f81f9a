// The GPT-2 parameter layout and the binding of named views into flat buffers.
#include "model/parameters.hpp"

#include "core/errors.hpp"
#include "core/model_sizes.hpp"

#include <fmt/format.h>

#include <algorithm>

namespace meshtrain {

std::uint64_t Piece::elements() const {
  std::uint64_t n = 1;
  for (std::size_t d = 0; d < block.size(); ++d) n *= count[d] * block[d];
  return n;
}

PieceIndex TensorInfo::piece_index() const {
  const std::size_t dims = local_shape.size();
  if (dims > std::size_t(PieceIndex::max_dims) || shape.size() != dims || piece.block.size() != dims) {
    throw std::logic_error(fmt::format("tensor {}: {} dimensions do not fit a PieceIndex", name, dims));
  }
  PieceIndex p;
  p.dims = int(dims);
  for (std::size_t d = 0; d < dims; ++d) {
    p.shape[d] = shape[d];
    p.local_shape[d] = local_shape[d];
    p.offset[d] = piece.offset[d];
    p.count[d] = piece.count[d];
    p.stride[d] = piece.stride[d];
    p.block[d] = piece.block[d];
  }
  return p;
}

namespace {

Piece whole(const std::vector<std::uint64_t>& shape) {
  return {std::vector<std::uint64_t>(shape.size(), 0), std::vector<std::uint64_t>(shape.size(), 1), shape, shape};
}

// Dimension `dim` cut into `parts` equal blocks; this rank holds block `part` of each of `groups`
// equal groups along that dimension (groups = 3 for c_attn's q|k|v, 1 otherwise).
Piece split(const std::vector<std::uint64_t>& shape, std::size_t dim, std::uint64_t groups, int parts, int part) {
  Piece p = whole(shape);
  const std::uint64_t group = shape[dim] / groups, block = group / parts;
  p.offset[dim] = block * part;
  p.count[dim] = groups;
  p.stride[dim] = group;
  p.block[dim] = block;
  return p;
}

std::vector<std::uint64_t> local_of(const Piece& p) {
  std::vector<std::uint64_t> shape(p.block.size());
  for (std::size_t d = 0; d < shape.size(); ++d) shape[d] = p.count[d] * p.block[d];
  return shape;
}

}  // namespace

ParameterLayout::ParameterLayout(const ModelConfig& model, int tp, int tp_rank, StagePlace place, int unit_align,
                                 int ep, int ep_rank)
    : model_(model),
      tp_(tp),
      tp_rank_(tp_rank),
      ep_(ep),
      ep_rank_(ep_rank),
      padded_vocab_(int(meshtrain::padded_vocab(model, tp).value())),
      place_(place),
      first_layer_(place.stage * model.layers / place.stages),
      end_layer_((place.stage + 1) * model.layers / place.stages),
      unit_align_(unit_align) {
  if (ep < 1 || ep_rank < 0 || ep_rank >= ep || model.experts % ep != 0) {
    throw std::logic_error(
        fmt::format("expert rank {} of {} cannot hold an equal share of {} experts", ep_rank, ep, model.experts));
  }
  if (model.arch == Arch::llama) {
    add_llama_tensors();
  } else {
    add_gpt2_tensors();
  }
  close_unit();
}

// Vocabulary-parallel rows of a [V, C] table: rows [r·Vp/t, (r+1)·Vp/t) of the padded vocabulary
// (padded_vocab: for tp and train.vocab_multiple); only the real rows belong to the tensor (and the
// checkpoint), the rest of the local array is padding.
void ParameterLayout::add_vocabulary_table(const std::string& name) {
  const std::uint64_t C = model_.d_model, V = model_.vocab;
  const std::uint64_t rows = padded_vocab_ / tp_, first = rows * tp_rank_;
  Piece vocab = whole({V, C});
  vocab.offset[0] = std::min(first, V);
  vocab.block[0] = first < V ? std::min(rows, V - first) : 0;
  add(name, {V, C}, {rows, C}, vocab, InitKind::normal, tp_ == 1);
}

// Dimension `dim` of `shape` split over the tensor-parallel ranks (`groups` equal groups, each cut alike).
void ParameterLayout::add_split(const std::string& name, std::vector<std::uint64_t> shape, std::size_t dim,
                                std::uint64_t groups, InitKind init) {
  Piece p = split(shape, dim, groups, tp_, tp_rank_);
  add(name, shape, local_of(p), p, init, tp_ == 1);
}

void ParameterLayout::add_gpt2_tensors() {
  const std::uint64_t C = model_.d_model;
  // The first stage embeds, the last stage's head reuses wte: both hold it (tied, gradients summed).
  if (place_.first() || place_.last()) {
    start_unit("wte", -1);
    add_vocabulary_table("wte.weight");
  }
  if (place_.first()) {
    start_unit("wpe", -1);
    add_replicated("wpe.weight", {std::uint64_t(model_.seq_len), C}, InitKind::normal);
  }
  for (int l = first_layer_; l < end_layer_; ++l) {
    const std::string h = fmt::format("h.{}.", l);
    start_unit(fmt::format("h.{}", l), l);
    add_replicated(h + "ln_1.weight", {C}, InitKind::ones);
    add_replicated(h + "ln_1.bias", {C}, InitKind::zeros);
    add_split(h + "attn.c_attn.weight", {C, 3 * C}, 1, 3, InitKind::normal);  // column-parallel, by heads
    add_split(h + "attn.c_attn.bias", {3 * C}, 0, 3, InitKind::zeros);
    add_split(h + "attn.c_proj.weight", {C, C}, 0, 1, InitKind::normal_residual);  // row-parallel
    add_replicated(h + "attn.c_proj.bias", {C}, InitKind::zeros);
    add_replicated(h + "ln_2.weight", {C}, InitKind::ones);
    add_replicated(h + "ln_2.bias", {C}, InitKind::zeros);
    add_split(h + "mlp.c_fc.weight", {C, 4 * C}, 1, 1, InitKind::normal);  // column-parallel
    add_split(h + "mlp.c_fc.bias", {4 * C}, 0, 1, InitKind::zeros);
    add_split(h + "mlp.c_proj.weight", {4 * C, C}, 0, 1, InitKind::normal_residual);  // row-parallel
    add_replicated(h + "mlp.c_proj.bias", {C}, InitKind::zeros);
  }
  if (place_.last()) {
    start_unit("ln_f", -1);
    add_replicated("ln_f.weight", {C}, InitKind::ones);
    add_replicated("ln_f.bias", {C}, InitKind::zeros);
  }
}

// torch Linear layout [out, in]: a column-parallel product splits dimension 0 (its output rows), a
// row-parallel one dimension 1. q, k and v of a block are consecutive, and so are gate and up, so
// each trio or pair is one [Σ out, C] matrix in the flat buffer (one GEMM).
void ParameterLayout::add_llama_tensors() {
  const std::uint64_t C = model_.d_model, hs = model_.head_size(), H = model_.mlp_hidden();
  const std::uint64_t q_rows = std::uint64_t(model_.heads) * hs, kv_rows = std::uint64_t(model_.kv_head_count()) * hs;
  if (place_.first()) {
    start_unit("embed_tokens", -1);
    add_vocabulary_table("embed_tokens.weight");
  }
  for (int l = first_layer_; l < end_layer_; ++l) {
    const std::string h = fmt::format("layers.{}.", l);
    start_unit(fmt::format("layers.{}", l), l);
    add_replicated(h + "input_layernorm.weight", {C}, InitKind::ones);
    add_split(h + "self_attn.q_proj.weight", {q_rows, C}, 0, 1, InitKind::normal);  // column-parallel, by heads
    add_split(h + "self_attn.k_proj.weight", {kv_rows, C}, 0, 1, InitKind::normal);
    add_split(h + "self_attn.v_proj.weight", {kv_rows, C}, 0, 1, InitKind::normal);
    add_split(h + "self_attn.o_proj.weight", {C, q_rows}, 1, 1, InitKind::normal_residual);  // row-parallel
    add_replicated(h + "post_attention_layernorm.weight", {C}, InitKind::ones);
    if (model_.is_moe_block(l)) {
      add_expert_tensors(l);
    } else {
      add_swiglu(h + "mlp.", H);
    }
  }
  if (place_.last()) {
    start_unit("norm", -1);
    add_replicated("norm.weight", {C}, InitKind::ones);
    start_unit("lm_head", -1);
    add_vocabulary_table("lm_head.weight");
  }
}

// One SwiGLU's gate_proj, up_proj (column-parallel) and down_proj (row-parallel), names under `prefix`.
void ParameterLayout::add_swiglu(const std::string& prefix, std::uint64_t hidden) {
  const std::uint64_t C = model_.d_model;
  add_split(prefix + "gate_proj.weight", {hidden, C}, 0, 1, InitKind::normal);
  add_split(prefix + "up_proj.weight", {hidden, C}, 0, 1, InitKind::normal);
  add_split(prefix + "down_proj.weight", {C, hidden}, 1, 1, InitKind::normal_residual);
}

// An MoE block's MLP: the router (replicated over tp: every tp rank routes the same tokens alike)
// and the shared experts' SwiGLU in the block's unit; then, in a unit of their own (reduced over
// the expert-data-parallel group), this ep rank's routed experts, each SwiGLU split as the dense
// one. An expert's three tensors are consecutive, so its gate|up is one [2H, C] matrix (one GEMM
// per expert). Names and TensorInfo::expert keep the global expert index.
void ParameterLayout::add_expert_tensors(int l) {
  const std::string block = fmt::format("layers.{}.", l);
  const std::uint64_t C = model_.d_model, E = model_.experts;
  add_replicated(block + "mlp.gate.weight", {E, C}, InitKind::normal);
  if (model_.shared_experts > 0) add_swiglu(block + "mlp.shared_experts.", model_.shared_hidden());
  start_unit(block + "mlp.experts", l, true);
  for (int e = first_expert(); e < first_expert() + local_experts(); ++e) {
    add_swiglu(fmt::format("{}mlp.experts.{}.", block, e), model_.expert_hidden_size());
    for (std::size_t i = tensors_.size() - 3; i < tensors_.size(); ++i) tensors_[i].expert = e;
  }
}

void ParameterLayout::start_unit(std::string name, int block, bool experts) {
  close_unit();
  units_.push_back({std::move(name), block, total_, total_, experts});
}

void ParameterLayout::close_unit() {
  if (units_.empty()) return;
  ShardUnit& u = units_.back();
  const std::size_t align = std::size_t(unit_align_);
  u.end = u.begin + (total_ - u.begin + align - 1) / align * align;
  total_ = u.end;
}

std::size_t ParameterLayout::unit_at(std::size_t offset) const {
  for (std::size_t u = 0; u < units_.size(); ++u) {
    if (offset >= units_[u].begin && offset < units_[u].end) return u;
  }
  throw std::out_of_range(fmt::format("flat offset {} lies in no shard unit", offset));
}

std::size_t ParameterLayout::block_begin(int l) const {
  for (const ShardUnit& u : units_) {
    if (u.block == first_layer_ + l) return u.begin;
  }
  throw std::out_of_range(fmt::format("stage of blocks {}..{} has no block {}", first_layer_, end_layer_ - 1, l));
}

std::size_t ParameterLayout::head_begin() const {
  std::size_t begin = total_;
  for (auto u = units_.rbegin(); u != units_.rend() && u->block < 0 && place_.last(); ++u) begin = u->begin;
  return begin;
}

void ParameterLayout::add_replicated(std::string name, std::vector<std::uint64_t> shape, InitKind init) {
  Piece p = whole(shape);
  add(std::move(name), shape, shape, p, init, true);
}

void ParameterLayout::add(std::string name, std::vector<std::uint64_t> shape, std::vector<std::uint64_t> local_shape,
                          Piece piece, InitKind init, bool replicated) {
  TensorInfo t;
  t.name = std::move(name);
  t.numel = 1;
  for (auto d : local_shape) t.numel *= d;
  t.decays = shape.size() >= 2;
  t.shape = std::move(shape);
  t.local_shape = std::move(local_shape);
  t.piece = std::move(piece);
  t.replicated = replicated;
  t.offset = total_;
  t.init = init;
  total_ += t.numel;
  tensors_.push_back(std::move(t));
}

const TensorInfo* ParameterLayout::find_if_held(const std::string& name) const {
  for (const auto& t : tensors_) {
    if (t.name == name) return &t;
  }
  return nullptr;
}

const TensorInfo& ParameterLayout::find(const std::string& name) const {
  if (const TensorInfo* t = find_if_held(name)) return *t;
  throw std::out_of_range("no parameter named " + name);
}

bool ParameterLayout::holds_counted_copy(const TensorInfo& t) const {
  if (t.replicated && tp_rank_ != 0) return false;
  return t.name != "wte.weight" || place_.first();
}

template <class Real>
ParameterTensors<Real> ParameterTensors<Real>::bind(Vec<Real> flat, const ParameterLayout& layout) {
  if (flat.extent(0) < layout.total()) {
    throw std::logic_error(
        fmt::format("flat buffer of {} elements cannot hold {} parameters", flat.extent(0), layout.total()));
  }
  return bind(layout, [&](const TensorInfo& t) { return flat.data() + t.offset; });
}

template <class Real>
ParameterTensors<Real> ParameterTensors<Real>::bind(const ParameterLayout& layout, const Where& where) {
  auto view = [&](const std::string& name) {
    const TensorInfo* t = layout.find_if_held(name);
    return t == nullptr ? Vec<Real>() : Vec<Real>(where(*t), t->numel);
  };
  ParameterTensors p;
  p.wte = view("wte.weight");
  p.wpe = view("wpe.weight");
  for (int l = layout.first_layer(); l < layout.first_layer() + layout.stage_layers(); ++l) {
    const std::string h = fmt::format("h.{}.", l);
    BlockTensors<Real> b;
    b.ln1_w = view(h + "ln_1.weight");
    b.ln1_b = view(h + "ln_1.bias");
    b.qkv_w = view(h + "attn.c_attn.weight");
    b.qkv_b = view(h + "attn.c_attn.bias");
    b.attproj_w = view(h + "attn.c_proj.weight");
    b.attproj_b = view(h + "attn.c_proj.bias");
    b.ln2_w = view(h + "ln_2.weight");
    b.ln2_b = view(h + "ln_2.bias");
    b.fc_w = view(h + "mlp.c_fc.weight");
    b.fc_b = view(h + "mlp.c_fc.bias");
    b.fcproj_w = view(h + "mlp.c_proj.weight");
    b.fcproj_b = view(h + "mlp.c_proj.bias");
    p.blocks.push_back(b);
  }
  p.lnf_w = view("ln_f.weight");
  p.lnf_b = view("ln_f.bias");
  return p;
}

template struct ParameterTensors<float>;
template struct ParameterTensors<double>;
template struct ParameterTensors<bf16>;
template struct ParameterTensors<fp16>;

namespace {

// Whether a tensor's elements count in the 6·N of a token's FLOPs (llm.c counts every parameter,
// gpt2's wpe included): a table that only looks rows up is no product's matrix — llama's
// embed_tokens, and gpt2's tied wte on a stage without the output head (its product is the head's).
bool counts_in_flops(const TensorInfo& t, const ParameterLayout& layout) {
  if (t.name == "embed_tokens.weight") return false;
  return t.name != "wte.weight" || layout.place().last();
}

}  // namespace

double active_share(const TensorInfo& t, const ModelConfig& m) {
  return t.expert >= 0 ? double(m.experts_per_token) / double(m.experts) : 1.0;
}

double stage_flops_per_token(const ParameterLayout& layout) {
  const auto& m = layout.model();
  double parameters = 0;
  for (const TensorInfo& t : layout.tensors()) {
    if (!counts_in_flops(t, layout)) continue;
    double n = active_share(t, m);
    for (auto d : t.shape) n *= double(d);
    parameters += n;
  }
  // Attention's two products, QKᵀ and PV, over all query heads (grouped-query attention shares
  // keys and values, not these products).
  return 6.0 * parameters + 6.0 * layout.stage_layers() * double(m.d_model) * m.seq_len;
}

double active_parameters(const ParameterLayout& layout) {
  const ParameterLayout whole(layout.model());
  double active = 0;
  // The tensor's own elements: the vocabulary's padding is no parameter.
  for (const TensorInfo& t : whole.tensors()) active += active_share(t, whole.model()) * double(t.piece.elements());
  return active;
}

std::string parameter_count_text(const ModelConfig& model) {
  const ParameterLayout whole(model);
  const double total = double(parameter_count(model).value());
  if (model.experts == 0) return fmt::format("{:.2f}M parameters", total / 1e6);
  return fmt::format("{:.2f}M parameters total, {:.2f}M active per token", total / 1e6, active_parameters(whole) / 1e6);
}

double flops_per_token(const ParameterLayout& layout) {
  // The whole model's count, whatever piece this rank holds.
  return stage_flops_per_token(ParameterLayout(layout.model()));
}

}  // namespace meshtrain
