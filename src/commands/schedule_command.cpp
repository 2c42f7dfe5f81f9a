// meshtrain schedule: the pipeline schedule simulator (parallel/pipeline_schedule.hpp) for any stages, micro-batches,
// chunks and schedule kind, with per-operation costs F, B, W: the makespan, each stage's idle time, the idle
// fraction beside its closed form, and each stage's activation peak in micro-batches; the costs are a micro-batch's
// through one stage's blocks, whatever the kind, so kinds compare at equal costs. Runs without MPI and Kokkos
// (main.cpp): it computes lists, not models. Lists of gpipe and 1f1b run under synchronous sends (what their
// executor meets at worst), those of interleaved and zb-h1 under eager sends (what they are made for).
#include "commands/commands.hpp"

#include "core/command_line.hpp"
#include "parallel/pipeline_schedule.hpp"

#include <boost/program_options.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <array>
#include <cmath>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

namespace po = boost::program_options;

namespace meshtrain {
namespace {

constexpr std::array kinds = {"gpipe", "1f1b", "interleaved", "zb-h1"};

struct Request {
  std::string kind;
  int stages = 0, micros = 0, chunks = 1;
  ScheduleCosts costs{1.0, 1.0, 1.0};
};

ScheduleCosts parse_costs(const std::string& text) {
  std::vector<double> values;
  bool numbers = true;
  std::istringstream in(text);
  for (std::string part; std::getline(in, part, ',');) {
    std::size_t used = 0;
    double v = -1;
    try {
      v = std::stod(part, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    numbers = numbers && used == part.size() && v >= 0 && std::isfinite(v);
    values.push_back(v);
  }
  if (!numbers || values.size() != 3) {
    input_error(
        "--costs {} is invalid: give three finite numbers ≥ 0, F,B,W (forward, the input's gradient, the "
        "weights' gradients), say 1,1,1",
        text);
  }
  return {values[0], values[1], values[2]};
}

void check(const Request& r) {
  if (std::find(kinds.begin(), kinds.end(), r.kind) == kinds.end()) {
    input_error("--kind {} is not a schedule: choose gpipe, 1f1b, interleaved or zb-h1", r.kind);
  }
  if (r.stages < 1) input_error("--stages {} is invalid: give 1 or more pipeline stages", r.stages);
  if (r.micros < 1) input_error("--micro-batches {} is invalid: give 1 or more micro-batches a step", r.micros);
  if (r.chunks < 1) input_error("--chunks {} is invalid: give 1 or more model chunks a stage", r.chunks);
  if (r.kind != "interleaved" && r.chunks != 1) {
    input_error("--chunks {} is for --kind interleaved; --kind {} holds one chunk a stage", r.chunks, r.kind);
  }
  if (r.kind == "interleaved" && r.micros % r.stages != 0) {
    input_error(
        "--kind interleaved runs micro-batches in groups of the stages: --micro-batches {} is not a multiple "
        "of --stages {} (say {})",
        r.micros, r.stages, (r.micros / r.stages + 1) * r.stages);
  }
}

std::vector<Action> stage_list(const Request& r, int stage) {
  if (r.kind == "gpipe") return gpipe_schedule(r.stages, stage, r.micros);
  if (r.kind == "1f1b") return one_f_one_b_schedule(r.stages, stage, r.micros);
  if (r.kind == "interleaved") return interleaved_schedule(r.stages, stage, r.micros, r.chunks);
  return zero_bubble_h1_schedule(r.stages, stage, r.micros);
}

// The idle fraction the closed forms give, where one holds (parallel/pipeline_schedule.hpp).
std::optional<double> closed_form(const Request& r, double makespan) {
  const int p = r.stages, m = r.micros;
  if (r.kind == "gpipe" || r.kind == "1f1b") return ideal_bubble_fraction(p, m);
  if (r.kind == "interleaved") return interleaved_bubble_fraction(p, m, r.chunks);
  if (m < p || r.costs.backward_weight > r.costs.forward || makespan <= 0) return std::nullopt;
  return zero_bubble_h1_idle(p, r.costs) / makespan;
}

}  // namespace

int schedule_command(const Args& args) {
  Request r;
  std::string costs = "1,1,1";
  bool json = false, lists = false;
  po::options_description options(
      "meshtrain schedule: a pipeline schedule's bubble and activations, simulated for per-operation costs");
  options.add_options()("kind", po::value(&r.kind)->required(), "gpipe, 1f1b, interleaved or zb-h1")(
      "stages", po::value(&r.stages)->required(), "pipeline stages p")(
      "micro-batches", po::value(&r.micros)->required(), "micro-batches a step m")(
      "chunks", po::value(&r.chunks)->default_value(1), "interleaved: model chunks a stage holds v")(
      "costs", po::value(&costs)->default_value(costs),
      "F,B,W: a micro-batch's forward through a stage, its input's gradient, its weights' gradients (a whole "
      "backward costs B + W; an interleaved chunk 1/v of each)")(
      "lists", po::bool_switch(&lists), "print each stage's action list")("json", po::bool_switch(&json),
                                                                          "one JSON object instead of the table");
  constexpr const char* usage =
      "meshtrain schedule --kind KIND --stages P --micro-batches M [--chunks V] [--costs F,B,W] [--lists] [--json]";
  if (print_help_if_asked(args, options, usage)) return 0;
  parse_options(args, options, usage);
  r.costs = parse_costs(costs);
  check(r);

  std::vector<std::vector<Action>> all;
  for (int s = 0; s < r.stages; ++s) all.push_back(stage_list(r, s));
  const bool eager = r.kind == "interleaved" || r.kind == "zb-h1";
  // The costs are a micro-batch's through a stage's blocks: each of its v chunks holds 1/v of them.
  const double v = r.chunks;
  const ScheduleCosts per_list{r.costs.forward / v, r.costs.backward_input / v, r.costs.backward_weight / v};
  const ScheduleTiming t = simulate_schedule(all, per_list, eager ? SendSemantics::eager : SendSemantics::synchronous);
  const std::optional<double> expected = closed_form(r, t.makespan);
  // A stage's peak in micro-batches: an interleaved chunk holds 1/v of the stage's blocks.
  std::vector<double> peaks;
  for (const std::vector<Action>& list : all) peaks.push_back(double(peak_live_activations(list)) / r.chunks);

  if (json) {
    nlohmann::json out = {{"kind", r.kind},
                          {"stages", r.stages},
                          {"micro_batches", r.micros},
                          {"chunks", r.chunks},
                          {"costs",
                           {{"forward", r.costs.forward},
                            {"backward_input", r.costs.backward_input},
                            {"backward_weight", r.costs.backward_weight}}},
                          {"sends", eager ? "eager" : "synchronous"},
                          {"makespan", t.makespan},
                          {"idle_fraction", t.idle_fraction},
                          {"closed_form_idle_fraction", expected ? nlohmann::json(*expected) : nlohmann::json()},
                          {"per_stage", nlohmann::json::array()}};
    for (int s = 0; s < r.stages; ++s) {
      out["per_stage"].push_back(
          {{"stage", s}, {"idle", t.stage_idle[std::size_t(s)]}, {"peak_activations", peaks[std::size_t(s)]}});
    }
    fmt::print("{}\n", out.dump());
    return 0;
  }
  fmt::print("schedule {}: {} stages, {} micro-batches{}, costs F {} B {} W {} ({} sends)\n", r.kind, r.stages,
             r.micros, r.kind == "interleaved" ? fmt::format(", {} chunks a stage", r.chunks) : std::string(),
             r.costs.forward, r.costs.backward_input, r.costs.backward_weight, eager ? "eager" : "synchronous");
  fmt::print("makespan {:.6g}, idle {:.4f} of the stages' time{}\n", t.makespan, t.idle_fraction,
             expected ? fmt::format(" (closed form {:.4f})", *expected) : std::string(" (no closed form)"));
  fmt::print("{:>6} {:>12} {:>22}\n", "stage", "idle", "peak micro-batches");
  for (int s = 0; s < r.stages; ++s) {
    fmt::print("{:>6} {:>12.6g} {:>22.6g}\n", s, t.stage_idle[std::size_t(s)], peaks[std::size_t(s)]);
  }
  if (lists) {
    for (int s = 0; s < r.stages; ++s) {
      fmt::print("stage {}: {}\n", s, to_string(all[std::size_t(s)]));
    }
  }
  return 0;
}

}  // namespace meshtrain
