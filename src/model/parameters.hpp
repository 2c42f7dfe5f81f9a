// A model's parameters as named views into one flat buffer (llm.c's ParameterTensors pattern).
//
// ParameterLayout lists every tensor once, in the family's Hugging Face names and shapes
// (share/docs/usage.md, Checkpoints), with its offset in the flat buffer. The family supplies the
// list (its list_tensors, model/families/gpt2.cpp and llama.cpp); the layout names no tensor. Tensors
// of one block are contiguous, so a pipeline stage's layers are one range. The same layout binds
// weights, gradients and both AdamW moments (TensorViews).
//
// Size letters: L layers, C channels, V vocab, T context length.
#pragma once

#include "core/config.hpp"
#include "core/exec.hpp"
#include "core/lora_targets.hpp"

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

namespace meshtrain {

enum class InitKind {
  normal,           // normal(0, 0.02)
  normal_residual,  // normal(0, 0.02 / sqrt(2·L)): the two c_proj weights
  zeros,            // biases, LayerNorm bias
  ones,             // LayerNorm weight
  lora_uniform,     // LoRA's A: uniform(±1/sqrt(fan_in)), PEFT's Kaiming-uniform with a = sqrt(5)
};

// What a vocabulary table is to the model: the embedding's lookup, the output head's matrix, or
// both (tied: gpt2's wte, held by the first stage and again by the last).
enum class TableRole { none, lookup, output, tied };

// The part of a global tensor one rank holds (share/docs/design.md, Parallelism), in HDF5 hyperslab terms:
// per dimension, `count` blocks of `block` elements starting at offset + k·stride. The rank stores
// the selected elements row-major, in the order HDF5 iterates them. A tensor-parallel c_attn
// weight [C, 3C] on tp rank r of t: offset (0, r·C/t), count (1, 3), stride (1, C), block (C, C/t):
// its q, k and v columns of heads r·NH/t … side by side.
struct Piece {
  std::vector<std::uint64_t> offset, count, stride, block;
  std::uint64_t elements() const;
};

// TensorInfo::global_index's arithmetic in a fixed-size, trivially copyable form: nothing is
// allocated per call (the initialisation's set-up calls it for every row), and kernels can capture
// it (device code has no std::vector). The global row-major index of element `local` of the rank's
// array, or -1 for padding (vocabulary rows past V).
struct PieceIndex {
  static constexpr int max_dims = 4;
  int dims = 0;
  std::uint64_t shape[max_dims] = {};        // global shape
  std::uint64_t local_shape[max_dims] = {};  // the rank's array
  std::uint64_t offset[max_dims] = {}, count[max_dims] = {}, stride[max_dims] = {}, block[max_dims] = {};

  KOKKOS_INLINE_FUNCTION std::int64_t global_index(std::uint64_t local) const {
    // Unravel in the local array, map each coordinate through the piece, ravel in the global shape.
    std::uint64_t coordinate[max_dims] = {};
    std::uint64_t rest = local;
    for (int d = dims - 1; d >= 0; --d) {
      coordinate[d] = rest % local_shape[d];
      rest /= local_shape[d];
    }
    std::int64_t global = 0;
    for (int d = 0; d < dims; ++d) {
      if (block[d] == 0) return -1;
      const std::uint64_t k = coordinate[d] / block[d];
      if (k >= count[d]) return -1;  // padding past the piece
      const std::uint64_t g = offset[d] + k * stride[d] + coordinate[d] % block[d];
      global = global * std::int64_t(shape[d]) + std::int64_t(g);
    }
    return global;
  }
};

struct TensorInfo {
  std::string name;                        // "h.3.attn.c_attn.weight"
  std::vector<std::uint64_t> shape;        // global shape, row-major
  std::vector<std::uint64_t> local_shape;  // the rank's array (wte: padded vocab rows / tp)
  Piece piece;                             // which global elements the rank's array holds
  bool replicated = true;                  // every tensor-parallel rank holds the same whole tensor
  std::size_t offset = 0;                  // first element in the flat buffer
  std::size_t numel = 0;                   // elements of local_shape
  InitKind init = InitKind::zeros;
  bool decays = false;  // AdamW weight decay applies (tensors of two or more dimensions)
  int expert = -1;      // the routed expert (global index) whose weight this is, or -1
  TableRole role = TableRole::none;

