// meshtrain plan [--config FILE.ini] [--section.key VALUE ...] --world N [--cluster PRESET] [...]
//     [--json] [--search]
//
// Per-rank memory and step-time estimates for a layout, without training (src/plan/). Takes every
// key of `train` plus the world size and the cluster description; nothing is allocated or written.
// With [lora] keys the plan is the LoRA run's, and full fine-tuning of the same layout is put beside it.
#include "commands/commands.hpp"

#include "core/agreement.hpp"
#include "core/command_line.hpp"
#include "core/config.hpp"
#include "core/errors.hpp"
#include "core/mpi_check.hpp"
#include "plan/cluster.hpp"
#include "plan/fit.hpp"
#include "plan/plan_report.hpp"
#include "plan/planner.hpp"

#include <boost/program_options.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <optional>
#include <set>
#include <sstream>

namespace po = boost::program_options;

namespace meshtrain {
namespace {

constexpr const char* plan_usage =
    "meshtrain plan [--config FILE.ini] [--section.key VALUE ...] --world N [--cluster PRESET] "
    "[--ranks-per-node N] [--device-memory-gib X] [--peak-tflops X] [--efficiency X] [--intra-bw-gbs X] "
    "[--intra-latency-us X] [--inter-bw-gbs X] [--inter-latency-us X] [--json] [--search] [--max-micro-batch]";

struct PlanOptions {
  int world = 0;
  std::string cluster = "local";
  std::optional<int> ranks_per_node;
  std::optional<double> device_memory_gib, peak_tflops, efficiency, intra_bw_gbs, intra_latency_us, inter_bw_gbs,
      inter_latency_us;
  bool json = false;
  bool search = false;
  bool max_micro_batch = false;
};

struct PlanRequest {
  Config cfg;
  PlanOptions options;
  Cluster cluster;
};

std::string preset_list() {
  std::string out;
  for (const auto& n : cluster_preset_names()) out += (out.empty() ? "" : ", ") + n;
  return out;
}

// The plan command's own options (the train keys are config.cpp's).
po::options_description plan_options(PlanOptions& o, std::string& cluster_text) {
  po::options_description options("meshtrain plan options");
  options.add_options()("world", po::value<int>(&o.world), "number of ranks (required)")(
      "cluster", po::value<std::string>(&cluster_text)->default_value("local"),
      fmt::format("cluster preset: {}", preset_list()).c_str())(
      "ranks-per-node", po::value<int>(), "ranks on one node (0: all on one node; default: the preset's)")(
      "device-memory-gib", po::value<double>(), "GiB of one GPU, or of one node's RAM on a host-only cluster")(
      "peak-tflops", po::value<double>(), "peak TFLOP/s of one GPU (host-only: one node) in train.precision")(
      "efficiency", po::value<double>(), "fraction of the peak the compute reaches, in (0, 1]")(
      "intra-bw-gbs", po::value<double>(), "bandwidth between ranks of one node, GB/s (collective bus bandwidth)")(
      "intra-latency-us", po::value<double>(), "latency between ranks of one node, µs")(
      "inter-bw-gbs", po::value<double>(), "bandwidth between nodes per rank, GB/s")(
      "inter-latency-us", po::value<double>(), "latency between nodes, µs")(
      "json", po::bool_switch(&o.json), "print one JSON object (with --search: a list)")(
      "search", po::bool_switch(&o.search), "rank every (dp, tp, pp) layout of --world by predicted step time")(
      "max-micro-batch", po::bool_switch(&o.max_micro_batch),
      "plan the largest train.micro_batch that fits (accum kept), the trainer's own rule");
  return options;
}

// Splits args into the plan command's own options and the train keys.
std::pair<Args, Args> split_args(const Args& args, const po::options_description& own) {
  Args mine, rest;
  for (std::size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a.rfind("--", 0) == 0) {
      const std::string name = a.substr(2, a.find('=') == std::string::npos ? std::string::npos : a.find('=') - 2);
      const po::option_description* d = own.find_nothrow(name, false);
      if (d != nullptr) {
        mine.push_back(a);
        const bool takes_value = d->semantic()->min_tokens() > 0;  // not a switch like --json
        if (takes_value && a.find('=') == std::string::npos && i + 1 < args.size()) mine.push_back(args[++i]);
        continue;
      }
    }
    rest.push_back(a);
  }
  return {mine, rest};
}

void require_positive(const char* option, std::optional<double> v) {
  if (v && (!std::isfinite(*v) || *v <= 0)) input_error("--{} = {} is invalid: it must be a number > 0", option, *v);
}

PlanRequest parse_plan(const Args& args) {
  PlanRequest req;
  PlanOptions& o = req.options;
  std::string cluster_text;
  const po::options_description own = plan_options(o, cluster_text);
  const auto [mine, rest] = split_args(args, own);
  po::variables_map vm;
  try {
    po::store(parse_command_line(mine, own, plan_usage), vm);
    po::notify(vm);
  } catch (const po::error& e) {
    input_error("{} (usage: {})", e.what(), plan_usage);
  }
  auto get = [&](const char* name, auto& field) {
    using T = typename std::decay_t<decltype(field)>::value_type;
    if (vm.count(name)) field = vm[name].as<T>();
  };
  get("ranks-per-node", o.ranks_per_node);
  get("device-memory-gib", o.device_memory_gib);
  get("peak-tflops", o.peak_tflops);
  get("efficiency", o.efficiency);
  get("intra-bw-gbs", o.intra_bw_gbs);
  get("intra-latency-us", o.intra_latency_us);
  get("inter-bw-gbs", o.inter_bw_gbs);
  get("inter-latency-us", o.inter_latency_us);
  o.cluster = cluster_text;

  if (!vm.count("world")) input_error("--world is missing: give the number of ranks to plan for, e.g. --world 8");
  if (o.world < 1) input_error("--world = {} is invalid: it must be a positive integer", o.world);
  if (o.world > max_plan_world) {
    input_error("--world = {} is too large: plan plans for at most {} ranks", o.world, max_plan_world);
  }
  if (o.ranks_per_node && *o.ranks_per_node < 0) {
    input_error("--ranks-per-node = {} is invalid: it must be >= 1 (0: all ranks on one node)", *o.ranks_per_node);
  }
  require_positive("device-memory-gib", o.device_memory_gib);
  require_positive("peak-tflops", o.peak_tflops);
  require_positive("intra-bw-gbs", o.intra_bw_gbs);
  require_positive("inter-bw-gbs", o.inter_bw_gbs);
  if (o.efficiency && (!std::isfinite(*o.efficiency) || *o.efficiency <= 0 || *o.efficiency > 1)) {
    input_error("--efficiency = {} is invalid: it must lie in (0, 1]", *o.efficiency);
  }
  for (auto [name, v] :
       {std::pair{"intra-latency-us", o.intra_latency_us}, std::pair{"inter-latency-us", o.inter_latency_us}}) {
    if (v && (!std::isfinite(*v) || *v < 0)) input_error("--{} = {} is invalid: it must be a number >= 0", name, *v);
  }

  Cluster& c = req.cluster;
  c = cluster_preset(o.cluster);
  if (o.ranks_per_node) c.ranks_per_node = *o.ranks_per_node;
  if (o.device_memory_gib) c.device_memory_bytes = *o.device_memory_gib * 1024.0 * 1024.0 * 1024.0;
  if (o.peak_tflops) c.peak_flops_fp32 = c.peak_flops_16bit = *o.peak_tflops * 1e12;
  if (o.efficiency) c.efficiency = *o.efficiency;
  if (o.intra_bw_gbs) c.intra.bandwidth_Bps = *o.intra_bw_gbs * 1e9;
  if (o.intra_latency_us) c.intra.latency_s = *o.intra_latency_us * 1e-6;
  if (o.inter_bw_gbs) c.inter.bandwidth_Bps = *o.inter_bw_gbs * 1e9;
  if (o.inter_latency_us) c.inter.latency_s = *o.inter_latency_us * 1e-6;

  try {
    req.cfg = parse_config(rest);
  } catch (const InputError& e) {
    // The train keys' messages point at `meshtrain train --help`; plan's help lists them too.
    std::string what = e.what();
    const std::string train_help = "`meshtrain train --help`";
    if (const auto at = what.find(train_help); at != std::string::npos) {
      what.replace(at, train_help.size(), "`meshtrain plan --help`");
    }
    throw InputError(what);
  }
  // train.memory_gib is what train's fit check allows; --device-memory-gib, when given, overrides it.
  if (!o.device_memory_gib && req.cfg.train.memory_gib > 0) {
    c.device_memory_bytes = req.cfg.train.memory_gib * 1024.0 * 1024.0 * 1024.0;
  }
  return req;
}

}  // namespace

