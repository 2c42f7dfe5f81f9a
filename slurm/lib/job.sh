# shellcheck shell=bash
# The machinery of slurm/train.sbatch, sourced by it: the binary, the keys the script acts on, the
# launcher, each rank's GPU and BLAS binding, the run with Slurm's signals passed to the ranks, and
# the requeue decision. Every message starts "train.sbatch:"; train.sbatch's header documents the
# environment variables read here.

say() { echo "train.sbatch: $*"; }
die() {
  echo "train.sbatch: error: $1" >&2
  exit "${2:-2}"
}

# sbatch runs a copy of train.sbatch from Slurm's spool directory: the checkout it came from is the
# submitted path that scontrol reports, or the submit directory.
find_binary() {
  local candidates=() submitted=""
  if [[ -n ${MESHTRAIN_BIN:-} ]]; then
    [[ -x $MESHTRAIN_BIN ]] || die "MESHTRAIN_BIN=$MESHTRAIN_BIN is not an executable"
    echo "$MESHTRAIN_BIN"
    return
  fi
  if [[ -n ${SLURM_JOB_ID:-} ]]; then
    submitted=$(scontrol show job "$SLURM_JOB_ID" 2>/dev/null | sed -n 's/^ *Command=\([^ ]*\).*/\1/p' | head -n 1)
  fi
  [[ -n $submitted ]] || submitted=$0
  local from
  from=$(dirname "$submitted")
  candidates+=("$from/../build/release/bin/meshtrain")
  # An installed copy, PREFIX/share/meshtrain/slurm/train.sbatch: PREFIX/bin/meshtrain.
  if [[ $(cd "$from" 2>/dev/null && pwd) == */share/meshtrain/slurm ]]; then
    candidates+=("$from/../../../bin/meshtrain")
  fi
  [[ -n ${SLURM_SUBMIT_DIR:-} ]] && candidates+=("$SLURM_SUBMIT_DIR/build/release/bin/meshtrain")
  local c
  for c in "${candidates[@]}"; do
    if [[ -x $c ]]; then
      realpath "$c"
      return
    fi
  done
  command -v meshtrain ||
    die "no meshtrain binary: set MESHTRAIN_BIN, build the checkout (cmake --preset release &&
  cmake --build build/release) or put meshtrain on PATH"
}

