"""Turns a training run's output (train.py's $OUT) into the shipped model and the test fixtures:
models/flint-nano (HF directory: config, generation config, tokenizer files with the GLM-4.7 chat
template, BF16 model.safetensors, and flint-nano-nvfp4.gguf) and tests/data/nano (prompts, selected
PyTorch logit rows, per-token NLL on held-out windows, metrics). The NVFP4 GGUF is quantized with
the same ggml block quantizer and global-scale rule that train.py used for its fake-quantized
reference, so the GGUF holds exactly the weights the NVFP4 fixtures were computed with.

Usage: .venv/bin/python tools/nano/export.py RUN_DIR [--data tools/nano/data]
"""

from __future__ import annotations

import argparse
import json
import shutil
import struct
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(ROOT / "tests" / "support"))
sys.path.insert(0, str(ROOT / "tests" / "reference"))

import make_inputs  # noqa: E402
import tiny_flint  # noqa: E402

MODEL_DIR = ROOT / "models" / "flint-nano"
FIXTURE_DIR = ROOT / "tests" / "data" / "nano"
GGUF_NAME = "flint-nano-nvfp4.gguf"


def read_safetensors(path: Path) -> dict:
    """name -> float32 array (BF16 widened exactly); a plain reader since NumPy has no bfloat16."""
    raw = path.read_bytes()
    n = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8:8 + n])
    base = 8 + n
    out = {}
    for name, h in header.items():
        if name == "__metadata__":
            continue
        a, b = h["data_offsets"]
        buf = raw[base + a:base + b]
        if h["dtype"] == "BF16":
            arr = tiny_flint.bf16_from_bits(np.frombuffer(buf, np.uint16))
        elif h["dtype"] == "F32":
            arr = np.frombuffer(buf, np.float32).copy()
        else:
            raise ValueError(f"{path}: unexpected dtype {h['dtype']} for {name}")
        out[name] = arr.reshape(h["shape"])
    return out


