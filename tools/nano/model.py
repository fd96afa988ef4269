"""flint-nano's PyTorch model: Flint's forward pass (../shared/spec/flint-model.md section 2) at a
small size, used for training and as the logits reference. Every op follows the spec: pre-norm
layers, per-head Q/K RMSNorm before NeoX RoPE, NoPE full-attention layers, sliding-window layers
(the current token plus window-1 earlier ones), learned sinks in the softmax denominator, GQA with
g(h) = h // (H / H_kv), sigmoid top-k routing with the weight applied after the down projection,
an ungated shared expert, an untied head computed in FP32.

Numerics: parameters are FP32 masters; under bf16 autocast the projections run in bf16, while the
norms, RoPE, softmax (with sinks), router and head run in FP32. For reference logits call it with
float64 parameters and no autocast. Partner check: train.py compares it with
tests/reference/flint_ref.py on the trained weights.
"""

from __future__ import annotations

import math

import torch
import torch.nn as nn
import torch.nn.functional as F


def compute_dtype(x: torch.Tensor) -> torch.dtype:
    """FP32 for norms/softmax/router, or FP64 when the model runs in FP64 (reference logits)."""
    return torch.float64 if x.dtype == torch.float64 else torch.float32


class RMSNorm(nn.Module):
    def __init__(self, n: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(n))
        self.eps = eps

    def forward(self, x):
        dt = compute_dtype(x)
        xf = x.to(dt)
        y = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        return y * self.weight.to(dt)


def linear(x, w):
    """y = x W^T; under autocast this is a bf16 GEMM with FP32 accumulation."""
    return F.linear(x, w)


def rope_tables(num_tokens: int, head_dim: int, theta: float, device, dtype):
    """cos/sin [num_tokens, head_dim/2] for NeoX RoPE: angle p * theta^(-2j/D)."""
    half = head_dim // 2
    inv_freq = theta ** (-torch.arange(half, dtype=torch.float64, device=device) * 2.0 / head_dim)
    ang = torch.arange(num_tokens, dtype=torch.float64, device=device)[:, None] * inv_freq[None, :]
    return torch.cos(ang).to(dtype), torch.sin(ang).to(dtype)


def neox_rope(x, cos, sin):
    # x: [B, T, heads, D]; pairs (j, j + D/2)
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]
    c, s = cos[None, :, None, :], sin[None, :, None, :]
    return torch.cat([x1 * c - x2 * s, x2 * c + x1 * s], dim=-1)


class Attention(nn.Module):
    def __init__(self, cfg: dict, layer: int):
        super().__init__()
        h, self.nh, self.nkv, self.hd = (cfg["hidden_size"], cfg["num_attention_heads"],
                                         cfg["num_key_value_heads"], cfg["head_dim"])
        self.q_proj = nn.Parameter(torch.empty(self.nh * self.hd, h))
        self.k_proj = nn.Parameter(torch.empty(self.nkv * self.hd, h))
        self.v_proj = nn.Parameter(torch.empty(self.nkv * self.hd, h))
        self.o_proj = nn.Parameter(torch.empty(h, self.nh * self.hd))
        self.q_norm = RMSNorm(self.hd, cfg["rms_norm_eps"])
        self.k_norm = RMSNorm(self.hd, cfg["rms_norm_eps"])
        self.sinks = nn.Parameter(torch.zeros(self.nh))  # FP32 raw logits, one per head
        self.sliding = cfg["layer_types"][layer] == "sliding_attention"
        self.rope = layer not in cfg["no_rope_layer_indices"]
        self.window = cfg["sliding_window"]

    def forward(self, x, cos, sin):
        B, T, _ = x.shape
        dt = compute_dtype(x)
        q = linear(x, self.q_proj).view(B, T, self.nh, self.hd)
        k = linear(x, self.k_proj).view(B, T, self.nkv, self.hd)
        v = linear(x, self.v_proj).view(B, T, self.nkv, self.hd)
        q = self.q_norm(q)  # FP32 from here
        k = self.k_norm(k)
        if self.rope:
            q = neox_rope(q, cos, sin)
            k = neox_rope(k, cos, sin)
        group = self.nh // self.nkv
        q = q.transpose(1, 2)                                      # [B, H, T, D]
        k = k.transpose(1, 2).repeat_interleave(group, dim=1)      # head h reads KV head h // group
        v = v.transpose(1, 2).repeat_interleave(group, dim=1)
        s = torch.matmul(q, k.transpose(-1, -2)).to(dt) * (1.0 / math.sqrt(self.hd))  # [B,H,T,T]
        i = torch.arange(T, device=x.device)[:, None]
        j = torch.arange(T, device=x.device)[None, :]
        allowed = j <= i
        if self.sliding:
            allowed = allowed & ((i - j) < self.window)
        s = s.masked_fill(~allowed, float("-inf"))
        sink = self.sinks.to(dt).view(1, self.nh, 1, 1).expand(B, self.nh, T, 1)
        p = torch.softmax(torch.cat([s, sink], dim=-1), dim=-1)[..., :T]  # sink: denominator only
        o = torch.matmul(p, v)                                             # [B, H, T, D]
        o = o.transpose(1, 2).reshape(B, T, self.nh * self.hd)
        return linear(o, self.o_proj)


