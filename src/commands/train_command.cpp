// meshtrain train [--config FILE.ini] [--section.key VALUE ...]
#include "commands/commands.hpp"

#include "core/agreement.hpp"
#include "core/command_line.hpp"
#include "core/config.hpp"
#include "core/config_agreement.hpp"
#include "core/injected_fault.hpp"
#include "train/trainer.hpp"

#include <fmt/format.h>

namespace meshtrain {

int train_command(const Args& args, MPI_Comm comm) {
  if (wants_help(args)) {
    fmt::print(
        "usage: meshtrain train [--config FILE.ini] [--section.key VALUE ...]\n\n"
        "Keys may come from an INI file ([model] section, layers = 12) or the command line\n"
        "(--model.layers 12); the command line wins.\n\n{}",
        config_help());
    return 0;
  }
  const Config config = agree_on_input(comm, [&] {
    injected_faults();  // a misspelt fault is refused before anything runs
    return parse_config(args);
  });
  // After the parse's agreement: every rank reaches this collective, each with a valid config.
  agree_on_input(comm, [&] { require_same_config(config, comm); });
  return train(config, comm);
}

}  // namespace meshtrain
