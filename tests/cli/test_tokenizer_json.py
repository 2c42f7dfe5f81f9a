#!/usr/bin/env python3
"""tokenizer.json byte-level BPE (share/docs/usage.md, Tokenizers) against Hugging Face's own JavaScript tokenizers.

The test writes its tokenizer.json files itself: a few hundred merges learnt here, in plain Python, from
Debian's fortunes, put in a GPT-2-style file (ByteLevel with its regex, merges as "a b" strings), a
Llama-3-style one (Split regex with (?i:...) and \\p{L}/\\p{N} classes, then ByteLevel; merges as pairs,
ignore_merges, <|begin_of_text|> added by a TemplateProcessing post-processor, other special tokens), a
Qwen2-style one (NFC normalizer, Qwen's regex, a normal added token) and one with ByteLevel's prefix space
and a Split that removes its matches. Over varied texts (accents, CJK, emoji, digit runs, whitespace runs
and newlines, contractions, special tokens inside text), meshtrain's ids (test_tokenizer_json_tool, the
loader prepare and sample use) must equal @huggingface/tokenizers' (node tests/io/hf_tokenizers.mjs), with
and without the post-processor's tokens, and decode(encode(t)) must give t back. Then: `meshtrain prepare`
with these files (a BOS per document), bad files refused with exit 2 naming the file and the key (nothing
written), and a vocabulary of 70,000 ids written as a uint32 shard that a llama of that vocabulary trains
on (ids past 65,535 reaching it: a smaller model.vocab is refused naming such a token).

usage: test_tokenizer_json.py --meshtrain BIN --tool BIN --node-modules DIR --workdir DIR [-k PATTERN] [-v]

Skips (exit 77) only where `node` is not installed; a missing npm package is a failure.
"""
import argparse
import ctypes
import json
import os
import re
import shutil
import subprocess
import sys
import time
import unicodedata
from collections import Counter

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import test_cli as cli  # noqa: E402
from test_cli import CliCase  # noqa: E402

try:
    import numpy as np
except ImportError as e:  # a missing test dependency is a failure, never a silent skip
    sys.exit(f"test_tokenizer_json.py needs numpy for {sys.executable}: {e}")

TOOL = None
NODE_MODULES = None
HF_SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "io", "hf_tokenizers.mjs")
FORTUNES = "/usr/share/games/fortunes"

GPT2_REGEX = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
LLAMA3_REGEX = (r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"""
                r"""|\s*[\r\n]+|\s+(?!\S)|\s+""")
QWEN2_REGEX = (r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"""
               r"""|\s*[\r\n]+|\s+(?!\S)|\s+""")

TEXTS = [
    "Hello world",
    "The quick brown fox jumps over the lazy dog.",
    "I'm sure they'll say it's fine; we've done what we'd planned. YOU'RE RIGHT, I'M WRONG, It'S",
    "Numbers: 1234567890 3.14159 2026-12-03 007 12,345,678 x86_64 v1.2.3",
    "Whitespace   runs\t\tand tabs\n\nnewlines\r\n  and trailing   \n   ",
    "  leading spaces, and a lone one at the end ",
    "naïve café, Ölçü, São Paulo, Ærøskøbing, crème brûlée",
    "Decomposed: cafe\u0301 and re\u0301sume\u0301 (NFC composes them)",
    "日本語のテキストと中文的句子，还有한국어 문장。",
    "Emoji 👍🏽 🇫🇷 👨‍👩‍👧 🤖🤖🤖 and ✨sparkles✨",
    "Greek: Καλημέρα κόσμε; Cyrillic: Съешь же ещё этих мягких булок",
    "Special tokens inside text: Hello<|eot_id|>world <|begin_of_text|>again<|endoftext|>x <|im_start|>user",
    "Adjacent <|eot_id|><|eot_id|> and half <|eot_id| or |eot_id|> ones",
    "Added token <tool_call>{\"name\": 1}</tool_call> normal one",
    "Punctuation!!! ??? ... --- *** ((nested)) [brackets] {braces} @user #tag $100 %50 ^_^",
    "\n\n\n",
    " ",
    "a",
    "Mixed1234abc 12ab34 αβγ123 ١٢٣ ②",
]


