"""Plain NumPy forward pass of Flint, written from ../shared/spec/flint-model.md section 2.

Full sequence, no KV cache, FP64 math on FP32-exact weights: it is the independent reference the
CPU backend (src/backends/cpu/forward.cpp) is compared with. Weights are a dict of HF tensor names
(spec section 3.1) to float arrays; `load_checkpoint` reads a safetensors file and dequantizes the
stored BF16 / NVFP4 values itself (spec section 4.3), so both sides see the same numbers.

Command line (used by tests/unit/cpu): python flint_ref.py CASE_DIR...; each CASE_DIR holds
config.json, model.safetensors and tokens.json ({"sequences": [[ids...], ...]}), and gets
logits_<s>.f32 (raw float32 [len(seq), vocab_size]) for each sequence s.
"""

import json
import math
import os
import sys

import numpy as np


# ---- configuration ----------------------------------------------------------------------------

class Config:
    def __init__(self, c):
        self.vocab_size = c["vocab_size"]
        self.hidden_size = c["hidden_size"]
        self.num_layers = c["num_hidden_layers"]
        self.num_heads = c["num_attention_heads"]
        self.num_kv_heads = c["num_key_value_heads"]
        self.head_dim = c.get("head_dim", self.hidden_size // self.num_heads)
        self.intermediate_size = c["intermediate_size"]
        self.moe_intermediate_size = c["moe_intermediate_size"]
        self.shared_intermediate_size = c.get("shared_expert_intermediate_size", 0)
        self.num_experts = c.get("num_experts", c.get("n_routed_experts"))
        self.top_k = c["num_experts_per_tok"]
        self.norm_topk_prob = c.get("norm_topk_prob", True)
        self.routed_scaling_factor = c.get("routed_scaling_factor", 1.0)
        self.layer_types = c["layer_types"]
        self.no_rope = set(c.get("no_rope_layer_indices", []))
        self.dense_layers = set(c.get("mlp_only_layers", []))
        self.sliding_window = c["sliding_window"]
        self.rope_theta = c.get("rope_theta", 10000.0)
        self.eps = c.get("rms_norm_eps", 1e-6)


# ---- building blocks (spec 2.2 - 2.6) ----------------------------------------------------------

def rms_norm(x, w, eps):
    # y = x / sqrt(mean(x^2) + eps) * w, over the last axis
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w


def silu(x):
    return x / (1.0 + np.exp(-x))


def sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def neox_rope(x, positions, theta):
    # x: [T, heads, D]; pairs (j, j + D/2), angle p * theta^(-2j/D)
    d = x.shape[-1]
    half = d // 2
    inv_freq = theta ** (-np.arange(half, dtype=np.float64) * 2.0 / d)
    ang = positions[:, None].astype(np.float64) * inv_freq[None, :]  # [T, half]
    cos = np.cos(ang)[:, None, :]
    sin = np.sin(ang)[:, None, :]
    x1, x2 = x[..., :half], x[..., half:]
    return np.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1)


def attention(cfg, W, layer, a):
    T = a.shape[0]
    H, Hkv, D = cfg.num_heads, cfg.num_kv_heads, cfg.head_dim
    p = f"model.layers.{layer}.self_attn."
    q = (a @ W[p + "q_proj.weight"].T).reshape(T, H, D)
    k = (a @ W[p + "k_proj.weight"].T).reshape(T, Hkv, D)
    v = (a @ W[p + "v_proj.weight"].T).reshape(T, Hkv, D)
    # per-head Q/K RMSNorm before RoPE, on every layer
    q = rms_norm(q, W[p + "q_norm.weight"], cfg.eps)
    k = rms_norm(k, W[p + "k_norm.weight"], cfg.eps)
    sliding = cfg.layer_types[layer] == "sliding_attention"
    if layer not in cfg.no_rope:
        pos = np.arange(T)
        q = neox_rope(q, pos, cfg.rope_theta)
        k = neox_rope(k, pos, cfg.rope_theta)
    sinks = W[p + "sinks"]  # [H]
    scale = 1.0 / math.sqrt(D)
    i = np.arange(T)[:, None]
    j = np.arange(T)[None, :]
    allowed = j <= i
    if sliding:
        allowed &= (i - j) < cfg.sliding_window  # current token + (window - 1) earlier ones
    group = H // Hkv
    out = np.zeros((T, H, D))
    for h in range(H):
        g = h // group
        s = (q[:, h, :] @ k[:, g, :].T) * scale  # [T, T]
        s = np.where(allowed, s, -np.inf)
        m = np.maximum(s.max(axis=1), sinks[h])  # [T]
        e = np.exp(s - m[:, None])
        z = e.sum(axis=1) + np.exp(sinks[h] - m)  # the sink: denominator only, zero value
        out[:, h, :] = (e / z[:, None]) @ v[:, g, :]
    return out.reshape(T, H * D) @ W[p + "o_proj.weight"].T


def gated_mlp(x, w_gate, w_up, w_down):
    return (silu(x @ w_gate.T) * (x @ w_up.T)) @ w_down.T


