// SIGTERM and SIGUSR1 (Slurm's warning before the time limit) ask the trainer to save and leave at
// the next step boundary; the handler only sets a flag.
#pragma once

namespace meshtrain {

void install_stop_signal_handlers();
// The signal that asked to stop, or 0.
int stop_signal_received();

}  // namespace meshtrain
