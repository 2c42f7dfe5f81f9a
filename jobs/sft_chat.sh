#!/usr/bin/env bash
# Supervised fine-tuning of a Hugging Face model on chats, by one command: installs what is missing,
# builds meshtrain, turns the fortunes into chat records (jobs/lib/fortune_chats.py: a user asks for
# a fortune on a topic, the assistant answers with one; some chats open with a system turn; one in
# twenty held out), writes the small Llama-3.2-shaped model directory of jobs/hf_llama_continue.sh
# (tests/hf/small_llama.py; its tokenizer.json has Llama 3's chat tokens), imports it, encodes the
# chats under the llama3 template with that tokenizer (prepare --sft), asks the imported model a
# held-out question (sample --template llama3), fine-tunes it on the answers (masked loss; records
# packed into windows of 128, longer ones truncated; the held-out chats as validation data), asks
# again, exports the result and has the PyTorch reference written from transformers' definitions
# compare the loss on held-out answers before and after. Output lands in out/sft_chat/.
#
# Cost: 300 steps of 16 windows of 128 tokens, as jobs/hf_llama_continue.sh (about 1 min on 2 cores),
# and three validation passes of 128 windows, forward only.
set -euo pipefail
cd "$(dirname "$0")/.."
source jobs/lib/prepare_host.sh

out=out/sft_chat
rm -rf "$out"
mkdir -p "$out"
source jobs/lib/chat_setup.sh

# The imported INI holds the model keys, checkpoint.init_weights and data.tokenizer; the run's own
# keys follow it on the command line: the fine-tuning shard (its over-long records cut to the
# window), and the held-out shard's loss every 100 steps over its first 128 windows.
mpiexec -n 1 "$meshtrain" train --config "$out/model.ini" --data.train "$out/train.bin" --data.overlong truncate \
  --data.order shuffle --data.valid "$out/valid.bin" --train.eval_every 100 --train.eval_tokens 16384 \
  --train.micro_batch 16 --train.global_batch 16 --train.steps 300 --train.seed 1337 \
  --optim.lr 0.002 --optim.min_lr 0.0001 --optim.warmup_steps 30 --optim.decay cosine --optim.grad_clip 1.0 \
  --checkpoint.dir "$out/checkpoints" --checkpoint.every 300 --checkpoint.resume never \
  --log.metrics "$out/metrics.jsonl" --log.every 50

latest=$out/checkpoints/$(cat "$out/checkpoints/latest")
ask "the fine-tuned model ($latest)" "$latest"
"$meshtrain" export "$latest" --format hf --out "$out/export" --dtype bf16
/usr/bin/python3 tests/hf/small_llama.py evaluate-sft --shard "$out/valid.bin" --seq-len 128 --records 64 \
  "$out/source" "$out/export"
