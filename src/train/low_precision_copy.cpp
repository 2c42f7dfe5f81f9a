// The 16-bit working copy of bf16/fp16 runs.
#include "train/low_precision_copy.hpp"

#include "kernels/convert.hpp"
#include "kernels/gemm.hpp"
#include "model/gemm_workspace.hpp"

#include <stdexcept>

namespace meshtrain {
namespace {

// Flat 16-bit weights and gradients over the fp32 side's layout, as the model's store.
template <class Low>
class FlatStore final : public ParameterStore<Low> {
 public:
  explicit FlatStore(const ParameterLayout& layout)
      : layout_(layout),
        weights_("meshtrain::low_precision::weights", layout.total()),
        grads_("meshtrain::low_precision::grads", layout.total()) {}
  const ParameterLayout& layout() const override { return layout_; }
  Low* weight(const TensorInfo& t) override { return weights_.data() + t.offset; }
  Low* grad(const TensorInfo& t) override { return grads_.data() + t.offset; }
  void need_block(int) override {}
  std::size_t bytes() const { return (weights_.extent(0) + grads_.extent(0)) * sizeof(Low); }

 private:
  ParameterLayout layout_;
  Buffer<Low> weights_, grads_;
};

template <class Low>
std::size_t workspace_bytes(const Config& cfg, int tp) {
  return gpt2_gemm_workspace_bytes<Low>(cfg.model, cfg.train.micro_batch, tp);
}

template <class Low>
class Copy final : public LowPrecisionCopy {
 public:
  Copy(const ExecSpace& space, const Config& cfg, const ParameterLayout& layout, Comm* tp, StagePlace place, int slots,
       Locate master, Locate grad)
      : space_(space),
        store_(layout),
        model_(space, cfg.model, cfg.train.micro_batch, tp, place, slots, parse_recompute(cfg.train.recompute), &store_),
        master_(std::move(master)),
        grad_(std::move(grad)),
        workspace_(workspace_bytes<Low>(cfg, tp != nullptr ? tp->size() : 1)) {
    // The GEMMs of a 16-bit model go through one fp32 workspace: allocated now, counted, never grown.
    reserve_gemm_workspace(workspace_);
    next_ = tensors().size();
  }

  double forward(CVec<int> inputs, CVec<int> targets, double grad_scale, double loss_scale) override {
    return double(model_.forward(inputs, targets, float(grad_scale * loss_scale)));
  }

  void backward(CVec<int> inputs, double loss_scale, const Gpt2<float>::ReadyFrom& fp32_ready) override {
    const float unscale = float(1.0 / loss_scale);
    model_.backward(inputs, [&](std::size_t offset) {
      // Tensors finish from the end of the layout: move every newly final one into fp32.
      while (next_ > 0 && tensors()[next_ - 1].offset >= offset) {
        const TensorInfo& t = tensors()[--next_];
        Low* g16 = store_.grad(t);
        accumulate_into<float, Low>(space_, Vec<float>(grad_(t), t.numel), CVec<Low>(g16, t.numel), unscale,
                                    long(t.numel));
        Kokkos::deep_copy(space_, Vec<Low>(g16, t.numel), Low(0.0f));
      }
      if (next_ == 0) next_ = tensors().size();  // the pass is complete
      if (fp32_ready) fp32_ready(offset);
    });
  }

  void copy_master() override {
    for (const TensorInfo& t : tensors()) {
      convert<Low, float>(space_, Vec<Low>(store_.weight(t), t.numel), CVec<float>(master_(t), t.numel), long(t.numel));
    }
    space_.fence();
  }

  MemoryBytes memory() const override {
    MemoryBytes m;
    m[MemoryCategory::weights] = std::int64_t(store_.bytes() / 2);
    m[MemoryCategory::grads] = std::int64_t(store_.bytes() / 2);
    m[MemoryCategory::activations] = std::int64_t(model_.activation_bytes());
    m[MemoryCategory::workspace] = std::int64_t(workspace_);
    return m;
  }

 private:
  const std::vector<TensorInfo>& tensors() const { return store_.layout().tensors(); }

  ExecSpace space_;
  FlatStore<Low> store_;
  Gpt2<Low> model_;
  Locate master_, grad_;
  std::size_t workspace_;
  std::size_t next_;  // tensors [next_, end) have been moved into fp32 in this backward pass
};

template <class Low>
MemoryBytes planned_for(const Config& cfg, const ParameterLayout& layout, int tp, StagePlace place, int slots) {
  MemoryBytes m;
  m[MemoryCategory::weights] = std::int64_t(layout.total() * sizeof(Low));
  m[MemoryCategory::grads] = std::int64_t(layout.total() * sizeof(Low));
  // Activations are carved in the model's element type; the per-row statistics in fp32 take two slots.
  m[MemoryCategory::activations] = std::int64_t(
      sizeof(Low) * gpt2_activation_elements<Low>(cfg.model, cfg.train.micro_batch, tp, place, slots,
                                                  parse_recompute(cfg.train.recompute))
                        .total());
  m[MemoryCategory::workspace] = std::int64_t(workspace_bytes<Low>(cfg, tp));
  return m;
}

}  // namespace

std::unique_ptr<LowPrecisionCopy> LowPrecisionCopy::make(const ExecSpace& space, const Config& cfg,
                                                         const ParameterLayout& layout, Comm* tp, StagePlace place,
                                                         int slots, Locate master, Locate grad) {
  if (cfg.train.precision == "bf16") return std::make_unique<Copy<bf16>>(space, cfg, layout, tp, place, slots, master, grad);
  if (cfg.train.precision == "fp16") return std::make_unique<Copy<fp16>>(space, cfg, layout, tp, place, slots, master, grad);
  throw std::invalid_argument("LowPrecisionCopy: train.precision must be bf16 or fp16");
}

MemoryBytes LowPrecisionCopy::planned(const Config& cfg, const ParameterLayout& layout, int tp, StagePlace place,
                                      int slots) {
  if (cfg.train.precision == "bf16") return planned_for<bf16>(cfg, layout, tp, place, slots);
  return planned_for<fp16>(cfg, layout, tp, place, slots);
}

}  // namespace meshtrain
