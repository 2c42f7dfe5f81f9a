// The subcommands of the meshtrain binary (share/docs/usage.md, Commands). Each takes the arguments after its
// name and returns the process exit code; bad input throws InputError (exit 2, see core/errors.hpp).
#pragma once

#include <mpi.h>

#include <string>
#include <vector>

namespace meshtrain {

using Args = std::vector<std::string>;

int train_command(const Args& args, MPI_Comm comm);
int prepare_command(const Args& args, MPI_Comm comm);
int tokenizer_command(const Args& args, MPI_Comm comm);
int sample_command(const Args& args, MPI_Comm comm);
int inspect_command(const Args& args, MPI_Comm comm);
int plan_command(const Args& args, MPI_Comm comm);
int export_command(const Args& args, MPI_Comm comm);
int import_command(const Args& args, MPI_Comm comm);
// Without MPI: it may run inside a launcher's task before the rank does.
int blas_command(const Args& args);
// Without MPI: a batch script asks it before it starts a launcher.
int config_command(const Args& args);
// Without MPI: it simulates schedules, no model.
int schedule_command(const Args& args);

}  // namespace meshtrain
