#!/usr/bin/env python3
"""SentencePiece tokenizers through the command line (share/docs/usage.md, Tokenizers).

`meshtrain tokenizer train` on Debian's fortunes (the quickstart's corpus), `prepare --tokenizer`,
`data.tokenizer`, what checkpoints record, `sample` and `inspect`, checked against what meshtrain
does not compute itself: python3-sentencepiece's encoder and decoder on the same model file, XXH64
from libxxhash through ctypes, the attributes read with h5py.

usage: test_tokenizer.py --meshtrain BIN --workdir DIR [--mpiexec MPIEXEC] [-k PATTERN] [-v]
"""
import ctypes
import os
import shutil
import struct
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import test_cli as cli  # noqa: E402
from test_cli import CliCase, h5_attr, train_args  # noqa: E402

try:
    import h5py
    import numpy as np
    import sentencepiece as spm
except ImportError as e:  # a missing test dependency is a failure, never a silent skip
    sys.exit(f"test_tokenizer.py needs numpy, h5py and sentencepiece for {sys.executable}: {e}")

FORTUNES = "/usr/share/games/fortunes"
# Two fortune files (~480 KB): a model of 1000 pieces trains in about a second.
CORPUS = [os.path.join(FORTUNES, name) for name in ("computers", "cookie")]
VOCAB = 1000
# A tiny gpt2 over the tokenizer's vocabulary.
SUBWORD_MODEL = {"model.vocab": VOCAB, "model.d_model": 32, "model.seq_len": 32, "train.steps": 40,
                 "optim.lr": 3e-3, "checkpoint.dir": "ck"}


def xxh64(data):
    """XXH64 with seed 0 from the system's libxxhash, not through meshtrain."""
    lib = ctypes.CDLL("libxxhash.so.0")
    lib.XXH64.restype = ctypes.c_uint64
    lib.XXH64.argtypes = [ctypes.c_char_p, ctypes.c_size_t, ctypes.c_uint64]
    return f"{lib.XXH64(data, len(data), 0):016x}"


def shard_tokens(path):
    with open(path, "rb") as f:
        header = np.frombuffer(f.read(1024), dtype="<i4")
        tokens = np.frombuffer(f.read(), dtype="<u2")
    assert header[0] == cli.SHARD_MAGIC and header[2] == len(tokens), path
    return [int(t) for t in tokens]


def text_of(path):
    with open(path, encoding="utf-8") as f:
        return f.read()


def file_bytes(path):
    with open(path, "rb") as f:
        return f.read()


def protobuf_piece(text, score):
    """One ModelProto.pieces entry (field 1: piece, 2: score, 3: type NORMAL), encoded by hand."""
    def varint(n):
        out = b""
        while True:
            low, n = n & 0x7F, n >> 7
            if not n:
                return out + bytes([low])
            out += bytes([low | 0x80])
    inner = b"\x0a" + varint(len(text)) + text + b"\x15" + struct.pack("<f", score) + b"\x18\x01"
    return b"\x0a" + varint(len(inner)) + inner