  // The global row-major index of local element `local`, or -1 for padding (vocab rows past V).
  std::int64_t global_index(std::uint64_t local) const { return piece_index().global_index(local); }
  // The same map as a value kernels can capture.
  PieceIndex piece_index() const;
};

// Tensor parallelism (Megatron): the family's list says which tensors are split by columns or rows
// and which are replicated (gpt2: c_attn and c_fc by columns, c_attn by heads with q|k|v of a head
// together, both c_proj by rows, LayerNorms, wpe and the c_proj biases replicated); vocabulary
// tables are split by rows (padded so that tp divides them, and each share is a multiple of
// train.vocab_multiple).
// Pipeline parallelism: stage s of pp holds blocks [s·L/pp, (s+1)·L/pp); the first stage also the
// embedding's tables, the last the final norm and the output head (a tied table again).
struct StagePlace {
  int stage = 0, stages = 1;
  bool first() const { return stage == 0; }
  bool last() const { return stage == stages - 1; }
};

// A run of contiguous tensors that ZeRO shards and gathers as one (FSDP's unit): wte alone (the first
// and last stage shard it alike, so their tied gradients add shard by shard), wpe, each block, ln_f;
// an MoE block has a second unit after its own, the routed experts this expert-parallel rank holds.
// Its length is padded to a multiple of the layout's unit_align (the data-parallel degree under
// ZeRO), so that every rank's shard is an equal, contiguous slice [begin + r·shard, … + shard).
// Expert units are reduced and sharded over the expert-data-parallel group (dp / ep ranks, which
// divides dp: the same padding serves), the others over the data-parallel group.
struct ShardUnit {
  std::string name;                // "wte", "wpe", "h.3", "ln_f", "layers.2.mlp.experts"
  int block = -1;                  // global block index, or -1
  std::size_t begin = 0, end = 0;  // flat range, padding included
  bool experts = false;            // the routed experts of block `block` (held by one ep rank)
  std::size_t size() const { return end - begin; }
  std::size_t shard(int parts) const { return size() / std::size_t(parts); }
};

class ParameterLayout {
 public:
  // unit_align: every shard unit's length is padded to a multiple of it (1: no padding).
  // ep, ep_rank: expert parallelism (Megatron's): each MoE block's E routed experts are split over
  // the ep ranks, rank r holding experts [r·E/ep, (r+1)·E/ep).
  explicit ParameterLayout(const ModelConfig& model, int tp = 1, int tp_rank = 0, StagePlace place = {},
                           int unit_align = 1, int ep = 1, int ep_rank = 0,
                           LayoutContent content = LayoutContent::model);
  // The LoRA adapters of this rank's piece (model.lora), laid out as a model's tensors are: units per block.
  static ParameterLayout adapters(const ModelConfig& model, int tp = 1, int tp_rank = 0, StagePlace place = {},
                                  int unit_align = 1, int ep = 1, int ep_rank = 0) {
    return ParameterLayout(model, tp, tp_rank, place, unit_align, ep, ep_rank, LayoutContent::adapters);
  }
  LayoutContent content() const { return content_; }

  const std::vector<TensorInfo>& tensors() const { return tensors_; }
  std::size_t total() const { return total_; }  // padding of the units included
  const std::vector<ShardUnit>& units() const { return units_; }
  int unit_align() const { return unit_align_; }
  // Index of the unit holding flat offset `offset`.
  std::size_t unit_at(std::size_t offset) const;
  // Where backward's progress reports fall (LanguageModel::ReadyFrom): the first flat offset of
  // this stage's block l (0-based within the stage; its first unit, or that of the first later block with
  // units: an adapter layout may hold none for a block), and of the output head's units, those after
  // the last block (the last stage; total() elsewhere).
  std::size_t block_begin(int l) const;
  std::size_t head_begin() const;
  const TensorInfo& find(const std::string& name) const;
  const TensorInfo* find_if_held(const std::string& name) const;
  // The vocabulary tables by role (std::out_of_range where this stage holds none): the embedding's
  // (first stage), the output head's (last stage), the one that is both (a family that ties them).
  const TensorInfo& lookup_table() const { return table_or_throw(TableRole::lookup); }
  const TensorInfo& output_table() const { return table_or_throw(TableRole::output); }
  const TensorInfo& tied_table() const { return table_or_throw(TableRole::tied); }
  // The held table of that role (lookup, output: or the tied one), or null.
  const TensorInfo* table(TableRole role) const;
  const ModelConfig& model() const { return model_; }
  int tp() const { return tp_; }
  int tp_rank() const { return tp_rank_; }
  int ep() const { return ep_; }
  int ep_rank() const { return ep_rank_; }
  // The routed experts of each MoE block this rank holds: global experts [first_expert(), + local_experts()).
  int local_experts() const { return model_.experts / ep_; }
  int first_expert() const { return ep_rank_ * local_experts(); }
  // Vocabulary rows of wte across all tp ranks: V rounded up to a multiple of vocab_multiple × tp
  // (padded_vocab, core/model_sizes.hpp); each rank's array has padded_vocab() / tp rows.
  int padded_vocab() const { return padded_vocab_; }
  const StagePlace& place() const { return place_; }
  int first_layer() const { return first_layer_; }  // global index of this stage's first block
  int stage_layers() const { return end_layer_ - first_layer_; }
  // Whether this rank's copy of t is the one that counts where a tensor must be taken once: each
  // tensor-parallel rank's piece of a split tensor counts; a replicated tensor (norms, wpe, the
  // c_proj biases: the same on every tp rank) counts on tp rank 0 only; a tied table on the first
  // stage only. The checkpoint writes these copies, and the gradient norm adds them.
  bool holds_counted_copy(const TensorInfo& t) const;

