#!/usr/bin/env bash
# Continued pre-training of a Hugging Face model, by one command: installs what is missing, builds
# meshtrain, writes a small Llama-3.2-shaped model directory as a published checkpoint holds it
# (config.json, bfloat16 safetensors shards with their index, a byte-level BPE tokenizer.json;
# tests/hf/small_llama.py, random weights), imports it, encodes the fortunes with its own tokenizer,
# trains on them, exports the result as a Hugging Face directory and reads that back with the
# PyTorch reference written from transformers' definitions, which must find the loss lower than the
# imported model's on the same text. Output lands in out/hf_llama_continue/.
set -euo pipefail
cd "$(dirname "$0")/.."
source jobs/lib/prepare_host.sh

out=out/hf_llama_continue
rm -rf "$out"
mkdir -p "$out"
/usr/bin/python3 tests/hf/small_llama.py write --out "$out/source"
"$meshtrain" import "$out/source" --out "$out/init.h5" --ini "$out/model.ini" --seq-len 128
"$meshtrain" prepare --tokenizer "$out/source/tokenizer.json" --text "${corpus[@]}" --out "$out/fortunes.bin"

# The imported INI holds the model keys, checkpoint.init_weights and data.tokenizer; the run's own
# keys follow it on the command line.
mpiexec -n 1 "$meshtrain" train --config "$out/model.ini" --data.train "$out/fortunes.bin" --data.order shuffle \
  --train.micro_batch 16 --train.global_batch 16 --train.steps 300 --train.seed 1337 \
  --optim.lr 0.002 --optim.min_lr 0.0001 --optim.warmup_steps 30 --optim.decay cosine --optim.grad_clip 1.0 \
  --checkpoint.dir "$out/checkpoints" --checkpoint.every 300 --checkpoint.resume never \
  --log.metrics "$out/metrics.jsonl" --log.every 50

latest=$out/checkpoints/$(cat "$out/checkpoints/latest")
"$meshtrain" export "$latest" --format hf --out "$out/export" --dtype bf16
/usr/bin/python3 tests/hf/small_llama.py evaluate --shard "$out/fortunes.bin" --seq-len 128 --windows 16 \
  "$out/source" "$out/export"

echo
echo "--- sampled from $latest ---"
"$meshtrain" sample --checkpoint "$latest" --prompt "The " --tokens 120 --temperature 0.8 --seed 7
