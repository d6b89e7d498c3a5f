#!/usr/bin/env python3
"""A synthetic llm.c token file for the benchmarks and GPU checks, with its sidecar (docs/formats.md).

    python3 bench/synthetic_tokens.py OUT.bin VOCAB N [--random SEED]

N ids below VOCAB in OUT.bin, and OUT.json saying which vocabulary made them (without a sidecar an
llm.c file is taken for GPT-2's). By default a fixed pattern, (i * 7919 + (i // 64) * 31) mod
(VOCAB - 1), with VOCAB - 1 as the end of document (never written); with --random, uniform ids in
[1, VOCAB) from Python's generator seeded with SEED, 0 being the end of document. A step's time and
a save's cost do not depend on the tokens; these only have to be valid.
"""
import argparse
import array
import json
import random
import struct

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("out", help="the token file to write (NAME.bin; the sidecar is NAME.json)")
parser.add_argument("vocab", type=int)
parser.add_argument("n", type=int)
parser.add_argument("--random", type=int, metavar="SEED", help="uniform ids from this seed")
args = parser.parse_args()

if args.random is None:
    ids = array.array("H", ((i * 7919 + (i // 64) * 31) % (args.vocab - 1) for i in range(args.n)))
    eod = args.vocab - 1
else:
    random.seed(args.random)
    ids = array.array("H", (random.randrange(1, args.vocab) for _ in range(args.n)))
    eod = 0
assert ids.itemsize == 2 and array.array("H", [1]).tobytes() == b"\x01\x00", "little-endian u16"
with open(args.out, "wb") as f:
    f.write(struct.pack("<256i", 20240520, 1, args.n, *([0] * 253)))  # magic, version, tokens
    f.write(ids.tobytes())
stem = args.out[: -len(".bin")] if args.out.endswith(".bin") else args.out
with open(stem + ".json", "w") as f:
    json.dump({"tokenizer": "none", "vocab_size": args.vocab, "eod": eod, "documents": 1,
               "tokens": args.n, "source": "synthetic"}, f)
