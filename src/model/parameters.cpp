// The parameter layout (its tensors listed by the family) and the binding of named views into flat buffers.
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
                                 int ep, int ep_rank, LayoutContent content)
    : model_(model),
      tp_(tp),
      tp_rank_(tp_rank),
      ep_(ep),
      ep_rank_(ep_rank),
      padded_vocab_(int(meshtrain::padded_vocab(model, tp).value())),
      place_(place),
      first_layer_(place.stage * model.layers / place.stages),
      end_layer_((place.stage + 1) * model.layers / place.stages),
      unit_align_(unit_align),
      content_(content) {
  if (ep < 1 || ep_rank < 0 || ep_rank >= ep || model.experts % ep != 0) {
    throw std::logic_error(
        fmt::format("expert rank {} of {} cannot hold an equal share of {} experts", ep_rank, ep, model.experts));
  }
  if (content == LayoutContent::adapters) {
    list_family_adapters(*this);
  } else {
    list_family_tensors(*this);
  }
  close_unit();
}

// Vocabulary-parallel rows of a [V, C] table: rows [r·Vp/t, (r+1)·Vp/t) of the padded vocabulary
// (padded_vocab: for tp and train.vocab_multiple); only the real rows belong to the tensor (and the
// checkpoint), the rest of the local array is padding.
void ParameterLayout::add_vocabulary_table(const std::string& name, TableRole role) {
  add_vocabulary_piece(name, model_.d_model, InitKind::normal, role);
}

void ParameterLayout::add_vocabulary_rows(const std::string& name, std::uint64_t columns, InitKind init) {
  add_vocabulary_piece(name, columns, init, TableRole::none);
}

void ParameterLayout::add_vocabulary_piece(const std::string& name, std::uint64_t columns, InitKind init,
                                           TableRole role) {
  const std::uint64_t V = model_.vocab;
  const std::uint64_t rows = padded_vocab_ / tp_, first = rows * tp_rank_;
  Piece vocab = whole({V, columns});
  vocab.offset[0] = std::min(first, V);
  vocab.block[0] = first < V ? std::min(rows, V - first) : 0;
  add(name, {V, columns}, {rows, columns}, vocab, init, tp_ == 1, -1, role);
}

void ParameterLayout::add_split(const std::string& name, std::vector<std::uint64_t> shape, std::size_t dim,
                                std::uint64_t groups, InitKind init, int expert) {
  Piece p = split(shape, dim, groups, tp_, tp_rank_);
  add(name, shape, local_of(p), p, init, tp_ == 1, expert);
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
  if (l < 0 || first_layer_ + l >= end_layer_) {
    throw std::out_of_range(fmt::format("stage of blocks {}..{} has no block {}", first_layer_, end_layer_ - 1, l));
  }
  for (const ShardUnit& u : units_) {
    if (u.block >= first_layer_ + l) return u.begin;
  }
  return head_begin();
}

std::size_t ParameterLayout::head_begin() const {
  std::size_t begin = total_;
  for (auto u = units_.rbegin(); u != units_.rend() && u->block < 0 && place_.last(); ++u) begin = u->begin;
  return begin;
}

void ParameterLayout::add_replicated(std::string name, std::vector<std::uint64_t> shape, InitKind init, int expert) {
  Piece p = whole(shape);
  add(std::move(name), shape, shape, p, init, true, expert);
}

void ParameterLayout::add(std::string name, std::vector<std::uint64_t> shape, std::vector<std::uint64_t> local_shape,
                          Piece piece, InitKind init, bool replicated, int expert, TableRole role) {
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
  t.expert = expert;
  t.role = role;
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

const TensorInfo* ParameterLayout::table(TableRole role) const {
  for (const auto& t : tensors_) {
    if (t.role == role || (t.role == TableRole::tied && role != TableRole::none)) return &t;
  }
  return nullptr;
}

const TensorInfo& ParameterLayout::table_or_throw(TableRole role) const {
  if (const TensorInfo* t = table(role)) return *t;
  const char* what = role == TableRole::lookup ? "embedding" : role == TableRole::output ? "output head" : "tied";
  throw std::out_of_range(fmt::format("stage {} holds no {} table", place_.stage, what));
}

bool ParameterLayout::holds_counted_copy(const TensorInfo& t) const {
  if (t.replicated && tp_rank_ != 0) return false;
  return t.role != TableRole::tied || place_.first();
}

template <class Real>
Vec<Real> TensorViews<Real>::view(const std::string& name) const {
  return view_of(layout_.find_if_held(name));
}

template <class Real>
Vec<Real> TensorViews<Real>::joined(const std::string& prefix, const std::vector<std::string>& names) const {
  Real* first = nullptr;
  std::size_t numel = 0;
  for (const std::string& name : names) {
    const TensorInfo& t = layout_.find(prefix + name);
    if (first != nullptr && where_(t) != first + numel) {
      throw std::logic_error(fmt::format("tensor {}{} does not follow the one before it", prefix, name));
    }
    if (first == nullptr) first = where_(t);
    numel += t.numel;
  }
  return first == nullptr ? Vec<Real>() : Vec<Real>(first, numel);
}

template class TensorViews<float>;
template class TensorViews<double>;
template class TensorViews<bf16>;
template class TensorViews<fp16>;

namespace {

// Whether a tensor's elements count in the 6·N of a token's FLOPs (llm.c counts every parameter,
// gpt2's wpe included): a table that only looks rows up is no product's matrix — llama's
// embed_tokens, and gpt2's tied wte on a stage without the output head (its product is the head's).
bool counts_in_flops(const TensorInfo& t, const ParameterLayout& layout) {
  if (t.role == TableRole::lookup) return false;
  return t.role != TableRole::tied || layout.place().last();
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
  return 6.0 * parameters + 6.0 * layout.stage_layers() * double(m.query_width()) * m.seq_len;
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
