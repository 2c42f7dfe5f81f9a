#!/usr/bin/env python3
"""`meshtrain sample --template` (share/docs/usage.md, Fine-tuning data, Sampling a chat) against prepare --sft.

The prompt ids: for every template, with and without a system turn, with a tokenizer.json and a SentencePiece
model (both with every template's tokens, as test_sft_prepare.py makes them), the ids `sample --ids --tokens 0`
feeds the model must equal the ids that `prepare --sft` writes for a record of the same turns and an answer, up
to the answer's first loss-carrying token (test_sft_prepare.py checks those against a renderer written from
usage.md). Texts hold Unicode and the templates' own token strings, which stay text.

The stop: a tiny llama trained on a stream that repeats [the prompt's last id, 'H', 'i', '!', END], END being the
template's end-of-turn id (llama3 <|eot_id|>, chatml <|im_end|>), answers greedily "Hi!" and must stop there:
--ids prints the prompt, H i ! and END, nothing after; the text is "Hi!" alone (no prompt, no END); --tokens 2
cuts it to "Hi". The same model under a template whose end-of-turn token it never draws runs to --tokens.

Errors (exit 2, nothing on stdout): an unknown template, a template token the checkpoint's tokenizer lacks
(naming the token, the template and the file), --template on a byte-level checkpoint, --system without
--template.

usage: test_sft_sample.py --meshtrain BIN --workdir DIR [-k PATTERN] [-v]
"""
import argparse
import json
import os
import shutil
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import test_cli as cli  # noqa: E402
from test_cli import CliCase  # noqa: E402
from test_sft_prepare import SPECIALS, TEMPLATES, read_sft_shard  # noqa: E402
from test_tokenizer_json import (LLAMA3_REGEX, LLAMA3_SPECIALS, bos_template, byte_level, fortunes_text,  # noqa: E402
                                 learn_merges, split, tokenizer_file)

# (system, user): the turns whose prompt sample must encode as prepare does.
TURNS = [
    (None, "Tell me a fortune about computers."),
    ("Réponds brièvement. 日本語", "Write <|im_end|>, <|eot_id|>, [INST] and </s> literally 👍🏽\n"),
]
ANSWER = "An answer."
# The answer the stop models learn: the byte-level pieces of 'H', 'i' and '!' (ids = byte values).
HI = [ord("H"), ord("i"), ord("!")]
TINY_LLAMA = {**cli.LLAMA, "train.seed": 5}


def sample_ids(stdout):
    return [int(t) for t in stdout.split()]


