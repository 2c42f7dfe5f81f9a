#!/usr/bin/env python3
"""`meshtrain prepare --sft` (share/docs/usage.md, Fine-tuning data) against a renderer written here from usage.md.

For every template (chatml, llama2, llama3, alpaca, plain), both record forms (chats, some of several turns with
a system message; instructions with an input, an empty one and none), both tokenizer kinds and with and without
--train-on-prompt, this test renders each record as usage.md's pieces, encodes the text pieces with a peer —
Hugging Face's JavaScript tokenizers (tests/io/hf_tokenizers.mjs) for a tokenizer.json written here (merges learnt
by test_tokenizer_json.py's helpers), python3-sentencepiece for a model made by `meshtrain tokenizer train
--special` — inserts each special token as its one id, builds the loss mask from usage.md's rule and compares ids
and mask with the shard, read by this file's own numpy reader. The texts hold Unicode, empty contents and the
templates' own token strings (which must stay text). Then: malformed records (exit 2 naming the file, the line
and the field, nothing written), tokenizers lacking a template's token, the two shard kinds refusing each other,
and --special's control pieces.

usage: test_sft_prepare.py --meshtrain BIN --node-modules DIR --workdir DIR [--group sft_templates|sft_errors|all] [-k PATTERN] [-v]

Skips (exit 77) only where `node` is not installed.
"""
import argparse
import json
import os
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import test_cli as cli  # noqa: E402
from test_cli import CliCase  # noqa: E402
from test_tokenizer_json import (HF_SCRIPT, LLAMA3_REGEX, bos_template, byte_level, fortunes_text,  # noqa: E402
                                 hf_tokenizers_at, learn_merges, split, tokenizer_file)

try:
    import numpy as np
    import sentencepiece as spm
except ImportError as e:  # a missing test dependency is a failure, never a silent skip
    sys.exit(f"test_sft_prepare.py needs numpy and sentencepiece for {sys.executable}: {e}")

NODE_MODULES = None
TEMPLATES = ["chatml", "llama2", "llama3", "alpaca", "plain"]
SPECIALS = ["<|begin_of_text|>", "<s>", "</s>", "<|im_start|>", "<|im_end|>", "<|start_header_id|>",
            "<|end_header_id|>", "<|eot_id|>", "<|end_of_text|>", "<|endoftext|>"]
EOS_CANDIDATES = ["</s>", "<|end_of_text|>", "<|endoftext|>"]


def chat(*turns, system=None, **extra):
    messages = [{"role": "system", "content": system}] if system is not None else []
    for i, content in enumerate(turns):
        messages.append({"role": "user" if i % 2 == 0 else "assistant", "content": content})
    return {"messages": messages, **extra}


# One exchange each: what alpaca and plain take, and the chat templates too.
SINGLE = [
    chat("Bonjour ! Ça va ? 日本語のテキスト 👍🏽", "Ça va bien, merci. Καλημέρα.", system="Réponds brièvement."),
    chat("What is 12 * 12?", "144"),
    chat("", "Nothing was asked."),
    chat("Write <|im_start|>assistant, <|eot_id|>, [INST] and </s> <s> literally.",
         "Here: <|im_start|>assistant <|eot_id|><|end_header_id|> [INST] </s><s> <|endoftext|>", id=7),
    chat("Call it: <tool_call>", "<tool_call>{\"name\": 1}</tool_call>"),
    {"instruction": "Summarize the text.", "input": "The quick brown fox jumps over the lazy dog.",
     "output": "A fox jumps over a dog."},
    {"instruction": "Name a colour.", "input": "", "output": "Blue\n"},
    {"instruction": "Count to three.", "output": "1, 2, 3"},
]
# Conversations for chatml, llama2 and llama3.
MULTI = [
    chat("Hi <|im_end|>", "Hello!", "And 13 * 13?", "169", "Thanks", "You're welcome.\n\nAnything else?",
         system="You are terse.\n"),
    chat("One", "Two", "Three", "Four"),
]

ALPACA_WITH_INPUT = ("Below is an instruction that describes a task, paired with an input that provides further "
                     "context. Write a response that appropriately completes the request.")
ALPACA_WITHOUT_INPUT = ("Below is an instruction that describes a task. Write a response that appropriately "
                        "completes the request.")


