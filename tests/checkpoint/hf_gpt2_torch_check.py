"""Independent check of `weft ckpt export-hf`: reads the exported model.safetensors with a parser of
its own (the format's README: 8-byte little-endian header length, JSON header, buffer) into torch
tensors, and the weft checkpoint it came from straight from metadata.json and the shard file. Then:

  1. the names and shapes are exactly those of transformers' GPT2LMHeadModel state dict for
     config.json (tied LM head: no lm_head.weight);
  2. every value is the weft tensor's, transposed for the Conv1D weights, wte without padding rows;
  3. GPT-2's forward pass written the Hugging Face way (Conv1D: x @ W + b, c_attn split into q, k, v)
     on the exported tensors gives the logits of weft's forward (Linear: x @ W.T + b) on the
     checkpoint's tensors.

Usage: hf_gpt2_torch_check.py HF_DIR CHECKPOINT_DIR. Exit 0 when all hold; prints what differs.
"""
import json
import math
import struct
import sys

import torch
import torch.nn.functional as F


def read_safetensors(path):
    data = open(path, "rb").read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    buf = data[8 + n:]
    meta = header.pop("__metadata__", {})
    dtypes = {"F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16}
    out = {}
    for name, e in header.items():
        b, end = e["data_offsets"]
        t = torch.frombuffer(bytearray(buf[b:end]), dtype=dtypes[e["dtype"]])
        out[name] = t.reshape(e["shape"]).float()
    return out, meta


def read_weft(ckpt):
    md = json.load(open(f"{ckpt}/metadata.json"))
    files = {}
    out = {}
    for t in md["tensors"]:
        if t["group"] != "params":
            continue
        # A checkpoint of one process: every tensor whole, in one piece (format version 2).
        shape = t["global_shape"]
        assert t["tp_shard"]["tp"] == 1 and t["elements"] == [0, math.prod(shape)], t
        if t["file"] not in files:
            files[t["file"]] = open(f"{ckpt}/{t['file']}", "rb").read()
        raw = files[t["file"]][t["offset"]:t["offset"] + 4 * math.prod(shape)]
        out[t["name"]] = torch.frombuffer(bytearray(raw), dtype=torch.float32).reshape(shape)
    return md["model"], out


def expected_names(cfg):
    C, L, V, S = cfg["n_embd"], cfg["n_layer"], cfg["vocab_size"], cfg["n_positions"]
    names = {"transformer.wte.weight": [V, C], "transformer.wpe.weight": [S, C],
             "transformer.ln_f.weight": [C], "transformer.ln_f.bias": [C]}
    for i in range(L):
        h = f"transformer.h.{i}."
        names.update({h + "ln_1.weight": [C], h + "ln_1.bias": [C],
                      h + "attn.c_attn.weight": [C, 3 * C], h + "attn.c_attn.bias": [3 * C],
                      h + "attn.c_proj.weight": [C, C], h + "attn.c_proj.bias": [C],
                      h + "ln_2.weight": [C], h + "ln_2.bias": [C],
                      h + "mlp.c_fc.weight": [C, 4 * C], h + "mlp.c_fc.bias": [4 * C],
                      h + "mlp.c_proj.weight": [4 * C, C], h + "mlp.c_proj.bias": [C]})
    return names


def forward(p, tokens, C, NH, L, V, hf):
    """GPT-2 logits for tokens [T]; hf: Hugging Face names and Conv1D weights, else weft's."""
    T = tokens.shape[0]
    HS = C // NH

    def ln(x, name):
        return F.layer_norm(x, (C,), p[name + ".weight"], p[name + ".bias"], eps=1e-5)

    def lin(x, name):
        if hf:
            return x @ p[name + ".weight"] + p[name + ".bias"]
        return x @ p[name + ".weight"].T + p[name + ".bias"]

    pre = "transformer." if hf else ""
    wte = p[pre + "wte.weight" if hf else "wte"][:V]
    wpe = p[pre + "wpe.weight" if hf else "wpe"]
    x = wte[tokens] + wpe[:T]
    mask = torch.ones(T, T, dtype=torch.bool).tril()
    for i in range(L):
        h = f"{pre}h.{i}."
        qkv, proj, fc, mproj = (("attn.c_attn", "attn.c_proj", "mlp.c_fc", "mlp.c_proj") if hf else
                                ("attn.qkv", "attn.proj", "mlp.fc", "mlp.proj"))
        q, k, v = lin(ln(x, h + "ln_1"), h + qkv).split(C, dim=1)
        q, k, v = (t.view(T, NH, HS).transpose(0, 1) for t in (q, k, v))
        att = ((q @ k.transpose(-2, -1)) / math.sqrt(HS)).masked_fill(~mask, float("-inf"))
        y = (att.softmax(-1) @ v).transpose(0, 1).reshape(T, C)
        x = x + lin(y, h + proj)
        m = F.gelu(lin(ln(x, h + "ln_2"), h + fc), approximate="tanh")  # gelu_new
        x = x + lin(m, h + mproj)
    return ln(x, pre + "ln_f") @ wte.T


def main(hf_dir, ckpt):
    cfg = json.load(open(f"{hf_dir}/config.json"))
    hf, meta = read_safetensors(f"{hf_dir}/model.safetensors")
    wcfg, weft = read_weft(ckpt)
    problems = []
    if meta.get("format") != "pt":
        problems.append(f"__metadata__ {meta}: transformers needs format=pt")
    for key, want in [("model_type", "gpt2"), ("architectures", ["GPT2LMHeadModel"]),
                      ("n_layer", wcfg["n_layer"]), ("n_embd", wcfg["n_embd"]),
                      ("n_head", wcfg["n_head"]), ("vocab_size", wcfg["vocab_size"]),
                      ("n_positions", wcfg["max_seq_len"]), ("n_inner", None),
                      ("activation_function", "gelu_new"), ("layer_norm_epsilon", 1e-5),
                      ("tie_word_embeddings", True)]:
        if cfg.get(key, "absent") != want:
            problems.append(f"config.json: {key}={cfg.get(key, 'absent')!r}, expected {want!r}")
    want = expected_names(cfg)
    if set(hf) != set(want):
        problems.append(f"names: missing {sorted(set(want) - set(hf))}, "
                        f"unexpected {sorted(set(hf) - set(want))}")
    for name, shape in want.items():
        if name in hf and list(hf[name].shape) != shape:
            problems.append(f"{name}: shape {list(hf[name].shape)}, expected {shape}")
    V = cfg["vocab_size"]
    conv = {"attn.c_attn": "attn.qkv", "attn.c_proj": "attn.proj", "mlp.c_fc": "mlp.fc",
            "mlp.c_proj": "mlp.proj"}
    for name, t in hf.items():
        w = name[len("transformer."):]
        if w in ("wte.weight", "wpe.weight"):
            ref = weft[w[:3]][:V] if w == "wte.weight" else weft["wpe"]
        else:
            for a, b in conv.items():
                w = w.replace(a, b)
            ref = weft[w].T if name.endswith(".weight") and any(a in name for a in conv) else weft[w]
        if list(ref.shape) != list(t.shape) or not torch.equal(ref, t):
            problems.append(f"{name}: values differ from weft's {w}")
    if not problems:
        C, NH, L = cfg["n_embd"], cfg["n_head"], cfg["n_layer"]
        tokens = torch.tensor([(i * 37 + 11) % V for i in range(min(8, cfg["n_positions"]))])
        a = forward(hf, tokens, C, NH, L, V, hf=True)
        b = forward(weft, tokens, C, NH, L, V, hf=False)
        err = (a - b).abs().max().item()
        if not err < 1e-5:
            problems.append(f"logits of the HF-layout forward differ from weft's by {err}")
    for p in problems:
        print(p)
    print("ok" if not problems else f"{len(problems)} problems")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
