// Traffic counts as JSON.
#include "parallel/traffic_json.hpp"

namespace meshtrain {

nlohmann::json traffic_json(const RankTraffic& traffic) {
  nlohmann::json out = nlohmann::json::object();
  for (const auto& [group, counts] : traffic) {
    if (counts.empty()) continue;
    nlohmann::json kinds = nlohmann::json::object();
    for (int k = 0; k < collective_kinds; ++k) {
      const TrafficCount& c = counts.by_kind[k];
      if (c.calls > 0) kinds[collective_name(Collective(k))] = {{"calls", c.calls}, {"bytes", c.bytes}};
    }
    out[group] = std::move(kinds);
  }
  return out;
}

}  // namespace meshtrain
