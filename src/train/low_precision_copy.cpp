// The 16-bit working copy of bf16/fp16 runs.
#include "train/low_precision_copy.hpp"

#include "kernels/convert.hpp"
#include "kernels/gemm.hpp"
#include "model/gemm_workspace.hpp"
#include "train/pipeline_executor.hpp"

#include <optional>
#include <stdexcept>

namespace meshtrain {
namespace {

// Element counts of the copy's buffers: weights (with the stage-3 shard), gradients.
struct CopySizes {
  std::size_t weights, shard, grads;
};

CopySizes copy_sizes(const ParameterLayout& layout, int dp, int stage) {
  if (stage == 0) return {layout.total(), 0, layout.total()};
  const ShardMap map(layout, dp, 0);
  return {stage < 3 ? layout.total() : map.working_total(), stage == 3 ? map.shard_total() : 0,
          stage < 2 ? layout.total() : map.working_total()};
}

// The 16-bit weights and gradients, laid out as ZeRO lays out an fp32 run's (see the header).
template <class Low>
class CopyStore final : public ParameterStore<Low> {
 public:
  CopyStore(const ExecSpace& space, const ParameterLayout& layout, int stage, Comm* dp)
      : space_(space),
        map_(layout, stage > 0 ? dp->size() : 1, stage > 0 ? dp->rank() : 0),
        stage_(stage),
        dp_(dp) {
    const CopySizes sizes = copy_sizes(layout, map_.dp(), stage);
    weights_ = Buffer<Low>("meshtrain::low_precision::weights", sizes.weights);
    shard_ = Buffer<Low>("meshtrain::low_precision::weight_shard", sizes.shard);
    grads_ = Buffer<Low>("meshtrain::low_precision::grads", sizes.grads);
  }

  const ParameterLayout& layout() const override { return map_.layout(); }
  Low* weight(const TensorInfo& t) override { return weights_.data() + place(t, stage_ == 3); }
  Low* grad(const TensorInfo& t) override { return grads_.data() + place(t, stage_ >= 2); }

  void need_block(int block) override {
    if (stage_ < 3 || gathered_ == block) return;
    const std::size_t u = map_.block_unit(block);
    gather(u);
    gathered_ = block;
  }

  void copy_master(const Fp32Side& fp32) {
    if (stage_ == 0) {
      for (const TensorInfo& t : layout().tensors()) {
        convert<Low, float>(space_, Vec<Low>(weight(t), t.numel), CVec<float>(fp32.master(t), t.numel), long(t.numel));
      }
      space_.fence();
      return;
    }
    for (std::size_t u = 0; u < map_.units(); ++u) {
      // This rank's slice, rounded from its fp32 master slice, then everyone's slices gathered.
      const std::size_t n = map_.shard(u);
      Low* slice = stage_ < 3 ? weights_.data() + map_.owned_begin(u) : shard_.data() + map_.shard_offset(u);
      convert<Low, float>(space_, Vec<Low>(slice, n), fp32.master_shard(u), long(n));
      if (stage_ < 3) {
        space_.fence();
        dp_->allgather(slice, weights_.data() + map_.unit(u).begin, n);
      } else if (!map_.is_block(u)) {
        gather(u);
      }
    }
    gathered_ = -1;
    space_.fence();
  }

  std::size_t weight_bytes() const { return (weights_.extent(0) + shard_.extent(0)) * sizeof(Low); }
  std::size_t grad_bytes() const { return grads_.extent(0) * sizeof(Low); }

 private:
  // Offset of tensor t in a buffer that is whole, or (working) holds units at their working place.
  std::size_t place(const TensorInfo& t, bool working) const {
    if (!working) return t.offset;
    const std::size_t u = map_.layout().unit_at(t.offset);
    return map_.working_offset(u) + (t.offset - map_.unit(u).begin);
  }
  void gather(std::size_t u) {
    space_.fence();
    dp_->allgather(shard_.data() + map_.shard_offset(u), weights_.data() + map_.working_offset(u), map_.shard(u));
  }

  ExecSpace space_;
  ShardMap map_;
  int stage_;
  Comm* dp_;
  Buffer<Low> weights_, shard_, grads_;
  int gathered_ = -1;  // stage 3: the block in the working block buffer
};

template <class Low>
std::size_t workspace_bytes(const Config& cfg, int tp) {
  return gpt2_gemm_workspace_bytes<Low>(cfg.model, cfg.train.micro_batch, tp);
}

template <class Low>
class Copy final : public LowPrecisionCopy {
 public:
  Copy(const ExecSpace& space, const Config& cfg, const ParameterLayout& layout, Comm* tp, Comm* dp, StagePlace place,
       const PipelineParts& pipeline, Fp32Side fp32)
      : space_(space),
        store_(space, layout, cfg.parallel.zero, dp),
        model_(space, cfg.model, cfg.train.micro_batch, tp, place,
               pipeline.schedule.empty() ? 1 : pipeline_slots(pipeline.schedule), cfg.train.recompute,
               &store_),
        fp32_(std::move(fp32)),
        workspace_(workspace_bytes<Low>(cfg, tp != nullptr ? tp->size() : 1)) {
    // The GEMMs of a 16-bit model go through one fp32 workspace: allocated now, counted, never grown.
    reserve_gemm_workspace(workspace_);
    next_ = tensors().size();
    if (!pipeline.schedule.empty() && pipeline.loader != nullptr && pipeline.pp != nullptr) {
      executor_.emplace(pipeline.schedule, model_, *pipeline.loader, *pipeline.pp,
                        [this](std::size_t offset) { finished_from(offset); });
    }
  }