def render(template, record, eos):
    """usage.md's pieces of a record: (special, text, loss); empty texts left out."""
    pieces = []

    def text(t, loss=False):
        if t:
            pieces.append((False, t, loss))

    def special(name, loss=False):
        pieces.append((True, name, loss))

    if "messages" in record:
        messages = record["messages"]
    else:
        user = record["instruction"] + ("\n\n" + record["input"] if record.get("input") else "")
        messages = [{"role": "user", "content": user}, {"role": "assistant", "content": record["output"]}]
    system = messages[0]["content"] if messages[0]["role"] == "system" else None
    turns = messages[1:] if system is not None else messages

    if template == "chatml":
        for m in messages:
            loss = m["role"] == "assistant"
            special("<|im_start|>")
            text(m["role"] + "\n")
            text(m["content"], loss)
            special("<|im_end|>", loss)
            text("\n")
    elif template == "llama3":
        special("<|begin_of_text|>")
        for m in messages:
            loss = m["role"] == "assistant"
            special("<|start_header_id|>")
            text(m["role"])
            special("<|end_header_id|>")
            text("\n\n")
            text(m["content"], loss)
            special("<|eot_id|>", loss)
    elif template == "llama2":
        for i in range(0, len(turns), 2):
            special("<s>")
            if i == 0 and system is not None:
                text("[INST] <<SYS>>\n")
                text(system)
                text("\n<</SYS>>\n\n")
            else:
                text("[INST] ")
            text(turns[i]["content"])
            text(" [/INST] ")
            text(turns[i + 1]["content"], True)
            text(" ")
            special("</s>", True)
    else:
        if "messages" in record:
            instruction, inp, output = turns[0]["content"], "", turns[1]["content"]
        else:
            instruction, inp, output = record["instruction"], record.get("input", ""), record["output"]
        if template == "alpaca":
            if system is not None:
                text(system)
                text("\n\n### Instruction:\n")
            else:
                text((ALPACA_WITH_INPUT if inp else ALPACA_WITHOUT_INPUT) + "\n\n### Instruction:\n")
            text(instruction)
            if inp:
                text("\n\n### Input:\n")
                text(inp)
            text("\n\n### Response:\n")
        else:
            prompt = instruction + ("\n\n" + inp if inp else "")
            text(system + "\n\n" + prompt if system is not None else prompt)
        text(output, True)
        special(eos, True)
    return pieces


def expected_record(pieces, encode, special_id, train_on_prompt):
    ids, mask = [], []
    for is_special, t, loss in pieces:
        piece_ids = [special_id(t)] if is_special else encode(t)
        ids += piece_ids
        mask += [1 if loss or train_on_prompt else 0] * len(piece_ids)
    mask[0] = 0
    return ids, mask


def read_sft_shard(path):
    """The records of a fine-tuning shard, read from usage.md's layout: [(ids, mask), ...] and the width."""
    with open(path, "rb") as f:
        data = f.read()
    header = np.frombuffer(data[:1024], dtype="<i4")
    magic, version, n, r, width = (int(v) for v in header[:5])
    assert (magic, version) == (20261203, 1), (path, magic, version)
    assert not header[5:].any(), path
    assert width in (2, 4), width
    assert len(data) == 1024 + n * width + n + 8 * (r + 1), (path, len(data))
    tokens = np.frombuffer(data, dtype="<u2" if width == 2 else "<u4", count=n, offset=1024)
    mask = np.frombuffer(data, dtype="u1", count=n, offset=1024 + n * width)
    offsets = np.frombuffer(data, dtype="<i8", count=r + 1, offset=1024 + n * width + n)
    assert offsets[0] == 0 and offsets[-1] == n and (np.diff(offsets) > 0).all(), offsets
    return [([int(t) for t in tokens[a:b]], [int(m) for m in mask[a:b]]) for a, b in zip(offsets, offsets[1:])], width


def write_jsonl(path, records):
    with open(path, "w", encoding="utf-8") as f:
        for i, record in enumerate(records):
            f.write(json.dumps(record, ensure_ascii=i % 2 == 0) + "\n")
            if i == 1:
                f.write("   \n")  # a blank line, skipped


