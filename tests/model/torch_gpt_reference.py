"""Independent oracle for weft's GPT: the same model written in PyTorch (float64), fed weft's
weights and tokens, writing back its loss and every parameter gradient.

Usage: torch_gpt_reference.py DIR
DIR holds config.json, layout.json ([{name, shape, offset}]), params.bin (weft's flat fp32 buffer),
tokens.bin and targets.bin (int32, [B,T]; a target < 0 is ignored). Writes loss.json and grads.bin
(float64, same offsets as params.bin).
"""
import json
import math
import sys

import numpy as np
import torch
import torch.nn.functional as F


def main(d):
    cfg = json.load(open(f"{d}/config.json"))
    layout = json.load(open(f"{d}/layout.json"))
    flat = np.fromfile(f"{d}/params.bin", dtype=np.float32)
    B, T, L, C, NH, V = (cfg[k] for k in ("B", "T", "n_layer", "n_embd", "n_head", "vocab_size"))
    HS = C // NH
    p = {}
    for s in layout:
        n = math.prod(s["shape"])
        arr = flat[s["offset"]:s["offset"] + n].astype(np.float64).reshape(s["shape"])
        p[s["name"]] = torch.tensor(arr, requires_grad=True)
    tokens = torch.tensor(np.fromfile(f"{d}/tokens.bin", dtype=np.int32).astype(np.int64)).view(B, T)
    targets = torch.tensor(np.fromfile(f"{d}/targets.bin", dtype=np.int32).astype(np.int64)).view(B, T)

    def ln(x, name):
        return F.layer_norm(x, (C,), p[name + ".weight"], p[name + ".bias"], eps=1e-5)

    def lin(x, name):
        return x @ p[name + ".weight"].T + p[name + ".bias"]

    x = p["wte"][tokens] + p["wpe"][:T]
    mask = torch.ones(T, T, dtype=torch.bool).tril()
    for l in range(L):
        h = f"h.{l}."
        q, k, v = lin(ln(x, h + "ln_1"), h + "attn.qkv").split(C, dim=2)
        q, k, v = (t.view(B, T, NH, HS).transpose(1, 2) for t in (q, k, v))
        att = (q @ k.transpose(-2, -1)) / math.sqrt(HS)
        att = att.masked_fill(~mask, float("-inf")).softmax(-1)
        y = (att @ v).transpose(1, 2).contiguous().view(B, T, C)
        x = x + lin(y, h + "attn.proj")
        m = lin(ln(x, h + "ln_2"), h + "mlp.fc")
        x = x + lin(F.gelu(m, approximate="tanh"), h + "mlp.proj")
    logits = ln(x, "ln_f") @ p["wte"][:V].T  # padded vocabulary rows never get probability
    loss = F.cross_entropy(logits.view(-1, V), targets.view(-1), ignore_index=-1)
    loss.backward()

    grads = np.zeros(flat.shape, dtype=np.float64)
    for s in layout:
        g = p[s["name"]].grad
        n = math.prod(s["shape"])
        grads[s["offset"]:s["offset"] + n] = 0 if g is None else g.numpy().reshape(-1)
    grads.tofile(f"{d}/grads.bin")
    json.dump({"loss": loss.item()}, open(f"{d}/loss.json", "w"))


if __name__ == "__main__":
    main(sys.argv[1])
