"""A GPT-2 of its own, reading `weft ckpt export-hf`'s directory the way a Hugging Face user's
tools would, with nothing of weft's: config.json, model.safetensors (parsed here from the format's
description), and the tokenizer files vocab.json + merges.txt + tokenizer_config.json (GPT-2's
byte-level BPE, written here from OpenAI's encoder.py description). numpy in float64.

Usage: hf_standalone_gpt2.py HF_DIR TEXT_FILE IDS LOSS
  IDS   the ids `weft tokenizer encode` gives for the text (comma or space separated)
  LOSS  `weft generate --score`'s mean next-token loss of the text (nats/token)
Checks that config.json's bos/eos are <|endoftext|> in vocab.json, that this tokenizer gives weft's
ids, and that this model's loss on them is weft's within 1e-5 relative. Exit 0 when all hold.
"""
import json
import struct
import sys

import numpy as np
import regex  # Debian's python3-regex: GPT-2's pattern needs \p{L} and \p{N}

# OpenAI's encoder.py pre-tokenization.
PATTERN = regex.compile(r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+""")


def bytes_to_unicode():
    """encoder.py's table: every byte to a printable character (the printable ones to themselves)."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(
        range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, map(chr, cs)))


class Tokenizer:
    def __init__(self, hf_dir):
        self.encoder = json.load(open(f"{hf_dir}/vocab.json", encoding="utf-8"))
        lines = open(f"{hf_dir}/merges.txt", encoding="utf-8").read().split("\n")
        assert lines[0].startswith("#version"), "merges.txt: no #version header"
        merges = [tuple(l.split(" ")) for l in lines[1:] if l]
        self.ranks = {m: i for i, m in enumerate(merges)}
        self.byte_encoder = bytes_to_unicode()
        self.config = json.load(open(f"{hf_dir}/tokenizer_config.json"))

    def bpe(self, token):
        """encoder.py's loop: merge every occurrence of the best-ranked pair until none is left."""
        word = list(token)
        while len(word) > 1:
            rank, i = min((self.ranks.get(pair, float("inf")), i)
                          for i, pair in enumerate(zip(word, word[1:])))
            if rank == float("inf"):
                break
            first, second = word[i], word[i + 1]
            merged, j = [], 0
            while j < len(word):
                if j < len(word) - 1 and word[j] == first and word[j + 1] == second:
                    merged.append(first + second)
                    j += 2
                else:
                    merged.append(word[j])
                    j += 1
            word = merged
        return word

    def encode(self, text):
        ids = []
        for piece in PATTERN.findall(text):
            chars = "".join(self.byte_encoder[b] for b in piece.encode("utf-8"))
            ids.extend(self.encoder[t] for t in self.bpe(chars))
        return ids


def read_safetensors(path):
    data = open(path, "rb").read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    header.pop("__metadata__", None)
    dtypes = {"F32": np.float32, "F16": np.float16}
    out = {}
    for name, e in header.items():
        b, end = e["data_offsets"]
        a = np.frombuffer(data[8 + n + b:8 + n + end], dtype=dtypes[e["dtype"]])
        out[name] = a.reshape(e["shape"]).astype(np.float64)
    return out


def layer_norm(x, w, b, eps):
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(var + eps) * w + b


def gelu_new(x):
    return 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x ** 3)))


def gpt2_loss(w, cfg, ids):
    """GPT2LMHeadModel's forward (Conv1D: x @ W + b, tied LM head), mean next-token loss."""
    C, H, eps = cfg["n_embd"], cfg["n_head"], cfg["layer_norm_epsilon"]
    x, y = np.array(ids[:-1]), np.array(ids[1:])
    T = len(x)
    h = w["transformer.wte.weight"][x] + w["transformer.wpe.weight"][:T]
    mask = np.triu(np.full((T, T), -np.inf), 1)
    for l in range(cfg["n_layer"]):
        p = f"transformer.h.{l}."
        a = layer_norm(h, w[p + "ln_1.weight"], w[p + "ln_1.bias"], eps)
        q, k, v = np.split(a @ w[p + "attn.c_attn.weight"] + w[p + "attn.c_attn.bias"], 3, -1)
        q, k, v = (t.reshape(T, H, C // H).transpose(1, 0, 2) for t in (q, k, v))
        s = q @ k.transpose(0, 2, 1) / np.sqrt(C // H) + mask
        s = np.exp(s - s.max(-1, keepdims=True))
        s /= s.sum(-1, keepdims=True)
        o = (s @ v).transpose(1, 0, 2).reshape(T, C)
        h = h + o @ w[p + "attn.c_proj.weight"] + w[p + "attn.c_proj.bias"]
        m = layer_norm(h, w[p + "ln_2.weight"], w[p + "ln_2.bias"], eps)
        m = gelu_new(m @ w[p + "mlp.c_fc.weight"] + w[p + "mlp.c_fc.bias"])
        h = h + m @ w[p + "mlp.c_proj.weight"] + w[p + "mlp.c_proj.bias"]
    h = layer_norm(h, w["transformer.ln_f.weight"], w["transformer.ln_f.bias"], eps)
    logits = h @ w["transformer.wte.weight"].T
    logits -= logits.max(-1, keepdims=True)
    logp = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    return float(-logp[np.arange(T), y].mean())


def main():
    hf_dir, text_file, ids_text, weft_loss = sys.argv[1:5]
    text = open(text_file, encoding="utf-8").read()
    weft_ids = [int(t) for t in ids_text.replace(",", " ").split()]
    weft_loss = float(weft_loss)
    cfg = json.load(open(f"{hf_dir}/config.json"))
    tok = Tokenizer(hf_dir)
    problems = []
    eot = tok.encoder.get("<|endoftext|>")
    for key in ("bos_token_id", "eos_token_id"):
        if eot is None or cfg.get(key) != eot:
            problems.append(f"config.json {key}={cfg.get(key)} is not <|endoftext|> ({eot})")
    if not all(tok.config.get(k) == "<|endoftext|>" for k in ("bos_token", "eos_token")):
        problems.append(f"tokenizer_config.json: {tok.config}")
    ids = tok.encode(text)
    if ids != weft_ids:
        first = next((i for i, (a, b) in enumerate(zip(ids, weft_ids)) if a != b),
                     min(len(ids), len(weft_ids)))
        problems.append(f"ids differ from weft's at {first}: {ids[first:first + 5]} vs "
                        f"{weft_ids[first:first + 5]} ({len(ids)} vs {len(weft_ids)} ids)")
    loss = gpt2_loss(read_safetensors(f"{hf_dir}/model.safetensors"), cfg,
                     weft_ids[:cfg["n_positions"] + 1])
    rel = abs(loss - weft_loss) / abs(weft_loss)
    print(f"{len(ids)} ids as weft's: {ids == weft_ids}; loss {loss:.9f} here, {weft_loss:.9f} "
          f"in weft: relative difference {rel:.2e}")
    if not rel <= 1e-5:
        problems.append(f"loss {loss} differs from weft's {weft_loss} by {rel:.2e} (> 1e-5)")
    for p in problems:
        print("FAIL:", p)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
