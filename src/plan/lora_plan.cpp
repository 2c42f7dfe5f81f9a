// LoRA's shapes, counts, memory and FLOPs for the planner (the model they follow: lora_plan.hpp).
#include "plan/lora_plan.hpp"

#include "core/lora_targets.hpp"
#include "core/model_sizes.hpp"
#include "state/state_source.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <stdexcept>

namespace meshtrain {
namespace {

// Where each llama module's weight lives in a block, and how tensor parallelism splits it
// (model/families/llama.cpp: q, k, v, gate and up by output rows; o and down by input columns).
struct ModuleSite {
  const char* prefix;
  bool column_parallel;
};

const ModuleSite& module_site(const std::string& module) {
  static const std::map<std::string, ModuleSite> sites = {
      {"q_proj", {"self_attn.", true}},  {"k_proj", {"self_attn.", true}}, {"v_proj", {"self_attn.", true}},
      {"o_proj", {"self_attn.", false}}, {"gate_proj", {"mlp.", true}},    {"up_proj", {"mlp.", true}},
      {"down_proj", {"mlp.", false}}};
  const auto it = sites.find(module);
  if (it == sites.end()) throw std::logic_error("LoRA knows no module " + module);
  return it->second;
}

// Elements of a state held so over units (PlacedState's place and shard, state/placed_state.hpp).
struct UnitTotals {
  std::size_t whole = 0;    // every unit at its offset
  std::size_t working = 0;  // the resident units, then the block rooms
  std::size_t shard = 0;    // the owned slices end to end
  std::size_t largest_shard = 0;

