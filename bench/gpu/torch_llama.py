"""Baseline: a Llama-style GPT training step in plain PyTorch, beside weft's on the same shape.

The architecture of weft's model with every modern choice on (model/gpt_config.h; Touvron et al.
2023): rotary positions (rotate-half pairing), RMSNorm, a SwiGLU MLP, grouped-query attention, an
untied LM head, no biases. AdamW, cross-entropy on random tokens. On CUDA: bf16 autocast, SDPA
attention (grouped heads natively where torch has enable_gqa, else repeated), fused AdamW and
torch.compile. On CPU: fp32. The sibling of ../shared/bench/torch_gpt.py (GPT-2), with its
options and its JSON line:
  {"name", "device", "params", "B", "T", "ms_median", "tokens_per_s", "model_tflops", ...}
Model FLOPs per step (weft's model/flops.h, no recomputation): 3 x (the GEMMs' 2 x multiply-adds
per token: qkv C(C + 2 NKV HS), proj C^2, SwiGLU's 3 C F per layer, the head C V; attention's
2 x 2 T C per layer) x B T.

Example:
  python3 torch_llama.py --device cuda --layers 16 --hidden 2048 --heads 32 --kv-heads 8 \
    --ffn 5632 --vocab 32000 --batch 8 --seq 1024
"""
import argparse
import json
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class RMSNorm(nn.Module):
    def __init__(self, C, eps):
        super().__init__()
        self.eps, self.weight = eps, nn.Parameter(torch.ones(C))

    def forward(self, x):
        xf = x.float()
        return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)).type_as(x) * self.weight


def rotate(x, cos, sin):  # x [B, H, T, HS]; cos, sin [T, HS]
    h = x.size(-1) // 2
    return x * cos + torch.cat([-x[..., h:], x[..., :h]], -1) * sin


class Block(nn.Module):
    def __init__(self, C, H, KV, F_, eps):
        super().__init__()
        self.H, self.KV, self.HS = H, KV, C // H
        self.ln1, self.ln2 = RMSNorm(C, eps), RMSNorm(C, eps)
        self.qkv = nn.Linear(C, C + 2 * KV * self.HS, bias=False)
        self.proj = nn.Linear(C, C, bias=False)
        self.fc = nn.Linear(C, 2 * F_, bias=False)  # [gate; up], as weft's mlp.fc
        self.fc2 = nn.Linear(F_, C, bias=False)
        self.F = F_

    def attend(self, q, k, v):
        sdpa = getattr(F, "scaled_dot_product_attention", None)
        if sdpa is not None:
            try:
                return sdpa(q, k, v, is_causal=True, enable_gqa=True)
            except TypeError:  # torch < 2.5: no enable_gqa
                pass
        g = self.H // self.KV  # each key/value head repeated for its group of query heads
        k, v = k.repeat_interleave(g, dim=1), v.repeat_interleave(g, dim=1)
        if sdpa is not None:
            return sdpa(q, k, v, is_causal=True)
        T = q.size(-2)  # Debian's CPU torch 1.13: the plain form
        att = (q @ k.transpose(-2, -1)) / (q.size(-1) ** 0.5)
        mask = torch.ones(T, T, dtype=torch.bool, device=q.device).tril()
        return att.masked_fill(~mask, float("-inf")).softmax(-1) @ v

    def forward(self, x, cos, sin):
        B, T, C = x.shape
        q, k, v = self.qkv(self.ln1(x)).split([C, self.KV * self.HS, self.KV * self.HS], dim=2)
        q = q.view(B, T, self.H, self.HS).transpose(1, 2)
        k, v = (t.view(B, T, self.KV, self.HS).transpose(1, 2) for t in (k, v))
        q, k = rotate(q, cos, sin), rotate(k, cos, sin)
        y = self.attend(q, k, v).transpose(1, 2).contiguous().view(B, T, C)
        x = x + self.proj(y)
        gate, up = self.fc(self.ln2(x)).split(self.F, dim=2)
        return x + self.fc2(F.silu(gate) * up)


