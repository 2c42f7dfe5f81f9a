// Tables and JSON of `meshtrain plan`.
#include "plan/plan_report.hpp"

#include "core/accumulation.hpp"
#include "core/byte_units.hpp"
#include "core/lora_targets.hpp"
#include "core/model_sizes.hpp"
#include "model/parameters.hpp"
#include "parallel/traffic_json.hpp"
#include "plan/fit.hpp"
#include "plan/lora_plan.hpp"
#include "plan/traffic.hpp"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <map>
#include <string_view>
#include <tuple>

namespace meshtrain {
namespace {

std::string bytes_text(double bytes) {
  if (bytes >= GiB) return fmt::format("{:.2f} GiB", bytes / GiB);
  return fmt::format("{:.1f} MiB", bytes / MiB);
}

std::string seconds_text(double s) {
  if (s >= 1) return fmt::format("{:.3f} s", s);
  if (s >= 1e-3) return fmt::format("{:.3f} ms", s * 1e3);
  return fmt::format("{:.3f} µs", s * 1e6);
}

std::string rate_text(double per_s, const char* unit) {
  if (per_s >= 1e12) return fmt::format("{:.1f} T{}", per_s / 1e12, unit);
  if (per_s >= 1e9) return fmt::format("{:.1f} G{}", per_s / 1e9, unit);
  if (per_s >= 1e6) return fmt::format("{:.1f} M{}", per_s / 1e6, unit);
  if (per_s >= 1e3) return fmt::format("{:.1f} k{}", per_s / 1e3, unit);
  return fmt::format("{:.1f} {}", per_s, unit);
}

// "0", "0 2", "0 2 4 6 … (16 ranks)": the first ranks of a kind of `count`.
std::string rank_list(const std::vector<int>& first, std::int64_t count) {
  std::string out;
  for (std::size_t i = 0; i < first.size(); ++i) out += fmt::format("{}{}", i ? " " : "", first[i]);
  if (count > std::int64_t(first.size())) out += fmt::format(" … ({} ranks)", count);
  return out;
}

int node_count(const Plan& plan) { return plan.cluster.node_of(plan.layout.world() - 1) + 1; }

std::string cluster_line(const Plan& plan) {
  const Cluster& c = plan.cluster;
  const int nodes = node_count(plan);
  const std::string placement =
      c.ranks_per_node > 0 ? fmt::format("{} node{} of {} ranks", nodes, nodes == 1 ? "" : "s", c.ranks_per_node)
                           : "all ranks on one node";
  const double peak = c.peak_flops(plan.cfg.train.precision);
  return fmt::format(
      "cluster: {} ({}); {} {} per {}, efficiency {:.2f}; {} per {}\n"
      "         links: intra-node {}/s, {}; inter-node {}/s, {}",
      c.preset, placement, rate_text(peak, "FLOP/s"), plan.cfg.train.precision,
      c.host_only ? "node (shared by its ranks)" : "GPU", c.efficiency, bytes_text(c.device_memory_bytes),
      c.host_only ? "node (RAM)" : "GPU", rate_text(c.intra.bandwidth_Bps, "B"), seconds_text(c.intra.latency_s),
      rate_text(c.inter.bandwidth_Bps, "B"), seconds_text(c.inter.latency_s));
}

// "dp 4 × tp 1 × pp 1 = 4 ranks", with "(ep 2)" after it under expert parallelism.
std::string layout_text(const Layout& l) {
  return fmt::format("dp {}{} × tp {} × pp {} = {} rank{}{}", l.dp, l.cp > 1 ? fmt::format(" × cp {}", l.cp) : "", l.tp,
                     l.pp, l.world(), l.world() == 1 ? "" : "s", l.ep > 1 ? fmt::format(" (ep {})", l.ep) : "");
}

nlohmann::json link_json(const Link& link) {
  return {{"bandwidth_Bps", link.bandwidth_Bps}, {"latency_s", link.latency_s}};
}

nlohmann::json step_json(const StepTime& st) {
  return {{"stage", st.stage},         {"compute_s", st.compute_s}, {"tp_comm_s", st.tp_comm_s},
          {"pp_comm_s", st.pp_comm_s}, {"dp_comm_s", st.dp_comm_s}, {"ep_comm_s", st.ep_comm_s},
          {"cp_comm_s", st.cp_comm_s}, {"bubble_s", st.bubble_s},   {"hidden_s", st.hidden_s},
          {"total_s", st.total_s()}};
}

nlohmann::json memory_json(const MemoryBytes& m) {
  nlohmann::json out = nlohmann::json::object();
  for (int c = 0; c < memory_categories; ++c) out[category_name(MemoryCategory(c))] = m.bytes[c];
  return out;
}

// "model: 6 layers, 6 heads, d_model 384, …: 10.84M parameters, 68.6 M FLOP per token"; llama's line
// names the family and the widths gpt2 fixes (kv heads, the SwiGLU hidden size).
// An MoE model adds its experts and both parameter counts: all that memory holds, and the share
// one token's forward passes through (compute).
// A largest seq_len: the number, or "none" when not even 1 fits.
std::string seq_len_text(int T) { return T > 0 ? std::to_string(T) : std::string("none"); }

std::string model_line(const ModelConfig& m) {
  std::string family = family_shape(m.arch).llama_keys
                           ? fmt::format("{}, {} layers, {} heads ({} kv), d_model {}, SwiGLU {}", name_of(m.arch),
                                         m.layers, m.heads, m.kv_head_count(), m.d_model, m.mlp_hidden())
                           : fmt::format("{} layers, {} heads, d_model {}", m.layers, m.heads, m.d_model);
  if (m.experts > 0) {
    family += fmt::format(", MoE {} experts of width {}, top-{}, {} of {} blocks", m.experts, m.expert_hidden_size(),
                          m.experts_per_token, m.moe_blocks(), m.layers);
    if (m.shared_experts > 0) family += fmt::format(", {} shared", m.shared_experts);
  }
  return fmt::format("model: {}, vocab {}, seq_len {}: {}, {} FLOP per token\n", family, m.vocab, m.seq_len,
                     parameter_count_text(m), rate_text(flops_per_token(ParameterLayout(m)), ""));
}

// The shape with the widths each family derives (kv heads, the MLP's hidden size), the parameter
// count and FLOPs per token: what bench/benchmark.py builds its PyTorch model from.
nlohmann::json model_json(const ModelConfig& m) {
  return {{"arch", name_of(m.arch)},
          {"layers", m.layers},
          {"heads", m.heads},
          {"kv_heads", m.kv_head_count()},
          {"d_model", m.d_model},
          {"mlp_hidden", m.mlp_hidden()},
          {"vocab", m.vocab},
          {"seq_len", m.seq_len},
          {"attention", name_of(m.attention)},
          {"parameters", parameter_count(m).value()},
          {"active_parameters", active_parameters(ParameterLayout(m))},
          {"experts", m.experts},
          {"experts_per_token", m.experts > 0 ? m.experts_per_token : 0},
          {"flops_per_token", flops_per_token(ParameterLayout(m))}};
}

// Everything of plan_json but per_rank.
nlohmann::json summary_json(const Plan& plan) {
  const Config& cfg = plan.cfg;
  const Layout& l = plan.layout;
  const long sequences = long(cfg.train.micro_batch) * l.dp * plan.accum;
  const Cluster& c = plan.cluster;
  return {
      {"model", model_json(cfg.model)},
      {"layout",
       {{"world", l.world()},
        {"dp", l.dp},
        {"tp", l.tp},
        {"pp", l.pp},
        {"ep", l.ep},
        {"cp", l.cp},
        {"sequence_parallel", cfg.model.sequence_parallel && l.tp > 1},
        {"zero", cfg.parallel.zero},
        {"schedule", name_of(cfg.parallel.schedule)},
        {"precision", name_of(cfg.train.precision)},
        {"recompute", name_of(cfg.train.recompute)}}},
      {"effective_batch",
       {{"micro_batch", cfg.train.micro_batch},
        {"dp", l.dp},
        {"accum", plan.accum},
        {"sequences", sequences},
        {"tokens", sequences * cfg.model.seq_len},
        {"line", effective_batch_line(cfg.train.micro_batch, l.dp, plan.accum, cfg.model.seq_len)}}},
      {"cluster",
       {{"preset", c.preset},
        {"ranks_per_node", c.ranks_per_node},
        {"nodes", node_count(plan)},
        {"host_only", c.host_only},
        {"device_memory_bytes", c.device_memory_bytes},
        {"peak_flops", c.peak_flops(cfg.train.precision)},
        {"efficiency", c.efficiency},
        {"intra", link_json(c.intra)},
        {"inter", link_json(c.inter)}}},
      {"step_time", step_json(plan.step)},
      {"tokens_per_step", plan.tokens_per_step},
      {"tokens_per_s", plan.tokens_per_s},
      {"model_flops_per_s", plan.model_flops_per_s},
      {"max_peak_rss", plan.max_peak_rss},
      {"max_device_bytes", plan.max_device_bytes},
      {"needed_bytes", plan.needed_bytes},
      {"capacity_bytes", plan.capacity_bytes},
      {"limiting_rank", plan.limiting_rank},
      {"fits", plan.fits},
      // The largest model.seq_len this layout fits at this micro-batch (0: not even 1).
      {"max_seq_len", largest_seq_len(cfg, plan.layout.world(), plan.cluster)},
  };
}

// The kind of rank that needs the most of its device (host-only: of its memory): the one a
// comparison of two plans shows.
const RankKind& neediest_kind(const Plan& plan) {
  const auto need = [&](const RankKind& k) {
    return plan.cluster.host_only ? k.figures.peak_rss : k.figures.device_bytes;
  };
  return *std::max_element(plan.kinds.begin(), plan.kinds.end(),
                           [&](const RankKind& a, const RankKind& b) { return need(a) < need(b); });
}

// "q_proj,k_proj,v_proj": lora.targets resolved.
std::string target_list(const ModelConfig& m) {
  std::string out;
  for (const std::string& name : lora_target_names(m)) out += (out.empty() ? "" : ",") + name;
  return out;
}

std::string count_text(double n) {
  if (n >= 1e9) return fmt::format("{:.2f}B", n / 1e9);
  if (n >= 1e6) return fmt::format("{:.2f}M", n / 1e6);
  if (n >= 1e3) return fmt::format("{:.2f}k", n / 1e3);
  return fmt::format("{:.0f}", n);
}

nlohmann::json comparison_side_json(const Plan& plan) {
  const RankPlan& r = neediest_kind(plan).figures;
  return {{"trainable_parameters", trainable_parameters(plan.cfg.model)},
          {"neediest_rank",
           {{"rank", r.rank},
            {"pp_rank", r.position.pp_rank},
            {"tp_rank", r.position.tp_rank},
            {"memory", memory_json(r.memory)},
            {"runtime_bytes", r.runtime_bytes},
            {"data_bytes", r.data_bytes},
            {"peak_rss", r.peak_rss},
            {"device_bytes", r.device_bytes}}},
          {"step_time", step_json(plan.step)},
          {"tokens_per_s", plan.tokens_per_s},
          {"needed_bytes", plan.needed_bytes},
          {"fits", plan.fits}};
}

}  // namespace

std::string plan_table(const Plan& plan) {
  const Config& cfg = plan.cfg;
  const ModelConfig& m = cfg.model;
  std::string out;
  out += model_line(m);
  out += fmt::format("training: {}, recompute {}, attention {}, zero {}, schedule {}\n", cfg.train.precision,
                     cfg.train.recompute, m.attention, cfg.parallel.zero, cfg.parallel.schedule);
  out += cluster_line(plan) + "\n";
  out += fmt::format("layout: {}\n", layout_text(plan.layout));
  out += effective_batch_line(cfg.train.micro_batch, plan.layout.dp, plan.accum, m.seq_len) + "\n\n";

  // Rows: ranks of one (pp, tp) position with equal figures.
  const bool gib = std::max(plan.max_peak_rss, plan.max_device_bytes) >= 10 * GiB;
  const double unit = gib ? GiB : MiB;
  out += fmt::format("memory per rank ({}; runtime: MPI, BLAS, Kokkos, HDF5, measured; data: mapped token shards)\n",
                     gib ? "GiB" : "MiB");
  std::string header = fmt::format("  {:<8} {:<8}", "pp tp", "ranks");
  for (int c = 0; c < memory_categories; ++c) header += fmt::format(" {:>11}", category_name(MemoryCategory(c)));
  header += fmt::format(" {:>9} {:>9} {:>9}", "runtime", "data", "peak_rss");
  if (!plan.cluster.host_only) header += fmt::format(" {:>9}", "device");
  out += header + "\n";
  for (const RankKind& kind : plan.kinds) {
    const RankPlan& r = kind.figures;
    std::string row = fmt::format("  {:<8} {:<8}", fmt::format("{} {}", r.position.pp_rank, r.position.tp_rank),
                                  rank_list(kind.first_ranks, kind.count));
    for (int c = 0; c < memory_categories; ++c) row += fmt::format(" {:>11.1f}", double(r.memory.bytes[c]) / unit);
    row += fmt::format(" {:>9.1f} {:>9.1f} {:>9.1f}", r.runtime_bytes / unit, r.data_bytes / unit, r.peak_rss / unit);
    if (!plan.cluster.host_only) row += fmt::format(" {:>9.1f}", r.device_bytes / unit);
    out += row + "\n";
  }

  const StepTime& st = plan.step;
  const bool overlaps = !plan.cluster.host_only;
  out += fmt::format("\nstep time (pipeline stage {} of {}, the slowest; alpha-beta model, {})\n", st.stage,
                     plan.layout.pp,
                     overlaps ? "less what a device hides behind the compute" : "nothing overlapped on host ranks");
  const double total = st.total_s();
  for (auto [name, s] :
       {std::pair{"compute", st.compute_s}, std::pair{"tp comm", st.tp_comm_s}, std::pair{"pp comm", st.pp_comm_s},
        std::pair{"dp comm", st.dp_comm_s}, std::pair{"ep comm", st.ep_comm_s}, std::pair{"cp comm", st.cp_comm_s},
        std::pair{"bubble", st.bubble_s}, std::pair{"hidden", -st.hidden_s}}) {
    if (std::string_view(name) == "ep comm" && plan.layout.ep == 1) continue;  // no expert parallelism: no line
    if (std::string_view(name) == "cp comm" && plan.layout.cp == 1) continue;  // nor context parallelism
    if (std::string_view(name) == "hidden" && !overlaps) continue;
    const std::string text = s < 0 ? fmt::format("-{}", seconds_text(-s)) : seconds_text(s);
    out += fmt::format("  {:<9} {:>12} {:>6.1f} %\n", name, text, total > 0 ? 100 * s / total : 0);
  }
  out += fmt::format("  {:<9} {:>12}   {}/s, {} model\n", "total", seconds_text(total),
                     rate_text(plan.tokens_per_s, "tok"), rate_text(plan.model_flops_per_s, "FLOP/s"));

  const Cluster& c = plan.cluster;
  std::string where;
  if (c.host_only) {
    const int first = plan.limiting_rank;
    const int count = c.ranks_on_node(first, plan.layout.world());
    where = fmt::format("node {} (ranks {}-{}, token pages counted once)", c.node_of(first), first, first + count - 1);
  } else {
    where = fmt::format("rank {}", plan.limiting_rank);
  }
  out += fmt::format("\nfits: {} — {} needs {} of {}\n", plan.fits ? "yes" : "no", where,
                     bytes_text(double(plan.needed_bytes)), bytes_text(double(plan.capacity_bytes)));
  out += fmt::format("largest seq_len that fits this layout at micro_batch {}: {}\n", cfg.train.micro_batch,
                     seq_len_text(largest_seq_len(cfg, plan.layout.world(), plan.cluster)));
  return out;
}

nlohmann::json plan_json(const Plan& plan) {
  nlohmann::json out = summary_json(plan);
  nlohmann::json ranks = nlohmann::json::array();
  // A rank's traffic follows from its stage, tp rank and ep rank (plan/traffic.hpp): predicted once for each.
  std::map<std::tuple<int, int, int>, nlohmann::json> traffic;
  for (const RankPlan& r : plan.ranks) {
    const GridPosition& at = r.position;
    auto it = traffic.find({at.pp_rank, at.tp_rank, at.ep_rank});
    if (it == traffic.end()) {
      it = traffic
               .emplace(std::tuple{at.pp_rank, at.tp_rank, at.ep_rank},
                        traffic_json(predicted_traffic(plan.cfg, plan.layout, at)))
               .first;
    }
    ranks.push_back({{"rank", r.rank},
                     {"dp_rank", r.position.dp_rank},
                     {"tp_rank", r.position.tp_rank},
                     {"pp_rank", r.position.pp_rank},
                     {"cp_rank", r.position.cp_rank},
                     {"memory", memory_json(r.memory)},
                     {"runtime_bytes", r.runtime_bytes},
                     {"data_bytes", r.data_bytes},
                     {"peak_rss", r.peak_rss},
                     {"device_bytes", r.device_bytes},
                     // What one step sends, as `log.traffic` counts it (plan/traffic.hpp).
                     {"traffic", it->second}});
  }
  out["per_rank"] = std::move(ranks);
  return out;
}

std::string search_table(const std::vector<Plan>& plans, int world) {
  std::string out;
  if (plans.empty()) {
    return fmt::format(
        "no layout of {} ranks fits the model and the batch (tp must divide heads, pp at most layers, "
        "global_batch a multiple of micro_batch × dp)\n",
        world);
  }
  const Plan& first = plans.front();
  out += cluster_line(first) + "\n";
  out += fmt::format(
      "{} layout{} of {} rank{}, fastest first (step time: alpha-beta model; memory: the largest need "
      "against one {})\n",
      plans.size(), plans.size() == 1 ? "" : "s", world, world == 1 ? "" : "s",
      first.cluster.host_only ? "node" : "GPU");
  // Every term of the step's total has its column; ep comm only under expert parallelism (the
  // search keeps the config's ep, so every row has it or none does), cp comm where a layout has cp > 1.
  const bool ep = first.layout.ep > 1;
  const bool cp = std::any_of(plans.begin(), plans.end(), [](const Plan& p) { return p.layout.cp > 1; });
  const bool overlaps = !first.cluster.host_only;  // a hidden column: what a device hides (StepTime::hidden_s)
  std::string header =
      fmt::format("  {:>3} {:>5} {:>3} {:>4} {:>3} {:>4} {:>6} {:>6} {:>11} {:>11} {:>11} {:>11} {:>11}", "#", "dp",
                  "cp", "tp", "sp", "pp", "sched", "accum", "step", "compute", "tp comm", "pp comm", "dp comm");
  if (ep) header += fmt::format(" {:>11}", "ep comm");
  if (cp) header += fmt::format(" {:>11}", "cp comm");
  header += fmt::format(" {:>11}", "bubble");
  if (overlaps) header += fmt::format(" {:>11}", "hidden");
  out += header + fmt::format(" {:>11} {:>11} {:>9}  {}\n", "tok/s", "needs", "max T", "fits");
  int i = 0;
  for (const Plan& p : plans) {
    const StepTime& st = p.step;
    std::string row = fmt::format(
        "  {:>3} {:>5} {:>3} {:>4} {:>3} {:>4} {:>6} {:>6} {:>11} {:>11} {:>11} {:>11} {:>11}", ++i, p.layout.dp,
        p.layout.cp, p.layout.tp, p.cfg.model.sequence_parallel && p.layout.tp > 1 ? "yes" : "-", p.layout.pp,
        p.layout.pp > 1 ? name_of(p.cfg.parallel.schedule) : "-", p.accum, seconds_text(st.total_s()),
        seconds_text(st.compute_s), seconds_text(st.tp_comm_s), seconds_text(st.pp_comm_s), seconds_text(st.dp_comm_s));
    if (ep) row += fmt::format(" {:>11}", seconds_text(st.ep_comm_s));
    if (cp) row += fmt::format(" {:>11}", seconds_text(st.cp_comm_s));
    row += fmt::format(" {:>11}", seconds_text(st.bubble_s));
    if (overlaps) row += fmt::format(" {:>11}", fmt::format("-{}", seconds_text(st.hidden_s)));
    out += row + fmt::format(" {:>11} {:>11} {:>9}  {}\n", rate_text(p.tokens_per_s, ""),
                             bytes_text(double(p.needed_bytes)), seq_len_text(largest_seq_len(p.cfg, world, p.cluster)),
                             p.fits ? "yes" : "no");
  }
  return out;
}

nlohmann::json search_json(const std::vector<Plan>& plans) {
  nlohmann::json out = nlohmann::json::array();
  for (const Plan& p : plans) out.push_back(summary_json(p));
  return out;
}

std::string lora_comparison_table(const Plan& full, const Plan& lora) {
  const LoraConfig& l = lora.cfg.model.lora;
  std::string out = fmt::format(
      "LoRA against full fine-tuning of the same model and layout (lora.rank {}, alpha {:g}{}, targets {})\n", l.rank,
      l.alpha, l.rslora ? ", rsLoRA" : "", target_list(lora.cfg.model));
  const RankPlan& f = neediest_kind(full).figures;
  const RankPlan& a = neediest_kind(lora).figures;
  const auto row = [&](const std::string& name, const std::string& full_text, const std::string& lora_text) {
    out += fmt::format("  {:<22} {:>16} {:>16}\n", name, full_text, lora_text);
  };
  row("", "full", "LoRA");
  const double total = double(full_trainable_parameters(full.cfg.model));
  const double trained = double(lora_trainable_parameters(lora.cfg.model));
  row("trainable parameters", count_text(total), count_text(trained));
  row("  share of the model", "100 %", fmt::format("{:.3f} %", 100 * trained / total));
  const bool gib = std::max(f.device_bytes, f.peak_rss) >= 10 * GiB;
  const double unit = gib ? GiB : MiB;
  const auto amount = [&](double bytes) { return fmt::format("{:.2f}", bytes / unit); };
  row(fmt::format("memory ({}) of rank", gib ? "GiB" : "MiB"),
      fmt::format("{} (pp {} tp {})", f.rank, f.position.pp_rank, f.position.tp_rank),
      fmt::format("{} (pp {} tp {})", a.rank, a.position.pp_rank, a.position.tp_rank));
  for (int c = 0; c < memory_categories; ++c) {
    row(fmt::format("  {}", category_name(MemoryCategory(c))), amount(double(f.memory.bytes[c])),
        amount(double(a.memory.bytes[c])));
  }
  row("  runtime", amount(double(f.runtime_bytes)), amount(double(a.runtime_bytes)));
  row("  data", amount(double(f.data_bytes)), amount(double(a.data_bytes)));
  row("  peak_rss", amount(double(f.peak_rss)), amount(double(a.peak_rss)));
  if (!full.cluster.host_only) row("  device", amount(double(f.device_bytes)), amount(double(a.device_bytes)));
  row("step time (slowest stage)", fmt::format("stage {}", full.step.stage), fmt::format("stage {}", lora.step.stage));
  const StepTime &sf = full.step, &sa = lora.step;
  for (auto [name, x, y] :
       {std::tuple{"compute", sf.compute_s, sa.compute_s}, std::tuple{"tp comm", sf.tp_comm_s, sa.tp_comm_s},
        std::tuple{"pp comm", sf.pp_comm_s, sa.pp_comm_s}, std::tuple{"dp comm", sf.dp_comm_s, sa.dp_comm_s},
        std::tuple{"ep comm", sf.ep_comm_s, sa.ep_comm_s}, std::tuple{"cp comm", sf.cp_comm_s, sa.cp_comm_s},
        std::tuple{"bubble", sf.bubble_s, sa.bubble_s}}) {
    if (std::string_view(name) == "ep comm" && full.layout.ep == 1) continue;
    if (std::string_view(name) == "cp comm" && full.layout.cp == 1) continue;
    row(fmt::format("  {}", name), seconds_text(x), seconds_text(y));
  }
  if (!full.cluster.host_only) {
    row("  hidden", fmt::format("-{}", seconds_text(sf.hidden_s)), fmt::format("-{}", seconds_text(sa.hidden_s)));
  }
  row("  total", seconds_text(sf.total_s()), seconds_text(sa.total_s()));
  row("tokens per second", rate_text(full.tokens_per_s, "tok/s"), rate_text(lora.tokens_per_s, "tok/s"));
  row("fits", fmt::format("{} ({})", full.fits ? "yes" : "no", bytes_text(double(full.needed_bytes))),
      fmt::format("{} ({})", lora.fits ? "yes" : "no", bytes_text(double(lora.needed_bytes))));
  return out;
}

nlohmann::json lora_comparison_json(const Plan& full, const Plan& lora) {
  const LoraConfig& l = lora.cfg.model.lora;
  nlohmann::json out = plan_json(lora);
  out["lora"] = {{"rank", l.rank},
                 {"alpha", l.alpha},
                 {"rslora", l.rslora},
                 {"targets", lora_target_names(lora.cfg.model)},
                 {"comparison", {{"full", comparison_side_json(full)}, {"lora", comparison_side_json(lora)}}}};
  return out;
}

}  // namespace meshtrain
