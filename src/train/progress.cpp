// Formatting of progress lines and metrics records.
#include "train/progress.hpp"

#include "train/memory_report.hpp"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <cmath>

namespace meshtrain {
namespace {

// 12345 → "12.3 k", 1.2e9 → "1.20 G": a number and the prefix of its unit.
std::string si(double v) {
  const char* units[] = {"", "k", "M", "G", "T", "P"};
  int u = 0;
  while (std::fabs(v) >= 1000.0 && u < 5) {
    v /= 1000.0;
    ++u;
  }
  return u == 0 ? fmt::format("{:.0f} ", v) : fmt::format("{:.{}f} {}", v, v < 10 ? 2 : v < 100 ? 1 : 0, units[u]);
}

nlohmann::json moe_json(const MoeStepMetrics& m) {
  nlohmann::json blocks = nlohmann::json::array();
  for (const MoeBlockLoad& b : m.blocks) {
    blocks.push_back(
        {{"block", b.block}, {"routed", b.routed}, {"min", b.min}, {"max", b.max}, {"dropped", b.dropped}});
  }
  return {{"aux_loss", m.aux_loss}, {"z_loss", m.z_loss}, {"dropped", m.dropped}, {"blocks", blocks}};
}

}  // namespace

std::string startup_line(double since_process_start_s, double allocation_s, double initialization_s) {
  std::string line = since_process_start_s >= 0
                         ? fmt::format("start-up {:.2f} s (process start to the first step): ", since_process_start_s)
                         : std::string("start-up: ");
  line += fmt::format("state allocated in {:.2f} s", allocation_s);
  if (initialization_s >= 0) line += fmt::format(", weights initialised in {:.2f} s", initialization_s);
  return line;
}

std::string format_duration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "?";
  const long s = std::lround(seconds);
  if (s < 60) return fmt::format("{}s", s);
  if (s < 3600) return fmt::format("{}m{:02}s", s / 60, s % 60);
  return fmt::format("{}h{:02}m{:02}s", s / 3600, (s / 60) % 60, s % 60);
}

std::string progress_line(const StepReport& r) {
  const int width = int(fmt::format("{}", r.steps).size());
  std::string line =
      fmt::format("step {:>{}}/{} | loss {:.4f} | lr {:.2e} | norm {:.3f} | {}tok/s | {}FLOP/s", r.step, width, r.steps,
                  r.loss, r.lr, r.grad_norm, si(r.tokens_per_s), si(r.model_flops_per_s));
  if (r.mfu > 0) line += fmt::format(" | MFU {:.1f}%", 100.0 * r.mfu);
  if (r.moe != nullptr) {
    line += fmt::format(" | moe aux {:.3f} drop {:.1f}% load {:.2f}-{:.2f}", r.moe->aux_loss, 100.0 * r.moe->dropped,
                        r.moe->min_relative_load(), r.moe->max_relative_load());
  }
  if (r.validation) line += fmt::format(" | val loss {:.4f}", r.validation->loss);
  line += fmt::format(" | {} elapsed, ETA {}", format_duration(r.elapsed_s), format_duration(r.eta_s));
  return line;
}

nlohmann::json metrics_record(const StepReport& r) {
  nlohmann::json j;
  j["step"] = r.step;
  j["loss"] = r.loss;
  j["lr"] = r.lr;
  j["grad_norm"] = r.grad_norm;
  j["tokens"] = r.tokens;
  if (r.loss_targets > 0) j["loss_targets"] = r.loss_targets;
  j["step_time_s"] = r.step_time_s;
  j["tokens_per_s"] = r.tokens_per_s;
  j["model_flops_per_s"] = r.model_flops_per_s;
  if (r.mfu > 0) j["mfu"] = r.mfu;
  if (r.memory != nullptr) j["memory"] = memory_json(*r.memory, r.peak_rss);
  if (r.loss_scale > 0) j["loss_scale"] = r.loss_scale;
  if (r.skipped) j["skipped"] = true;
  if (r.nonfinite) j["nonfinite"] = true;  // JSON has no NaN or Inf: the loss or grad_norm reads null
  if (r.moe != nullptr) j["moe"] = moe_json(*r.moe);
  if (r.validation) {
    j["val_loss"] = r.validation->loss;
    j["val_loss_targets"] = r.validation->loss_targets;
    j["val_time_s"] = r.validation->seconds;
  }
  return j;
}

}  // namespace meshtrain
