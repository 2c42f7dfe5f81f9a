// The files a training run writes — log.metrics, log.traffic and the files of checkpoint.dir —
// checked against the run's inputs and against what they are (io/output_guard.hpp;
// share/docs/usage.md, Outputs that never destroy a file), and the logs opened at start, so that
// neither a log pointed at the data nor one that cannot be written is found after training.
#pragma once

#include "core/config.hpp"
#include "io/metrics_writer.hpp"

#include <string>
#include <vector>

namespace meshtrain {

// Throws InputError naming the key and the file when
//   - log.metrics or log.traffic is an input of the run (the --config file, a data.train shard,
//     data.tokenizer, checkpoint.init_weights, the checkpoint.resume file, a checkpoint or `latest`
//     of checkpoint.dir: compared as files, through links), the other log, a directory, or an
//     existing file of another kind (log.metrics appends only to a metrics file, log.traffic
//     replaces only a traffic file; an empty file is either);
//   - an input or a log has a name in checkpoint.dir that its saves write, replace or delete
//     (step_*.h5, latest, their temporaries), checkpoints being resumed apart;
//   - a log is matched by the data.train glob (the next job would read it as a shard).
// Reads only: call it on every rank, each with its own view of the files, inside the agreement on
// the run's input (train/run_input.hpp). `shards`: the files data.train names.
void check_run_outputs(const Config& cfg, const std::vector<std::string>& shards);

// The logs at start, on rank 0 (`leader`; the others get a disabled writer): the directories of
// log.metrics and log.traffic created if needed and probed writable, and the metrics file opened
// for appending. InputError naming the key otherwise.
io::MetricsWriter open_run_logs(const Config& cfg, bool leader);

}  // namespace meshtrain