  double forward(CVec<int> inputs, CVec<int> targets, double grad_scale, double loss_scale) override {
    return double(model_.forward(inputs, targets, float(grad_scale * loss_scale)));
  }

  void backward(CVec<int> inputs, double loss_scale, const Gpt2<float>::ReadyFrom& fp32_ready) override {
    unscale_ = float(1.0 / loss_scale);
    fp32_ready_ = &fp32_ready;
    model_.backward(inputs, [this](std::size_t offset) { finished_from(offset); });
  }

  double run_pipeline(std::int64_t step, double grad_scale, double loss_scale,
                      const Gpt2<float>::ReadyFrom& fp32_ready) override {
    if (!executor_) throw std::logic_error("LowPrecisionCopy: no pipeline schedule was given");
    unscale_ = float(1.0 / loss_scale);
    fp32_ready_ = &fp32_ready;
    return executor_->run(step, float(grad_scale * loss_scale));
  }

  void copy_master() override { store_.copy_master(fp32_); }

  MemoryBytes memory() const override {
    MemoryBytes m;
    m[MemoryCategory::weights] = std::int64_t(store_.weight_bytes());
    m[MemoryCategory::grads] = std::int64_t(store_.grad_bytes());
    m[MemoryCategory::activations] = std::int64_t(model_.activation_bytes());
    m[MemoryCategory::workspace] = std::int64_t(workspace_);
    return m;
  }

 private:
  const std::vector<TensorInfo>& tensors() const { return store_.layout().tensors(); }

  // Backward's report that every gradient at offset ≥ `offset` is final for this pass: move the
  // newly final tensors into fp32 (tensors finish from the end of the layout), then pass it on.
  void finished_from(std::size_t offset) {
    while (next_ > 0 && tensors()[next_ - 1].offset >= offset) {
      const TensorInfo& t = tensors()[--next_];
      Low* g16 = store_.grad(t);
      accumulate_into<float, Low>(space_, Vec<float>(fp32_.grad(t), t.numel), CVec<Low>(g16, t.numel), unscale_,
                                  long(t.numel));
      Kokkos::deep_copy(space_, Vec<Low>(g16, t.numel), Low(0.0f));
    }
    if (next_ == 0) next_ = tensors().size();  // the pass is complete
    if (*fp32_ready_) (*fp32_ready_)(offset);
  }

  ExecSpace space_;
  CopyStore<Low> store_;
  Gpt2<Low> model_;
  Fp32Side fp32_;
  std::size_t workspace_;
  std::optional<PipelineExecutor<Low>> executor_;
  std::size_t next_;  // tensors [next_, end) have been moved into fp32 in this backward pass
  float unscale_ = 1.0f;
  const Gpt2<float>::ReadyFrom* fp32_ready_ = nullptr;
};

template <class Low>
MemoryBytes planned_for(const Config& cfg, const ParameterLayout& layout, int tp, int dp, StagePlace place, int slots) {
  const CopySizes sizes = copy_sizes(layout, dp, cfg.parallel.zero);
  MemoryBytes m;
  m[MemoryCategory::weights] = std::int64_t((sizes.weights + sizes.shard) * sizeof(Low));
  m[MemoryCategory::grads] = std::int64_t(sizes.grads * sizeof(Low));
  m[MemoryCategory::activations] = std::int64_t(
      sizeof(Low) * gpt2_activation_elements<Low>(cfg.model, cfg.train.micro_batch, tp, place, slots,
                                                  cfg.train.recompute)
                        .total());
  m[MemoryCategory::workspace] = std::int64_t(workspace_bytes<Low>(cfg, tp));
  return m;
}

}  // namespace

std::unique_ptr<LowPrecisionCopy> LowPrecisionCopy::make(const ExecSpace& space, const Config& cfg,
                                                         const ParameterLayout& layout, Comm* tp, Comm* dp,
                                                         StagePlace place, const PipelineParts& pipeline,
                                                         Fp32Side fp32) {
  if (cfg.train.precision == Precision::bf16) {
    return std::make_unique<Copy<bf16>>(space, cfg, layout, tp, dp, place, pipeline, std::move(fp32));
  }
  if (cfg.train.precision == Precision::fp16) {
    return std::make_unique<Copy<fp16>>(space, cfg, layout, tp, dp, place, pipeline, std::move(fp32));
  }
  throw std::invalid_argument("LowPrecisionCopy: train.precision must be bf16 or fp16");
}

MemoryBytes LowPrecisionCopy::planned(const Config& cfg, const ParameterLayout& layout, int tp, int dp,
                                      StagePlace place, int slots) {
  if (cfg.train.precision == Precision::bf16) return planned_for<bf16>(cfg, layout, tp, dp, place, slots);
  return planned_for<fp16>(cfg, layout, tp, dp, place, slots);
}

}  // namespace meshtrain
