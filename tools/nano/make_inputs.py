"""Writes the inputs of the training run that do not need torch: tools/nano/config.json (the HF
config of flint-nano, from tests/support/tiny_flint.py's writer so our loaders read it) and
DATA/prompts.json (fixture prompts rendered with the GLM-4.7 template, held-out windows, greedy
prompts, stop ids). Run after prepare_data.py.

Usage: .venv/bin/python tools/nano/make_inputs.py [--data tools/nano/data]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(ROOT / "tests" / "support"))

import chat_data  # noqa: E402
import tiny_flint  # noqa: E402

# flint-nano: every Flint feature at ~9.4M parameters (see docs/NANO.md).
NANO = {
    "num_hidden_layers": 8,          # full attention (NoPE) at 0, 1, 5, 7; sliding elsewhere
    "sliding_window": 64,            # current token + 63 earlier ones
    "mlp_only_layers": [0, 1],
    "num_experts": 12,
    "num_experts_per_tok": 3,
    "moe_intermediate_size": 64,
    "shared_expert_intermediate_size": 128,
    "intermediate_size": 512,
    "norm_topk_prob": True,
    "routed_scaling_factor": 1.0,
    "expert_bias": False,
    "rope_theta": 10000.0,
    "rms_norm_eps": 1e-6,
    "vocab_size": 6144,
    "hidden_size": 256,
    "num_attention_heads": 8,
    "num_key_value_heads": 2,
    "head_dim": 32,
    "max_position_embeddings": 4096,
    "dtype": "BF16",
}

TOOL_WEATHER = chat_data.TOOLS["get_weather"][0]


def knobs() -> dict:
    return tiny_flint.make_config(NANO)


def hf_config(tok) -> dict:
    return tiny_flint.hf_config_json(knobs(), tok)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default=str(HERE / "data"))
    args = ap.parse_args(argv)
    data = Path(args.data)
    from tokenizers import Tokenizer
    tok = Tokenizer.from_file(str(data / "tokenizer.json"))
    cfg = hf_config(tok)
    (HERE / "config.json").write_text(json.dumps(cfg, indent=2) + "\n")

    r = chat_data.Renderer()

    def chat(text, tools=None):
        return r.render([{"role": "user", "content": text}], tools=tools, add_generation_prompt=True)

    def enc(text):
        return tok.encode(text, add_special_tokens=False).ids

    heldout = np.fromfile(data / "heldout.bin", dtype=np.uint16)
    long_ids = [int(x) for x in heldout[1000:1160]]  # 160 tokens: 2.5 sliding windows
    prompts = [
        {"name": "chat_math", "text": chat("What is 12 + 7?")},
        {"name": "chat_hello", "text": chat("Hello!")},
        {"name": "chat_tool", "text": chat("What's the weather in Paris?", [TOOL_WEATHER])},
        {"name": "code_long", "text": tok.decode(long_ids, skip_special_tokens=False)},
    ]
    for p in prompts:
        p["ids"] = enc(p["text"])
    prompts[3]["ids"] = long_ids  # exact held-out tokens (re-encoding could differ)
    generate = [
        {"name": "code_fib", "text": "def fibonacci(n):\n"},
        {"name": "code_files", "text": "import os\n\n\ndef list_python_files(path):\n"},
        {"name": "code_stack", "text": "class Stack:\n    def __init__(self):\n"},
        {"name": "chat_math", "text": chat("What is 12 + 7?")},
        {"name": "chat_hello", "text": chat("Hello!")},
        {"name": "chat_even", "text": chat("Write a Python function that checks if a number is even.")},
        {"name": "chat_tool", "text": chat("What's the weather in Paris?", [TOOL_WEATHER])},
        {"name": "chat_capital", "text": chat("What is the capital of France?")},
    ]
    for p in generate:
        p["ids"] = enc(p["text"])
        p["max_new"] = 80
    n = len(heldout)
    windows = [[int(x) for x in heldout[o:o + 256]] for o in (0, n // 2)]
    special = tiny_flint.special_ids(tok)
    doc = {"prompts": prompts, "generate": generate, "windows": windows,
           "stop_ids": [special["<|endoftext|>"], special["<|user|>"], special["<|observation|>"]]}
    (data / "prompts.json").write_text(json.dumps(doc))
    print(f"config: {sum(1 for _ in cfg)} keys; prompts: " +
          ", ".join(f"{p['name']}={len(p['ids'])}" for p in prompts))
    return 0


if __name__ == "__main__":
    sys.exit(main())
