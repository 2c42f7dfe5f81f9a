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

// The ranked layouts, one line each.
std::string search_table(const std::vector<Plan>& plans, int world);

// A list, fastest first, of plan_json without per_rank (its largest peak_rss and device need instead).
nlohmann::json search_json(const std::vector<Plan>& plans);

}  // namespace meshtrain