class Llama(nn.Module):
    def __init__(self, V, T, L, C, H, KV, F_, theta, eps):
        super().__init__()
        self.wte = nn.Embedding(V, C)
        self.blocks = nn.ModuleList(Block(C, H, KV, F_, eps) for _ in range(L))
        self.lnf = RMSNorm(C, eps)
        self.head = nn.Linear(C, V, bias=False)
        HS = C // H
        inv = 1.0 / theta ** (torch.arange(0, HS, 2, dtype=torch.float64) / HS)
        ang = torch.outer(torch.arange(T, dtype=torch.float64), inv)
        ang = torch.cat([ang, ang], -1)
        self.register_buffer("cos", ang.cos().float(), persistent=False)
        self.register_buffer("sin", ang.sin().float(), persistent=False)
        for p in self.parameters():
            if p.dim() > 1:
                nn.init.normal_(p, std=0.02)

    def forward(self, idx, tgt):
        T = idx.size(1)
        x = self.wte(idx)
        for b in self.blocks:
            x = b(x, self.cos[:T], self.sin[:T])
        logits = self.head(self.lnf(x))
        return F.cross_entropy(logits.float().view(-1, logits.size(-1)), tgt.view(-1))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--layers", type=int, default=16)
    ap.add_argument("--hidden", type=int, default=2048)
    ap.add_argument("--heads", type=int, default=32)
    ap.add_argument("--kv-heads", type=int, default=8)
    ap.add_argument("--ffn", type=int, default=5632)
    ap.add_argument("--vocab", type=int, default=32000)
    ap.add_argument("--theta", type=float, default=500000.0)
    ap.add_argument("--eps", type=float, default=1e-5)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--seq", type=int, default=64)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--threads", type=int, default=0, help="CPU threads (0: leave as is)")
    ap.add_argument("--no-compile", action="store_true")
    a = ap.parse_args()
    if a.threads:
        torch.set_num_threads(a.threads)
    dev = a.device
    cuda = dev.startswith("cuda")
    torch.manual_seed(0)
    m = Llama(a.vocab, a.seq, a.layers, a.hidden, a.heads, a.kv_heads, a.ffn, a.theta,
              a.eps).to(dev)
    params = sum(p.numel() for p in m.parameters())
    try:
        opt = torch.optim.AdamW(m.parameters(), lr=3e-4, fused=cuda)
    except TypeError:
        opt = torch.optim.AdamW(m.parameters(), lr=3e-4)
    compiled = cuda and not a.no_compile and hasattr(torch, "compile")
    mc = torch.compile(m) if compiled else m
    idx = torch.randint(0, a.vocab, (a.batch, a.seq), device=dev)
    tgt = torch.randint(0, a.vocab, (a.batch, a.seq), device=dev)

    def step():
        if cuda:
            with torch.autocast("cuda", dtype=torch.bfloat16):
                loss = mc(idx, tgt)
        else:
            loss = mc(idx, tgt)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss

    sync = torch.cuda.synchronize if cuda else (lambda: None)
    for _ in range(a.warmup):
        step()
    sync()
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    times = []
    for _ in range(a.steps):
        t0 = time.perf_counter()
        loss = step()
        sync()
        times.append((time.perf_counter() - t0) * 1e3)
    ms = sorted(times)[len(times) // 2]
    B, T, L, C, V, H, KV, F_ = (a.batch, a.seq, a.layers, a.hidden, a.vocab, a.heads, a.kv_heads,
                                a.ffn)
    per_layer = C * (C + 2 * KV * (C // H)) + C * C + 3 * C * F_
    flops = 3 * 2 * B * T * (L * per_layer + C * V) + 3 * B * T * L * 4 * T * C
    out = dict(name="pytorch", arch="llama", device=torch.cuda.get_device_name(0) if cuda else "cpu",
               torch=torch.__version__, compiled=compiled, threads=torch.get_num_threads(),
               params=params, L=L, C=C, H=H, KV=KV, F=F_, V=V, B=B, T=T, ms_median=round(ms, 3),
               ms_min=round(min(times), 3), tokens_per_s=round(B * T / ms * 1e3, 1),
               model_tflops=round(flops / ms / 1e9, 3), loss=round(loss.item(), 4))
    if cuda:
        out["peak_mem_gib"] = round(torch.cuda.max_memory_allocated() / 2**30, 2)
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
