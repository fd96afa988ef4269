"""Tiny random Flint checkpoints in every form, for tests and tools.

Writes an HF directory (config.json, generation_config.json, safetensors single or sharded,
tokenizer.json + tokenizer_config.json with the GLM-4.7 chat template), a BF16 GGUF and an NVFP4
GGUF (flint.* keys, stacked expert tensors, `.scale` companions, tokenizer.ggml.* keys), following
../shared/spec/flint-model.md sections 1, 3 and 4. Each writer returns the weights as float32 NumPy
arrays keyed by HF name, holding exactly the values stored in the file (BF16-rounded, or NVFP4
dequantized including the global scale), so a NumPy reference can use them directly.

CLI: python tests/support/tiny_flint.py OUT --form hf|gguf-bf16|gguf-nvfp4 [--preset tiny] [--seed N]
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import struct
import sys
from pathlib import Path

import numpy as np

SOURCE_DIR = Path(__file__).resolve().parents[2]
CHAT_TEMPLATE_PATH = Path(
    os.environ.get("FLINT_CHAT_TEMPLATE", "/work/shared/data/chat-templates/GLM-4.7.jinja"))

SPECIAL_TOKENS = [
    "<|endoftext|>", "[gMASK]", "<sop>", "<|system|>", "<|user|>", "<|assistant|>",
    "<|observation|>", "<think>", "</think>", "<tool_call>", "</tool_call>", "<arg_key>",
    "</arg_key>", "<arg_value>", "</arg_value>", "<tool_response>", "</tool_response>",
]

# Every knob the tests vary. Names follow HF config.json where one exists.
DEFAULT_CONFIG = {
    "num_hidden_layers": 4,
    # None: Flint's rule scaled down (layers 0, 1, last and every 4th from 1 are full).
    "layer_types": None,
    "no_rope_layers": None,        # None: the full-attention layers (as in Flint)
    "sliding_window": 5,
    "mlp_only_layers": [0],        # dense prefix
    "num_experts": 8,
    "num_experts_per_tok": 2,
    "moe_intermediate_size": 64,
    "shared_expert_intermediate_size": 128,  # 0: no shared expert
    "intermediate_size": 192,
    "norm_topk_prob": True,
    "routed_scaling_factor": 1.0,
    "expert_bias": False,          # write an e_score_correction_bias per MoE layer
    "rope_theta": 10000.0,
    "rms_norm_eps": 1e-6,
    "vocab_size": 384,
    "hidden_size": 64,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 16,
    "max_position_embeddings": 4096,
    "dtype": "BF16",               # weight dtype of the HF form: BF16 or F32
    "seed": 0,
    "sink_scale": 1.0,             # sinks ~ N(0, 1) * sink_scale, so they matter
    "weight_scale": 0.5,           # linear weights ~ N(0, 1) * weight_scale / sqrt(in)
    # Spelling variants of UNCONFIRMED names (spec sections 1 and 3).
    "experts_key": "num_experts",          # or "n_routed_experts"
    "shared_expert_name": "shared_expert",  # or "shared_experts"
    "sink_name": "self_attn.sinks",        # or "self_attn.softmax_offset", "self_attn.attn.sinks"
    "bias_name": "mlp.gate.e_score_correction_bias",  # or "mlp.e_score_correction_bias"
    "shards": 1,                   # number of safetensors shards (>1 writes an index)
}

PRESETS = {
    "tiny": {},
    # The bundled model (models/flint-tiny): every feature on, still only a few MB.
    "bundled": {
        "num_hidden_layers": 5, "sliding_window": 9, "mlp_only_layers": [0], "num_experts": 8,
        "num_experts_per_tok": 3, "moe_intermediate_size": 64, "shared_expert_intermediate_size": 128,
        "intermediate_size": 128, "vocab_size": 640, "hidden_size": 128, "num_attention_heads": 4,
        "num_key_value_heads": 2, "head_dim": 32, "expert_bias": True, "seed": 7, "shards": 2,
    },
    "no_shared": {"shared_expert_intermediate_size": 0, "norm_topk_prob": False,
                  "routed_scaling_factor": 2.5},
    "biased": {"expert_bias": True, "experts_key": "n_routed_experts",
               "shared_expert_name": "shared_experts", "sink_name": "self_attn.softmax_offset"},
}


def make_config(overrides: dict | None = None, preset: str = "tiny") -> dict:
    """The full knob dict: DEFAULT_CONFIG, then the preset, then `overrides`."""
    cfg = copy.deepcopy(DEFAULT_CONFIG)
    cfg.update(copy.deepcopy(PRESETS[preset]))
    if overrides:
        unknown = set(overrides) - set(DEFAULT_CONFIG)
        if unknown:
            raise KeyError(f"tiny_flint: unknown config keys {sorted(unknown)}")
        cfg.update(copy.deepcopy(overrides))
    n = cfg["num_hidden_layers"]
    if cfg["layer_types"] is None:
        full = {0, 1, n - 1} | {i for i in range(1, n, 4)}
        cfg["layer_types"] = ["full_attention" if i in full else "sliding_attention"
                              for i in range(n)]
    if cfg["no_rope_layers"] is None:
        cfg["no_rope_layers"] = [i for i, t in enumerate(cfg["layer_types"]) if t == "full_attention"]
    return cfg


# ---------------------------------------------------------------------------------------------
# Numeric helpers: BF16 rounding and the ggml NVFP4 block, written from spec section 4.

def bf16_round(x: np.ndarray) -> np.ndarray:
    """float32 -> nearest-even bfloat16 -> float32."""
    return bf16_from_bits(bf16_bits(x))


def bf16_bits(x: np.ndarray) -> np.ndarray:
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    u = (u + 0x7FFF + ((u >> 16) & 1)) >> 16
    return u.astype(np.uint16)


def bf16_from_bits(b: np.ndarray) -> np.ndarray:
    return (b.astype(np.uint32) << 16).view(np.float32)


E2M1 = np.array([0, 0.5, 1, 1.5, 2, 3, 4, 6, -0.0, -0.5, -1, -1.5, -2, -3, -4, -6], np.float32)


def ue4m3_decode(x: np.ndarray) -> np.ndarray:
    """Unsigned E4M3 to float (the full value, not ggml's half)."""
    x = x.astype(np.int32)
    e = (x >> 3) & 0xF
    m = (x & 7).astype(np.float32)
    raw = np.where(e == 0, m * 2.0**-9, (1 + m / 8) * 2.0 ** (e.astype(np.float32) - 7))
    return np.where((x == 0) | (x == 0x7F), 0.0, raw).astype(np.float32)


_UE4M3_VALUES = ue4m3_decode(np.arange(0x7F, dtype=np.uint8))  # codes 0..0x7E


def ue4m3_encode(v: np.ndarray) -> np.ndarray:
    """Nearest unsigned E4M3 code (0..0x7E) for non-negative values."""
    idx = np.searchsorted(_UE4M3_VALUES, v)
    idx = np.clip(idx, 1, len(_UE4M3_VALUES) - 1)
    lo, hi = _UE4M3_VALUES[idx - 1], _UE4M3_VALUES[idx]
    return np.where(v - lo <= hi - v, idx - 1, idx).astype(np.uint8)


def nvfp4_quantize(w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Quantizes rows of `w` [..., K] (K % 64 == 0) to ggml block_nvfp4 bytes [..., K/64*36] and
    returns (bytes, dequantized float32 values of the same shape as w)."""
    shape = w.shape
    k = shape[-1]
    assert k % 64 == 0, f"nvfp4 rows must be a multiple of 64, got {k}"
    sub = w.reshape(-1, 16).astype(np.float32)                       # [n_sub, 16]
    amax = np.abs(sub).max(axis=1)
    d = ue4m3_encode(amax / 6.0)                                      # [n_sub]
    dv = ue4m3_decode(d)[:, None]
    safe = np.where(dv == 0, 1.0, dv)
    q = sub / safe                                                    # want nearest E2M1
    mag = np.argmin(np.abs(np.abs(q)[..., None] - E2M1[None, None, :8]), axis=-1)
    code = (mag | np.where((q < 0) & (mag != 0), 8, 0)).astype(np.uint8)
    code = np.where(dv == 0, 0, code).astype(np.uint8)
    deq = (E2M1[code] * dv).reshape(shape).astype(np.float32)
    nb = sub.shape[0] // 4
    code = code.reshape(nb, 4, 16)
    qs = (code[:, :, :8] | (code[:, :, 8:] << 4)).astype(np.uint8).reshape(nb, 32)
    blocks = np.concatenate([d.reshape(nb, 4), qs], axis=1)          # [nb, 36]
    return blocks.reshape(*shape[:-1], k // 64 * 36), deq


def nvfp4_dequantize(blocks: np.ndarray, k: int) -> np.ndarray:
    """Decodes ggml block_nvfp4 bytes [..., k/64*36] to float32 [..., k] (no global scale)."""
    lead = blocks.shape[:-1]
    b = blocks.reshape(-1, 36)
    d = ue4m3_decode(b[:, :4])                                         # [nb, 4]
    qs = b[:, 4:].reshape(-1, 4, 8)
    code = np.concatenate([qs & 0xF, qs >> 4], axis=-1)               # [nb, 4, 16]
    return (E2M1[code] * d[:, :, None]).reshape(*lead, k).astype(np.float32)


# ---------------------------------------------------------------------------------------------
# Random weights.

def hf_tensor_shapes(cfg: dict) -> dict:
    """HF tensor name -> shape, in file order."""
    h, nh, nkv, hd = (cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_key_value_heads"],
                      cfg["head_dim"])
    shapes = {"model.embed_tokens.weight": (cfg["vocab_size"], h)}
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        shapes[p + "input_layernorm.weight"] = (h,)
        shapes[p + "self_attn.q_proj.weight"] = (nh * hd, h)
        shapes[p + "self_attn.k_proj.weight"] = (nkv * hd, h)
        shapes[p + "self_attn.v_proj.weight"] = (nkv * hd, h)
        shapes[p + "self_attn.o_proj.weight"] = (h, nh * hd)
        shapes[p + "self_attn.q_norm.weight"] = (hd,)
        shapes[p + "self_attn.k_norm.weight"] = (hd,)
        shapes[p + cfg["sink_name"]] = (nh,)
        shapes[p + "post_attention_layernorm.weight"] = (h,)
        if i in cfg["mlp_only_layers"]:
            inter = cfg["intermediate_size"]
            shapes[p + "mlp.gate_proj.weight"] = (inter, h)
            shapes[p + "mlp.up_proj.weight"] = (inter, h)
            shapes[p + "mlp.down_proj.weight"] = (h, inter)
            continue
        e, mi, si = cfg["num_experts"], cfg["moe_intermediate_size"], cfg["shared_expert_intermediate_size"]
        shapes[p + "mlp.gate.weight"] = (e, h)
        if cfg["expert_bias"]:
            shapes[p + cfg["bias_name"]] = (e,)
        for x in range(e):
            q = f"{p}mlp.experts.{x}."
            shapes[q + "gate_proj.weight"] = (mi, h)
            shapes[q + "up_proj.weight"] = (mi, h)
            shapes[q + "down_proj.weight"] = (h, mi)
        if si:
            q = f"{p}mlp.{cfg['shared_expert_name']}."
            shapes[q + "gate_proj.weight"] = (si, h)
            shapes[q + "up_proj.weight"] = (si, h)
            shapes[q + "down_proj.weight"] = (h, si)
    shapes["model.norm.weight"] = (h,)
    shapes["lm_head.weight"] = (cfg["vocab_size"], h)
    return shapes


def is_fp32_tensor(name: str, cfg: dict) -> bool:
    """Tensors kept in FP32 in every form: sinks and the expert-score bias."""
    return name.endswith(cfg["sink_name"]) or (cfg["expert_bias"] and name.endswith(cfg["bias_name"]))


def random_weights(cfg: dict) -> dict:
    """HF name -> float32 array, deterministic in cfg['seed'], rounded to cfg['dtype']."""
    rng = np.random.default_rng(cfg["seed"])
    out = {}
    for name, shape in hf_tensor_shapes(cfg).items():
        if name.endswith("norm.weight") or name.endswith("layernorm.weight"):
            w = 1.0 + 0.2 * rng.standard_normal(shape)
        elif is_fp32_tensor(name, cfg) and name.endswith(cfg["sink_name"]):
            w = cfg["sink_scale"] * rng.standard_normal(shape)
        elif is_fp32_tensor(name, cfg):
            w = 0.1 * rng.standard_normal(shape)
        elif name == "model.embed_tokens.weight":
            w = rng.standard_normal(shape)
        else:
            w = cfg["weight_scale"] * rng.standard_normal(shape) / np.sqrt(shape[1])
        w = w.astype(np.float32)
        if cfg["dtype"] == "BF16" and not is_fp32_tensor(name, cfg):
            w = bf16_round(w)
        out[name] = w
    return out


# ---------------------------------------------------------------------------------------------
# Tokenizer.

TRAINING_TEXT = """Flint is a small test model. It reads tokens and writes tokens.
The quick brown fox jumps over the lazy dog. Pack my box with five dozen liquor jugs.
Hello, world! How are you today? I am fine, thank you. What is 2 + 2? It is 4.
def add(a, b):\n    return a + b\nprint(add(1, 2))
The weather is sunny; the sea is calm. Numbers: 0 1 2 3 4 5 6 7 8 9 10 100 1000.
User: tell me a story. Assistant: once upon a time there was a tiny model that could.
{"name": "get_weather", "arguments": {"city": "Paris"}}
"""


def build_tokenizer(vocab_size: int):
    """A byte-level BPE trained on TRAINING_TEXT, then the Flint special tokens, then reserved
    tokens so that the vocabulary is exactly vocab_size. Returns a tokenizers.Tokenizer."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers, AddedToken

    n_special = len(SPECIAL_TOKENS)
    if vocab_size < 256 + n_special + 1:
        raise ValueError(f"tiny_flint: vocab_size {vocab_size} too small for a byte-level BPE")
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size - n_special, show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), special_tokens=[])
    tok.train_from_iterator([TRAINING_TEXT] * 4, trainer=trainer)
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in SPECIAL_TOKENS])
    n = tok.get_vocab_size()
    if n < vocab_size:
        tok.add_special_tokens([AddedToken(f"<|reserved_{i}|>", special=True, normalized=False)
                                for i in range(vocab_size - n)])
    assert tok.get_vocab_size() == vocab_size, (tok.get_vocab_size(), vocab_size)
    return tok


