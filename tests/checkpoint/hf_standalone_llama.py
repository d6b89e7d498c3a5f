"""A Llama of its own, reading `weft ckpt export-hf`'s LlamaForCausalLM directory the way a Hugging
Face user's tools would, with nothing of weft's: config.json and model.safetensors (parsed here from
the format's description: 8-byte little-endian header length, JSON header, buffer), the model
written from transformers' modeling_llama.py description, in float64 (numpy):

  h = embed_tokens[ids]
  per layer: h += o_proj(attention(rope(q_proj(n)), rope(k_proj(n)), v_proj(n))), n = rms(h) w_in
             h += down_proj(silu(gate_proj(n)) * up_proj(n)),                    n = rms(h) w_post
  logits = lm_head(rms(h) w_norm)   (embed_tokens when tie_word_embeddings)
  rms(x) = x / sqrt(mean(x^2) + rms_norm_eps); rope rotates pairs (i, i + d/2) by
  t rope_theta^(-2i/d) (rotate_half); key/value head j // (heads / kv_heads) serves query head j
  (repeat_kv); causal softmax of q k^T / sqrt(d).

Usage: hf_standalone_llama.py HF_DIR IDS LOGITS
  IDS     the token ids weft ran (comma or space separated), T of them
  LOGITS  weft's logits for them: float32 [T, vocab_size], row-major
Checks config.json (LlamaForCausalLM), that the tensors are exactly LlamaForCausalLM's state dict
for it (names, shapes, F32), and that this model's logits equal weft's: max |a - b| / max |b| at
most 1e-5. Exit 0 when all hold.
"""
import json
import struct
import sys

import numpy as np


def read_safetensors(path):
    data = open(path, "rb").read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    meta = header.pop("__metadata__", {})
    dtypes = {"F32": np.float32, "F16": np.float16}
    out, kinds = {}, {}
    for name, e in header.items():
        b, end = e["data_offsets"]
        a = np.frombuffer(data[8 + n + b:8 + n + end], dtype=dtypes[e["dtype"]])
        out[name] = a.reshape(e["shape"]).astype(np.float64)
        kinds[name] = e["dtype"]
    return out, kinds, meta


def expected_tensors(cfg):
    """LlamaForCausalLM's state dict for cfg: name -> shape."""
    C, L, V = cfg["hidden_size"], cfg["num_hidden_layers"], cfg["vocab_size"]
    H = cfg["num_attention_heads"]
    KV = cfg.get("num_key_value_heads") or H
    D = cfg.get("head_dim") or C // H
    F = cfg["intermediate_size"]
    out = {"model.embed_tokens.weight": [V, C], "model.norm.weight": [C]}
    if not cfg.get("tie_word_embeddings", False):
        out["lm_head.weight"] = [V, C]
    for i in range(L):
        p = f"model.layers.{i}."
        out.update({p + "input_layernorm.weight": [C], p + "post_attention_layernorm.weight": [C],
                    p + "self_attn.q_proj.weight": [H * D, C],
                    p + "self_attn.k_proj.weight": [KV * D, C],
                    p + "self_attn.v_proj.weight": [KV * D, C],
                    p + "self_attn.o_proj.weight": [C, H * D],
                    p + "mlp.gate_proj.weight": [F, C], p + "mlp.up_proj.weight": [F, C],
                    p + "mlp.down_proj.weight": [C, F]})
        if cfg.get("attention_bias", False):
            out.update({p + "self_attn.q_proj.bias": [H * D], p + "self_attn.k_proj.bias": [KV * D],
                        p + "self_attn.v_proj.bias": [KV * D], p + "self_attn.o_proj.bias": [C]})
        if cfg.get("mlp_bias", False):
            out.update({p + "mlp.gate_proj.bias": [F], p + "mlp.up_proj.bias": [F],
                        p + "mlp.down_proj.bias": [C]})
    return out


def rms_norm(x, w, eps):
    return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * w