# The keys, for `meshtrain train` and `meshtrain config` (sets `keys`): CONFIG.ini becomes
# --config CONFIG.ini, the rest pass as they are. Then the keys this script acts on (sets
# checkpoint_dir, steps, resume) as the run will see them (defaults, the INI, the command line;
# share/docs/usage.md, Commands): `meshtrain config` parses and checks them with the trainer's own
# code, without MPI. Bad input ends the job here, as the run would have.
resolve_keys() {
  keys=()
  if (($# > 0)) && [[ $1 != --* ]]; then
    keys+=(--config "$1")
    shift
  fi
  keys+=("$@")
  local rc=0 resolved values
  # shellcheck disable=SC2154  # bin: set by train.sbatch from find_binary
  resolved=$("$bin" config "${keys[@]}" --get checkpoint.dir train.steps checkpoint.resume) || rc=$?
  if ((rc != 0)); then
    say "training failed (exit $rc): not requeued"
    exit "$rc"
  fi
  mapfile -t values <<<"$resolved"
  checkpoint_dir=${values[0]}
  steps=${values[1]}
  resume=${values[2]}
}

# The step of the checkpoint <checkpoint.dir>/latest names, 0 if there is none.
latest_step() {
  local name
  [[ -r $checkpoint_dir/latest ]] || { echo 0; return; }
  name=$(<"$checkpoint_dir/latest")
  if [[ $name =~ ^step_([0-9]+)\.h5$ ]]; then
    echo $((10#${BASH_REMATCH[1]}))
  else
    echo 0
  fi
}

# The launcher (sets `launch`, `ntasks`): srun, or the MPI's mpiexec (MESHTRAIN_LAUNCHER).
choose_launcher() {
  local launcher=${MESHTRAIN_LAUNCHER:-srun}
  local launcher_args srun_mpi mpi_default
  read -r -a launcher_args <<<"${MESHTRAIN_LAUNCHER_ARGS:-}"
  ntasks=${SLURM_NTASKS:-1}
  case $launcher in
    srun)
      srun_mpi=${MESHTRAIN_SRUN_MPI:-}
      if [[ -z $srun_mpi ]]; then
        mpi_default=$(scontrol show config 2>/dev/null | sed -n 's/^MpiDefault *= *//p')
        [[ ${mpi_default:-none} == none ]] && srun_mpi=pmi2 || srun_mpi=default
      fi
      launch=(srun)
      if [[ $srun_mpi != default ]]; then
        launch+=("--mpi=$srun_mpi")
      fi
      # Since Slurm 22.05 srun does not take --cpus-per-task from the batch job by itself.
      if [[ -n ${SLURM_CPUS_PER_TASK:-} ]]; then
        launch+=("--cpus-per-task=$SLURM_CPUS_PER_TASK")
      fi ;;
    mpiexec)
      launch=(mpiexec -n "$ntasks") ;;
    *) die "MESHTRAIN_LAUNCHER=$launcher: use srun or mpiexec" ;;
  esac
  launch+=("${launcher_args[@]}")
}

# What each rank runs in front of `meshtrain` (sets `rank_cmd`, `gpu_count`).
bind_ranks() {
  # GPUs: one per rank. The node-local rank comes from the launcher (Hydra's MPI_LOCALRANKID, Open
  # MPI's OMPI_COMM_WORLD_LOCAL_RANK, srun's SLURM_LOCALID; Hydra's ranks all see SLURM_LOCALID 0);
  # rank r takes entry r mod count of the GPUs it can see, whether Slurm granted them
  # (CUDA_VISIBLE_DEVICES) or the node simply has them.
  gpu_count=0
  local visible per_node
  case ${MESHTRAIN_GPU_BIND:-auto} in
    auto)
      if [[ -n ${CUDA_VISIBLE_DEVICES:-} && ${CUDA_VISIBLE_DEVICES} != NoDevFiles ]]; then
        IFS=, read -r -a visible <<<"$CUDA_VISIBLE_DEVICES"
        gpu_count=${#visible[@]}
      elif command -v nvidia-smi >/dev/null; then
        gpu_count=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
      fi ;;
    none) ;;
    *) die "MESHTRAIN_GPU_BIND=${MESHTRAIN_GPU_BIND}: use auto or none" ;;
  esac
  rank_cmd=("$bin")
  if ((gpu_count > 0)); then
    per_node=$(((ntasks + ${SLURM_JOB_NUM_NODES:-1} - 1) / ${SLURM_JOB_NUM_NODES:-1}))
    ((per_node <= gpu_count)) || say "warning: up to $per_node ranks per node share $gpu_count GPUs"
    # shellcheck disable=SC2016  # expanded by each rank's shell
    rank_cmd=(bash -c '
      local_rank=${MPI_LOCALRANKID:-${OMPI_COMM_WORLD_LOCAL_RANK:-${SLURM_LOCALID:-0}}}
      if [[ -n ${CUDA_VISIBLE_DEVICES:-} ]]; then
        IFS=, read -r -a gpus <<<"$CUDA_VISIBLE_DEVICES"
      else
        mapfile -t gpus < <(seq 0 $(($(nvidia-smi -L | grep -c "^GPU") - 1)))
      fi
      export CUDA_VISIBLE_DEVICES=${gpus[local_rank % ${#gpus[@]}]}
      exec "$@"' meshtrain-rank "$bin")
  fi

  # OpenBLAS kernels. OpenBLAS runs generic kernels on CPUs it does not recognise (Prescott's on a Xeon
  # with AVX-512 of family 6 model 207: GEMMs 5x slower). Where OPENBLAS_CORETYPE is unset, each rank
  # first asks `meshtrain blas --openblas-coretype` on its own node (nodes may differ) and sets the
  # kernel set it names, if any; a value set here or in the submitting environment is kept.
  if [[ -z ${OPENBLAS_CORETYPE:-} ]]; then
    # shellcheck disable=SC2016  # expanded by each rank's shell
    rank_cmd=(bash -c '
      core=$("$0" blas --openblas-coretype 2>/dev/null) && [[ -n $core ]] && export OPENBLAS_CORETYPE=$core
      exec "$@"' "$bin" "${rank_cmd[@]}")
  fi
}

# Runs the launch line it is given, once (sets rc, restarts, step_before, step_after), passing
# Slurm's signals on to the ranks.
run_ranks() {
  restarts=${SLURM_RESTART_COUNT:-0}
  step_before=$(latest_step)
  say "job ${SLURM_JOB_ID:-(none)} run $((restarts + 1)) on ${SLURM_JOB_NODELIST:-$(hostname)}: $ntasks ranks," \
    "$gpu_count GPUs per node, checkpoint $checkpoint_dir at step $step_before of $steps"
  say "binary $bin"
  say "${launch[*]} $bin train ${keys[*]}$( ((gpu_count > 0)) && echo ', each rank with one GPU')"

  # The launcher runs in the background so that this shell can take Slurm's signals while it waits
  # (bash runs a trap only between commands). SIGUSR1 goes to the ranks whatever came in: srun
  # passes it on to every task, where SIGTERM would make srun kill the step.
  launcher_pid=""
  signalled=""
  # shellcheck disable=SC2317  # called by the traps
  forward() {
    signalled=$1
    say "received SIG$1: asking the ranks to save and leave"
    if [[ -n $launcher_pid ]]; then
      kill -USR1 "$launcher_pid" 2>/dev/null || true
    fi
  }
  trap 'forward USR1' USR1
  trap 'forward TERM' TERM

  # srun reports an MPI_Abort as killed tasks (exit 137), whatever code it carried: the watchdog also
  # writes its report here, which tells a collective timeout (exit 5) from other failures.
  export MESHTRAIN_WATCHDOG_REPORT=$PWD/.meshtrain-watchdog-${SLURM_JOB_ID:-$$}
  rm -f "$MESHTRAIN_WATCHDOG_REPORT"

  start_s=$SECONDS
  "$@" &
  launcher_pid=$!
  if [[ -n $signalled ]]; then
    kill -USR1 "$launcher_pid" 2>/dev/null || true
  fi
  rc=0
  while true; do
    rc=0
    wait "$launcher_pid" || rc=$?
    # A trapped signal ends wait early with 128 + its number; the launcher still runs.
    ((rc > 128)) && kill -0 "$launcher_pid" 2>/dev/null && continue
    break
  done
  trap - USR1 TERM
  if [[ -s $MESHTRAIN_WATCHDOG_REPORT ]] && ((rc != 0)); then
    say "the collective watchdog ended the run (launcher exit $rc): treated as exit 5"
    rc=5
  fi
  rm -f "$MESHTRAIN_WATCHDOG_REPORT"

  step_after=$(latest_step)
  say "launcher exited $rc after $((SECONDS - start_s)) s; checkpoint at step $step_after of $steps"
}

# Finished, failed, or left early: ends the job with its exit code, or requeues it.
requeue_or_exit() {
  if ((rc == 7)); then
    if ((step_after >= steps)); then
      say "training finished (step $step_after of $steps), but a log output could not be written (exit 7; the" \
        "run's message names the file)"
    else
      say "a log output could not be written (exit 7; the run's message names the file); the checkpoint is at" \
        "step $step_after of $steps: not requeued, make room for the log and submit again to resume"
    fi
    exit 7
  fi
  if ((step_after >= steps)); then
    say "training finished: step $step_after of $steps"
    exit 0
  fi
  if ((rc == 5)); then
    if ((step_after <= step_before)); then
      say "a collective timed out (exit 5) without progress (step $step_before before this run, $step_after" \
        "after): not requeued, a requeue would likely time out again"
      exit 5
    fi
    say "a collective timed out (exit 5) after progress to step $step_after: requeued as a transient fault"
  elif ((rc != 0 && rc != 3)); then
    say "training failed (exit $rc): not requeued"
    exit "$rc"
  fi
  # Left early: exit 3, or exit 0 from a launcher that does not pass the ranks' code on.
  if ((step_after <= step_before)); then
    say "left early without progress (step $step_before before this run, $step_after after): not requeued," \
      "a requeue would repeat this run"
    exit 1
  fi
  if [[ $resume != auto ]]; then
    say "left at step $step_after; checkpoint.resume = $resume, not auto: not requeued (a new run would" \
      "not start from latest)"
    exit 3
  fi
  if [[ ${MESHTRAIN_REQUEUE:-1} != 1 ]]; then
    say "left at step $step_after; MESHTRAIN_REQUEUE=${MESHTRAIN_REQUEUE}: not requeued"
    exit 3
  fi
  if [[ -n ${MESHTRAIN_MAX_RESTARTS:-} ]] && ((restarts >= MESHTRAIN_MAX_RESTARTS)); then
    say "left at step $step_after after $restarts restarts, MESHTRAIN_MAX_RESTARTS=$MESHTRAIN_MAX_RESTARTS: not requeued"
    exit 3
  fi
  [[ -n ${SLURM_JOB_ID:-} ]] || die "left at step $step_after outside a Slurm job: run it again to resume" 3
  # scontrol requeue also revives finished and cancelled jobs: a job that scancel ended stays ended.
  # (Incomplete closes the race between this check and the requeue, but then fails silently.)
  job_state=$(scontrol show job "$SLURM_JOB_ID" 2>/dev/null | sed -n 's/^ *JobState=\([A-Z_]*\).*/\1/p')
  if [[ $job_state != RUNNING ]]; then
    say "left at step $step_after of $steps; the job is ending (JobState=${job_state:-unknown}: cancelled, or" \
      "at its time limit): not requeued; submit again to resume"
    exit 3
  fi
  say "left at step $step_after of $steps: requeueing job $SLURM_JOB_ID (restart $((restarts + 1)))"
  if ! scontrol requeue Incomplete "$SLURM_JOB_ID"; then
    say "Slurm refused the requeue (requeueing off: JobRequeue=0 or --no-requeue): submit again to resume," \
      "or use slurm/chain.sh"
    exit 3
  fi
  # Slurm ends this run now; the requeued job starts again from the top.
  exit 0
}