def chat_template() -> str:
    return CHAT_TEMPLATE_PATH.read_text()


def special_ids(tok) -> dict:
    return {t: tok.token_to_id(t) for t in SPECIAL_TOKENS}


# ---------------------------------------------------------------------------------------------
# HF directory.

def hf_config_json(cfg: dict, tok=None) -> dict:
    ids = special_ids(tok) if tok is not None else {}
    eos = ids.get("<|endoftext|>", 0)
    j = {
        "architectures": ["FlintForCausalLM"],
        "model_type": "flint",
        "vocab_size": cfg["vocab_size"],
        "hidden_size": cfg["hidden_size"],
        "num_hidden_layers": cfg["num_hidden_layers"],
        "num_attention_heads": cfg["num_attention_heads"],
        "num_key_value_heads": cfg["num_key_value_heads"],
        "head_dim": cfg["head_dim"],
        "hidden_act": "silu",
        "intermediate_size": cfg["intermediate_size"],
        "moe_intermediate_size": cfg["moe_intermediate_size"],
        "shared_expert_intermediate_size": cfg["shared_expert_intermediate_size"],
        cfg["experts_key"]: cfg["num_experts"],
        "num_experts_per_tok": cfg["num_experts_per_tok"],
        "norm_topk_prob": cfg["norm_topk_prob"],
        "routed_scaling_factor": cfg["routed_scaling_factor"],
        "mlp_only_layers": list(cfg["mlp_only_layers"]),
        "decoder_sparse_step": 1,
        "layer_types": list(cfg["layer_types"]),
        "no_rope_layer_indices": list(cfg["no_rope_layers"]),
        "sliding_window": cfg["sliding_window"],
        "rope_theta": cfg["rope_theta"],
        "rms_norm_eps": cfg["rms_norm_eps"],
        "max_position_embeddings": cfg["max_position_embeddings"],
        "attention_bias": False,
        "attention_dropout": 0.0,
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16" if cfg["dtype"] == "BF16" else "float32",
        "eos_token_id": eos,
        "pad_token_id": eos,
        "router_aux_loss_coef": 0.0005,
    }
    return j


