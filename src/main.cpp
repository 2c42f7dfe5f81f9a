// meshtrain: one binary, several commands (share/docs/usage.md, Commands).
//
// MPI and Kokkos live for the whole process (but for `blas`, which asks the libraries only and
// may run inside a launcher's task before the rank does, `config`, which a batch script asks
// before it starts a launcher, and `schedule`, which simulates lists). Bad input (InputError) exits 2 with the message;
// a wait the collective watchdog gave up on exits 5 (the watchdog itself calls MPI_Abort with 5 where
// the wait cannot give up, parallel/watchdog.hpp); any other failure exits 1. With several ranks, an
// error on one rank aborts them all, so that no rank is left waiting in a collective.
#include "commands/commands.hpp"
#include "core/agreement.hpp"
#include "core/errors.hpp"
#include "core/kokkos_compat.hpp"
#include "core/watched_wait.hpp"

#include <Kokkos_Core.hpp>
#include <fmt/format.h>
#include <mpi.h>

#include <cstdio>
#include <exception>
#include <map>

namespace {

constexpr const char* usage =
    "usage: meshtrain <command> [options]\n"
    "\n"
    "commands:\n"
    "  train    [--config FILE.ini] [--section.key VALUE ...]   train a GPT-2 model\n"
    "  prepare  --text FILE... [--tokenizer TOK.model] --out SHARD.bin\n"
    "                                                           token shard: bytes, or a tokenizer's ids\n"
    "  prepare  --sft FILE.jsonl... --tokenizer T --template NAME --out X.bin [--train-on-prompt]\n"
    "                                                           fine-tuning shard: chats, loss masks\n"
    "  tokenizer train --text FILE... --vocab N --out TOK.model [--special TOKEN...]\n"
    "                                                           a SentencePiece BPE tokenizer\n"
    "  sample   --checkpoint FILE --prompt TEXT --tokens N [--template NAME [--system TEXT]]\n"
    "                                                           generate text (with its tokenizer); a chat's answer\n"
    "  plan     --world N [train keys] [--cluster PRESET] [--json] [--search]\n"
    "                                                           per-rank memory and step time of a layout\n"
    "  inspect  FILE                                            describe a checkpoint\n"
    "  export   FILE --format safetensors --out OUT             the model for other tools\n"
    "  import   DIR --out WEIGHTS.h5 --ini MODEL.ini            a Hugging Face model as initial weights\n"
    "  blas     [--openblas-coretype]                           which BLAS runs; the OPENBLAS_CORETYPE this CPU needs\n"
    "  config   [--config FILE.ini] [--section.key VALUE ...] [--get KEY ...]\n"
    "                                                           the keys train would run with\n"
    "  schedule --kind KIND --stages P --micro-batches M [--chunks V] [--costs F,B,W]\n"
    "                                                           a pipeline schedule's bubble, simulated\n"
    "\n"
    "`meshtrain <command> --help` lists a command's options. Exit codes: 0 finished, 1 failure,\n"
    "2 bad input (nothing written), 3 left early with a checkpoint saved (requeue the job), 4 a save\n"
    "failed (previous checkpoint intact), 5 a collective timed out, 6 the loss turned non-finite,\n"
    "7 a log could not be written (left with a checkpoint saved).\n";

// The codes a command returns on every rank together, having agreed on them (a failed save, a log
// that could not be written, and a non-finite stop decided from values every rank shares: share/docs/usage.md, Faults):
// no rank is left behind.
bool returned_together(int code) {
  using namespace meshtrain::exit_code;
  return code == finished || code == requeue || code == save_failed || code == nonfinite || code == log_failed;
}

int finish(int code, int world, bool agreed) {
  // A rank that fails alone cannot wait for the others to agree: take the whole job down.
  if (!agreed && !returned_together(code) && world > 1) {
    std::fflush(stdout);
    std::fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, code);
  }
  return code;
}

// A command that needs neither MPI nor Kokkos, with main's exit codes.
int run_alone(const char* name, int (*command)(const meshtrain::Args&), const meshtrain::Args& args) {
  try {
    return command(args);
  } catch (const meshtrain::InputError& e) {
    fmt::print(stderr, "meshtrain {}: error: {}\n", name, e.what());
    return meshtrain::exit_code::bad_input;
  } catch (const std::exception& e) {
    fmt::print(stderr, "meshtrain {}: failure: {}\n", name, e.what());
    return meshtrain::exit_code::failure;
  }
}

}  // namespace

int main(int argc, char** argv) {
  using namespace meshtrain;
  if (argc >= 2 && std::string(argv[1]) == "blas") return run_alone("blas", blas_command, Args(argv + 2, argv + argc));
  if (argc >= 2 && std::string(argv[1]) == "config") {
    return run_alone("config", config_command, Args(argv + 2, argv + argc));
  }
  if (argc >= 2 && std::string(argv[1]) == "schedule") {
    return run_alone("schedule", schedule_command, Args(argv + 2, argv + argc));
  }
  // Threads: background checkpoint saves (checkpoint.async) run collectives on a thread of their own.
  int threads = MPI_THREAD_SINGLE;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &threads);
  int world = 1, rank = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);

  const std::map<std::string, int (*)(const Args&, MPI_Comm)> commands = {
      {"train", train_command},   {"prepare", prepare_command}, {"tokenizer", tokenizer_command},
      {"sample", sample_command}, {"inspect", inspect_command}, {"export", export_command},
      {"import", import_command}, {"plan", plan_command}};

  int code = exit_code::finished;
  if (argc < 2 || std::string(argv[1]) == "--help" || std::string(argv[1]) == "-h") {
    if (rank == 0) std::fputs(usage, argc < 2 ? stderr : stdout);
    code = argc < 2 ? exit_code::bad_input : exit_code::finished;
  } else if (commands.find(argv[1]) == commands.end()) {
    if (rank == 0) fmt::print(stderr, "meshtrain: error: unknown command '{}'\n{}", argv[1], usage);
    code = exit_code::bad_input;
  } else {
    const Args args(argv + 2, argv + argc);
    initialize_kokkos();
    bool agreed = false;  // every rank knows of the failure, so all can leave normally
    try {
      code = commands.at(argv[1])(args, MPI_COMM_WORLD);
    } catch (const AgreedInputError& e) {
      if (e.reporter()) fmt::print(stderr, "meshtrain {}: error: {}\n", argv[1], e.what());
      code = exit_code::bad_input;
      agreed = true;
    } catch (const InputError& e) {
      fmt::print(stderr, "meshtrain {}: error: {}\n", argv[1], e.what());
      code = exit_code::bad_input;
    } catch (const CollectiveTimeout& e) {
      // The watchdog has reported the wait; this thread gave it up (NCCL's polling) and says so.
      fmt::print(stderr, "meshtrain {}: rank {}: {}\n", argv[1], rank, e.what());
      code = exit_code::collective_timeout;
    } catch (const std::exception& e) {
      fmt::print(stderr, "meshtrain {}: failure on rank {}: {}\n", argv[1], rank, e.what());
      code = exit_code::failure;
    }
    code = finish(code, world, agreed);
    Kokkos::finalize();
  }
  MPI_Finalize();
  return code;
}