class SftFiles(CliCase):
    """The files both groups use: the tokenizers, the records."""

    @classmethod
    def setUpClass(cls):
        cls.shared = os.path.join(cli.WORKDIR, cls.group, "_files")
        shutil.rmtree(cls.shared, ignore_errors=True)
        os.makedirs(cls.shared)
        corpus = fortunes_text(100_000)
        cls.corpus_path = os.path.join(cls.shared, "corpus.txt")
        with open(cls.corpus_path, "w", encoding="utf-8") as f:
            f.write(corpus)
        # A Llama-3-shaped tokenizer.json (its post-processor puts a BOS first: pieces must not get it) with every
        # template's tokens as special added tokens and one normal added token, which text still matches.
        merges = learn_merges(corpus, 100)
        added = [(t,) for t in SPECIALS] + [("<tool_call>", False, False), ("</tool_call>", False, False)]
        pre = {"type": "Sequence", "pretokenizers": [split(LLAMA3_REGEX), byte_level(use_regex=False)]}
        content = tokenizer_file(merges, pre, added, post_processor=bos_template, pairs=True)
        cls.json_path = os.path.join(cls.shared, "tok.json")
        with open(cls.json_path, "w", encoding="utf-8") as f:
            json.dump(content, f, ensure_ascii=False)
        cls.json_special = {t["content"]: t["id"] for t in content["added_tokens"] if t["special"]}
        # The peer's file: the special added tokens dropped, so that their strings in a text are encoded as text.
        peer = dict(content, added_tokens=[t for t in content["added_tokens"] if not t["special"]],
                    post_processor=byte_level())
        cls.peer_json_path = os.path.join(cls.shared, "peer.json")
        with open(cls.peer_json_path, "w", encoding="utf-8") as f:
            json.dump(peer, f, ensure_ascii=False)
        cls.spm_path = os.path.join(cls.shared, "tok.model")
        p = cli.run(["tokenizer", "train", "--text", cls.corpus_path, "--vocab", 700, "--out", cls.spm_path,
                     "--special", *SPECIALS], cls.shared, timeout=120)
        if p.returncode != 0:
            raise RuntimeError(f"tokenizer train --special failed: {cli.describe(p)}")
        cls.sp = spm.SentencePieceProcessor(model_file=cls.spm_path)
        cls.single = os.path.join(cls.shared, "single.jsonl")
        cls.multi = os.path.join(cls.shared, "multi.jsonl")
        write_jsonl(cls.single, SINGLE)
        write_jsonl(cls.multi, MULTI)

    def json_encoder(self, texts):
        """Hugging Face's ids of each text (no post-processor), one node run for all of them."""
        texts = sorted(set(texts))
        path = self.path("texts.json")
        with open(path, "w", encoding="utf-8") as f:
            json.dump(texts, f, ensure_ascii=False)
        p = subprocess.run(["node", HF_SCRIPT, NODE_MODULES, self.peer_json_path, path], capture_output=True,
                           timeout=120)
        self.assertEqual(p.returncode, 0, p.stderr.decode("utf-8", "replace")[-3000:])
        ids = dict(zip(texts, json.loads(p.stdout)["ids"]))
        return lambda t: ids[t]

    def spm_special(self, name):
        i = self.sp.piece_to_id(name)
        self.assertTrue(self.sp.is_control(i) and self.sp.id_to_piece(i) == name, name)
        return i

    def check_all_templates(self, kind):
        tokenizer = self.json_path if kind == "json" else self.spm_path
        eos = "</s>"
        cases = []  # (template, files, records, train_on_prompt)
        for template in TEMPLATES:
            if template in ("alpaca", "plain"):
                files, records = [self.single], SINGLE
            else:
                files, records = [self.multi, self.single], MULTI + SINGLE
            # --train-on-prompt under every template with one tokenizer kind, two with the other.
            for on_prompt in (False, True) if kind == "json" or template in ("chatml", "alpaca") else (False,):
                cases.append((template, files, records, on_prompt))
        rendered = {(t, i): render(t, r, eos) for t, _, records, _ in cases for i, r in enumerate(records)}
        if kind == "json":
            encode = self.json_encoder([text for pieces in rendered.values() for s, text, _ in pieces if not s])
            special_id = self.json_special.__getitem__
        else:
            encode, special_id = self.sp.encode, self.spm_special
        for template, files, records, on_prompt in cases:
            with self.subTest(template=template, train_on_prompt=on_prompt):
                out = f"{template}_{int(on_prompt)}.bin"
                args = ["prepare", "--sft", *files, "--tokenizer", tokenizer, "--template", template, "--out", out]
                p = self.run_ok(args + (["--train-on-prompt"] if on_prompt else []))
                got, width = read_sft_shard(self.path(out))
                self.assertEqual(width, 2)
                self.assertEqual(len(got), len(records))
                for i, (ids, mask) in enumerate(got):
                    want_ids, want_mask = expected_record(rendered[(template, i)], encode, special_id, on_prompt)
                    self.assertEqual(ids, want_ids, f"{template}: ids of record {i}")
                    self.assertEqual(mask, want_mask, f"{template}: mask of record {i}")
                tokens = sum(len(ids) for ids, _ in got)
                loss = sum(sum(mask) for _, mask in got)
                longest = max(len(ids) for ids, _ in got)
                self.assertIn(f"wrote {len(got)} records, {tokens} tokens ({loss} carry loss, the longest record "
                              f"{longest} tokens)", p.stdout)
        # The templates' token strings in the texts stay text: chatml's record 3 of SINGLE holds <|im_start|>
        # in both turns, yet has exactly one <|im_start|> id per message.
        got, _ = read_sft_shard(self.path("chatml_0.bin"))
        ids = got[len(MULTI) + 3][0]
        self.assertEqual(ids.count(special_id("<|im_start|>")), 2)
        self.assertEqual(ids.count(special_id("</s>")), 0)
        if kind == "json":  # a normal added token is matched in text
            got, _ = read_sft_shard(self.path("plain_0.bin"))
            self.assertIn(self.tool_call_id(), got[4][0])

    def tool_call_id(self):
        with open(self.json_path, encoding="utf-8") as f:
            return next(t["id"] for t in json.load(f)["added_tokens"] if t["content"] == "<tool_call>")