def generation_config_json(tok) -> dict:
    ids = special_ids(tok)
    return {
        "eos_token_id": [ids["<|endoftext|>"], ids["<|user|>"], ids["<|observation|>"]],
        "pad_token_id": ids["<|endoftext|>"],
        "temperature": 1.0,
        "top_p": 0.95,
        "top_k": 20,
    }


def write_safetensors(path: Path, tensors: dict, dtypes: dict, metadata: dict | None = None):
    """A plain safetensors writer (BF16 has no NumPy dtype, so the package cannot write it)."""
    header = {}
    blobs = []
    off = 0
    for name, arr in tensors.items():
        dt = dtypes[name]
        if dt == "BF16":
            raw = bf16_bits(arr).tobytes()
        elif dt == "F32":
            raw = np.ascontiguousarray(arr, np.float32).tobytes()
        else:
            raise ValueError(dt)
        header[name] = {"dtype": dt, "shape": list(arr.shape), "data_offsets": [off, off + len(raw)]}
        blobs.append(raw)
        off += len(raw)
    if metadata:
        header["__metadata__"] = metadata
    hb = json.dumps(header, separators=(",", ":")).encode()
    hb += b" " * ((8 - len(hb) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(hb)))
        f.write(hb)
        for b in blobs:
            f.write(b)


