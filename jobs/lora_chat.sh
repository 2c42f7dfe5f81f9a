#!/usr/bin/env bash
# LoRA fine-tuning of a Hugging Face model on chats, by one command: jobs/sft_chat.sh's model and data
# (the small Llama-3.2-shaped model of tests/hf/small_llama.py, imported; the fortune chats encoded
# under the llama3 template, one in twenty held out as validation data), but the imported weights
# stay frozen and only rank-16 adapters on every linear layer of every block train (share/docs/
# usage.md, LoRA). Before training, `meshtrain plan` sets the LoRA run beside the full fine-tune of
# sft_chat: trainable parameters and memory by category (its categories are what the train log's
# memory table measures). After it, the adapters leave as a PEFT adapter (export --format peft) and
# merged into the base as a Hugging Face model (export --format hf --merge-lora); the PyTorch
# reference (tests/oracle/lora_reference.py applying the PEFT adapter to the base, PEFT's
# definitions) checks that the merged model's logits equal the adapted base's on held-out records and
# reports the answers' loss before and after. The merged model, imported back, is asked the held-out
# question the imported model was asked first. Output lands in out/lora_chat/.
#
# Cost: sft_chat's 300 steps of 16 windows of 128 tokens (about 1 min on 2 cores, 2 under load: the
# frozen base skips its weight gradients, 4 FLOPs a parameter and token instead of 6, the rest is as
# full training's), three validation passes of 128 windows, forward only, and the reference check
# (about 15 s). Measured end to end: 2 min 43 s and 2 min 57 s on 2 cores shared with other builds (README).
#
# The base here is random (small_llama.py writes random weights): the adapters can reshape its layers
# but not its embeddings, so LoRA lowers the held-out loss far less than sft_chat's full fine-tune
# does. LoRA is for adapting a trained base; this job shows the mechanics and the bookkeeping.
set -euo pipefail
cd "$(dirname "$0")/.."
source jobs/lib/prepare_host.sh

out=out/lora_chat
rm -rf "$out"
mkdir -p "$out"
source jobs/lib/chat_setup.sh

# The imported INI holds the model keys, checkpoint.init_weights (here: the frozen base) and
# data.tokenizer; the run's keys follow it. LoRA: rank 16 on the seven linear layers of every block
# (q,k,v,o,gate,up,down), scaling alpha / r = 2. The rest is sft_chat's run, learning rate included,
# so that the two compare step for step.
run=(--config "$out/model.ini" --lora.rank 16 --lora.alpha 32 --lora.targets all-linear
  --data.train "$out/train.bin" --data.overlong truncate --data.order shuffle
  --train.micro_batch 16 --train.global_batch 16 --train.steps 300 --train.seed 1337
  --optim.lr 0.002 --optim.min_lr 0.0001 --optim.warmup_steps 30 --optim.decay cosine --optim.grad_clip 1.0)

echo
echo "--- the plan: LoRA beside sft_chat's full fine-tune of the same model, batch and layout ---"
"$meshtrain" plan "${run[@]}" --world 1 | sed -n '/^LoRA against full/,$p'
echo

mpiexec -n 1 "$meshtrain" train "${run[@]}" \
  --data.valid "$out/valid.bin" --train.eval_every 100 --train.eval_tokens 16384 \
  --checkpoint.dir "$out/checkpoints" --checkpoint.every 300 --checkpoint.resume never \
  --log.metrics "$out/metrics.jsonl" --log.every 50

# The checkpoint holds the adapters only (and names its base): exported as PEFT writes an adapter,
# and merged into the base as a float32 Hugging Face model, which meshtrain imports back as a whole
# model for sampling.
latest=$out/checkpoints/$(cat "$out/checkpoints/latest")
"$meshtrain" export "$latest" --format peft --out "$out/adapter"
"$meshtrain" export "$latest" --format hf --merge-lora --out "$out/merged" --dtype fp32
"$meshtrain" import "$out/merged" --out "$out/merged.h5" --ini "$out/merged.ini" --seq-len 128
ask "the merged model ($latest merged into the base)" "$out/merged.h5"
echo
/usr/bin/python3 tests/hf/small_llama.py evaluate-lora --shard "$out/valid.bin" --seq-len 128 --records 64 \
  --compare 8 --tolerance 1e-5 "$out/source" "$out/adapter" "$out/merged"