class SftSample(CliCase):
    group = "sft_sample"

    @classmethod
    def setUpClass(cls):
        cls.shared = os.path.join(cli.WORKDIR, cls.group, "_files")
        shutil.rmtree(cls.shared, ignore_errors=True)
        os.makedirs(cls.shared)
        corpus = fortunes_text(50_000)
        corpus_path = cls.file("corpus.txt")
        with open(corpus_path, "w", encoding="utf-8") as f:
            f.write(corpus)
        merges = learn_merges(corpus, 100)
        pre = {"type": "Sequence", "pretokenizers": [split(LLAMA3_REGEX), byte_level(use_regex=False)]}
        # Every template's tokens; and one with Llama 3's alone, which lacks chatml's.
        cls.json_path, cls.json_vocab, cls.json_special = cls.write_json(
            "tok.json", tokenizer_file(merges, pre, [(t,) for t in SPECIALS], post_processor=bos_template, pairs=True))
        cls.llama3_path, cls.llama3_vocab, _ = cls.write_json(
            "llama3.json", tokenizer_file(merges, pre, LLAMA3_SPECIALS, post_processor=bos_template, pairs=True))
        cls.spm_path = cls.file("tok.model")
        p = cli.run(["tokenizer", "train", "--text", corpus_path, "--vocab", 500, "--out", cls.spm_path, "--special",
                     *SPECIALS], cls.shared, timeout=120)
        if p.returncode != 0:
            raise RuntimeError(f"tokenizer train --special failed: {cli.describe(p)}")
        # One record per TURNS entry, answered with ANSWER.
        cls.records_path = cls.file("turns.jsonl")
        with open(cls.records_path, "w", encoding="utf-8") as f:
            for system, user in TURNS:
                messages = ([{"role": "system", "content": system}] if system is not None else []) + [
                    {"role": "user", "content": user}, {"role": "assistant", "content": ANSWER}]
                f.write(json.dumps({"messages": messages}, ensure_ascii=False) + "\n")
        cli.write_shard(cls.file("bytes.bin"), list(range(256)) * 20)
        cls.checkpoints = {}

    @classmethod
    def file(cls, name):
        return os.path.join(cls.shared, name)

    @classmethod
    def write_json(cls, name, content):
        path = cls.file(name)
        with open(path, "w", encoding="utf-8") as f:
            json.dump(content, f, ensure_ascii=False)
        vocab = max(t["id"] for t in content["added_tokens"]) + 1
        return path, vocab, {t["content"]: t["id"] for t in content["added_tokens"]}

    def checkpoint(self, name, tokenizer, vocab, shard="bytes.bin", keys=None):
        """A tiny llama trained on the shard under _files/name/, recording `tokenizer` (made once per name)."""
        if name not in self.checkpoints:
            directory = self.file(name)
            os.makedirs(directory)
            overrides = {**TINY_LLAMA, "data.train": self.file(shard), "model.vocab": vocab, "train.steps": 1,
                         "checkpoint.dir": "ck", **(keys or {})}
            if tokenizer:
                overrides["data.tokenizer"] = tokenizer
            p = cli.run(cli.train_args(overrides), directory, timeout=120)
            self.assertEqual(p.returncode, 0, cli.describe(p))
            self.checkpoints[name] = os.path.join(directory, "ck", cli.read_latest(os.path.join(directory, "ck")))
        return self.checkpoints[name]

    def prepared_prompts(self, template, tokenizer):
        """The ids prepare --sft writes for each TURNS record before its answer's first loss-carrying token."""
        out = f"{template}.bin"
        self.run_ok(["prepare", "--sft", self.records_path, "--tokenizer", tokenizer, "--template", template, "--out",
                     out])
        records, _ = read_sft_shard(self.path(out))
        self.assertEqual(len(records), len(TURNS))
        return [ids[:mask.index(1)] for ids, mask in records]

    def sample(self, checkpoint, template, user, system=None, tokens=0, ids=True, codes=(0,)):
        args = ["sample", "--checkpoint", checkpoint, "--prompt", user, "--tokens", tokens, "--temperature", 0]
        args += ["--template", template] if template else []
        args += ["--system", system] if system is not None else []
        return self.run_ok(args + (["--ids"] if ids else []), codes=codes, timeout=120)

    def check_prompts(self, tokenizer, vocab, name):
        checkpoint = self.checkpoint(name, tokenizer, vocab)
        for template in TEMPLATES:
            want = self.prepared_prompts(template, tokenizer)
            for (system, user), want_ids in zip(TURNS, want):
                with self.subTest(template=template, system=system):
                    got = sample_ids(self.sample(checkpoint, template, user, system).stdout)
                    self.assertEqual(got, want_ids, f"{template}: sample's prompt ids differ from prepare's")

    def test_prompt_ids_equal_prepare_tokenizer_json(self):
        self.check_prompts(self.json_path, self.json_vocab, "json")

    def test_prompt_ids_equal_prepare_sentencepiece(self):
        self.check_prompts(self.spm_path, 500, "spm")

    def stop_model(self, template, end_id):
        """A llama that after the template's prompt for TURNS[0] answers H i ! and its end-of-turn id."""
        last = self.prepared_prompts(template, self.json_path)[0][-1]
        shard = f"cycle_{template}.bin"
        cli.write_shard(self.file(shard), [last, *HI, end_id] * 2000)
        keys = {"train.steps": 300, "optim.lr": 0.01, "optim.warmup_steps": 0}
        return self.checkpoint(f"stop_{template}", self.json_path, self.json_vocab, shard, keys)

    def check_stop(self, template, end):
        end_id = self.json_special[end]
        checkpoint = self.stop_model(template, end_id)
        prompt = self.prepared_prompts(template, self.json_path)[0]
        user = TURNS[0][1]
        got = sample_ids(self.sample(checkpoint, template, user, tokens=50).stdout)
        self.assertEqual(got, prompt + HI + [end_id], f"{template}: the answer should be H i ! and {end}, then stop")
        p = self.sample(checkpoint, template, user, tokens=50, ids=False)
        self.assertEqual(p.stdout, "Hi!\n", "the text printed is the answer alone")
        p = self.sample(checkpoint, template, user, tokens=2, ids=False)
        self.assertEqual(p.stdout, "Hi\n", "--tokens caps the answer")
        return checkpoint

    def test_llama3_stops_at_eot_id(self):
        checkpoint = self.check_stop("llama3", "<|eot_id|>")
        # The control: under chatml (whose end, <|im_end|>, this model never draws) the answer runs to --tokens,
        # the model's <|eot_id|> in it.
        got = sample_ids(self.sample(checkpoint, "chatml", TURNS[0][1], tokens=12).stdout)
        prompt = self.prepared_prompts("chatml", self.json_path)[0]
        self.assertEqual(len(got), len(prompt) + 12)
        self.assertIn(self.json_special["<|eot_id|>"], got[len(prompt):])

    def test_chatml_stops_at_im_end(self):
        self.check_stop("chatml", "<|im_end|>")

    def test_errors(self):
        checkpoint = self.checkpoint("json", self.json_path, self.json_vocab)
        p = cli.run(["sample", "--checkpoint", checkpoint, "--prompt", "x", "--template", "vicuna"], self.dir)
        self.assert_bad_input(p, "--template", "vicuna", "chatml, llama2, llama3, alpaca and plain")
        self.assertEqual(p.stdout, "")
        p = cli.run(["sample", "--checkpoint", checkpoint, "--prompt", "x", "--system", "s"], self.dir)
        self.assert_bad_input(p, "--system", "--template")
        self.assertEqual(p.stdout, "")
        # A tokenizer with Llama 3's tokens alone: chatml's are missing, llama3 works.
        llama3 = self.checkpoint("llama3_only", self.llama3_path, self.llama3_vocab)
        p = cli.run(["sample", "--checkpoint", llama3, "--prompt", "x", "--template", "chatml"], self.dir)
        self.assert_bad_input(p, "<|im_start|>", "chatml", "llama3.json", "special")
        self.assertEqual(p.stdout, "")
        self.sample(llama3, "llama3", "x")
        byte_level_model = self.checkpoint("bytes", None, 256)
        p = cli.run(["sample", "--checkpoint", byte_level_model, "--prompt", "x", "--template", "llama3"], self.dir)
        self.assert_bad_input(p, "--template llama3", "records no tokenizer")
        self.assertEqual(p.stdout, "")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--meshtrain", required=True)
    ap.add_argument("--workdir", required=True)
    ap.add_argument("--mpiexec", default=None)
    ap.add_argument("-k", dest="pattern", default=None)
    ap.add_argument("-v", dest="verbose", action="store_true")
    opts = ap.parse_args()
    opts.group = "sft_sample"
    cli.take_common_options(opts)
    return cli.run_groups({"sft_sample": SftSample}, opts, cli.WORKDIR)


if __name__ == "__main__":
    sys.exit(main())