  std::size_t elements(Held held) const {
    switch (held) {
      case Held::whole: return whole;
      case Held::working_and_shard: return working + shard;
      case Held::working: return working;
      case Held::shard: return shard;
    }
    return 0;
  }
};

// ShardMap's arithmetic over a stage's units and a shard group of `group` ranks: a block's units
// end to end in a room, one room per block up to two, the non-block units resident.
UnitTotals unit_totals(const std::vector<ShardUnit>& units, int group) {
  UnitTotals totals;
  std::map<int, std::size_t> block_sizes;
  std::size_t resident = 0;
  for (const ShardUnit& u : units) {
    totals.whole += u.size();
    totals.shard += u.shard(group);
    totals.largest_shard = std::max(totals.largest_shard, u.shard(group));
    if (u.block < 0) {
      resident += u.size();
    } else {
      block_sizes[u.block] += u.size();
    }
  }
  std::size_t room = 0;
  for (const auto& [block, size] : block_sizes) room = std::max(room, size);
  const std::size_t rooms = std::min<std::size_t>(block_sizes.size(), std::size_t(ShardMap::max_block_rooms));
  totals.working = resident + rooms * room;
  return totals;
}

// The forward products' parameters of the stage's tensors: stage_flops_per_token's 6·N at seq_len
// 0, where the attention's term (the only one that grows with T) vanishes.
double stage_product_parameters(const ModelConfig& model, int stage, int stages) {
  ModelConfig no_context = without_lora(model);
  no_context.seq_len = 0;
  return stage_flops_per_token(ParameterLayout(no_context, 1, 0, StagePlace{stage, stages})) / 6.0;
}

}  // namespace

ModelConfig without_lora(ModelConfig model) {
  model.lora = LoraConfig{};
  return model;
}

Config full_training(Config cfg) {
  cfg.model = without_lora(cfg.model);
  return cfg;
}

std::vector<AdapterTensor> lora_adapters(const ModelConfig& model, const ParameterLayout& base) {
  const std::vector<std::string> targets = lora_target_names(model);
  const std::uint64_t r = std::uint64_t(model.lora.rank);
  const bool split = base.tp() > 1;
  std::vector<AdapterTensor> adapters;
  for (int l = base.first_layer(); l < base.first_layer() + base.stage_layers(); ++l) {
    for (const std::string& module : targets) {
      const ModuleSite& site = module_site(module);
      const std::string stem = fmt::format("layers.{}.{}{}", l, site.prefix, module);
      // W [out, in] and the rank's piece of it.
      const TensorInfo& w = base.find(stem + ".weight");
      const std::uint64_t out = w.shape[0], in = w.shape[1];
      const std::uint64_t local_out = w.local_shape[0], local_in = w.local_shape[1];
      // A [r, in]: whole beside a column-parallel W, its columns split like W's otherwise.
      AdapterTensor a{stem + ".lora_A.weight", module, l, site.column_parallel};
      a.replicated = !split || site.column_parallel;
      a.rows = a.local_rows = r;
      a.cols = in;
      a.local_cols = local_in;
      // B [out, r]: its rows split like a column-parallel W's, whole beside a row-parallel one.
      AdapterTensor b{stem + ".lora_B.weight", module, l, site.column_parallel};
      b.replicated = !split || !site.column_parallel;
      b.rows = out;
      b.local_rows = local_out;
      b.cols = b.local_cols = r;
      adapters.push_back(std::move(a));
      adapters.push_back(std::move(b));
    }
  }
  return adapters;
}

std::int64_t full_trainable_parameters(const ModelConfig& model) {
  return std::int64_t(parameter_count(without_lora(model)).value());
}

std::int64_t lora_trainable_parameters(const ModelConfig& model) {
  std::int64_t n = 0;
  for (const AdapterTensor& a : lora_adapters(model, ParameterLayout(without_lora(model)))) {
    n += std::int64_t(a.global_elements());
  }
  return n;
}

std::int64_t trainable_parameters(const ModelConfig& model) {
  return model.lora.enabled() ? lora_trainable_parameters(model) : full_trainable_parameters(model);
}

std::vector<ShardUnit> lora_units(const std::vector<AdapterTensor>& adapters, int unit_align) {
  std::vector<ShardUnit> units;
  const std::size_t align = std::size_t(unit_align);
  for (const AdapterTensor& a : adapters) {
    if (units.empty() || units.back().block != a.block) {
      const std::size_t begin = units.empty() ? 0 : units.back().end;
      units.push_back({fmt::format("layers.{}.lora", a.block), a.block, begin, begin, false});
    }
    units.back().end += a.numel();
  }
  // Pad each unit (the later ones move up by the padding before them).
  std::size_t shift = 0;
  for (ShardUnit& u : units) {
    const std::size_t size = u.size();
    u.begin += shift;
    u.end = u.begin + (size + align - 1) / align * align;
    shift += u.size() - size;
  }
  return units;
}

MemoryBytes unit_state_memory(const std::vector<ShardUnit>& units, int dp, ZeroStage stage, Precision precision) {
  const UnitTotals totals = unit_totals(units, stage.shard_group_size(dp));
  const auto bytes = [&](Held held, std::size_t element) { return std::int64_t(totals.elements(held) * element); };
  const bool fp32 = precision == Precision::fp32;
  MemoryBytes m;
  m[fp32 ? MemoryCategory::weights : MemoryCategory::master] =
      bytes(fp32 ? stage.compute_weights() : ZeroStage::master_copy(), sizeof(float));
  m[MemoryCategory::grads] = bytes(stage.fp32_grads(), sizeof(float));
  m[MemoryCategory::optimizer] = 2 * bytes(ZeroStage::moments(), sizeof(float));
  m[MemoryCategory::comm_buffers] = stage.shards() ? std::int64_t(totals.largest_shard * sizeof(float)) : 0;
  if (!fp32) {
    m[MemoryCategory::weights] += bytes(stage.compute_weights(), sizeof(bf16));
    m[MemoryCategory::grads] += bytes(stage.compute_grads(), sizeof(bf16));
  }
  return m;
}

std::vector<GradientBucket> unit_gradient_buckets(const std::vector<ShardUnit>& units, std::size_t bucket_bytes) {
  std::vector<GradientBucket> buckets;
  if (units.empty()) return buckets;
  const std::size_t per_bucket = std::max<std::size_t>(1, bucket_bytes / sizeof(float));
  const std::size_t first = units.front().begin;
  for (std::size_t end = units.back().end; end > first;) {
    const std::size_t begin = end - first > per_bucket ? end - per_bucket : first;
    buckets.push_back({begin, end, false});
    end = begin;
  }
  return buckets;
}

MemoryBytes planned_lora_state_memory(const Config& cfg, const ParameterLayout& base, int dp) {
  const ZeroStage stage{cfg.parallel.zero};
  const std::vector<AdapterTensor> adapters = lora_adapters(cfg.model, base);
  MemoryBytes m = unit_state_memory(lora_units(adapters, stage.shard_group_size(dp)), dp, stage, cfg.train.precision);
  std::size_t frozen = 0;
  for (const TensorInfo& t : base.tensors()) frozen += t.numel;
  m[MemoryCategory::weights] += std::int64_t(frozen) * compute_bytes(cfg.train.precision);
  m[MemoryCategory::workspace] += std::int64_t(CheckpointStaging::bytes_for(base));
  return m;
}

std::size_t lora_activation_elements(const ModelConfig& model, int micro_batch, int stage_layers, int slots) {
  const std::size_t Nr = std::size_t(micro_batch) * std::size_t(model.seq_len) * std::size_t(model.lora.rank);
  const std::size_t modules = lora_target_names(model).size();
  return Nr * (std::size_t(stage_layers) * modules * std::size_t(slots) + 1);
}

std::size_t lora_snapshot_bytes(const std::vector<AdapterTensor>& adapters, int tp_rank, int dp) {
  std::size_t counted = 0;
  for (const AdapterTensor& a : adapters) {
    if (!a.replicated || tp_rank == 0) counted += a.numel();
  }
  constexpr std::size_t saved_states = 3;  // the weights and the two moments
  return saved_states * ((counted + std::size_t(dp) - 1) / std::size_t(dp)) * sizeof(float);
}

TokenFlops dense_stage_flops(const ModelConfig& model, int stage, int stages) {
  const double total = stage_flops_per_token(ParameterLayout(without_lora(model), 1, 0, StagePlace{stage, stages}));
  return {total / 3, total};
}

TokenFlops lora_stage_flops(const ModelConfig& model, int stage, int stages) {
  const TokenFlops dense = dense_stage_flops(model, stage, stages);
  const double products = stage_product_parameters(model, stage, stages);
  const double attention = dense.total - 6 * products;
  double adapters = 0;
  const ParameterLayout base(without_lora(model), 1, 0, StagePlace{stage, stages});
  for (const AdapterTensor& a : lora_adapters(model, base)) adapters += double(a.global_elements());
  return {2 * products + attention / 3 + 2 * adapters, 4 * products + attention + 6 * adapters};
}

TokenFlops training_stage_flops(const ModelConfig& model, int stage, int stages) {
  return model.lora.enabled() ? lora_stage_flops(model, stage, stages) : dense_stage_flops(model, stage, stages);
}

LoraModuleSplit lora_module_split(const ModelConfig& model) {
  LoraModuleSplit split;
  for (const std::string& module : lora_target_names(model)) {
    (module_site(module).column_parallel ? split.column_parallel : split.row_parallel) += 1;
  }
  return split;
}

}  // namespace meshtrain
