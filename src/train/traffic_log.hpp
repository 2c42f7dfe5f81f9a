// `log.traffic` (share/docs/usage.md, Communication traffic): every group's calls and bytes by kind
// in the run's last step, counted on every rank by a counting Comm (parallel/counting_comm.hpp) and
// written by rank 0 as JSON, in the form `meshtrain plan --json` predicts them (plan/traffic.hpp).
//
// The last step's counts, not the job's totals over its steps: set-up moves data too (ZeRO gathers
// the weights after initialising or loading them), and a checkpoint save between steps might; the
// counts start again at every step, so what is written is one step's traffic, which is the same in
// every step of a run (except an fp16 step whose update is skipped: no weights are gathered then).
#pragma once

#include "parallel/counting_comm.hpp"
#include "parallel/topology.hpp"
#include "parallel/traffic_json.hpp"

#include <mpi.h>
#include <nlohmann/json.hpp>

#include <memory>
#include <string>

namespace meshtrain {

class TrafficLog {
 public:
  // `path` empty: nothing is counted or written.
  explicit TrafficLog(std::string path) : path_(std::move(path)) {}

  // The group's Comm, counted under `group` when the log is on.
  std::unique_ptr<Comm> counted(const std::string& group, std::unique_ptr<Comm> comm);
  // A step begins: the counts start from zero.
  void begin_step();
  // A step has ended; after the run's last one (`last`, the same on every rank) rank 0 writes every
  // rank's counts with its grid position, whole or not at all (io::LogWriteFailed on rank 0, after
  // the collectives, when it cannot). Collective over `world`.
  void end_step(MPI_Comm world, const GridPosition& position, bool last);

 private:
  std::string path_;
  RankTraffic counts_;  // a map: the counting Comms keep references into it
};

}  // namespace meshtrain
