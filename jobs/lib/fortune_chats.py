#!/usr/bin/python3
"""Chat records for jobs/sft_chat.sh from the fortune files (share/docs/usage.md, Fine-tuning data).

Each fortune of at most --max-chars characters becomes one JSON line: a user turn asking for a
fortune on the file's topic (some asking for one that starts with its first word) and an assistant
turn answering with the fortune; about one in four opens with a system turn. The same files give
the same records in the same order (a seeded shuffle); one record in --every is held out into
--valid, the rest go to --train.

usage: fortune_chats.py --train TRAIN.jsonl --valid VALID.jsonl [--max-chars 200] [--every 20] [--seed 3] FILE...
"""
import argparse
import json
import os
import random
import sys

QUESTIONS = [
    "Tell me a fortune about {topic}.",
    "I'd like a {topic} fortune, please.",
    "Give me a fortune from the {topic} collection.",
]
QUESTION_WITH_WORD = 'Give me a {topic} fortune that starts with "{word}".'
SYSTEMS = [
    "You are a fortune cookie. Answer with one fortune and nothing else.",
    "Reply with a single fortune from the collection asked for.",
]


def fortunes(path, max_chars):
    """The fortunes of one file (entries between lines holding "%"), stripped, short enough, with letters."""
    with open(path, encoding="utf-8", errors="replace") as f:
        text = f.read()
    entries = [e.strip() for e in text.replace("\r\n", "\n").split("\n%\n")]
    return [e for e in entries if 0 < len(e) <= max_chars and any(c.isalpha() for c in e) and e != "%"]


def record(topic, fortune, rng):
    word = fortune.split()[0]
    if rng.random() < 0.3:
        question = QUESTION_WITH_WORD.format(topic=topic, word=word)
    else:
        question = rng.choice(QUESTIONS).format(topic=topic)
    messages = []
    if rng.random() < 0.25:
        messages.append({"role": "system", "content": rng.choice(SYSTEMS)})
    messages += [{"role": "user", "content": question}, {"role": "assistant", "content": fortune}]
    return {"messages": messages}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--train", required=True)
    ap.add_argument("--valid", required=True)
    ap.add_argument("--max-chars", type=int, default=200)
    ap.add_argument("--every", type=int, default=20)
    ap.add_argument("--seed", type=int, default=3)
    ap.add_argument("files", nargs="+")
    a = ap.parse_args()
    pairs = [(os.path.basename(path), f) for path in sorted(a.files) for f in fortunes(path, a.max_chars)]
    if not pairs:
        sys.exit(f"no fortune of at most {a.max_chars} characters in {', '.join(a.files)}")
    rng = random.Random(a.seed)
    rng.shuffle(pairs)
    records = [record(topic, fortune, rng) for topic, fortune in pairs]
    held_out = [r for i, r in enumerate(records) if i % a.every == a.every - 1]
    kept = [r for i, r in enumerate(records) if i % a.every != a.every - 1]
    for path, chosen in ((a.train, kept), (a.valid, held_out)):
        with open(path, "w", encoding="utf-8") as f:
            for r in chosen:
                f.write(json.dumps(r, ensure_ascii=False) + "\n")
    systems = sum(r["messages"][0]["role"] == "system" for r in records)
    print(f"wrote {len(kept)} chats to {a.train} and {len(held_out)} held out to {a.valid} "
          f"({systems} of {len(records)} with a system turn)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
