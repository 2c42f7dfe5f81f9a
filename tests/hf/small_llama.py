#!/usr/bin/python3
"""The Hugging Face side of jobs/hf_llama_continue.sh, written without meshtrain.

  write     a small Llama-3.2-shaped model directory as a published checkpoint holds it:
            config.json (tied embeddings, llama3 RoPE scaling, 4 query heads over 2 key/value
            heads), generation_config.json, sharded model.safetensors in bfloat16 with its index
            (tests/oracle/hf_reference.py's writer, random weights), and a byte-level BPE
            tokenizer.json in Llama 3's form (its split regex and special tokens) whose merges are
            learnt from the fortunes (tests/cli/test_tokenizer_json.py's learner).
  evaluate  the mean cross-entropy that the reference (transformers' definitions) gives each
            directory on the same windows of a token shard: the imported model against its
            continued-pretraining export. Exit 1 unless the export's loss is the lower.
  evaluate-sft  the same for a fine-tuning shard (prepare --sft): the mean cross-entropy of the
            tokens that carry loss (the answers) in its first records, each cut to --seq-len + 1
            tokens: the imported model against its fine-tuned export, on held-out chats.
  evaluate-lora  jobs/lora_chat.sh's check, on the same records: the base directory with the PEFT
            adapter applied by tests/oracle/lora_reference.py (PEFT's definitions) against the merged
            export read as a plain model: the largest logit difference over the first --compare
            records (exit 1 past --tolerance), and the answers' loss of the base, the adapted base
            and the merged model (exit 1 unless the adapted one is the lower).

usage: small_llama.py write --out DIR [--merges 700] [--seed 11]
       small_llama.py evaluate --shard S.bin --seq-len T --windows N DIR_BEFORE DIR_AFTER
       small_llama.py evaluate-sft --shard SFT.bin --seq-len T --records N DIR_BEFORE DIR_AFTER
       small_llama.py evaluate-lora --shard SFT.bin --seq-len T --records N [--compare 8] [--tolerance 1e-5]
                                    BASE_DIR ADAPTER_DIR MERGED_DIR
"""
import argparse
import json
import os
import sys

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "oracle"))
sys.path.insert(0, os.path.join(HERE, "..", "cli"))
import gpt2_torch  # noqa: E402
import hf_reference  # noqa: E402
import lora_reference  # noqa: E402
import test_tokenizer_json as tokjson  # noqa: E402
from test_sft_prepare import read_sft_shard  # noqa: E402

# Llama 3.2 1B's choices at a size two CPU cores train in a minute: tied head, GQA, llama3 RoPE.
CONFIG = {"hidden_size": 128, "intermediate_size": 352, "num_hidden_layers": 4, "num_attention_heads": 4,
          "num_key_value_heads": 2, "tie_word_embeddings": True, "rope_theta": 500000.0,
          "max_position_embeddings": 512, "rms_norm_eps": 1e-5,
          "rope_scaling": {"rope_type": "llama3", "factor": 32.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                           "original_max_position_embeddings": 64}}


def write(out_dir, merges_count, seed):
    merges = tokjson.learn_merges(tokjson.fortunes_text(), merges_count)
    tokenizer = tokjson.tokenizer_file(
        merges, {"type": "Sequence", "pretokenizers": [tokjson.split(tokjson.LLAMA3_REGEX),
                                                       tokjson.byte_level(use_regex=False)]},
        tokjson.LLAMA3_SPECIALS, post_processor=tokjson.bos_template, pairs=True, ignore_merges=True)
    vocab = len(tokenizer["model"]["vocab"]) + len(tokenizer["added_tokens"])
    specials = {t["content"]: t["id"] for t in tokenizer["added_tokens"]}
    config = {**CONFIG, "vocab_size": vocab, "bos_token_id": specials["<|begin_of_text|>"],
              "eos_token_id": specials["<|end_of_text|>"]}
    hf_reference.write_hf_dir(out_dir, "llama", config, seed=seed, dtype="bfloat16", shard_bytes=1 << 20, std=0.02)
    with open(os.path.join(out_dir, "tokenizer.json"), "w", encoding="utf-8") as f:
        json.dump(tokenizer, f, ensure_ascii=False, indent=1)
    print(f"wrote {out_dir}: LlamaForCausalLM, vocab {vocab} ({len(merges)} merges learnt from the fortunes), "
          f"bfloat16 shards")


def mean_loss(directory, inputs, targets):
    return hf_reference.forward_loss(hf_reference.load_hf_dir(directory), inputs, targets)["loss"]