def nvfp4_tensor(arr: np.ndarray):
    """ggml NVFP4 blocks, global scales and dequantized values for one GGUF tensor (2-D: one
    scale; stacked experts [E, out, in]: one scale per expert), as train.py fake-quantizes."""
    lead = arr.reshape(-1, arr.shape[-2], arr.shape[-1]) if arr.ndim == 3 else arr[None]
    amax = np.abs(lead).reshape(lead.shape[0], -1).max(axis=1)
    g = (amax / (6.0 * 200.0)).astype(np.float32)
    g = np.where(g == 0, 1.0, g).astype(np.float32)
    blocks = np.empty(lead.shape[:-1] + (lead.shape[-1] // 64 * 36,), np.uint8)
    deq = np.empty(lead.shape, np.float32)
    for e in range(lead.shape[0]):  # per expert, exactly as train.py quantizes each HF tensor
        blocks[e], d = tiny_flint.nvfp4_quantize(lead[e] / g[e])
        deq[e] = d * g[e]
    if arr.ndim == 2:
        return blocks[0], g, deq[0]
    return blocks, g, deq


def write_gguf(path: Path, cfg: dict, weights: dict, tok) -> dict:
    """NVFP4 GGUF in tiny_flint's layout (spec 3.2/4.3). Returns GGUF name -> stored float32."""
    import gguf

    garr = tiny_flint.gguf_arrays(cfg, weights)
    w = gguf.GGUFWriter(str(path), arch="flint")
    GT = gguf.GGUFValueType
    for k, v in tiny_flint.gguf_metadata(cfg).items():
        if isinstance(v, list):
            w.add_array(k, v)
        elif isinstance(v, bool):
            w.add_bool(k, v)
        elif isinstance(v, float):
            w.add_float32(k, v)
        else:
            w.add_uint32(k, int(v))
    w.add_name("flint-nano")
    w.add_key_value("general.file_type", 39, GT.UINT32)
    tj = json.loads(tok.to_str())
    vocab = sorted(tok.get_vocab(with_added_tokens=True).items(), key=lambda kv: kv[1])
    added = {a["id"] for a in tj["added_tokens"]}
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("glm4")
    w.add_token_list([t for t, _ in vocab])
    w.add_token_types([3 if i in added else 1 for i in range(len(vocab))])
    w.add_token_merges([m if isinstance(m, str) else " ".join(m) for m in tj["model"]["merges"]])
    ids = tiny_flint.special_ids(tok)
    w.add_eos_token_id(ids["<|endoftext|>"])
    w.add_pad_token_id(ids["<|endoftext|>"])
    w.add_key_value("tokenizer.ggml.eot_token_id", ids["<|user|>"], GT.UINT32)
    w.add_chat_template(tiny_flint.chat_template())
    stored = {}
    for name, arr in garr.items():
        if arr.ndim == 1 or tiny_flint.is_fp32_gguf(name):
            w.add_tensor(name, np.ascontiguousarray(arr, np.float32))
            stored[name] = arr.astype(np.float32)
        elif tiny_flint.nvfp4_eligible(name):
            blocks, g, deq = nvfp4_tensor(arr)
            w.add_tensor(name, np.ascontiguousarray(blocks), raw_dtype=gguf.GGMLQuantizationType.NVFP4)
            w.add_tensor(name.removesuffix(".weight") + ".scale", g.reshape(-1))
            stored[name] = deq
        else:
            w.add_tensor(name, tiny_flint.bf16_bits(arr), raw_shape=arr.shape,
                         raw_dtype=gguf.GGMLQuantizationType.BF16)
            stored[name] = tiny_flint.bf16_round(arr)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return stored


def fixture_rows(n: int) -> list[int]:
    """Which logit rows of an n-token prompt the repo keeps: every 16th, and the last four."""
    return sorted(set(range(0, n, 16)) | set(range(max(0, n - 4), n)))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run", help="directory holding train.py's output")
    ap.add_argument("--data", default=str(HERE / "data"))
    ap.add_argument("--model-dir", default=str(MODEL_DIR))
    ap.add_argument("--fixture-dir", default=str(FIXTURE_DIR))
    args = ap.parse_args(argv)
    run, data = Path(args.run), Path(args.data)
    model_dir, fixture_dir = Path(args.model_dir), Path(args.fixture_dir)
    from tokenizers import Tokenizer
    from safetensors.numpy import load_file

    tok = Tokenizer.from_file(str(data / "tokenizer.json"))
    cfg = make_inputs.knobs()
    hf_cfg = json.loads((HERE / "config.json").read_text())
    assert hf_cfg == make_inputs.hf_config(tok), "tools/nano/config.json is stale"
    weights = {}
    for k in (0, 1):
        weights.update(read_safetensors(run / f"weights_{k}.safetensors"))
    order = list(tiny_flint.hf_tensor_shapes(cfg))
    assert set(order) == set(weights), set(order) ^ set(weights)
    for n, shape in tiny_flint.hf_tensor_shapes(cfg).items():
        assert weights[n].shape == tuple(shape), (n, weights[n].shape, shape)

    if model_dir.exists():
        shutil.rmtree(model_dir)
    model_dir.mkdir(parents=True)
    (model_dir / "config.json").write_text(json.dumps(hf_cfg, indent=2) + "\n")
    (model_dir / "generation_config.json").write_text(
        json.dumps(tiny_flint.generation_config_json(tok), indent=2) + "\n")
    tiny_flint.write_tokenizer_files(model_dir, tok)
    dtypes = {n: "F32" if tiny_flint.is_fp32_tensor(n, cfg) else "BF16" for n in order}
    tiny_flint.write_safetensors(model_dir / "model.safetensors", {n: weights[n] for n in order},
                                 dtypes, {"format": "pt"})
    stored = write_gguf(model_dir / GGUF_NAME, cfg, weights, tok)
    nvfp4 = tiny_flint.hf_weights_from_gguf(cfg, stored)

    # Self-check: the NumPy spec reference on the shipped weights reproduces the PyTorch fixtures
    # (this also proves the GGUF's NVFP4 values equal train.py's fake-quantized ones).
    import flint_ref
    prompts = json.loads((data / "prompts.json").read_text())
    fx = {}
    for kind in ("bf16", "nvfp4"):
        fx.update(load_file(str(run / f"fixtures_{kind}.safetensors")))
    p0 = prompts["prompts"][0]
    for kind, W in (("bf16", weights), ("nvfp4", nvfp4)):
        want = fx[f"{kind}.logits.{p0['name']}"]
        got = flint_ref.forward(flint_ref.Config(hf_cfg), W, p0["ids"])
        err = float(np.abs(got - want).max() / np.abs(want).max())
        print(f"flint_ref vs PyTorch fixture [{kind}, {p0['name']}]: rel err {err:.2e}")
        assert err < 1e-5, err

    # Fixtures.
    fixture_dir.mkdir(parents=True, exist_ok=True)
    arrays = {}
    meta_prompts = []
    for p in prompts["prompts"]:
        rows = fixture_rows(len(p["ids"]))
        meta_prompts.append({"name": p["name"], "ids": p["ids"], "rows": rows})
        for kind in ("bf16", "nvfp4"):
            arrays[f"{kind}_logits_{p['name']}"] = fx[f"{kind}.logits.{p['name']}"][rows].astype(np.float32)
    for k in range(len(prompts["windows"])):
        for kind in ("bf16", "nvfp4"):
            arrays[f"{kind}_nll_window{k}"] = fx[f"{kind}.nll.window{k}"].astype(np.float64)
    np.savez(fixture_dir / "fixtures.npz", **arrays)
    metrics = json.loads((run / "metrics.json").read_text())
    (fixture_dir / "prompts.json").write_text(json.dumps(
        {"prompts": meta_prompts, "windows": prompts["windows"], "stop_ids": prompts["stop_ids"],
         "completions": metrics.get("completions", [])}, indent=1))
    keep = {k: v for k, v in metrics.items() if k not in ("config", "completions", "history")}
    (fixture_dir / "metrics.json").write_text(json.dumps(keep, indent=2) + "\n")
    sizes = {f.name: f.stat().st_size for f in model_dir.iterdir()}
    print(json.dumps(sizes), f"total {sum(sizes.values()) / 1e6:.2f} MB")
    print(f"fixtures: {sum(f.stat().st_size for f in fixture_dir.iterdir()) / 1e6:.2f} MB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
