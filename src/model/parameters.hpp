// GPT-2 parameters as named views into one flat buffer (llm.c's ParameterTensors pattern).
//
// ParameterLayout lists every tensor once, in Hugging Face's names and Conv1D shapes [in, out]
// (interface section 3), with its offset in the flat buffer. Tensors of one block are contiguous,
// so a pipeline stage's layers are one range. The same layout binds weights, gradients and both
// AdamW moments.
//
// Size letters: L layers, C channels, V vocab, T context length.
#pragma once

#include "core/config.hpp"
#include "core/exec.hpp"

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace meshtrain {

enum class InitKind {
  normal,           // normal(0, 0.02)
  normal_residual,  // normal(0, 0.02 / sqrt(2·L)): the two c_proj weights
  zeros,            // biases, LayerNorm bias
  ones,             // LayerNorm weight
};

struct TensorInfo {
  std::string name;                  // "h.3.attn.c_attn.weight"
  std::vector<std::uint64_t> shape;  // global shape, row-major
  std::size_t offset = 0;            // first element in the flat buffer
  std::size_t numel = 0;
  InitKind init = InitKind::zeros;
  bool decays = false;  // AdamW weight decay applies (tensors of two or more dimensions)
};

class ParameterLayout {
 public:
  explicit ParameterLayout(const ModelConfig& model);

  const std::vector<TensorInfo>& tensors() const { return tensors_; }
  std::size_t total() const { return total_; }
  const TensorInfo& find(const std::string& name) const;
  const ModelConfig& model() const { return model_; }

 private:
  void add(std::string name, std::vector<std::uint64_t> shape, InitKind init);

  ModelConfig model_;
  std::vector<TensorInfo> tensors_;
  std::size_t total_ = 0;
};

// Tensors of one transformer block.
template <class Real>
struct BlockTensors {
  Vec<Real> ln1_w;       // (C)
  Vec<Real> ln1_b;       // (C)
  Vec<Real> qkv_w;       // (C, 3C)  columns q|k|v, heads contiguous inside each
  Vec<Real> qkv_b;       // (3C)
  Vec<Real> attproj_w;   // (C, C)
  Vec<Real> attproj_b;   // (C)
  Vec<Real> ln2_w;       // (C)
  Vec<Real> ln2_b;       // (C)
  Vec<Real> fc_w;        // (C, 4C)
  Vec<Real> fc_b;        // (4C)
  Vec<Real> fcproj_w;    // (4C, C)
  Vec<Real> fcproj_b;    // (C)
};

// Named views of a whole model's worth of values (weights, gradients or a moment).
template <class Real>
struct ParameterTensors {
  Vec<Real> wte;  // (V, C), also the output head
  Vec<Real> wpe;  // (T, C)
  std::vector<BlockTensors<Real>> blocks;
  Vec<Real> lnf_w;  // (C)
  Vec<Real> lnf_b;  // (C)

  // Points every view into `flat`, which must hold layout.total() elements.
  static ParameterTensors bind(Vec<Real> flat, const ParameterLayout& layout);
};

// FLOPs of one token's forward and backward pass, as llm.c counts them: 6·N + 6·L·C·T.
double flops_per_token(const ParameterLayout& layout);

}  // namespace meshtrain
