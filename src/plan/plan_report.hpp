// How `meshtrain plan` shows a plan: a table for people, one JSON object for scripts.
#pragma once

#include "plan/planner.hpp"

#include <nlohmann/json_fwd.hpp>

#include <string>
#include <vector>

namespace meshtrain {

// The model, cluster and layout; memory per kind of rank (ranks of one pp stage and tp rank with
// equal figures share a row); the step-time split; the effective batch; whether it fits.
std::string plan_table(const Plan& plan);

// {"layout": {...}, "effective_batch": {...}, "cluster": {...}, "per_rank": [{"rank", "dp_rank",
// "tp_rank", "pp_rank", "memory": {<category>: bytes...}, "runtime_bytes", "data_bytes",
// "peak_rss", "device_bytes"}...], "step_time": {"stage", "compute_s", "tp_comm_s", "pp_comm_s",
// "dp_comm_s", "bubble_s", "total_s"}, "tokens_per_s", "model_flops_per_s", "fits", ...}
nlohmann::json plan_json(const Plan& plan);

// A LoRA run (lora.plan.cfg.model.lora enabled) beside full fine-tuning of the same model and layout
// (`full`: the plan of full_training(cfg), plan/lora_plan.hpp): the trainable parameters, the memory
// by category of each plan's neediest rank, the step time's terms, the throughput and the fit.
std::string lora_comparison_table(const Plan& full, const Plan& lora);
// plan_json(lora) with "lora": {"rank", "alpha", "rslora", "targets", "comparison": {"full": {...},
// "lora": {...}}}, each side {"trainable_parameters", "neediest_rank": {"rank", "pp_rank",
// "tp_rank", "memory", ...}, "step_time", "tokens_per_s", "needed_bytes", "fits"}.
nlohmann::json lora_comparison_json(const Plan& full, const Plan& lora);

// The ranked layouts, one line each.
std::string search_table(const std::vector<Plan>& plans, int world);

// A list, fastest first, of plan_json without per_rank (its largest peak_rss and device need instead).
nlohmann::json search_json(const std::vector<Plan>& plans);

}  // namespace meshtrain
