#!/usr/bin/env bash
# For sites that forbid requeueing: submits N jobs of slurm/train.sbatch that run one after the
# other, each resuming from the checkpoint the one before left (checkpoint.resume = auto). Give
# each job a time limit (--time) or train.stop_after / train.time_limit; a job that starts when
# training is already done finds the checkpoint at train.steps, meshtrain says "nothing to do" and
# the job ends at once.
#
#   slurm/chain.sh [-j N] [--singleton] [sbatch options ...] -- CONFIG.ini [--section.key VALUE ...]
#   slurm/chain.sh -j 6 -N 4 --ntasks-per-node 8 --time 12:00:00 -- jobs/run.ini
#
#   -j, --jobs N   jobs to submit (default 4)
#   --singleton    chain by job name (--dependency=singleton: one job of that name and user runs at a
#                  time; give --job-name, default meshtrain) instead of afterany on the previous
#                  job's id. Jobs submitted later with the same name join the chain.
#
# Each job depends on the previous one with afterany: it runs whether the previous one finished,
# left early or failed, and resumes from whatever latest names. The jobs do not requeue themselves
# (--no-requeue, MESHTRAIN_REQUEUE=0). Prints the job ids, one per line. Environment: as
# train.sbatch (MESHTRAIN_BIN, MESHTRAIN_LAUNCHER, ...), passed on by sbatch.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
jobs=4
singleton=0
sbatch_args=()

die() {
  echo "chain.sh: error: $1" >&2
  exit 2
}

while (($#)); do
  case $1 in
    -j | --jobs)
      (($# >= 2)) || die "$1 needs a number"
      jobs=$2
      shift 2 ;;
    --jobs=*)
      jobs=${1#--jobs=}
      shift ;;
    --singleton)
      singleton=1
      shift ;;
    --)
      shift
      break ;;
    -h | --help)
      sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "$0"
      exit 0 ;;
    *)
      sbatch_args+=("$1")
      shift ;;
  esac
done
[[ $jobs =~ ^[1-9][0-9]*$ ]] || die "-j $jobs: the number of jobs must be a positive whole number"
(($# >= 1)) || die "no training arguments: slurm/chain.sh [-j N] [sbatch options] -- CONFIG.ini [--key value ...]"
command -v sbatch >/dev/null || die "sbatch not found (is Slurm installed, SLURM_CONF set?)"

# shellcheck disable=SC2054  # the comma belongs to --export
submit=(sbatch --parsable --no-requeue --export=ALL,MESHTRAIN_REQUEUE=0 "${sbatch_args[@]}")
previous=""
for ((i = 1; i <= jobs; i++)); do
  dependency=()
  if ((singleton)); then
    dependency=(--dependency=singleton)
  elif [[ -n $previous ]]; then
    dependency=("--dependency=afterany:$previous")
  fi
  id=$("${submit[@]}" "${dependency[@]}" "$here/train.sbatch" "$@")
  previous=${id%%;*}
  echo "$previous"
done
