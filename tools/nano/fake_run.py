"""Writes a directory shaped like train.py's output from RANDOM weights, with the logits and NLL
computed by the NumPy reference (tests/reference/flint_ref.py) instead of PyTorch. Only for
checking export.py and tests/python/nano on a machine without torch; never ship its result.

Usage: .venv/bin/python tools/nano/fake_run.py OUT_DIR [--data tools/nano/data]
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
sys.path.insert(0, str(ROOT / "tests" / "reference"))

import export  # noqa: E402
import flint_ref  # noqa: E402
import make_inputs  # noqa: E402
import tiny_flint  # noqa: E402


def nll(logits, ids):
    lg = logits[:-1]
    m = lg.max(axis=1, keepdims=True)
    lse = (m + np.log(np.exp(lg - m).sum(axis=1, keepdims=True)))[:, 0]
    return lse - lg[np.arange(len(ids) - 1), ids[1:]]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out")
    ap.add_argument("--data", default=str(HERE / "data"))
    args = ap.parse_args(argv)
    out, data = Path(args.out), Path(args.data)
    out.mkdir(parents=True, exist_ok=True)
    from safetensors.numpy import save_file

    cfg = make_inputs.knobs()
    hf_cfg = json.loads((HERE / "config.json").read_text())
    w = tiny_flint.random_weights(cfg)
    names = list(w)
    half = len(names) // 2
    dtypes = {n: "F32" if tiny_flint.is_fp32_tensor(n, cfg) else "BF16" for n in names}
    for k, part in enumerate((names[:half], names[half:])):
        tiny_flint.write_safetensors(out / f"weights_{k}.safetensors", {n: w[n] for n in part},
                                     dtypes, {"format": "pt"})
    nv = {}
    for n, a in w.items():
        if tiny_flint.nvfp4_eligible(tiny_flint.gguf_name(n, cfg) or "blk.0.ffn_gate_exps.weight"):
            _, _, deq = export.nvfp4_tensor(a)
            nv[n] = deq
        else:
            nv[n] = a
    prompts = json.loads((data / "prompts.json").read_text())
    c = flint_ref.Config(hf_cfg)
    comps = []
    for kind, W in (("bf16", w), ("nvfp4", nv)):
        fx = {}
        for p in prompts["prompts"]:
            fx[f"{kind}.logits.{p['name']}"] = flint_ref.forward(c, W, p["ids"]).astype(np.float32)
        for k, ids in enumerate(prompts["windows"]):
            fx[f"{kind}.nll.window{k}"] = nll(flint_ref.forward(c, W, ids), ids)
        save_file(fx, str(out / f"fixtures_{kind}.safetensors"))
        for p in prompts["generate"][:3]:
            ids, gen = list(p["ids"]), []
            for _ in range(4):
                gen.append(int(flint_ref.forward(c, W, ids)[-1].argmax()))
                ids.append(gen[-1])
            comps.append({"name": p["name"], "kind": kind, "prompt": p["text"], "ids": gen,
                          "completion": ""})
    (out / "metrics.json").write_text(json.dumps({"fake": True, "completions": comps}))
    print(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
