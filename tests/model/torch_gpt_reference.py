"""Independent oracle for weft's GPT: the same model written in PyTorch (float64), fed weft's
weights and tokens, writing back its loss and every parameter gradient.

Usage: torch_gpt_reference.py DIR [DIR ...] (one process for every case: importing torch is most
of its time)
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
    # The variant's choices (weft's model/gpt_config.h); GPT-2's when absent.
    NKV = cfg.get("n_kv_head", 0) or NH
    rope = cfg.get("position", "learned") == "rope"
    theta = cfg.get("rope_theta", 10000.0)
    rms = cfg.get("norm", "layernorm") == "rmsnorm"
    eps = cfg.get("norm_eps", 1e-5)
    swiglu = cfg.get("mlp", "gelu") == "swiglu"
    F_ = cfg.get("ffn_hidden_size", 0) or 4 * C
    tied = cfg.get("tie_embeddings", True)
    p = {}
    for s in layout:
        n = math.prod(s["shape"])
        arr = flat[s["offset"]:s["offset"] + n].astype(np.float64).reshape(s["shape"])
        p[s["name"]] = torch.tensor(arr, requires_grad=True)
    tokens = torch.tensor(np.fromfile(f"{d}/tokens.bin", dtype=np.int32).astype(np.int64)).view(B, T)
    targets = torch.tensor(np.fromfile(f"{d}/targets.bin", dtype=np.int32).astype(np.int64)).view(B, T)

    def ln(x, name):
        if rms:  # Zhang & Sennrich 2019: no mean, no bias
            return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * p[name + ".weight"]
        return F.layer_norm(x, (C,), p[name + ".weight"], p.get(name + ".bias"), eps=eps)

    def lin(x, name):
        y = x @ p[name + ".weight"].T
        return y + p[name + ".bias"] if name + ".bias" in p else y

    # RoPE (Su et al. 2021) in Hugging Face Llama's form: cos/sin of t * theta^(-2i/HS) repeated
    # over both halves, x * cos + rotate_half(x) * sin.
    inv_freq = 1.0 / (theta ** (torch.arange(0, HS, 2, dtype=torch.float64) / HS))
    ang = torch.outer(torch.arange(T, dtype=torch.float64), inv_freq)
    cos, sin = torch.cat([ang, ang], -1).cos(), torch.cat([ang, ang], -1).sin()

    def rotate(x):  # [B, heads, T, HS]
        x1, x2 = x[..., :HS // 2], x[..., HS // 2:]
        return x * cos + torch.cat([-x2, x1], -1) * sin

    x = p["wte"][tokens] + (0 if rope else p["wpe"][:T])
    mask = torch.ones(T, T, dtype=torch.bool).tril()
    for l in range(L):
        h = f"h.{l}."
        q, k, v = lin(ln(x, h + "ln_1"), h + "attn.qkv").split([C, NKV * HS, NKV * HS], dim=2)
        q = q.view(B, T, NH, HS).transpose(1, 2)
        k, v = (t.view(B, T, NKV, HS).transpose(1, 2) for t in (k, v))
        if rope:
            q, k = rotate(q), rotate(k)
        k, v = (t.repeat_interleave(NH // NKV, dim=1) for t in (k, v))  # grouped-query heads
        att = (q @ k.transpose(-2, -1)) / math.sqrt(HS)
        att = att.masked_fill(~mask, float("-inf")).softmax(-1)
        y = (att @ v).transpose(1, 2).contiguous().view(B, T, C)
        x = x + lin(y, h + "attn.proj")
        m = lin(ln(x, h + "ln_2"), h + "mlp.fc")
        if swiglu:  # Shazeer 2020: [gate; up]
            act = F.silu(m[..., :F_]) * m[..., F_:]
        else:
            act = F.gelu(m, approximate="tanh")
        x = x + lin(act, h + "mlp.proj")
    head = p["wte"] if tied else p["lm_head"]
    logits = ln(x, "ln_f") @ head[:V].T  # padded vocabulary rows never get probability
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
    for d in sys.argv[1:]:
        main(d)
