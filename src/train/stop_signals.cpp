// Async-signal-safe stop requests.
#include "train/stop_signals.hpp"

#include <csignal>

namespace meshtrain {
namespace {

volatile std::sig_atomic_t received_signal = 0;

extern "C" void record_stop_signal(int signal) { received_signal = signal; }

}  // namespace

void install_stop_signal_handlers() {
  struct sigaction action {};
  action.sa_handler = record_stop_signal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;
  sigaction(SIGTERM, &action, nullptr);
  sigaction(SIGUSR1, &action, nullptr);
}

int stop_signal_received() { return received_signal; }

}  // namespace meshtrain
