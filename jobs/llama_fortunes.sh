#!/usr/bin/env bash
# A small LLaMA with a SentencePiece vocabulary, by one command: installs what is missing, builds
# meshtrain, trains a 2048-piece BPE tokenizer on Debian's fortunes, encodes them into a token
# shard, trains jobs/llama_fortunes.ini and samples subword text from the checkpoint it saved.
# Output lands in out/llama_fortunes/.
set -euo pipefail
cd "$(dirname "$0")/.."
source jobs/lib/prepare_host.sh

out=out/llama_fortunes
mkdir -p "$out"
"$meshtrain" tokenizer train --text "${corpus[@]}" --vocab 2048 --out "$out/tok.model"
"$meshtrain" prepare --tokenizer "$out/tok.model" --text "${corpus[@]}" --out "$out/fortunes.bin"

mpiexec -n 1 "$meshtrain" train --config jobs/llama_fortunes.ini --checkpoint.resume never

latest=$out/checkpoints/$(cat "$out/checkpoints/latest")
echo
echo "--- sampled from $latest ---"
"$meshtrain" sample --checkpoint "$latest" --prompt "The " --tokens 200 --temperature 0.8 --seed 7