def moe(cfg, W, layer, x):
    p = f"model.layers.{layer}.mlp."
    scores = sigmoid(x @ W[p + "gate.weight"].T)  # [T, E]
    bias = W.get(p + "gate.e_score_correction_bias")
    choice = scores + bias if bias is not None else scores
    out = np.zeros_like(x)
    for t in range(x.shape[0]):
        # top-k on the (biased) choice scores; ties go to the lower expert id
        top = sorted(range(cfg.num_experts), key=lambda e: (-choice[t, e], e))[: cfg.top_k]
        w = scores[t, top]
        if cfg.norm_topk_prob:
            w = w / w.sum()
        w = w * cfg.routed_scaling_factor
        for e, we in zip(top, w):
            q = p + f"experts.{e}."
            y = gated_mlp(x[t], W[q + "gate_proj.weight"], W[q + "up_proj.weight"],
                          W[q + "down_proj.weight"])
            out[t] += we * y  # weight applied after the down projection
    if cfg.shared_intermediate_size > 0:
        q = p + "shared_expert."
        out += gated_mlp(x, W[q + "gate_proj.weight"], W[q + "up_proj.weight"],
                         W[q + "down_proj.weight"])  # ungated
    return out


def canonical_names(W):
    """Maps the spelling variants of UNCONFIRMED names (spec 3.1) onto the ones used here."""
    out = {}
    for n, a in W.items():
        for old in ("self_attn.softmax_offset", "self_attn.attn.sinks"):
            n = n.replace(old, "self_attn.sinks")
        n = n.replace("mlp.shared_experts.", "mlp.shared_expert.")
        if n.endswith(".mlp.e_score_correction_bias"):
            n = n.replace(".mlp.e_score_correction_bias", ".mlp.gate.e_score_correction_bias")
        out[n] = np.asarray(a, dtype=np.float64)
    return out


def forward(cfg, W, tokens):
    """Logits [len(tokens), vocab_size] (float64) for one sequence starting at position 0.
    W: HF tensor name -> array of the stored values (any spelling canonical_names knows)."""
    W = canonical_names(W)
    h = W["model.embed_tokens.weight"][np.asarray(tokens)].astype(np.float64)
    for layer in range(cfg.num_layers):
        p = f"model.layers.{layer}."
        a = rms_norm(h, W[p + "input_layernorm.weight"], cfg.eps)
        h = h + attention(cfg, W, layer, a)
        m = rms_norm(h, W[p + "post_attention_layernorm.weight"], cfg.eps)
        if layer in cfg.dense_layers:
            h = h + gated_mlp(m, W[p + "mlp.gate_proj.weight"], W[p + "mlp.up_proj.weight"],
                              W[p + "mlp.down_proj.weight"])
        else:
            h = h + moe(cfg, W, layer, m)
    h = rms_norm(h, W["model.norm.weight"], cfg.eps)
    return h @ W["lm_head.weight"].T


# ---- stored weights -> float64 (spec 4.3) -------------------------------------------------------

E2M1_DOUBLED = np.array([0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12], dtype=np.float64)


def ue4m3_half(x):
    x = int(x)
    if x == 0x00 or x == 0x7F:
        return 0.0
    e = (x >> 3) & 0xF
    m = x & 7
    raw = m * 2.0 ** -9 if e == 0 else (1 + m / 8) * 2.0 ** (e - 7)
    return raw * 0.5


def dequant_nvfp4(blocks, rows, cols, scale):
    """ggml block_nvfp4 bytes [rows, cols/64*36] -> [rows, cols] float64, times the global scale."""
    blocks = blocks.reshape(rows, cols // 64, 36)
    out = np.zeros((rows, cols // 64, 64))
    half = np.vectorize(ue4m3_half)(blocks[:, :, :4])  # [rows, nb, 4]
    for s in range(4):
        qs = blocks[:, :, 4 + 8 * s: 4 + 8 * s + 8]
        d = half[:, :, s:s + 1]
        out[:, :, 16 * s: 16 * s + 8] = E2M1_DOUBLED[qs & 0xF] * d
        out[:, :, 16 * s + 8: 16 * s + 16] = E2M1_DOUBLED[qs >> 4] * d
    return out.reshape(rows, cols) * scale


def bf16_to_f64(u16):
    return (u16.astype(np.uint32) << 16).view(np.float32).astype(np.float64)


def load_checkpoint(path):
    """Reads model.safetensors as written by the C++ tests: F32 tensors as is; BF16 stored as U16
    with metadata dtype 'bf16'; NVFP4 as U8 blocks with metadata 'nvfp4:<rows>:<cols>' and the
    global scale in '<name>.scale'."""
    from safetensors.numpy import load_file
    from safetensors import safe_open
    with safe_open(path, framework="numpy") as f:
        meta = f.metadata() or {}
    raw = load_file(path)
    W = {}
    for name, arr in raw.items():
        if name.endswith(".scale"):
            continue
        kind = meta.get(name, "f32")
        if kind == "f32":
            W[name] = arr.astype(np.float64)
        elif kind == "bf16":
            W[name] = bf16_to_f64(arr)
        elif kind.startswith("nvfp4:"):
            _, rows, cols = kind.split(":")
            W[name] = dequant_nvfp4(arr, int(rows), int(cols), float(raw[name + ".scale"][0]))
        else:
            raise ValueError(f"unknown stored kind {kind} for {name}")
    return W


def main(case_dirs):
    for d in case_dirs:
        with open(os.path.join(d, "config.json")) as f:
            cfg = Config(json.load(f))
        with open(os.path.join(d, "tokens.json")) as f:
            seqs = json.load(f)["sequences"]
        W = load_checkpoint(os.path.join(d, "model.safetensors"))
        for s, toks in enumerate(seqs):
            logits = forward(cfg, W, toks).astype(np.float32)
            logits.tofile(os.path.join(d, f"logits_{s}.f32"))


if __name__ == "__main__":
    main(sys.argv[1:])
