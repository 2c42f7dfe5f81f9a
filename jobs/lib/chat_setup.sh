# What both chat fine-tuning jobs (jobs/sft_chat.sh, jobs/lora_chat.sh) start from, in "$out": chats made
# from the fortunes (train.jsonl, valid.jsonl), the small Llama-3.2-shaped model imported (init.h5,
# model.ini), both sets prepared as llama3-template fine-tuning shards (train.bin, valid.bin); `turns`,
# the system and user turns of the first held-out chat with a system turn, and `ask LABEL CHECKPOINT`,
# which asks a checkpoint that question; the imported model is asked first. Sourced after
# jobs/lib/prepare_host.sh, with `out` set.
/usr/bin/python3 jobs/lib/fortune_chats.py --train "$out/train.jsonl" --valid "$out/valid.jsonl" "${corpus[@]}"
/usr/bin/python3 tests/hf/small_llama.py write --out "$out/source"
"$meshtrain" import "$out/source" --out "$out/init.h5" --ini "$out/model.ini" --seq-len 128
for part in train valid; do
  "$meshtrain" prepare --sft "$out/$part.jsonl" --tokenizer "$out/source/tokenizer.json" --template llama3 \
    --out "$out/$part.bin"
done

# The first held-out chat with a system turn: its system and user turns are what both models are asked.
mapfile -t turns < <(/usr/bin/python3 -c '
import json, sys
chats = [json.loads(line)["messages"] for line in open(sys.argv[1], encoding="utf-8")]
system, user = next(m[:2] for m in chats if m[0]["role"] == "system")
print(system["content"]); print(user["content"])' "$out/valid.jsonl")
ask() {
  echo
  echo "--- $1 answers \"${turns[1]}\" ---"
  "$meshtrain" sample --checkpoint "$2" --template llama3 --system "${turns[0]}" --prompt "${turns[1]}" \
    --tokens 80 --temperature 0.7 --seed 7
}
ask "the imported model (random weights)" "$out/init.h5"
