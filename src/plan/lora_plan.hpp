// LoRA in the planner (issue 28; share/docs/usage.md, `meshtrain plan`): what a LoRA run holds and
// computes on one rank, as the trainer implements it, so that `plan` can put it beside full
// fine-tuning of the same model and layout.
//
//   adapters     per targeted module of each block A [r, in] and B [out, r] (W [out, in] the base
//                module's weight). Their tensor-parallel pieces follow W's split: a column-parallel
//                W (q, k, v, gate, up: split by output rows) keeps A whole on every rank and splits
//                B's rows like W's; a row-parallel W (o, down: split by input columns) splits A's
//                columns like W's and keeps B whole, so r need not divide tp. The adapters are the
//                only trained tensors: their states are a dense run's (fp32 master, gradients, two
//                moments, the 16-bit copy and its gradients under bf16/fp16), under the same ZeRO
//                rules, one shard unit per block padded to dp under ZeRO.
//   frozen base  every base tensor (the rank's tp and pp piece) in the compute precision only, held
//                whole at every ZeRO stage: no gradients, no master, no moments.
//   activations  a dense run's, plus per block and targeted module h = A·x [N, r] in every
//                activation slot and one [N, r] backward scratch, in the compute precision.
//   FLOPs        the base's backward computes input gradients only: 4 per parameter and token
//                instead of 6, attention unchanged; each adapter 6·r·(in + out) per token.
//   traffic      data parallel: the adapters' gradients and weights only (the dense rules over
//                their units); tensor parallel: per targeted column-parallel module one all-reduce
//                of [N, r] in backward, per row-parallel module one in forward.
//
// Size letters: r lora.rank, N = micro_batch · seq_len, t tp.
#pragma once

#include "core/config.hpp"
#include "core/memory_ledger.hpp"
#include "model/parameters.hpp"
#include "state/gradient_reduction.hpp"
#include "state/zero_stage.hpp"

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace meshtrain {

// The model with no adapters: a LoRA run's frozen base, and what full fine-tuning trains.
ModelConfig without_lora(ModelConfig model);
// The same run as full fine-tuning: every key but [lora].
Config full_training(Config cfg);

// One adapter matrix of one targeted module of one block.
struct AdapterTensor {
  std::string name;                              // "layers.3.self_attn.q_proj.lora_A.weight"
  std::string module;                            // "q_proj"
  int block = -1;                                // global block index
  bool column_parallel = false;                  // the base W split by output rows (else by input columns)
  bool replicated = true;                        // every tensor-parallel rank holds the same whole matrix
  std::uint64_t rows = 0, cols = 0;              // global shape: [r, in] (A) or [out, r] (B)
  std::uint64_t local_rows = 0, local_cols = 0;  // the rank's piece
  std::uint64_t global_elements() const { return rows * cols; }
  std::size_t numel() const { return std::size_t(local_rows * local_cols); }
};

// The adapters of `model` (model.lora: rank and targets, lora_target_names) on the blocks a rank of
// its frozen base holds (`base`: a layout of without_lora(model), any tp piece and stage), block by
// block, each block's modules in the family's order, A before B. Shapes from the base's own tensors.
std::vector<AdapterTensor> lora_adapters(const ModelConfig& model, const ParameterLayout& base);

// Parameters each kind of training trains, global counts: full, every parameter of the model;
// LoRA, Σ r·(in + out) over the targeted modules of every block.
std::int64_t full_trainable_parameters(const ModelConfig& model);
std::int64_t lora_trainable_parameters(const ModelConfig& model);
// The one of the two that `model` trains (LoRA when model.lora is enabled).
std::int64_t trainable_parameters(const ModelConfig& model);

// The adapters' shard units: one per block (the trainer's unit, as a dense block's), contiguous
// from offset 0, each padded to a multiple of `unit_align` (dp under ZeRO, else 1).
std::vector<ShardUnit> lora_units(const std::vector<AdapterTensor>& adapters, int unit_align);

// The model states of trained shard units (one stage's, padded for `dp`, no routed experts) held as
// ZeRO `stage` holds them over `dp` ranks: weights, master, grads, optimizer and comm_buffers as
// planned_state_memory (state/state_memory.hpp) gives them for a layout of these units, said from
// the units alone (ShardMap's resident run, at most two block rooms, the owned slices): a LoRA run
// has no ParameterLayout of its adapters to ask. test_lora_plan holds it to planned_state_memory.
MemoryBytes unit_state_memory(const std::vector<ShardUnit>& units, int dp, ZeroStage stage, Precision precision);

// Stage 0's gradient buckets over contiguous units (no routed experts): what gradient_buckets
// (state/gradient_reduction.hpp) cuts from a layout of them, from the end, about bucket_bytes each.
std::vector<GradientBucket> unit_gradient_buckets(const std::vector<ShardUnit>& units, std::size_t bucket_bytes);

// The model states and checkpoint staging of a LoRA rank: the frozen base (`base`, the rank's piece
// of without_lora(cfg.model): its tensors, whatever padding its units have) in the compute precision; its adapters'
// states over `dp` ranks under cfg.parallel.zero; the staging the base is read through (CheckpointStaging, as the dense
// rank's).
MemoryBytes planned_lora_state_memory(const Config& cfg, const ParameterLayout& base, int dp);

// Elements, in the compute precision, of a LoRA rank's activations beyond its dense model's: h
// [N, r] per targeted module of each of the stage's `stage_layers` blocks in each of `slots`
// activation slots, and one [N, r] backward scratch.
std::size_t lora_activation_elements(const ModelConfig& model, int micro_batch, int stage_layers, int slots);

// Bytes of host memory a background save copies a LoRA rank's adapter states into: the three saved
// states (weights and both moments) of its even share of the adapter elements it counts
// (holds_counted_copy's rule: a replicated matrix on tp rank 0), over the dp ranks.
std::size_t lora_snapshot_bytes(const std::vector<AdapterTensor>& adapters, int tp_rank, int dp);

// Model FLOPs per token of one pipeline stage: what its forward passes cost, and the whole
// forward-and-backward (stage_flops_per_token's count for a dense run: forward a third of it).
struct TokenFlops {
  double forward = 0;
  double total = 0;
};
TokenFlops dense_stage_flops(const ModelConfig& model, int stage, int stages);
// LoRA's: the base's products 2 per parameter forward and 2 backward (input gradients only), the
// attention's products as dense, each adapter 2·r·(in + out) forward and 4 backward.
TokenFlops lora_stage_flops(const ModelConfig& model, int stage, int stages);
// The one `model` trains.
TokenFlops training_stage_flops(const ModelConfig& model, int stage, int stages);

// Targeted modules of one block by their base's tensor-parallel split: LoRA's extra all-reduces of
// [N, r] (backward, column-parallel; forward, row-parallel).
struct LoraModuleSplit {
  int column_parallel = 0;
  int row_parallel = 0;
};
LoraModuleSplit lora_module_split(const ModelConfig& model);

}  // namespace meshtrain