class DenseMLP(nn.Module):
    def __init__(self, h: int, inter: int):
        super().__init__()
        self.gate_proj = nn.Parameter(torch.empty(inter, h))
        self.up_proj = nn.Parameter(torch.empty(inter, h))
        self.down_proj = nn.Parameter(torch.empty(h, inter))

    def forward(self, x):
        return linear(F.silu(linear(x, self.gate_proj)) * linear(x, self.up_proj), self.down_proj)


class MoE(nn.Module):
    """Sigmoid top-k router (FP32), routed experts weighted after the down projection, plus an
    ungated shared expert. Training computes every expert on every token and zeroes the unselected
    ones through the combine matrix (same values and gradients as a sparse dispatch, and fast at
    this size)."""

    def __init__(self, cfg: dict):
        super().__init__()
        h, e, i = cfg["hidden_size"], cfg["num_experts"], cfg["moe_intermediate_size"]
        self.num_experts, self.top_k = e, cfg["num_experts_per_tok"]
        self.norm_topk_prob = cfg["norm_topk_prob"]
        self.scale = cfg["routed_scaling_factor"]
        self.gate = nn.Parameter(torch.empty(e, h))                 # router
        self.w_gate = nn.Parameter(torch.empty(e, i, h))            # experts.{e}.gate_proj
        self.w_up = nn.Parameter(torch.empty(e, i, h))              # experts.{e}.up_proj
        self.w_down = nn.Parameter(torch.empty(e, h, i))            # experts.{e}.down_proj
        self.shared_expert = DenseMLP(h, cfg["shared_expert_intermediate_size"])
        self.aux_loss = None

    def forward(self, x):
        shape = x.shape
        x2 = x.reshape(-1, shape[-1])                                # [N, h]
        dt = compute_dtype(x)
        with torch.autocast(device_type=x.device.type, enabled=False):
            logits = F.linear(x2.to(dt), self.gate.to(dt))           # [N, E] FP32
        scores = torch.sigmoid(logits)
        top_w, top_i = scores.topk(self.top_k, dim=-1)               # [N, k]
        if self.norm_topk_prob:
            top_w = top_w / top_w.sum(-1, keepdim=True)
        top_w = top_w * self.scale
        combine = torch.zeros_like(scores).scatter(1, top_i, top_w)  # [N, E]
        g = torch.einsum("nh,eih->nei", x2, self.w_gate)
        u = torch.einsum("nh,eih->nei", x2, self.w_up)
        y = torch.einsum("nei,ehi->neh", F.silu(g) * u, self.w_down)  # [N, E, h]
        routed = torch.einsum("ne,neh->nh", combine.to(y.dtype), y)
        if self.training:
            # Switch-style balance loss on the sigmoid scores (training only).
            frac = torch.zeros_like(scores).scatter(1, top_i, 1.0).mean(0) / self.top_k
            prob = (scores / scores.sum(-1, keepdim=True)).mean(0)
            self.aux_loss = self.num_experts * (frac * prob).sum()
        out = routed + self.shared_expert(x2)
        return out.reshape(shape)


class Layer(nn.Module):
    def __init__(self, cfg: dict, layer: int):
        super().__init__()
        h, eps = cfg["hidden_size"], cfg["rms_norm_eps"]
        self.input_layernorm = RMSNorm(h, eps)
        self.self_attn = Attention(cfg, layer)
        self.post_attention_layernorm = RMSNorm(h, eps)
        self.dense = layer in cfg["mlp_only_layers"]
        self.mlp = DenseMLP(h, cfg["intermediate_size"]) if self.dense else MoE(cfg)

    def forward(self, h, cos, sin):
        h = h + self.self_attn(self.input_layernorm(h), cos, sin)
        return h + self.mlp(self.post_attention_layernorm(h))