int plan_command(const Args& args, MPI_Comm comm) {
  if (wants_help(args)) {
    PlanOptions o;
    std::string cluster_text;
    std::ostringstream own;
    own << plan_options(o, cluster_text);
    fmt::print(
        "usage: {}\n\nPredicts per-rank memory and the step time of a layout without training; takes every\n"
        "key of `meshtrain train` (below) plus the world size and a cluster description (a preset\n"
        "that the options override). See share/docs/usage.md, `meshtrain plan`.\n\n{}\n{}",
        plan_usage, own.str(), config_help());
    return 0;
  }
  const int rank = mpi::rank_of(comm);
  const PlanRequest req = agree_on_input(comm, [&] { return parse_plan(args); });
  const PlanOptions& o = req.options;
  std::string text;
  if (o.search && o.max_micro_batch) input_error("--max-micro-batch plans one layout: it cannot go with --search");
  if (o.search) {
    const std::vector<Plan> plans = search_layouts(req.cfg, req.cluster, o.world);
    text = o.json ? search_json(plans).dump(2) + "\n" : search_table(plans, o.world);
  } else {
    // The table prints kinds of ranks, --json every rank: only --json needs every rank's figures.
    const RankCoverage coverage = o.json ? RankCoverage::every : RankCoverage::ends;
    const Plan plan = agree_on_input(comm, [&] {
      if (!o.max_micro_batch) return make_plan(req.cfg, o.world, req.cluster, coverage);
      const int micro = largest_micro_batch(req.cfg, o.world, req.cluster);
      if (micro == 0) {
        input_error(
            "no micro-batch fits: not even train.micro_batch 1 fits {} ({} rank{}); reduce model.* or plan "
            "for more memory",
            req.cluster.preset, o.world, o.world == 1 ? "" : "s");
      }
      const int dp = Topology::resolve(req.cfg.parallel, req.cfg.model, o.world).dp;
      return make_plan(with_micro_batch(req.cfg, dp, micro), o.world, req.cluster, coverage);
    });
    if (!plan.cfg.model.lora.enabled()) {
      text = o.json ? plan_json(plan).dump(2) + "\n" : plan_table(plan);
    } else {
      // LoRA: full fine-tuning of the same model, layout and micro-batch beside it.
      const Plan full = full_training_plan(plan, coverage);
      text = o.json ? lora_comparison_json(full, plan).dump(2) + "\n"
                    : plan_table(plan) + "\n" + lora_comparison_table(full, plan);
    }
  }
  if (rank == 0) fmt::print("{}", text);
  return 0;
}

}  // namespace meshtrain