def evaluate(shard, seq_len, windows, before, after):
    tokens = gpt2_torch.read_tokens(shard)
    # Windows spread over the whole shard, the same for both models.
    step = max(1, (len(tokens) - 1) // seq_len // windows)
    starts = [i * step * seq_len for i in range(windows) if i * step * seq_len + seq_len < len(tokens)]
    rows = np.stack([tokens[s:s + seq_len + 1] for s in starts])
    inputs, targets = torch.from_numpy(rows[:, :-1].copy()), torch.from_numpy(rows[:, 1:].copy())
    first, last = mean_loss(before, inputs, targets), mean_loss(after, inputs, targets)
    print(f"reference loss on {len(starts)} windows of {seq_len} tokens of {shard}: "
          f"{first:.4f} imported ({before}), {last:.4f} exported ({after})")
    return 0 if last < first else 1


def answer_loss(directory, records):
    """The mean cross-entropy over the records' loss-carrying targets (target i predicts token i + 1)."""
    return model_answer_loss(hf_reference.load_hf_dir(directory), records)


def model_answer_loss(model, records):
    total, count = 0.0, 0
    for ids, mask in records:
        logits = hf_reference.forward_loss(model, [ids[:-1]], [ids[1:]])["logits"][0]
        losses = torch.nn.functional.cross_entropy(logits, torch.tensor(ids[1:]), reduction="none")
        carried = torch.tensor(mask[1:], dtype=torch.bool)
        total += float(losses[carried].sum())
        count += int(carried.sum())
    return total / count


def answer_records(shard, seq_len, count):
    """The shard's first `count` records cut to seq_len + 1 tokens, those with an answer target only."""
    records = [(ids[:seq_len + 1], mask[:seq_len + 1]) for ids, mask in read_sft_shard(shard)[0][:count]]
    return [(ids, mask) for ids, mask in records if len(ids) > 1 and any(mask[1:])]


def evaluate_sft(shard, seq_len, count, before, after):
    records = answer_records(shard, seq_len, count)
    first, last = answer_loss(before, records), answer_loss(after, records)
    print(f"reference loss on the answers of {len(records)} records of {shard}: "
          f"{first:.4f} imported ({before}), {last:.4f} fine-tuned ({after})")
    return 0 if last < first else 1


def evaluate_lora(shard, seq_len, count, compare, tolerance, base, adapter, merged):
    records = answer_records(shard, seq_len, count)
    adapted = lora_reference.load_peft_adapter(hf_reference.load_hf_dir(base), adapter)
    plain = hf_reference.load_hf_dir(merged)
    # Both in the reference's float64; the merged weights were rounded once to float32 by the export.
    worst, largest = 0.0, 0.0
    for ids, _ in records[:compare]:
        a = hf_reference.forward_loss(adapted, [ids[:-1]], [ids[1:]])["logits"][0]
        m = hf_reference.forward_loss(plain, [ids[:-1]], [ids[1:]])["logits"][0]
        worst = max(worst, float((a - m).abs().max()))
        largest = max(largest, float(a.abs().max()))
    print(f"logits of the first {min(compare, len(records))} records, base + adapter ({adapter}) against the merged "
          f"model ({merged}): largest difference {worst:.2e} (largest logit {largest:.3f}, tolerance {tolerance:g})")
    losses = [model_answer_loss(hf_reference.load_hf_dir(base), records), model_answer_loss(adapted, records),
              model_answer_loss(plain, records)]
    print(f"reference loss on the answers of {len(records)} records of {shard}: {losses[0]:.4f} base ({base}), "
          f"{losses[1]:.4f} base + adapter, {losses[2]:.4f} merged")
    return 0 if worst <= tolerance and losses[1] < losses[0] else 1


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="command", required=True)
    w = sub.add_parser("write")
    w.add_argument("--out", required=True)
    w.add_argument("--merges", type=int, default=700)
    w.add_argument("--seed", type=int, default=11)
    e = sub.add_parser("evaluate")
    e.add_argument("--shard", required=True)
    e.add_argument("--seq-len", type=int, required=True)
    e.add_argument("--windows", type=int, default=16)
    e.add_argument("before")
    e.add_argument("after")
    f = sub.add_parser("evaluate-sft")
    f.add_argument("--shard", required=True)
    f.add_argument("--seq-len", type=int, required=True)
    f.add_argument("--records", type=int, default=64)
    f.add_argument("before")
    f.add_argument("after")
    lo = sub.add_parser("evaluate-lora")
    lo.add_argument("--shard", required=True)
    lo.add_argument("--seq-len", type=int, required=True)
    lo.add_argument("--records", type=int, default=64)
    lo.add_argument("--compare", type=int, default=8)
    lo.add_argument("--tolerance", type=float, default=1e-5)
    lo.add_argument("base")
    lo.add_argument("adapter")
    lo.add_argument("merged")
    a = ap.parse_args()
    if a.command == "write":
        write(a.out, a.merges, a.seed)
        return 0
    if a.command == "evaluate-lora":
        return evaluate_lora(a.shard, a.seq_len, a.records, a.compare, a.tolerance, a.base, a.adapter, a.merged)
    if a.command == "evaluate-sft":
        return evaluate_sft(a.shard, a.seq_len, a.records, a.before, a.after)
    return evaluate(a.shard, a.seq_len, a.windows, a.before, a.after)


if __name__ == "__main__":
    sys.exit(main())