class SftTemplates(SftFiles):
    group = "sft_templates"

    def test_tokenizer_json_matches_the_renderer(self):
        self.check_all_templates("json")

    def test_sentencepiece_matches_the_renderer(self):
        self.check_all_templates("spm")

    def test_special_pieces_of_tokenizer_train(self):
        """--special: control pieces with ids 1, 2, ... in order, then the byte pieces; bad names refused."""
        for i, name in enumerate(SPECIALS):
            self.assertEqual(self.sp.id_to_piece(i + 1), name)
            self.assertTrue(self.sp.is_control(i + 1), name)
        self.assertEqual(self.sp.id_to_piece(len(SPECIALS) + 1), "<0x00>")
        self.assertEqual(self.sp.get_piece_size(), 700)
        for bad, needle in ((["a,b"], "'a,b'"), (["<unk>"], "'<unk>'"), (["<0x41>"], "'<0x41>'"), ([""], "''"),
                            (["<x>", "<x>"], "twice")):
            p = cli.run(["tokenizer", "train", "--text", self.corpus_path, "--vocab", 700, "--out", "t.model",
                         "--special", *bad], self.dir)
            self.assert_bad_input(p, "--special", needle)
            self.assertFalse(os.path.exists(self.path("t.model")))


class SftErrors(SftFiles):
    group = "sft_errors"

    def test_a_template_token_the_tokenizer_lacks(self):
        with open(self.path("t.txt"), "w", encoding="utf-8") as f:
            f.write(fortunes_text(30_000))
        self.run_ok(["tokenizer", "train", "--text", "t.txt", "--vocab", 400, "--out", "plain.model"], timeout=120)
        p = cli.run(["prepare", "--sft", self.single, "--tokenizer", "plain.model", "--template", "chatml", "--out",
                     "o.bin"], self.dir)
        self.assert_bad_input(p, "<|im_start|>", "chatml", "plain.model", "--special")
        p = cli.run(["prepare", "--sft", self.single, "--tokenizer", "plain.model", "--template", "alpaca", "--out",
                     "o.bin"], self.dir)
        self.assert_bad_input(p, "alpaca", "plain.model", "</s>, <|end_of_text|>, <|endoftext|>")
        # A tokenizer.json whose only EOS candidate is <|endoftext|> ends plain's records with it; its <|im_end|>
        # is a normal added token, which is no template token.
        with open(self.json_path, encoding="utf-8") as f:
            content = json.load(f)
        content["added_tokens"] = [t for t in content["added_tokens"] if t["content"] not in ("</s>", "<|end_of_text|>")]
        for t in content["added_tokens"]:
            if t["content"] == "<|im_end|>":
                t["special"] = False
        with open(self.path("few.json"), "w", encoding="utf-8") as f:
            json.dump(content, f, ensure_ascii=False)
        self.run_ok(["prepare", "--sft", self.single, "--tokenizer", "few.json", "--template", "plain", "--out",
                     "p.bin"])
        got, _ = read_sft_shard(self.path("p.bin"))
        endoftext = next(t["id"] for t in content["added_tokens"] if t["content"] == "<|endoftext|>")
        self.assertTrue(all(ids[-1] == endoftext and mask[-1] == 1 for ids, mask in got))
        p = cli.run(["prepare", "--sft", self.single, "--tokenizer", "few.json", "--template", "chatml", "--out",
                     "o.bin"], self.dir)
        self.assert_bad_input(p, "<|im_end|>", "chatml", "few.json", "special")
        p = cli.run(["prepare", "--sft", self.single, "--tokenizer", "few.json", "--template", "vicuna", "--out",
                     "o.bin"], self.dir)
        self.assert_bad_input(p, "--template", "vicuna", "chatml, llama2, llama3, alpaca and plain")
        self.assertFalse(os.path.exists(self.path("o.bin")))

    def test_malformed_records_name_file_line_and_field(self):
        good = json.dumps(SINGLE[1])
        ok_chat = [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}]
        # Every kind of malformed line is in tests/io/sft_records_test.cpp; these go through the command.
        cases = [
            ('{"messages": [', ["not valid JSON"]),
            (json.dumps({"messages": ok_chat[:1] + [{"role": "bot", "content": "b"}]}),
             ['messages[1].role "bot" is not system, user or assistant']),
            (json.dumps({"messages": [ok_chat[0], ok_chat[0], ok_chat[1]]}), ['messages[1].role is "user"',
                                                                               'expected "assistant"']),
            (json.dumps({"messages": [ok_chat[0], {"role": "assistant", "content": ""}]}),
             ["messages[1].content is empty"]),
            (json.dumps({"messages": [ok_chat[0], {"role": "assistant"}]}), ["messages[1].content is missing"]),
            (json.dumps({"instruction": "x", "input": 3, "output": "y"}), ["input is 3, expected a string"]),
        ]
        bad_utf8 = b'{"messages": [{"role": "user", "content": "a"}, {"role": "assistant", "content": "caf\xc3("}]}'
        for i, (line, needles) in enumerate(cases + [(bad_utf8, ["messages[1].content is not UTF-8", "0xc3"])]):
            with self.subTest(case=i, line=line):
                name = f"bad{i}.jsonl"
                with open(self.path(name), "wb") as f:
                    # line 1 good, line 2 blank, line 3 good, line 4 the bad record
                    f.write(f"{good}\n\n{good}\n".encode())
                    f.write(line if isinstance(line, bytes) else line.encode("utf-8"))
                    f.write(b"\n")
                p = cli.run(["prepare", "--sft", self.single, name, "--tokenizer", self.json_path, "--template",
                             "chatml", "--out", "o.bin"], self.dir)
                self.assert_bad_input(p, f"{name} line 4: ", *needles)
                self.assertFalse(os.path.exists(self.path("o.bin")))
                self.assertEqual([f for f in os.listdir(self.dir) if f.startswith("o.bin")], [])
        with open(self.path("empty.jsonl"), "w"):
            pass
        p = cli.run(["prepare", "--sft", "empty.jsonl", "--tokenizer", self.json_path, "--template", "chatml",
                     "--out", "o.bin"], self.dir)
        self.assert_bad_input(p, "empty.jsonl", "holds no records")
        # alpaca and plain take one exchange: a longer chat is refused naming its line.
        p = cli.run(["prepare", "--sft", self.multi, "--tokenizer", self.json_path, "--template", "alpaca", "--out",
                     "o.bin"], self.dir)
        self.assert_bad_input(p, f"{self.multi} line 1: ", "messages holds 6 user and assistant turns", "alpaca")
        self.assertFalse(os.path.exists(self.path("o.bin")))

    def test_shard_kinds_refuse_each_other(self):
        self.run_ok(["prepare", "--sft", self.single, "--tokenizer", self.spm_path, "--template", "chatml", "--out",
                     "sft.bin"])
        with open(self.path("t.txt"), "w") as f:
            f.write("some text for a token shard, long enough for a window of validation. " * 2)
        # prepare --text does not write over a fine-tuning shard, nor prepare --sft over a token shard.
        p = cli.run(["prepare", "--text", "t.txt", "--out", "sft.bin"], self.dir)
        self.assert_bad_input(p, "sft.bin", "a fine-tuning shard")
        self.run_ok(["prepare", "--text", "t.txt", "--out", "plain.bin"])
        p = cli.run(["prepare", "--sft", self.single, "--tokenizer", self.spm_path, "--template", "chatml", "--out",
                     "plain.bin"], self.dir)
        self.assert_bad_input(p, "plain.bin", "a token shard")
        # The trainer reads either kind by its magic: the fine-tuning shard trains (packed, its loss masked);
        # a glob that mixes the two kinds is refused, the token-stream reader naming the fine-tuning shard
        # for what it is; materialized attention, which has no document mask, is refused for it.
        keys = {"data.train": "sft.bin", "train.steps": 2, "model.vocab": 704, "model.seq_len": 32}
        p = cli.run(cli.train_args(keys), self.dir, timeout=120)
        self.assertEqual(p.returncode, 0, cli.describe(p))
        self.assertIn("fine-tuning records", p.stdout)
        p = cli.run(cli.train_args({**keys, "data.train": "*.bin"}), self.dir)
        self.assert_bad_input(p, "sft.bin", "is a fine-tuning shard", "not a token stream")
        p = cli.run(cli.train_args({**keys, "model.attention": "materialized"}), self.dir)
        self.assert_bad_input(p, "data.train", "sft.bin", "model.attention")
        # Validation data of either kind; refused naming the key when missing or asked for without it.
        p = cli.run(cli.train_args({**keys, "data.valid": "plain.bin", "train.eval_every": 1, "checkpoint.dir": "valid_ck"}),
                    self.dir, timeout=120)
        self.assertEqual(p.returncode, 0, cli.describe(p))
        self.assertIn("| val loss ", p.stdout)
        p = cli.run(cli.train_args({**keys, "data.valid": "missing.bin"}), self.dir)
        self.assert_bad_input(p, "data.valid", "missing.bin")
        p = cli.run(cli.train_args({**keys, "train.eval_every": 5}), self.dir)
        self.assert_bad_input(p, "train.eval_every", "data.valid")
        # A fine-tuning shard is replaced by the next prepare --sft.
        self.run_ok(["prepare", "--sft", self.single, "--tokenizer", self.spm_path, "--template", "plain", "--out",
                     "sft.bin"])
        self.assertEqual(len(read_sft_shard(self.path("sft.bin"))[0]), len(SINGLE))
        p = cli.run(["prepare", "--sft", self.single, "--text", "t.txt", "--tokenizer", self.spm_path, "--template",
                     "plain", "--out", "x.bin"], self.dir)
        self.assert_bad_input(p, "--sft and --text")


def main():
    global NODE_MODULES
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--meshtrain", required=True)
    ap.add_argument("--node-modules", required=True)
    ap.add_argument("--workdir", required=True)
    ap.add_argument("--group", choices=["sft_templates", "sft_errors", "all"], default="all")
    ap.add_argument("--mpiexec", default=None)
    ap.add_argument("-k", dest="pattern", default=None)
    ap.add_argument("-v", dest="verbose", action="store_true")
    opts = ap.parse_args()
    NODE_MODULES = hf_tokenizers_at(opts.node_modules)
    if NODE_MODULES is None:
        return 77
    cli.take_common_options(opts)
    return cli.run_groups({"sft_templates": SftTemplates, "sft_errors": SftErrors}, opts, cli.WORKDIR)


if __name__ == "__main__":
    sys.exit(main())