class Tokenizers(CliCase):
    group = "tokenizer"

    @classmethod
    def setUpClass(cls):
        """One model trained on the corpus for every case (cases copy it before changing anything)."""
        d = os.path.join(cli.WORKDIR, cls.group, "_model")
        shutil.rmtree(d, ignore_errors=True)
        os.makedirs(d)
        p = cli.run(["tokenizer", "train", "--text", *CORPUS, "--vocab", VOCAB, "--out", "tok.model"], d)
        if p.returncode != 0:
            raise RuntimeError(f"training the tokenizer failed: {cli.describe(p)}")
        cls.model = os.path.join(d, "tok.model")
        cls.sp = spm.SentencePieceProcessor(model_file=cls.model)

    def setUp(self):
        super().setUp()
        shutil.copy(self.model, self.path("tok.model"))

    def prepare(self, texts, out="shard.bin", tokenizer="tok.model"):
        return self.run_ok(["prepare", "--tokenizer", tokenizer, "--text", *texts, "--out", out])

    def train_subword(self, steps=None):
        """prepare + a tiny gpt2 trained on the shard with data.tokenizer; returns the last checkpoint."""
        self.prepare(CORPUS)
        keys = {**SUBWORD_MODEL, "data.train": "shard.bin", "data.tokenizer": "tok.model"}
        if steps:
            keys["train.steps"] = steps
        self.run_ok(train_args(keys))
        return self.path("ck", cli.read_latest(self.path("ck")))

    def test_model_is_bpe_of_the_asked_size_and_the_same_file_twice(self):
        self.assertEqual(self.sp.get_piece_size(), VOCAB)
        self.run_ok(["tokenizer", "train", "--text", *CORPUS, "--vocab", VOCAB, "--out", "again.model"])
        self.assertEqual(file_bytes(self.path("again.model")), file_bytes(self.model), "two trainings differ")
        # Byte fallback: a character the corpus never had encodes as its UTF-8 bytes' pieces.
        pieces = self.sp.encode("\u65e5", out_type=str)
        self.assertEqual(pieces, ["<0xE6>", "<0x97>", "<0xA5>"])

    def test_shard_ids_are_the_independent_encoders_and_decode_to_the_text(self):
        texts = [os.path.join(FORTUNES, "art"), CORPUS[0]]
        p = self.prepare(texts)
        got = shard_tokens(self.path("shard.bin"))
        # Each file is encoded on its own, the ids concatenated in the order given.
        want = [i for t in texts for i in self.sp.encode(text_of(t))]
        self.assertIn(f"wrote {len(want)} tokens", p.stdout)
        self.assertEqual(len(got), len(want))
        self.assertEqual(got, want, "meshtrain's ids differ from python3-sentencepiece's")
        self.assertEqual(self.sp.decode(got), "".join(text_of(t) for t in texts), "decode(encode(text)) != text")
        self.assertLess(len(got), 0.6 * sum(len(file_bytes(t)) for t in texts), "no subwords: about a token a byte")
        # Text with what a round trip most easily loses: leading and doubled spaces, tabs, blank lines, rare characters.
        with open(self.path("odd.txt"), "w", encoding="utf-8") as f:
            f.write("  two  spaces\t\ttabs\n\n\n trailing \u00e9t\u00e9 \u2603 \U0001F600 \u65e5\u672c 12345\n")
        self.prepare([self.path("odd.txt")], out="odd.bin")
        self.assertEqual(self.sp.decode(shard_tokens(self.path("odd.bin"))), text_of(self.path("odd.txt")))

    def test_without_a_tokenizer_prepare_is_byte_level(self):
        with open(self.path("t.txt"), "wb") as f:
            f.write("h\u00e9\n".encode())
        self.run_ok(["prepare", "--text", "t.txt", "--out", "b.bin"])
        self.assertEqual(shard_tokens(self.path("b.bin")), list("h\u00e9\n".encode()))

    def test_vocab_sizes_outside_the_range_are_refused(self):
        for vocab in (0, 257, 65537, 100000):
            p = cli.run(["tokenizer", "train", "--text", CORPUS[0], "--vocab", vocab, "--out", "v.model"], self.dir)
            self.assert_bad_input(p, f"--vocab {vocab} is invalid", "258", "65536")
        # In range, but more than these texts' characters leave room for, or more pieces than they offer.
        p = cli.run(["tokenizer", "train", "--text", CORPUS[0], "--vocab", 300, "--out", "v.model"], self.dir)
        self.assert_bad_input(p, "--vocab 300", "smaller than required_chars")
        p = cli.run(["tokenizer", "train", "--text", CORPUS[0], "--vocab", 65536, "--out", "v.model"], self.dir)
        self.assert_bad_input(p, "--vocab 65536", "Vocabulary size too high")
        self.assertFalse(os.path.exists(self.path("v.model")))

    def test_lines_over_sentencepieces_limit_are_named(self):
        # SentencePiece skips a line over 4192 bytes and then failed with an empty reason: the count, the longest
        # line and the limit are named.
        with open(self.path("long.txt"), "w") as f:
            f.write("ab" * 100000 + "\n")
        p = cli.run(["tokenizer", "train", "--text", "long.txt", "--vocab", 300, "--out", "l.model"], self.dir)
        self.assert_bad_input(p, "1 of the 1 lines", "4192 bytes", "200000 bytes", "shorter lines")
        self.assertNotIn("texts:  (", p.stderr)
        self.assertFalse(os.path.exists(self.path("l.model")))

    def test_a_model_of_more_than_65536_pieces_makes_no_shard(self):
        # The trained model with pieces appended to 65537: a valid SentencePiece model too large for uint16 ids.
        extra = b"".join(protobuf_piece(f"\u2581zz{i}".encode(), -1e6 - i) for i in range(65537 - VOCAB))
        with open(self.path("big.model"), "wb") as f:
            f.write(file_bytes(self.model) + extra)
        self.assertEqual(spm.SentencePieceProcessor(model_file=self.path("big.model")).get_piece_size(), 65537)
        p = cli.run(["prepare", "--tokenizer", "big.model", "--text", CORPUS[0], "--out", "s.bin"], self.dir)
        self.assert_bad_input(p, "big.model", "65537 pieces", "at most 65536")
        self.assertFalse(os.path.exists(self.path("s.bin")))

    def test_bad_inputs_exit_2_naming_the_culprit_and_write_nothing(self):
        with open(self.path("latin1.txt"), "wb") as f:
            f.write(b"caf\xe9\n")
        with open(self.path("text.txt"), "w") as f:
            f.write("some text\n")
        cli.random_shard(self.path("existing.bin"), 100)
        train = ["tokenizer", "train", "--vocab", VOCAB]
        prepare = ["prepare", "--tokenizer", "tok.model"]
        cases = [
            (train + ["--text", "missing.txt", "--out", "n.model"], ["missing.txt", "does not exist"]),
            (train + ["--text", "latin1.txt", "--out", "n.model"], ["latin1.txt", "not UTF-8", "0xe9", "offset 3"]),
            (train + ["--text", CORPUS[0], "--out", "text.txt", "--text", "text.txt"], ["--out", "the same file"]),
            (train + ["--text", CORPUS[0], "--out", "."], ["--out", "directory"]),
            (train + ["--out", "n.model"], ["--text is missing"]),
            (["tokenizer", "fit"], ["unknown tokenizer subcommand 'fit'", "train"]),
            (prepare + ["--text", "missing.txt", "--out", "n.bin"], ["missing.txt"]),
            (prepare + ["--text", "latin1.txt", "--out", "n.bin"], ["latin1.txt", "not UTF-8"]),
            (prepare + ["--text", "text.txt", "--out", "tok.model"], ["--out", "tok.model", "the same file"]),
            (["prepare", "--tokenizer", "nothere.model", "--text", "text.txt", "--out", "n.bin"],
             ["nothere.model", "does not exist"]),
            (["prepare", "--tokenizer", "text.txt", "--text", "text.txt", "--out", "n.bin"],
             ["text.txt", "not a SentencePiece model"]),
            (train_args({"data.train": "existing.bin", "data.tokenizer": "nothere.model", "checkpoint.dir": "ck"}),
             ["nothere.model", "does not exist"]),
            (train_args({"data.train": "existing.bin", "data.tokenizer": "text.txt", "checkpoint.dir": "ck"}),
             ["text.txt", "not a SentencePiece model"]),
            # The model's vocabulary must hold the tokenizer's ids: both numbers named.
            (train_args({"data.train": "existing.bin", "data.tokenizer": "tok.model", "model.vocab": VOCAB - 1,
                         "checkpoint.dir": "ck"}), [f"model.vocab = {VOCAB - 1}", f"{VOCAB} pieces"]),
        ]
        before = cli.tree_digest(self.dir)
        for args, needles in cases:
            with self.subTest(args=args):
                self.assert_bad_input(cli.run(args, self.dir), *needles)
        self.assertEqual(cli.tree_digest(self.dir), before, "a refused command changed a file")
        # A checkpoint is never overwritten by a model.
        ck = self.train_subword(steps=2)
        before = cli.tree_digest(self.dir)
        p = cli.run(train + ["--text", CORPUS[0], "--out", ck], self.dir)
        self.assert_bad_input(p, "--out", "HDF5")
        self.assertEqual(cli.tree_digest(self.dir), before)

    def test_checkpoints_record_the_tokenizers_path_and_hash(self):
        ck = self.train_subword(steps=2)
        self.assertEqual(h5_attr(ck, "tokenizer"), "tok.model")
        self.assertEqual(h5_attr(ck, "tokenizer_xxh64"), xxh64(file_bytes(self.path("tok.model"))))
        # Two ranks (each reads the model and agrees on its hash) write the same attributes.
        self.run_ok(train_args({**SUBWORD_MODEL, "data.train": "shard.bin", "data.tokenizer": "tok.model",
                                "checkpoint.dir": "ck2", "train.steps": 2, "parallel.dp": 2}),
                    launcher=[cli.MPIEXEC, "-n", "2"])
        ck2 = self.path("ck2", cli.read_latest(self.path("ck2")))
        for attr in ("tokenizer", "tokenizer_xxh64"):
            self.assertEqual(h5_attr(ck2, attr), h5_attr(ck, attr), attr)
        p = self.run_ok(["inspect", ck])
        self.assertIn(f"tokenizer: tok.model (tokenizer_xxh64 {xxh64(file_bytes(self.model))})", p.stdout)
        # Byte-level runs record none, and read as byte-level, as files from before tokenizers do.
        cli.random_shard(self.path("bytes.bin"), 2000)
        self.run_ok(train_args({"data.train": "bytes.bin", "checkpoint.dir": "ckb", "train.steps": 1}))
        byte_ck = self.path("ckb", cli.read_latest(self.path("ckb")))
        with h5py.File(byte_ck, "r") as f:
            self.assertNotIn("tokenizer", f.attrs)
            self.assertNotIn("tokenizer_xxh64", f.attrs)
        self.assertIn("tokenizer: none recorded (byte-level)", self.run_ok(["inspect", byte_ck]).stdout)
        p = self.run_ok(["sample", "--checkpoint", byte_ck, "--prompt", "ab", "--tokens", "3"])
        self.assertTrue(p.stdout_bytes.startswith(b"ab"), p.stdout)
        p = cli.run(["sample", "--checkpoint", byte_ck, "--prompt", "ab", "--tokens", "3", "--tokenizer", "tok.model"],
                    self.dir)
        self.assert_bad_input(p, "--tokenizer 'tok.model'", "records no tokenizer")

    def test_sample_prints_subword_text_decoded_with_the_recorded_tokenizer(self):
        ck = self.train_subword()
        # Greedy decoding of so small a model repeats its most frequent token (a newline): draw instead.
        sample = ["sample", "--checkpoint", ck, "--prompt", "The computer", "--tokens", "40", "--temperature", "0.8",
                  "--seed", "3"]
        text = self.run_ok(sample).stdout_bytes.decode("utf-8")
        ids = [int(t) for t in self.run_ok(sample + ["--ids"]).stdout.split()]
        prompt_ids = self.sp.encode("The computer")
        self.assertEqual(ids[:len(prompt_ids)], prompt_ids, "the prompt is not encoded as the tokenizer does")
        self.assertEqual(len(ids), len(prompt_ids) + 40)
        self.assertEqual(text, self.sp.decode(ids) + "\n", "sample's text is not the independent decoder's")
        generated = [self.sp.id_to_piece(i) for i in ids[len(prompt_ids):]]
        words = [p for p in generated if len(p.lstrip("\u2581")) > 1 and not self.sp.is_byte(self.sp.piece_to_id(p))]
        self.assertGreater(len(words), 10, f"few subword pieces in {generated}")
        # A 20 KB prompt is printed back decoded in time linear in it: well within 20 s (it took 47 s).
        prompt = text_of(CORPUS[0])[:20000]
        p = self.run_ok(["sample", "--checkpoint", ck, "--prompt", prompt, "--tokens", "0"], timeout=20)
        self.assertEqual(p.stdout_bytes.decode("utf-8"), prompt + "\n")

    def test_a_llama_from_dp2_tp2_pp2_zero1_resumes_under_one_rank_and_tp4_and_samples_subwords(self):
        """Issue 14's end to end: a llama checkpoint written under dp2·tp2·pp2·ZeRO-1 on a subword
        shard resumes under one rank and under tp4, and both give the same losses; sample prints the
        independent decoder's text of its ids, with words in it."""
        if not cli.MPIEXEC:
            self.skipTest("no mpiexec")
        self.prepare(CORPUS)
        keys = {**SUBWORD_MODEL, "model.arch": "llama", "model.layers": 2, "model.heads": 8, "model.kv_heads": 4,
                "model.d_model": 64, "model.ffn_hidden": 96, "train.micro_batch": 2, "train.global_batch": 8,
                "train.steps": 8, "data.train": "shard.bin", "data.tokenizer": "tok.model"}
        three_d = {"parallel.dp": 2, "parallel.tp": 2, "parallel.pp": 2, "parallel.zero": 1, "train.stop_after": 4}
        self.run_ok(train_args({**keys, **three_d}), codes=(3,), launcher=[cli.MPIEXEC, "-n", "8"], timeout=120)
        losses = {}
        for name, ranks, layout in (("one", 1, {}), ("tp4", 4, {"parallel.tp": 4})):
            shutil.copytree(self.path("ck"), self.path(name))
            self.run_ok(train_args({**keys, **layout, "checkpoint.dir": name, "log.metrics": f"{name}.jsonl"}),
                        launcher=[cli.MPIEXEC, "-n", str(ranks)], timeout=120)
            losses[name] = [m["loss"] for m in cli.read_metrics(self.path(f"{name}.jsonl"))]
        self.assertEqual(len(losses["one"]), 4, "the resumed runs train steps 5 to 8")
        np.testing.assert_allclose(losses["tp4"], losses["one"], rtol=1e-5)
        ck = self.path("tp4", cli.read_latest(self.path("tp4")))
        sample = ["sample", "--checkpoint", ck, "--prompt", "The computer", "--tokens", "30", "--temperature", "0.8",
                  "--seed", "5"]
        text = self.run_ok(sample).stdout_bytes.decode("utf-8")
        ids = [int(t) for t in self.run_ok(sample + ["--ids"]).stdout.split()]
        self.assertEqual(text, self.sp.decode(ids) + "\n", "sample's text is not the independent decoder's")
        generated = [self.sp.id_to_piece(i) for i in ids[len(self.sp.encode("The computer")):]]
        words = [p for p in generated if len(p.lstrip("\u2581")) > 1 and not self.sp.is_byte(self.sp.piece_to_id(p))]
        self.assertGreater(len(words), 5, f"few subword pieces in {generated}")

    def test_sample_refuses_a_changed_tokenizer_and_follows_one_moved(self):
        ck = self.train_subword(steps=2)
        recorded = xxh64(file_bytes(self.path("tok.model")))
        shutil.copy(self.path("tok.model"), self.path("moved.model"))
        with open(self.path("other.txt"), "w") as f:
            f.write(text_of(os.path.join(FORTUNES, "art")))
        self.run_ok(["tokenizer", "train", "--text", "other.txt", "--vocab", 500, "--out", "tok.model"])
        changed = xxh64(file_bytes(self.path("tok.model")))
        self.assertNotEqual(changed, recorded)
        sample = ["sample", "--checkpoint", ck, "--prompt", "The", "--tokens", "5"]
        self.assert_bad_input(cli.run(sample, self.dir), "tok.model", changed, recorded)
        self.run_ok(sample + ["--tokenizer", "moved.model"])
        # The override's hash is checked too.
        self.assert_bad_input(cli.run(sample + ["--tokenizer", "tok.model"], self.dir), "tok.model", changed, recorded)
        os.remove(self.path("tok.model"))
        self.assert_bad_input(cli.run(sample, self.dir), "tok.model", "does not exist", "--tokenizer")

    # --- the tokenizer is part of a checkpoint's identity

    def other_tokenizer(self, name="other.model"):
        """A second tokenizer (500 pieces, from another fortune file); returns its hash."""
        shutil.copy(os.path.join(FORTUNES, "art"), self.path("art.txt"))
        self.run_ok(["tokenizer", "train", "--text", "art.txt", "--vocab", 500, "--out", name])
        return xxh64(file_bytes(self.path(name)))

    def subword_keys(self, **keys):
        """A 2-step run on the subword shard (already prepared) with data.tokenizer tok.model, saving each step."""
        return train_args({**SUBWORD_MODEL, "data.train": "shard.bin", "data.tokenizer": "tok.model",
                           "train.steps": 2, "checkpoint.every": 1, **keys})

    def test_resume_refuses_a_changed_dropped_or_added_tokenizer(self):
        self.prepare(CORPUS)
        self.run_ok(self.subword_keys())
        recorded = xxh64(file_bytes(self.path("tok.model")))
        changed = self.other_tokenizer()
        # A byte-level checkpoint of the same vocabulary, for a tokenizer added on resume.
        self.run_ok(self.subword_keys(**{"data.tokenizer": None, "checkpoint.dir": "bytes"}))
        before = cli.tree_digest(self.dir)
        named = os.path.join("ck", "step_00000002.h5")
        cases = [
            ({"data.tokenizer": "other.model"}, ["ck/step_00000002.h5", recorded, changed, "data.tokenizer_change"]),
            ({"data.tokenizer": "other.model", "checkpoint.resume": named}, [named, recorded, changed]),
            ({"data.tokenizer": None}, ["ck/step_00000002.h5", recorded, "none (byte-level)"]),
            ({"checkpoint.dir": "bytes"}, ["bytes/step_00000002.h5", "none (byte-level)", recorded]),
            # Weights for a fresh run: the same ids must mean the same pieces.
            ({"data.tokenizer": "other.model", "checkpoint.dir": "new", "checkpoint.resume": "never",
              "checkpoint.init_weights": named}, ["checkpoint.init_weights", named, recorded, changed]),
        ]
        for keys, needles in cases:
            with self.subTest(keys=keys):
                p = cli.run(self.subword_keys(**{"train.steps": 4, **keys}), self.dir)
                self.assert_bad_input(p, *needles)
                self.assertNotIn("falling back", p.stdout, "an older checkpoint is no way round a tokenizer change")
        self.assertEqual(cli.tree_digest(self.dir), before, "a refused run changed a file")
        # The same bytes at another path are the same tokenizer; new checkpoints record where it is now.
        shutil.copy(self.path("tok.model"), self.path("moved.model"))
        p = self.run_ok(self.subword_keys(**{"data.tokenizer": "moved.model", "train.steps": 3}))
        self.assertNotIn("warning", p.stderr)
        self.assertEqual(h5_attr(self.path("ck", "step_00000003.h5"), "tokenizer"), "moved.model")

    def test_an_allowed_tokenizer_change_warns_and_is_recorded(self):
        self.prepare(CORPUS)
        self.run_ok(self.subword_keys())
        recorded = xxh64(file_bytes(self.path("tok.model")))
        changed = self.other_tokenizer()
        p = self.run_ok(self.subword_keys(**{"data.tokenizer": "other.model", "data.tokenizer_change": "allow",
                                             "train.steps": 3}))
        self.assertIn("warning", p.stderr)
        for needle in ("ck/step_00000002.h5", recorded, changed, "data.tokenizer_change = allow"):
            self.assertIn(needle, p.stderr)
        ck3 = self.path("ck", "step_00000003.h5")
        self.assertEqual(h5_attr(ck3, "tokenizer"), "other.model")
        self.assertEqual(h5_attr(ck3, "tokenizer_xxh64"), changed)
        # Back to the first tokenizer without the key: refused, never by falling back to step 2 (which records
        # it) and quietly dropping step 3.
        before = cli.tree_digest(self.dir)
        p = cli.run(self.subword_keys(**{"train.steps": 4}), self.dir)
        self.assert_bad_input(p, "ck/step_00000003.h5", changed, recorded)
        self.assertNotIn("falling back", p.stdout)
        self.assertEqual(cli.tree_digest(self.dir), before)
        # Initial weights of another tokenizer, allowed; a weights file of another tool records none and passes.
        p = self.run_ok(self.subword_keys(**{"checkpoint.dir": "init", "checkpoint.resume": "never",
                                             "checkpoint.init_weights": os.path.join("ck", "step_00000003.h5"),
                                             "data.tokenizer_change": "allow"}))
        self.assertIn("checkpoint.init_weights", p.stderr)
        with h5py.File(ck3, "r") as f, h5py.File(self.path("weights.h5"), "w") as out:
            for name, d in f["model"].items():
                out["model/" + name] = d[()]
        p = self.run_ok(self.subword_keys(**{"checkpoint.dir": "init2", "checkpoint.resume": "never",
                                             "checkpoint.init_weights": "weights.h5"}))
        self.assertNotIn("warning", p.stderr)


GROUPS = {"tokenizer": Tokenizers}


def main():
    opts = cli.take_common_options(cli.group_parser(__doc__, GROUPS).parse_args())
    return cli.run_groups(GROUPS, opts, cli.WORKDIR)


if __name__ == "__main__":
    sys.exit(main())
