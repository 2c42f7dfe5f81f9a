// A rank's counted (or predicted) traffic as JSON, the one form `log.traffic` writes and
// `meshtrain plan --json` prints (share/docs/usage.md, Communication traffic).
#pragma once

#include "parallel/counting_comm.hpp"

#include <nlohmann/json.hpp>

namespace meshtrain {

// {"dp": {"allreduce": {"calls": 3, "bytes": 4096}, …}, …}: groups and kinds without calls left out.
nlohmann::json traffic_json(const RankTraffic& traffic);

}  // namespace meshtrain