def rotate(x, theta):
    """x [heads, T, D]: GPT-NeoX / Llama rotary embedding (rotate_half)."""
    T, D = x.shape[1], x.shape[2]
    inv_freq = 1.0 / theta ** (np.arange(0, D, 2) / D)
    angles = np.arange(T)[:, None] * inv_freq[None, :]
    emb = np.concatenate([angles, angles], axis=-1)
    half = np.concatenate([-x[..., D // 2:], x[..., :D // 2]], axis=-1)
    return x * np.cos(emb) + half * np.sin(emb)


def llama_logits(w, cfg, ids):
    C, L = cfg["hidden_size"], cfg["num_hidden_layers"]
    H = cfg["num_attention_heads"]
    KV = cfg.get("num_key_value_heads") or H
    D = cfg.get("head_dim") or C // H
    eps, theta = cfg["rms_norm_eps"], cfg["rope_theta"]
    T = len(ids)

    def linear(x, name):
        y = x @ w[name + ".weight"].T
        return y + w[name + ".bias"] if name + ".bias" in w else y

    h = w["model.embed_tokens.weight"][np.array(ids)]
    mask = np.triu(np.full((T, T), -np.inf), 1)
    for i in range(L):
        p = f"model.layers.{i}."
        n = rms_norm(h, w[p + "input_layernorm.weight"], eps)
        q = linear(n, p + "self_attn.q_proj").reshape(T, H, D).transpose(1, 0, 2)
        k = linear(n, p + "self_attn.k_proj").reshape(T, KV, D).transpose(1, 0, 2)
        v = linear(n, p + "self_attn.v_proj").reshape(T, KV, D).transpose(1, 0, 2)
        q, k = rotate(q, theta), rotate(k, theta)
        k, v = np.repeat(k, H // KV, axis=0), np.repeat(v, H // KV, axis=0)  # repeat_kv
        s = q @ k.transpose(0, 2, 1) / np.sqrt(D) + mask
        s = np.exp(s - s.max(-1, keepdims=True))
        s /= s.sum(-1, keepdims=True)
        o = (s @ v).transpose(1, 0, 2).reshape(T, H * D)
        h = h + linear(o, p + "self_attn.o_proj")
        n = rms_norm(h, w[p + "post_attention_layernorm.weight"], eps)
        g = linear(n, p + "mlp.gate_proj")
        h = h + linear(g / (1 + np.exp(-g)) * linear(n, p + "mlp.up_proj"), p + "mlp.down_proj")
    h = rms_norm(h, w["model.norm.weight"], eps)
    head = w["model.embed_tokens.weight"] if cfg.get("tie_word_embeddings") else w["lm_head.weight"]
    return h @ head.T


def main():
    hf_dir, ids_text, logits_file = sys.argv[1:4]
    ids = [int(t) for t in ids_text.replace(",", " ").split()]
    cfg = json.load(open(f"{hf_dir}/config.json"))
    w, kinds, meta = read_safetensors(f"{hf_dir}/model.safetensors")
    problems = []
    if meta.get("format") != "pt":
        problems.append(f"__metadata__ {meta}: transformers needs format=pt")
    for key, want in [("architectures", ["LlamaForCausalLM"]), ("model_type", "llama"),
                      ("hidden_act", "silu"), ("rope_scaling", None)]:
        if cfg.get(key) != want:
            problems.append(f"config.json: {key}={cfg.get(key)!r}, expected {want!r}")
    want = expected_tensors(cfg)
    if set(w) != set(want):
        problems.append(f"names: missing {sorted(set(want) - set(w))}, "
                        f"unexpected {sorted(set(w) - set(want))}")
    for name, shape in want.items():
        if name in w and (list(w[name].shape) != shape or kinds[name] != "F32"):
            problems.append(f"{name}: {kinds[name]} {list(w[name].shape)}, expected F32 {shape}")
    if problems:
        for p in problems:
            print("FAIL:", p)
        return 1
    ref = llama_logits(w, cfg, ids)
    got = np.fromfile(logits_file, dtype=np.float32).astype(np.float64).reshape(ref.shape)
    rel = np.abs(got - ref).max() / np.abs(ref).max()
    rms = np.sqrt(((got - ref) ** 2).mean() / (ref ** 2).mean())
    print(f"{len(ids)} tokens, {ref.shape[1]} logits each: max |weft - here| / max |here| = "
          f"{rel:.3e}, rms relative {rms:.3e}")
    if not rel <= 1e-5:
        print(f"FAIL: weft's logits differ from this Llama's by {rel:.3e} (> 1e-5)")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
