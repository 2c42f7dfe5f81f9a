#!/usr/bin/env bash
# The quickstart: installs what is missing, builds meshtrain, turns Debian's fortunes into a
# byte-level token shard, trains jobs/quickstart.ini (~3 minutes on 2 cores), and samples text
# from the checkpoint it saved. Output lands in out/quickstart/.
set -euo pipefail
cd "$(dirname "$0")/.."
source jobs/lib/prepare_host.sh

mkdir -p out/quickstart
"$meshtrain" prepare --text "${corpus[@]}" --out out/quickstart/fortunes.bin

# One rank; the same line under srun or with -n 8 is how larger jobs start.
mpiexec -n 1 "$meshtrain" train --config jobs/quickstart.ini --checkpoint.resume never

latest=out/quickstart/checkpoints/$(cat out/quickstart/checkpoints/latest)
echo
echo "--- sampled from $latest ---"
"$meshtrain" sample --checkpoint "$latest" --prompt "The " --tokens 400 --temperature 0.8 --seed 7