def fortunes_text(limit=200_000):
    chunks = []
    for name in ("computers", "cookie", "fortunes", "science"):
        path = os.path.join(FORTUNES, name)
        if os.path.exists(path):
            with open(path, encoding="utf-8", errors="replace") as f:
                chunks.append(f.read())
    text = "".join(chunks)
    if not text:
        raise RuntimeError(f"no fortunes under {FORTUNES} (Debian: fortunes, fortunes-min)")
    return text if limit is None else text[:limit]


def byte_characters():
    """GPT-2's byte-to-character map, written from its definition (printable Latin-1 stands for itself)."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    chars, n = {}, 0
    for b in range(256):
        if b in printable:
            chars[b] = chr(b)
        else:
            chars[b] = chr(256 + n)
            n += 1
    return chars


BYTE_CHARS = byte_characters()


def to_piece(data):
    return "".join(BYTE_CHARS[b] for b in data)


def learn_merges(text, count):
    """Byte-level BPE merges, learnt greedily over the most frequent words of `text` (a crude word split:
    the tokenizers' own regexes decide the words at encoding time)."""
    words = Counter(re.findall(r" ?[A-Za-z]+| ?[0-9]+| ?[^\sA-Za-z0-9]+|\s+", text))
    vocab = {tuple(to_piece(bytes([b])) for b in w.encode("utf-8")): c for w, c in words.most_common(3000)}
    merges = []
    for _ in range(count):
        pairs = Counter()
        for word, c in vocab.items():
            for pair in zip(word, word[1:]):
                pairs[pair] += c
        if not pairs:
            break
        best = max(pairs.items(), key=lambda kv: (kv[1], kv[0]))[0]
        merges.append(best)
        merged = {}
        for word, c in vocab.items():
            out, i = [], 0
            while i < len(word):
                if i + 1 < len(word) and (word[i], word[i + 1]) == best:
                    out.append(word[i] + word[i + 1])
                    i += 2
                else:
                    out.append(word[i])
                    i += 1
            merged[tuple(out)] = merged.get(tuple(out), 0) + c
        vocab = merged
    return merges


def base_vocab(merges, first_merge_id=256, fillers=0):
    """Bytes 0..255 by value, `fillers` unreachable pieces, then each merge's result in rank order."""
    vocab = {to_piece(bytes([b])): b for b in range(256)}
    for i in range(fillers):
        vocab[f"<filler_{i}>"] = 256 + i
    next_id = max(first_merge_id, 256 + fillers)
    for a, b in merges:
        if a + b not in vocab:
            vocab[a + b] = next_id
            next_id += 1
    return vocab, next_id


def added(content, id_, special=True, normalized=False):
    return {"id": id_, "content": content, "single_word": False, "lstrip": False, "rstrip": False,
            "normalized": normalized, "special": special}


def byte_level(add_prefix_space=False, use_regex=True):
    return {"type": "ByteLevel", "add_prefix_space": add_prefix_space, "trim_offsets": True, "use_regex": use_regex}


def split(pattern, behavior="Isolated", invert=False):
    return {"type": "Split", "pattern": {"Regex": pattern}, "behavior": behavior, "invert": invert}


def tokenizer_file(merges, pre_tokenizer, added_tokens=(), normalizer=None, post_processor=None, pairs=False,
                   ignore_merges=False, fillers=0, first_merge_id=256):
    vocab, next_id = base_vocab(merges, first_merge_id, fillers)
    tokens = []
    for spec in added_tokens:
        tokens.append(added(spec[0], next_id, *spec[1:]))
        next_id += 1
    return {
        "version": "1.0", "truncation": None, "padding": None,
        "added_tokens": tokens,
        "normalizer": normalizer,
        "pre_tokenizer": pre_tokenizer,
        "post_processor": post_processor(tokens) if post_processor else byte_level(),
        "decoder": byte_level(add_prefix_space=True),
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                  "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False,
                  "ignore_merges": ignore_merges, "vocab": vocab,
                  "merges": [[a, b] if pairs else f"{a} {b}" for a, b in merges]},
    }