def write_tokenizer_files(out: Path, tok):
    tok.save(str(out / "tokenizer.json"))
    added = {}
    for t, i in special_ids(tok).items():
        added[str(i)] = {"content": t, "lstrip": False, "normalized": False, "rstrip": False,
                         "single_word": False, "special": True}
    (out / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "PreTrainedTokenizerFast",
        "eos_token": "<|endoftext|>",
        "pad_token": "<|endoftext|>",
        "clean_up_tokenization_spaces": False,
        "model_max_length": 4096,
        "added_tokens_decoder": added,
        "chat_template": chat_template(),
    }, indent=2))


def write_hf(out_dir, config: dict | None = None, preset: str = "tiny") -> dict:
    """Writes an HF checkpoint directory. Returns {"config": knobs, "weights": HF name -> float32,
    "tokenizer": tokenizers.Tokenizer, "path": out_dir}."""
    cfg = make_config(config, preset)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    tok = build_tokenizer(cfg["vocab_size"])
    weights = random_weights(cfg)
    dtypes = {n: ("F32" if is_fp32_tensor(n, cfg) or cfg["dtype"] == "F32" else "BF16")
              for n in weights}
    (out / "config.json").write_text(json.dumps(hf_config_json(cfg, tok), indent=2))
    (out / "generation_config.json").write_text(json.dumps(generation_config_json(tok), indent=2))
    write_tokenizer_files(out, tok)
    names = list(weights)
    shards = max(1, int(cfg["shards"]))
    if shards == 1:
        write_safetensors(out / "model.safetensors", weights, dtypes, {"format": "pt"})
    else:
        per = -(-len(names) // shards)
        weight_map = {}
        for s in range(shards):
            fname = f"model-{s + 1:05d}-of-{shards:05d}.safetensors"
            part = {n: weights[n] for n in names[s * per:(s + 1) * per]}
            write_safetensors(out / fname, part, dtypes, {"format": "pt"})
            weight_map.update({n: fname for n in part})
        total = sum(weights[n].size * (4 if dtypes[n] == "F32" else 2) for n in names)
        (out / "model.safetensors.index.json").write_text(json.dumps(
            {"metadata": {"total_size": int(total)}, "weight_map": weight_map}, indent=2))
    return {"config": cfg, "weights": weights, "tokenizer": tok, "path": str(out)}


# ---------------------------------------------------------------------------------------------
# GGUF.

def gguf_name(hf: str, cfg: dict) -> str | None:
    """GGUF name for a non-expert HF tensor (expert tensors are stacked separately)."""
    top = {"model.embed_tokens.weight": "token_embd.weight", "model.norm.weight": "output_norm.weight",
           "lm_head.weight": "output.weight"}
    if hf in top:
        return top[hf]
    parts = hf.split(".")
    i = int(parts[2])
    rest = ".".join(parts[3:])
    if rest == cfg["sink_name"]:
        return f"blk.{i}.attn_sinks.weight"
    if cfg["expert_bias"] and rest == cfg["bias_name"]:
        return f"blk.{i}.exp_probs_b.bias"
    sh = cfg["shared_expert_name"]
    table = {
        "input_layernorm.weight": "attn_norm.weight",
        "post_attention_layernorm.weight": "ffn_norm.weight",
        "self_attn.q_proj.weight": "attn_q.weight", "self_attn.k_proj.weight": "attn_k.weight",
        "self_attn.v_proj.weight": "attn_v.weight", "self_attn.o_proj.weight": "attn_output.weight",
        "self_attn.q_norm.weight": "attn_q_norm.weight", "self_attn.k_norm.weight": "attn_k_norm.weight",
        "mlp.gate_proj.weight": "ffn_gate.weight", "mlp.up_proj.weight": "ffn_up.weight",
        "mlp.down_proj.weight": "ffn_down.weight", "mlp.gate.weight": "ffn_gate_inp.weight",
        f"mlp.{sh}.gate_proj.weight": "ffn_gate_shexp.weight",
        f"mlp.{sh}.up_proj.weight": "ffn_up_shexp.weight",
        f"mlp.{sh}.down_proj.weight": "ffn_down_shexp.weight",
    }
    if rest in table:
        return f"blk.{i}.{table[rest]}"
    return None  # per-expert tensor


def gguf_arrays(cfg: dict, weights: dict) -> dict:
    """GGUF name -> float32 array in PyTorch order (experts stacked [E, out, in])."""
    out = {}
    for hf, w in weights.items():
        g = gguf_name(hf, cfg)
        if g is not None:
            out[g] = w
    for i in range(cfg["num_hidden_layers"]):
        if i in cfg["mlp_only_layers"]:
            continue
        for proj, g in (("gate_proj", "ffn_gate_exps"), ("up_proj", "ffn_up_exps"),
                        ("down_proj", "ffn_down_exps")):
            out[f"blk.{i}.{g}.weight"] = np.stack(
                [weights[f"model.layers.{i}.mlp.experts.{x}.{proj}.weight"]
                 for x in range(cfg["num_experts"])])
    return out


def nvfp4_eligible(gname: str) -> bool:
    """Which tensors the NVFP4 GGUF quantizes: every linear except embedding, head and router."""
    if gname in ("token_embd.weight", "output.weight") or "ffn_gate_inp" in gname:
        return False
    return any(k in gname for k in ("attn_q.", "attn_k.", "attn_v.", "attn_output.", "ffn_gate",
                                    "ffn_up", "ffn_down"))


def gguf_metadata(cfg: dict) -> dict:
    """flint.* keys (spec 3.2) as (key -> python value); types are chosen in write_gguf."""
    n = cfg["num_hidden_layers"]
    md = {
        "flint.block_count": n,
        "flint.context_length": cfg["max_position_embeddings"],
        "flint.embedding_length": cfg["hidden_size"],
        "flint.feed_forward_length": cfg["intermediate_size"],
        "flint.attention.head_count": cfg["num_attention_heads"],
        "flint.attention.head_count_kv": cfg["num_key_value_heads"],
        "flint.attention.key_length": cfg["head_dim"],
        "flint.attention.value_length": cfg["head_dim"],
        "flint.attention.layer_norm_rms_epsilon": float(cfg["rms_norm_eps"]),
        "flint.rope.freq_base": float(cfg["rope_theta"]),
        "flint.expert_count": cfg["num_experts"],
        "flint.expert_used_count": cfg["num_experts_per_tok"],
        "flint.expert_feed_forward_length": cfg["moe_intermediate_size"],
        "flint.expert_shared_feed_forward_length": cfg["shared_expert_intermediate_size"],
        "flint.leading_dense_block_count": len(cfg["mlp_only_layers"]),
        "flint.expert_shared_count": (cfg["shared_expert_intermediate_size"] //
                                      cfg["moe_intermediate_size"]),
        "flint.expert_weights_norm": bool(cfg["norm_topk_prob"]),
        "flint.expert_weights_scale": float(cfg["routed_scaling_factor"]),
        "flint.attention.sliding_window": cfg["sliding_window"],
        "flint.attention.sliding_window_pattern":
            [t == "sliding_attention" for t in cfg["layer_types"]],
        "flint.rope.pattern": [i not in cfg["no_rope_layers"] for i in range(n)],
    }
    return md


def write_gguf(path, config: dict | None = None, preset: str = "tiny", quant: str = "bf16") -> dict:
    """Writes a GGUF (quant 'bf16' or 'nvfp4'). Returns {"config", "weights" (HF name -> float32,
    the exact values the file encodes), "gguf_weights" (GGUF name -> float32), "tokenizer", "path"}."""
    import gguf

    cfg = make_config(config, preset)
    tok = build_tokenizer(cfg["vocab_size"])
    weights = random_weights(cfg)
    garr = gguf_arrays(cfg, weights)
    w = gguf.GGUFWriter(str(path), arch="flint")
    GT = gguf.GGUFValueType
    for k, v in gguf_metadata(cfg).items():
        if isinstance(v, list):
            w.add_array(k, v)
        elif isinstance(v, bool):
            w.add_bool(k, v)
        elif isinstance(v, float):
            w.add_float32(k, v)
        else:
            w.add_uint32(k, int(v))
    w.add_name("flint-tiny")
    w.add_key_value("general.file_type", 30 if quant == "bf16" else 39, GT.UINT32)
    # Tokenizer (GPT-2-style byte-level BPE, as llama.cpp stores it).
    tj = json.loads(tok.to_str())
    vocab = sorted(tok.get_vocab(with_added_tokens=True).items(), key=lambda kv: kv[1])
    tokens = [t for t, _ in vocab]
    added = {a["id"] for a in tj["added_tokens"]}
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("glm4")
    w.add_token_list(tokens)
    w.add_token_types([3 if i in added else 1 for i in range(len(tokens))])
    merges = [m if isinstance(m, str) else " ".join(m) for m in tj["model"]["merges"]]
    w.add_token_merges(merges)
    ids = special_ids(tok)
    w.add_eos_token_id(ids["<|endoftext|>"])
    w.add_pad_token_id(ids["<|endoftext|>"])
    w.add_key_value("tokenizer.ggml.eot_token_id", ids["<|user|>"], GT.UINT32)
    w.add_chat_template(chat_template())

    stored = {}
    for name, arr in garr.items():
        if arr.ndim == 1 or is_fp32_gguf(name):
            w.add_tensor(name, np.ascontiguousarray(arr, np.float32))
            stored[name] = arr.astype(np.float32)
        elif quant == "nvfp4" and nvfp4_eligible(name):
            # Global scale per tensor ({1}) or per expert ({E}), chosen so sub-block scales are
            # well inside UE4M3 range; it is a power of two times an odd value, so it matters.
            lead = arr.reshape(-1, arr.shape[-2], arr.shape[-1]) if arr.ndim == 3 else arr[None]
            amax = np.abs(lead).reshape(lead.shape[0], -1).max(axis=1)
            gscale = (amax / (6.0 * 200.0)).astype(np.float32)
            gscale = np.where(gscale == 0, 1.0, gscale).astype(np.float32)
            blocks, deq = nvfp4_quantize(lead / gscale[:, None, None])
            deq = deq * gscale[:, None, None]
            if arr.ndim == 2:
                blocks, deq = blocks[0], deq[0]
            w.add_tensor(name, np.ascontiguousarray(blocks),
                         raw_dtype=gguf.GGMLQuantizationType.NVFP4)
            w.add_tensor(name.removesuffix(".weight") + ".scale",
                         gscale.reshape(-1).astype(np.float32))
            stored[name] = deq.astype(np.float32)
        else:
            w.add_tensor(name, bf16_bits(arr), raw_shape=arr.shape,
                         raw_dtype=gguf.GGMLQuantizationType.BF16)
            stored[name] = bf16_round(arr)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return {"config": cfg, "weights": hf_weights_from_gguf(cfg, stored), "gguf_weights": stored,
            "tokenizer": tok, "path": str(path)}


def is_fp32_gguf(gname: str) -> bool:
    return "attn_sinks" in gname or "exp_probs_b" in gname


def hf_weights_from_gguf(cfg: dict, stored: dict) -> dict:
    """Maps GGUF-named arrays back to HF names (experts unstacked)."""
    out = {}
    for hf in hf_tensor_shapes(cfg):
        g = gguf_name(hf, cfg)
        if g is not None:
            out[hf] = stored[g]
            continue
        parts = hf.split(".")
        i, x, proj = int(parts[2]), int(parts[5]), parts[6]
        g = {"gate_proj": "ffn_gate_exps", "up_proj": "ffn_up_exps", "down_proj": "ffn_down_exps"}[proj]
        out[hf] = stored[f"blk.{i}.{g}.weight"][x]
    return out


def write(out, form: str, config: dict | None = None, preset: str = "tiny") -> dict:
    """Writes one form: 'hf' (a directory), 'gguf-bf16' or 'gguf-nvfp4' (a file)."""
    if form == "hf":
        return write_hf(out, config, preset)
    if form in ("gguf-bf16", "gguf-nvfp4"):
        return write_gguf(out, config, preset, quant=form.split("-")[1])
    raise ValueError(f"tiny_flint: unknown form {form!r}")


def dump_weights(res: dict, dump_dir) -> None:
    """Writes res["weights"] as raw little-endian float32 files plus index.json (the knobs and, per
    HF name, its file and shape), for C++ tests that cannot read .npy."""
    d = Path(dump_dir)
    d.mkdir(parents=True, exist_ok=True)
    index = {"config": res["config"], "tensors": {}}
    for i, (name, arr) in enumerate(res["weights"].items()):
        fname = f"{i}.f32"
        np.ascontiguousarray(arr, dtype="<f4").tofile(d / fname)
        index["tensors"][name] = {"file": fname, "shape": list(arr.shape)}
    (d / "index.json").write_text(json.dumps(index))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", help="output directory (hf) or .gguf file")
    ap.add_argument("--form", choices=["hf", "gguf-bf16", "gguf-nvfp4"], default="hf")
    ap.add_argument("--preset", choices=sorted(PRESETS), default="tiny")
    ap.add_argument("--seed", type=int)
    ap.add_argument("--dump", metavar="DIR", help="also write the weights as raw float32 + index.json")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=JSON",
                    help="override one knob, e.g. --set num_experts=4 --set expert_bias=true")
    args = ap.parse_args(argv)
    overrides = {}
    for kv in args.set:
        k, _, v = kv.partition("=")
        overrides[k] = json.loads(v)
    if args.seed is not None:
        overrides["seed"] = args.seed
    out = args.out
    if args.form != "hf" and os.path.isdir(out):
        out = os.path.join(out, f"flint-tiny-{args.form.split('-')[1]}.gguf")
    res = write(out, args.form, overrides, args.preset)
    if args.dump:
        dump_weights(res, args.dump)
    print(res["path"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