  // Building: the family's list_tensors calls these from the constructor, in flat-buffer order.
  // A shard unit holds the tensors added after it starts (`block`: its global block, or -1;
  // `experts`: a block's routed experts).
  void start_unit(std::string name, int block, bool experts = false);
  void add_replicated(std::string name, std::vector<std::uint64_t> shape, InitKind init, int expert = -1);
  // Dimension `dim` split over the tensor-parallel ranks (`groups` equal groups, each cut alike);
  // `expert`: the routed expert whose weight it is.
  void add_split(const std::string& name, std::vector<std::uint64_t> shape, std::size_t dim, std::uint64_t groups,
                 InitKind init, int expert = -1);
  // A [V, C] table split by vocabulary rows.
  void add_vocabulary_table(const std::string& name, TableRole role);
  // A [V, columns] matrix split by vocabulary rows as the tables are (LoRA's B beside lm_head).
  void add_vocabulary_rows(const std::string& name, std::uint64_t columns, InitKind init);

 private:
  void add(std::string name, std::vector<std::uint64_t> shape, std::vector<std::uint64_t> local_shape, Piece piece,
           InitKind init, bool replicated, int expert = -1, TableRole role = TableRole::none);
  void close_unit();
  void add_vocabulary_piece(const std::string& name, std::uint64_t columns, InitKind init, TableRole role);
  const TensorInfo& table_or_throw(TableRole role) const;

  ModelConfig model_;
  int tp_ = 1;
  int tp_rank_ = 0;
  int ep_ = 1, ep_rank_ = 0;
  int padded_vocab_ = 0;
  StagePlace place_;
  int first_layer_ = 0, end_layer_ = 0;
  int unit_align_ = 1;
  LayoutContent content_ = LayoutContent::model;
  std::vector<TensorInfo> tensors_;
  std::vector<ShardUnit> units_;
  std::size_t total_ = 0;
};

// The family registry (model/language_model.cpp): model.arch's family lists its tensors into
// `layout` (ParameterLayout's constructor calls it).
void list_family_tensors(ParameterLayout& layout);
// The same for the family's LoRA adapters (model/lora_adapters.cpp).
void list_family_adapters(ParameterLayout& layout);

// Points views at the tensors of a layout, wherever `where` says each lives (a flat buffer, or
// ZeRO's units in separate buffers); a family's bind() names them. Tensors the rank does not hold
// (another stage's) are empty views.
template <class Real>
class TensorViews {
 public:
  using Where = std::function<Real*(const TensorInfo&)>;
  TensorViews(const ParameterLayout& layout, Where where) : layout_(layout), where_(std::move(where)) {}
  const ParameterLayout& layout() const { return layout_; }
  Vec<Real> view(const std::string& name) const;
  // The tensors `names` (each after `prefix`) as one view: they must follow one another in memory.
  Vec<Real> joined(const std::string& prefix, const std::vector<std::string>& names) const;
  // The tied or lookup table, and the tied or output one (empty where the stage holds neither).
  Vec<Real> lookup_table() const { return view_of(layout_.table(TableRole::lookup)); }
  Vec<Real> output_table() const { return view_of(layout_.table(TableRole::output)); }

 private:
  // Empty where the rank does not hold t, or `where` places it nowhere (a frozen tensor's gradient).
  Vec<Real> view_of(const TensorInfo* t) const {
    Real* const at = t == nullptr ? nullptr : where_(*t);
    return at == nullptr ? Vec<Real>() : Vec<Real>(at, t->numel);
  }
  const ParameterLayout& layout_;
  Where where_;
};

// The share of a token's forward that passes through tensor t: k/E for a routed expert's weights
// (each token visits k of E experts; the plan assumes none is dropped), 1 otherwise.
double active_share(const TensorInfo& t, const ModelConfig& m);
// Parameters a token's forward passes through, over the whole model (every tensor counted once,
// whatever piece `layout` holds): all of them for a dense model; an MoE model's routed experts
// count k/E (share/docs/usage.md, Mixture of experts: total against active parameters).
double active_parameters(const ParameterLayout& layout);
// "10.84M parameters", or for an MoE model "12.31M parameters total, 4.12M active per token".
std::string parameter_count_text(const ModelConfig& model);
// FLOPs of one token's forward and backward pass, as llm.c counts them: 6·N + 6·L·C·T, N the
// parameters of the products a token passes (llama: all but embed_tokens, a lookup; MoE: k of the
// E experts, active_share), L·C·T the attention's.
double flops_per_token(const ParameterLayout& layout);
// The same for the tensors and blocks `layout` holds (one pipeline stage's share; the stages sum to
// flops_per_token). Global shapes: the whole tensor-parallel group's count. A layout of ep 1: an
// expert-parallel one holds only its rank's experts.
double stage_flops_per_token(const ParameterLayout& layout);

}  // namespace meshtrain
