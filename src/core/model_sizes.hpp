// Every size the model keys imply — the MLP widths, the largest tensors, the parameter count, an
// expert's capacity — computed in one place, in 64 bits, every product checked (share/docs/usage.md,
// Faults: Sizes that do not fit).
//
// The keys are ints, and a product of two of them wraps an int (of four, an int64): a SwiGLU width
// of shared_experts × expert_hidden, the LLaMA rule's round-up to multiple_of, a capacity of
// factor · N · k / E. require_sizes_fit is the one check that nothing wraps and no tensor exceeds
// what the kernels index; validate() (core/config.cpp) calls it for every command that reads keys
// or a checkpoint's stored config (train, plan, sample, inspect, export), so past it ModelConfig's
// int accessors and the layouts' size_t sums hold exact values.
#pragma once

#include "core/config.hpp"

#include <cstdint>
#include <limits>
#include <string>

namespace meshtrain {

// A non-negative count in 64 bits whose arithmetic saturates: a sum or product that would exceed
// int64 leaves it overflowed (and it stays so), never wrapped.
class Size {
 public:
  constexpr Size(std::int64_t value = 0) : value_(value) {}  // NOLINT: counts convert implicitly
  static constexpr Size overflow() {
    Size s;
    s.overflowed_ = true;
    return s;
  }
  bool overflowed() const { return overflowed_; }
  // The exact value; only when !overflowed().
  std::int64_t value() const { return value_; }
  // Whether it fits `limit` (an overflowed size fits nothing).
  bool at_most(std::int64_t limit) const { return !overflowed_ && value_ <= limit; }

  friend Size operator+(Size a, Size b);
  friend Size operator*(Size a, Size b);
  Size& operator+=(Size b) { return *this = *this + b; }

 private:
  std::int64_t value_ = 0;
  bool overflowed_ = false;
};

// "4294967296", or "more than 9.2e18" for an overflowed size.
std::string size_text(Size s);

// The largest weight tensor: 2^31 − 1 elements (its initialisation, checkpoint views and
// tensor-parallel pieces count elements in int). Activations have no such limit: the kernels index
// them in 64 bits, so the logits of a large micro-batch may hold more.
inline constexpr std::int64_t max_weight_elements = std::numeric_limits<int>::max();

// The largest count of rows or teams of one micro-batch: a GEMM's dimension (m, n, k are int) and
// a Kokkos launch's league size are int.
inline constexpr std::int64_t max_int_count = std::numeric_limits<int>::max();

// The widths ModelConfig's accessors narrow to int (share/docs/usage.md, Model families, Mixture of
// experts): the MLP's hidden size (gpt2 4·C; llama ffn_hidden or the LLaMA rule ⌊8·C/3⌋ rounded up
// to a multiple of multiple_of), one routed expert's (expert_hidden, or the MLP's) and the shared
// experts' (shared_experts × an expert's).
Size mlp_width(const ModelConfig& m);
Size expert_width(const ModelConfig& m);
Size shared_width(const ModelConfig& m);

// Assignments an expert keeps of a micro-batch of `tokens` tokens: ⌈factor · tokens · k / E⌉, at
// least 1, and at most `tokens` (top-k picks k distinct experts, so no expert is offered more than
// one assignment per token: a larger capacity never binds). 0: no capacity (capacity_factor 0).
std::int64_t expert_capacity(const ModelConfig& m, std::int64_t tokens);
// Rows a rank routes of a micro-batch of `tokens` tokens, in expert order (LlamaFamily::Dims::R): every
// assignment (tokens · k) dropless, at most E · capacity under a capacity, and exactly E · capacity
// under model.pad_to_capacity (each expert's rows padded to its capacity).
std::size_t expert_rows(const ModelConfig& m, std::size_t tokens);
// Rows of the residual stream a tensor-parallel rank holds of a micro-batch of `tokens` tokens
// (Dims::Nl): all of them, or under sequence parallelism (ModelConfig::sequence_parallel, tp > 1) its
// block of tokens / tp. std::invalid_argument where tp does not divide the tokens.
std::size_t residual_rows(const ModelConfig& m, std::size_t tokens, int tp);
// Whether sequences of seq_len positions split into the 2·cp equal chunks of a ring over cp ranks
// (ContextChunks): the one rule the configuration check, the sizes and the ring apply (cp 1 runs no ring).
bool context_chunks_divide(int seq_len, int cp);
// Positions of every sequence one rank holds (Dims::T): seq_len, or under context parallelism
// (ModelConfig::context_parallel = cp > 1) its two chunks of seq_len / (2·cp). std::invalid_argument where
// 2·cp does not divide seq_len.
std::size_t local_positions(const ModelConfig& m);
// Rows an expert-parallel rank's experts may receive of micro-batches of `tokens` tokens: every assignment
// (tokens · k, fewer under a capacity) without expert parallelism; else each of the ep senders' rows for its
// E / ep experts at most. The buffers' size (LlamaFamily::Dims::Rr), not a step's count — but for
// model.pad_to_capacity, where it is both: E · capacity.
std::size_t expert_rows_received(const ModelConfig& m, std::size_t tokens, int ep);

// train.vocab_multiple's automatic value (0): 128 on builds whose GEMMs run on cuBLAS (its aligned
// tensor-core kernels want leading dimensions of such multiples; llm.c pads GPT-2's 50257 to 50304), 1 on
// host builds, whose results and speed stay those of the unpadded vocabulary.
int automatic_vocab_multiple();
// The multiple train.vocab_multiple = `key` asks for: the key, or automatic_vocab_multiple() for 0.
int resolved_vocab_multiple(int key);

// The one rule for the vocabulary the GEMMs see: V rounded up to a multiple of m.vocab_multiple × tp, so
// each of the tp ranks holds an equal share of whole multiples (share/docs/design.md, Vocabulary padding).
// The rows past V are padding: zero weights, zero gradients, in no checkpoint or export.
Size padded_vocab(const ModelConfig& m, int tp = 1);

// Parameters of the whole model (every tensor once, unsharded, unpadded): ParameterLayout(m).total()
// in closed form, without building the layout's millions of entries for a model of many experts.
Size parameter_count(const ModelConfig& m);

// Throws InputError unless every width, weight and count of `m` fits: no weight of more than
// max_weight_elements, and no row count of the activations of `micro_batch` sequences with
// expert-parallel degree `ep` (the token rows B·T, the attention rows B·heads·T, the embedding
// gradient's teams, the expert assignments and rows) of more than max_int_count. The message names
// the tensor or count, its factors, the keys each comes from and the keys to make smaller.
void require_sizes_fit(const ModelConfig& m, int micro_batch, int ep);

}  // namespace meshtrain