def bos_template(tokens):
    bos = tokens[0]
    return {"type": "Sequence", "processors": [
        byte_level(),
        {"type": "TemplateProcessing",
         "single": [{"SpecialToken": {"id": bos["content"], "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
         "pair": [{"SpecialToken": {"id": bos["content"], "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
                  {"SpecialToken": {"id": bos["content"], "type_id": 1}}, {"Sequence": {"id": "B", "type_id": 1}}],
         "special_tokens": {bos["content"]: {"id": bos["content"], "ids": [bos["id"]], "tokens": [bos["content"]]}}},
    ]}


LLAMA3_SPECIALS = [("<|begin_of_text|>",), ("<|end_of_text|>",), ("<|start_header_id|>",), ("<|end_header_id|>",),
                   ("<|eot_id|>",)]


def make_files(directory, merges):
    files = {
        "gpt2": tokenizer_file(merges, byte_level(), [("<|endoftext|>",)]),
        "llama3": tokenizer_file(merges, {"type": "Sequence", "pretokenizers": [
            split(LLAMA3_REGEX), byte_level(use_regex=False)]}, LLAMA3_SPECIALS, post_processor=bos_template,
            pairs=True, ignore_merges=True),
        "qwen2": tokenizer_file(merges, {"type": "Sequence", "pretokenizers": [
            split(QWEN2_REGEX), byte_level(use_regex=False)]},
            [("<|endoftext|>",), ("<|im_start|>",), ("<|im_end|>",), ("<tool_call>", False, False),
             ("</tool_call>", False, True)],
            normalizer={"type": "NFC"}, pairs=True),
        "prefix_removed": tokenizer_file(merges, {"type": "Sequence", "pretokenizers": [
            split(r"[!?]+", behavior="Removed"), byte_level(add_prefix_space=True)]}, [("<|endoftext|>",)]),
    }
    paths = {}
    for name, content in files.items():
        paths[name] = os.path.join(directory, f"{name}.json")
        with open(paths[name], "w", encoding="utf-8") as f:
            json.dump(content, f, ensure_ascii=False, indent=1)
    return paths


def xxh64(data):
    """XXH64 with seed 0 from the system's libxxhash, not through meshtrain."""
    lib = ctypes.CDLL("libxxhash.so.0")
    lib.XXH64.restype = ctypes.c_uint64
    lib.XXH64.argtypes = [ctypes.c_char_p, ctypes.c_size_t, ctypes.c_uint64]
    return f"{lib.XXH64(data, len(data), 0):016x}"


def hf_tokenizers_at(node_modules):
    """The absolute node_modules holding @huggingface/tokenizers, or None when node is missing (the
    test is then skipped, exit 77); exits naming the package when node is there but it is not."""
    if shutil.which("node") is None:
        print("SKIP: node is not installed (share/scripts/setup.sh installs nodejs and @huggingface/tokenizers)")
        return None
    modules = os.path.abspath(node_modules)
    package = os.path.join(modules, "@huggingface", "tokenizers", "package.json")
    if not os.path.exists(package):
        sys.exit(f"{package} is missing: run share/scripts/setup.sh, which installs @huggingface/tokenizers there")
    return modules


def run_json(args, what):
    p = subprocess.run(args, capture_output=True, timeout=120)
    if p.returncode != 0:
        raise AssertionError(f"{what} failed (exit {p.returncode}): {p.stderr.decode('utf-8', 'replace')[-3000:]}")
    return json.loads(p.stdout)


def read_shard(path):
    with open(path, "rb") as f:
        header = np.frombuffer(f.read(1024), dtype="<i4")
        body = f.read()
    dtype = {(20240520, 1): "<u2", (20240801, 7): "<u4"}[(int(header[0]), int(header[1]))]
    tokens = np.frombuffer(body, dtype=dtype)
    assert header[2] == len(tokens), path
    return int(header[0]), [int(t) for t in tokens]


class TokenizerJson(CliCase):
    group = "tokenizer_json"

    @classmethod
    def setUpClass(cls):
        cls.shared = os.path.join(cli.WORKDIR, cls.group, "_files")
        shutil.rmtree(cls.shared, ignore_errors=True)
        os.makedirs(cls.shared)
        cls.corpus = fortunes_text()
        cls.merges = learn_merges(cls.corpus, 300)
        cls.files = make_files(cls.shared, cls.merges)
        cls.texts = TEXTS + [cls.corpus[:4000], cls.corpus[50_000:52_000]]
        cls.texts_path = os.path.join(cls.shared, "texts.json")
        with open(cls.texts_path, "w", encoding="utf-8") as f:
            json.dump(cls.texts, f, ensure_ascii=False)

    def peer_and_mine(self, name):
        path = self.files[name]
        peer = run_json(["node", HF_SCRIPT, NODE_MODULES, path, self.texts_path], f"@huggingface/tokenizers on {name}")
        mine = run_json([TOOL, path, self.texts_path], f"test_tokenizer_json_tool on {name}")
        return peer, mine

    def check_against_peer(self, name, normalize=lambda t: t):
        peer, mine = self.peer_and_mine(name)
        for i, text in enumerate(self.texts):
            for key in ("ids", "document"):
                self.assertEqual(mine[key][i], peer[key][i], f"{name}: {key} of text {i} {text[:80]!r}")
            self.assertEqual(mine["decoded"][i], normalize(text), f"{name}: decode(encode(text {i})) {text[:80]!r}")
            self.assertEqual(peer["decoded"][i], normalize(text), f"{name}: the peer's decode of text {i}")
        # The texts use the merges: most words are not spelled out byte by byte.
        total_bytes = sum(len(t.encode("utf-8")) for t in self.texts)
        total_ids = sum(len(ids) for ids in mine["ids"])
        self.assertLess(total_ids, 0.7 * total_bytes, f"{name}: {total_ids} ids for {total_bytes} bytes")
        return mine

    def test_gpt2_style_equals_hugging_face(self):
        mine = self.check_against_peer("gpt2")
        self.assertEqual(mine["ids"], mine["document"], "GPT-2's ByteLevel post-processor adds no tokens")

    def test_llama3_style_equals_hugging_face(self):
        mine = self.check_against_peer("llama3")
        bos = json.load(open(self.files["llama3"], encoding="utf-8"))["added_tokens"][0]["id"]
        for ids, document in zip(mine["ids"], mine["document"]):
            self.assertEqual(document, [bos] + ids)
        eot = json.load(open(self.files["llama3"], encoding="utf-8"))["added_tokens"][4]["id"]
        self.assertIn(eot, mine["ids"][TEXTS.index(next(t for t in TEXTS if t.startswith("Special")))])

    def test_qwen2_style_with_nfc_equals_hugging_face(self):
        mine = self.check_against_peer("qwen2", normalize=lambda t: unicodedata.normalize("NFC", t))
        decomposed = TEXTS.index(next(t for t in TEXTS if t.startswith("Decomposed")))
        self.assertIn("café", mine["decoded"][decomposed])

    def test_prefix_space_and_removed_split_equal_hugging_face(self):
        peer, mine = self.peer_and_mine("prefix_removed")
        for i, text in enumerate(self.texts):
            self.assertEqual(mine["ids"][i], peer["ids"][i], f"prefix_removed: ids of text {i} {text[:80]!r}")

    def test_prepare_writes_the_document_ids(self):
        texts = [self.path("a.txt"), self.path("b.txt")]
        for path, text in zip(texts, [TEXTS[2], TEXTS[9]]):
            with open(path, "w", encoding="utf-8") as f:
                f.write(text)
        with open(self.path("texts.json"), "w", encoding="utf-8") as f:
            json.dump([TEXTS[2], TEXTS[9]], f, ensure_ascii=False)
        peer = run_json(["node", HF_SCRIPT, NODE_MODULES, self.files["llama3"], self.path("texts.json")], "peer")
        self.run_ok(["prepare", "--tokenizer", self.files["llama3"], "--text", *texts, "--out", "s.bin"])
        self.assertTrue(peer["document"][0][0] != peer["ids"][0][0], "the peer puts a BOS first")
        magic, tokens = read_shard(self.path("s.bin"))
        self.assertEqual(magic, 20240520, "a vocabulary under 65,536 ids keeps the uint16 shard")
        self.assertEqual(tokens, peer["document"][0] + peer["document"][1])
        # An --out that is a tokenizer.json is not written over (usage.md, Outputs that never destroy a file).
        shutil.copy(self.files["gpt2"], self.path("other.json"))
        p = cli.run(["prepare", "--tokenizer", self.files["llama3"], "--text", *texts, "--out", "other.json"], self.dir)
        self.assert_bad_input(p, "other.json", "a tokenizer.json")
        with open(self.files["gpt2"], "rb") as a, open(self.path("other.json"), "rb") as b:
            self.assertEqual(a.read(), b.read())

    def test_a_megabyte_encodes_in_linear_time(self):
        """A whole text is one subject of the split regex: matching must not re-read it at every match
        (PCRE2's UTF check did: a minute for this megabyte, against a second)."""
        with open(self.path("big.txt"), "w", encoding="utf-8") as f:
            f.write((fortunes_text(limit=None) * 2)[:1_000_000])
        start = time.monotonic()
        self.run_ok(["prepare", "--tokenizer", self.files["llama3"], "--text", "big.txt", "--out", "big.bin"])
        self.assertLess(time.monotonic() - start, 20)

    def test_bad_files_exit_2_naming_file_and_key(self):
        good = json.load(open(self.files["llama3"], encoding="utf-8"))
        with open(self.path("t.txt"), "w") as f:
            f.write("some text")

        def variant(name, change):
            content = json.loads(json.dumps(good))
            change(content)
            path = self.path(name)
            with open(path, "w", encoding="utf-8") as f:
                json.dump(content, f)
            return path

        def set_key(keys, value):
            def change(content):
                node = content
                for k in keys[:-1]:
                    node = node[k]
                node[keys[-1]] = value
            return change

        with open(self.path("invalid.json"), "w") as f:
            f.write('{"model": {"type": "BPE", "vocab": {')
        cases = [
            (self.path("invalid.json"), ["invalid.json", "not valid JSON", "byte"]),
            (variant("wordpiece.json", set_key(["model", "type"], "WordPiece")), ["wordpiece.json", "model.type",
                                                                               "WordPiece"]),
            (variant("missing.json", lambda c: c["model"]["merges"].insert(3, ["Ġzzqx", "q"])),
             ["missing.json", "model.merges[3]", "Ġzzqx"]),
            (variant("fallback.json", set_key(["model", "byte_fallback"], True)), ["fallback.json",
                                                                                   "model.byte_fallback"]),
            (variant("dropout.json", set_key(["model", "dropout"], 0.1)), ["dropout.json", "model.dropout"]),
            (variant("pre.json", set_key(["pre_tokenizer", "pretokenizers", 0, "type"], "Whitespace")),
             ["pre.json", "pre_tokenizer.pretokenizers[0].type", "Whitespace"]),
            (variant("regex.json", set_key(["pre_tokenizer", "pretokenizers", 0, "pattern", "Regex"], "(unclosed")),
             ["regex.json", "pre_tokenizer.pretokenizers[0].pattern.Regex"]),
            (variant("norm.json", set_key(["normalizer"], {"type": "Lowercase"})), ["norm.json", "normalizer.type",
                                                                                   "Lowercase"]),
            (variant("post.json", set_key(["post_processor"], {"type": "RobertaProcessing"})),
             ["post.json", "post_processor.type", "RobertaProcessing"]),
            (variant("byte.json", lambda c: c["model"]["vocab"].pop("Ā")), ["byte.json", "model.vocab", "0x00"]),
        ]
        for path, needles in cases:
            for args in (["prepare", "--tokenizer", path, "--text", "t.txt", "--out", "o.bin"],
                         cli.train_args({"data.train": "o.bin", "data.tokenizer": path})):
                p = cli.run(args, self.dir)
                self.assert_bad_input(p, *needles)
            self.assertFalse(os.path.exists(self.path("o.bin")), f"{path}: prepare wrote its output")

    def test_a_vocabulary_past_65536_writes_uint32_shards_a_llama_trains_on(self):
        merges = self.merges[:200]
        content = tokenizer_file(merges, {"type": "Sequence", "pretokenizers": [
            split(LLAMA3_REGEX), byte_level(use_regex=False)]}, LLAMA3_SPECIALS, post_processor=bos_template,
            pairs=True, fillers=68_000)
        big = self.path("big.json")
        with open(big, "w", encoding="utf-8") as f:
            json.dump(content, f, ensure_ascii=False)
        vocab = max(t["id"] for t in content["added_tokens"]) + 1
        self.assertGreater(vocab, 68_256)
        with open(self.path("t.txt"), "w", encoding="utf-8") as f:
            f.write(self.corpus[:3000])
        with open(self.path("texts.json"), "w", encoding="utf-8") as f:
            json.dump([self.corpus[:3000]], f, ensure_ascii=False)
        self.run_ok(["prepare", "--tokenizer", big, "--text", "t.txt", "--out", "wide.bin"])
        magic, tokens = read_shard(self.path("wide.bin"))
        self.assertEqual(magic, 20240801, "ids past 65,535 need the uint32 shard")
        peer = run_json(["node", HF_SCRIPT, NODE_MODULES, big, self.path("texts.json")], "peer")
        self.assertEqual(tokens, peer["document"][0])
        self.assertGreater(max(tokens), 65_535)
        # The model sees the ids as they are: a vocabulary that stops short of them is refused naming one.
        small = cli.run(cli.train_args({**cli.LLAMA, "data.train": "wide.bin", "model.vocab": 65_600,
                                        "train.steps": 1}), self.dir)
        self.assert_bad_input(small, "wide.bin", "outside the vocabulary of 65600")
        self.run_ok(cli.train_args({**cli.LLAMA, "data.train": "wide.bin", "data.tokenizer": big,
                                    "model.vocab": vocab, "train.steps": 1, "checkpoint.dir": "ck"}), timeout=120)
        # The checkpoint records the file's XXH64 (libxxhash, not meshtrain), and sample decodes with it.
        checkpoint = self.path("ck", "step_00000001.h5")
        with open(big, "rb") as f:
            self.assertEqual(cli.h5_attr(checkpoint, "tokenizer_xxh64"), xxh64(f.read()))
        p = self.run_ok(["sample", "--checkpoint", checkpoint, "--prompt", "The naïve ", "--tokens", 4], timeout=120)
        self.assertTrue(p.stdout.startswith("<|begin_of_text|>The naïve "), p.stdout[:200])


def main():
    global TOOL, NODE_MODULES
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--meshtrain", required=True)
    ap.add_argument("--tool", required=True)
    ap.add_argument("--node-modules", required=True)
    ap.add_argument("--workdir", required=True)
    ap.add_argument("--mpiexec", default=None)
    ap.add_argument("-k", dest="pattern", default=None)
    ap.add_argument("-v", dest="verbose", action="store_true")
    opts = ap.parse_args()
    NODE_MODULES = hf_tokenizers_at(opts.node_modules)
    if NODE_MODULES is None:
        return 77
    TOOL = os.path.abspath(opts.tool)
    opts.group = "tokenizer_json"
    cli.take_common_options(opts)
    return cli.run_groups({"tokenizer_json": TokenizerJson}, opts, cli.WORKDIR)


if __name__ == "__main__":
    sys.exit(main())