class FlintNano(nn.Module):
    def __init__(self, cfg: dict):
        super().__init__()
        self.cfg = cfg
        self.embed_tokens = nn.Parameter(torch.empty(cfg["vocab_size"], cfg["hidden_size"]))
        self.layers = nn.ModuleList(Layer(cfg, i) for i in range(cfg["num_hidden_layers"]))
        self.norm = RMSNorm(cfg["hidden_size"], cfg["rms_norm_eps"])
        self.lm_head = nn.Parameter(torch.empty(cfg["vocab_size"], cfg["hidden_size"]))

    def init_weights(self, seed: int = 0):
        gen = torch.Generator().manual_seed(seed)
        std = 0.02
        out_std = std / math.sqrt(2 * self.cfg["num_hidden_layers"])
        for name, p in self.named_parameters():
            with torch.no_grad():
                if name.endswith("norm.weight") or name.endswith("layernorm.weight"):
                    p.fill_(1.0)
                elif name.endswith("sinks"):
                    p.zero_()
                elif name.endswith(("o_proj", "down_proj", "w_down")):
                    p.copy_(torch.randn(p.shape, generator=gen) * out_std)
                else:
                    p.copy_(torch.randn(p.shape, generator=gen) * std)

    def forward(self, tokens):
        """tokens [B, T] int64, positions 0..T-1 -> logits [B, T, V] (FP32, or FP64)."""
        h = self.embed_tokens[tokens]
        cfg = self.cfg
        cos, sin = rope_tables(tokens.shape[1], cfg["head_dim"], cfg["rope_theta"], tokens.device,
                               compute_dtype(h))
        for layer in self.layers:
            h = layer(h, cos, sin)
        h = self.norm(h)
        dt = compute_dtype(h)
        with torch.autocast(device_type=tokens.device.type, enabled=False):
            return F.linear(h.to(dt), self.lm_head.to(dt))  # untied FP32 head

    def aux_loss(self):
        losses = [layer.mlp.aux_loss for layer in self.layers
                  if not layer.dense and layer.mlp.aux_loss is not None]
        return torch.stack(losses).mean() if losses else None


# ---- HF names (spec 3.1, as tests/support/tiny_flint.py writes them) -------------------------

def hf_state_dict(model: FlintNano) -> dict:
    """HF tensor name -> tensor (detached, same dtype/device as the parameter)."""
    cfg = model.cfg
    out = {"model.embed_tokens.weight": model.embed_tokens.detach()}
    for i, layer in enumerate(model.layers):
        p = f"model.layers.{i}."
        a = layer.self_attn
        out[p + "input_layernorm.weight"] = layer.input_layernorm.weight.detach()
        for n in ("q_proj", "k_proj", "v_proj", "o_proj"):
            out[p + f"self_attn.{n}.weight"] = getattr(a, n).detach()
        out[p + "self_attn.q_norm.weight"] = a.q_norm.weight.detach()
        out[p + "self_attn.k_norm.weight"] = a.k_norm.weight.detach()
        out[p + "self_attn.sinks"] = a.sinks.detach()
        out[p + "post_attention_layernorm.weight"] = layer.post_attention_layernorm.weight.detach()
        m = layer.mlp
        if layer.dense:
            for n in ("gate_proj", "up_proj", "down_proj"):
                out[p + f"mlp.{n}.weight"] = getattr(m, n).detach()
            continue
        out[p + "mlp.gate.weight"] = m.gate.detach()
        for e in range(cfg["num_experts"]):
            q = f"{p}mlp.experts.{e}."
            out[q + "gate_proj.weight"] = m.w_gate[e].detach()
            out[q + "up_proj.weight"] = m.w_up[e].detach()
            out[q + "down_proj.weight"] = m.w_down[e].detach()
        for n in ("gate_proj", "up_proj", "down_proj"):
            out[p + f"mlp.shared_expert.{n}.weight"] = getattr(m.shared_expert, n).detach()
    out["model.norm.weight"] = model.norm.weight.detach()
    out["lm_head.weight"] = model.lm_head.detach()
    return out


def load_hf_state_dict(model: FlintNano, sd: dict):
    """Copies HF-named tensors into the model (inverse of hf_state_dict)."""
    cfg = model.cfg
    with torch.no_grad():
        params = hf_state_dict(model)
        missing = set(params) - set(sd)
        if missing:
            raise KeyError(f"missing tensors: {sorted(missing)[:5]}")
        for i, layer in enumerate(model.layers):
            if layer.dense:
                continue
            p = f"model.layers.{i}.mlp."
            for e in range(cfg["num_experts"]):
                layer.mlp.w_gate[e].copy_(sd[f"{p}experts.{e}.gate_proj.weight"])
                layer.mlp.w_up[e].copy_(sd[f"{p}experts.{e}.up_proj.weight"])
                layer.mlp.w_down[e].copy_(sd[f"{p}experts.{e}.down_proj.weight"])
        for name, t in params.items():
            if ".experts." in name:
                continue
            t.copy_(sd[name])  # detached views share storage with the parameters
