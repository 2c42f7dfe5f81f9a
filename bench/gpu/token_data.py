"""Training data the GPU check makes where it runs, the same bytes on every machine: plain Python, no
numpy, so that the CPU reference and the device run read identical tokens.

  english_like_text(chars, seed)   sentences of common English words drawn by a 32-bit LCG: byte-level
                                   text a small model learns from within ten steps
  write_random_shard(path, tokens, vocab, seed)
                                   a token shard (io/token_shard.hpp: 256 int32 header — 20240520, 1,
                                   count, zeros — then uint16 tokens) of LCG-drawn tokens below vocab
"""
import struct

SHARD_MAGIC = 20240520
SHARD_VERSION = 1

WORDS = ("the of and to in a is that for it as was with be by on not he this are or his from at which "
         "but have an they you were her she there had been one all we their has would when if so no "
         "will more can out up who time only them some these its into about two over may first than "
         "model train step loss rank layer weight token batch memory device kernel sum").split()


def lcg(seed):
    """Numerical Recipes' 32-bit linear congruential generator: the same numbers in any Python."""
    state = seed & 0xFFFFFFFF
    while True:
        state = (1664525 * state + 1013904223) & 0xFFFFFFFF
        yield state


def english_like_text(chars, seed):
    draws = lcg(seed)
    pieces, length, sentence = [], 0, []
    while length < chars:
        sentence.append(WORDS[next(draws) % len(WORDS)])
        if len(sentence) >= 4 + next(draws) % 9:
            text = " ".join(sentence)
            text = text[0].upper() + text[1:] + (". " if next(draws) % 5 else ".\n")
            pieces.append(text)
            length += len(text)
            sentence = []
    return "".join(pieces)[:chars]


def write_shard(path, tokens):
    header = struct.pack("<256i", SHARD_MAGIC, SHARD_VERSION, len(tokens), *([0] * 253))
    with open(path, "wb") as f:
        f.write(header)
        f.write(struct.pack(f"<{len(tokens)}H", *tokens))


def write_random_shard(path, count, vocab, seed):
    draws = lcg(seed)
    # The high bits of an LCG are its good ones.
    write_shard(path, [(next(draws) >> 8) % vocab for _ in range(count)])
