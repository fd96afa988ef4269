#!/usr/bin/env python3
"""End-to-end decode latency of `flint serve` at one request: what a client of the server sees.

Serves random weights of a config (`--load-format dummy`, the full Flint shape by default) and,
for each prompt length and sampling mode, sends streaming /v1/completions one after another
(`ignore_eos`, prompt token ids, the same prompt each time so prefix caching leaves one prefill)
and reports per request the time to the first token and the mean time per output token after it:
(last token's arrival - first token's) / (completion_tokens - 1), the HTTP, engine and detokenizer
included. The reported value is the median over the requests after the first (a warm-up).

Random weights pick tokens all over the vocabulary, so the served directory gets a tokenizer
padded to the config's vocab_size: the tokenizer of --tokenizer-from plus one plain word per
missing id (" w<id>"), so every token streams as text of its own.

With --concurrency N, each round is N streams sent at once whose prompts differ only in their
last token (after the warm-up round the shared blocks come from the prefix cache, so the streams
decode together, and greedy streams do not decode the same tokens, which would route every row
of a step to the same experts and understate a batch's MoE work): the row
gives the median ms per token over the streams of the measured rounds and the output tokens/s of
all N together (tokens over the time from the first stream's first token to the last one's last).

Usage (stdlib only):
  tools/decode_e2e.py --flint build/src/cli/flint --device cuda --quantization nvfp4 \
      --contexts 1024,102400 --max-tokens 256 --requests 4
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import random
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# Sampling modes: greedy, and Flint's generation_config (temperature 1, top_k 20, top_p 0.95).
MODES = {
    "greedy": {"temperature": 0.0},
    "default": {"temperature": 1.0, "top_k": 20, "top_p": 0.95},
}


def padded_tokenizer(src: Path, vocab_size: int) -> dict:
    tok = json.loads((src / "tokenizer.json").read_text())
    vocab = tok["model"]["vocab"]
    used = set(vocab.values()) | {a["id"] for a in tok.get("added_tokens", [])}
    if max(used) >= vocab_size:
        sys.exit(f"decode_e2e: the tokenizer has id {max(used)}, the config's vocab_size is "
                 f"{vocab_size}")
    for i in range(vocab_size):
        if i not in used:
            vocab[f"\u0120w{i}"] = i  # byte-level " w<i>"
    return tok


def make_model_dir(config: Path, tokenizer_from: Path, out: Path) -> int:
    cfg = json.loads(config.read_text())
    out.mkdir(parents=True, exist_ok=True)
    (out / "config.json").write_text(json.dumps(cfg))
    (out / "tokenizer.json").write_text(json.dumps(padded_tokenizer(tokenizer_from,
                                                                    cfg["vocab_size"])))
    tc = tokenizer_from / "tokenizer_config.json"
    if tc.exists():
        shutil.copy(tc, out / "tokenizer_config.json")
    return len(json.loads((tokenizer_from / "tokenizer.json").read_text())["model"]["vocab"])


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_ready(proc, port: int, log: Path, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            sys.exit(f"decode_e2e: flint serve exited ({proc.returncode}):\n"
                     + log.read_text()[-3000:])
        try:
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=1)
            c.request("GET", "/health")
            if c.getresponse().status == 200:
                return
        except OSError:
            pass
        time.sleep(0.1)
    proc.kill()
    sys.exit("decode_e2e: the server was not ready in time:\n" + log.read_text()[-3000:])


def one_request(port: int, prompt: list[int], max_tokens: int, sampling: dict):
    body = {"model": "flint", "prompt": prompt, "max_tokens": max_tokens, "stream": True,
            "ignore_eos": True, "stream_options": {"include_usage": True}, **sampling}
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=900)
    t0 = time.perf_counter()
    c.request("POST", "/v1/completions", body=json.dumps(body),
              headers={"Content-Type": "application/json"})
    r = c.getresponse()
    if r.status != 200:
        sys.exit(f"decode_e2e: HTTP {r.status}: {r.read()[:500]!r}")
    times, tokens = [], 0
    for raw in r:
        line = raw.strip()
        if not line.startswith(b"data: ") or line == b"data: [DONE]":
            continue
        j = json.loads(line[6:])
        if j.get("usage") and not j.get("choices"):
            tokens = j["usage"]["completion_tokens"]
        elif any(ch.get("text") for ch in j.get("choices", [])):
            times.append(time.perf_counter())
    c.close()
    if tokens < 2 or len(times) < 2:
        sys.exit(f"decode_e2e: {tokens} tokens in {len(times)} chunks: nothing to time")
    return times[0] - t0, (times[-1] - times[0]) / (tokens - 1), tokens, len(times)


def one_round(port: int, prompt: list[int], max_tokens: int, sampling: dict, n: int, words: int):
    """n concurrent streams, stream i's prompt ending in token prompt[-1] + i (mod words); each
    result as one_request's, plus (first arrival, last arrival)."""
    results: list = [None] * n

    def run(i: int) -> None:
        mine = prompt[:-1] + [(prompt[-1] + i) % words]
        t0 = time.perf_counter()
        ttft, per_token, tokens, chunks = one_request(port, mine, max_tokens, sampling)
        first = t0 + ttft
        results[i] = (ttft, per_token, tokens, chunks, first, first + per_token * (tokens - 1))

    threads = [threading.Thread(target=run, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if any(r is None for r in results):
        sys.exit("decode_e2e: a stream failed")
    return results


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--flint", default=os.environ.get("FLINT_BIN", ""), help="the flint binary")
    ap.add_argument("--config", default=str(ROOT / "tests/data/flint-config.json"))
    ap.add_argument("--tokenizer-from", default=str(ROOT / "models/flint-nano"))
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--quantization", default="", help="nvfp4 for NVFP4 dummy weights")
    ap.add_argument("--contexts", default="1024", help="prompt lengths in tokens")
    ap.add_argument("--modes", default="greedy,default", help=",".join(MODES))
    ap.add_argument("--max-tokens", type=int, default=256)
    ap.add_argument("--requests", type=int, default=4, help="per context and mode, 1 warm-up")
    ap.add_argument("--concurrency", type=int, default=1, help="streams sent at once per round")
    ap.add_argument("--server-arg", action="append", default=[])
    ap.add_argument("--startup-timeout", type=float, default=300)
    args = ap.parse_args()
    if not args.flint:
        sys.exit("decode_e2e: --flint or FLINT_BIN")
    contexts = [int(x) for x in args.contexts.split(",")]
    modes = args.modes.split(",")
    for m in modes:
        if m not in MODES:
            sys.exit(f"decode_e2e: unknown mode {m!r} (one of {', '.join(MODES)})")
    if args.requests < 2:
        sys.exit("decode_e2e: --requests must be at least 2 (the first is a warm-up)")
    if not 1 <= args.concurrency <= 256:
        sys.exit("decode_e2e: --concurrency must be 1 .. 256")

    work = Path(tempfile.mkdtemp(prefix="decode-e2e-"))
    words = make_model_dir(Path(args.config), Path(args.tokenizer_from), work / "model")
    port = free_port()
    cmd = [args.flint, "serve", str(work / "model"), "--load-format", "dummy", "--device",
           args.device, "--host", "127.0.0.1", "--port", str(port), "--served-model-name", "flint",
           "--max-model-len", str(max(contexts) + args.max_tokens + 16), *args.server_arg]
    if args.quantization:
        cmd += ["--quantization", args.quantization]
    log = work / "serve.log"
    t_start = time.perf_counter()
    with open(log, "wb") as lf:
        proc = subprocess.Popen(cmd, stdout=lf, stderr=subprocess.STDOUT)
    try:
        wait_ready(proc, port, log, args.startup_timeout)
        print(f"ready {time.perf_counter() - t_start:.1f} s after start: {' '.join(cmd[1:])}",
              flush=True)
        n = args.concurrency
        # TTFT: the warm-up round's streams (sent together), fastest / median / slowest; one
        # stream's alone depends on where it lands in the queue, a race between the threads.
        print("| prompt tokens | sampling | streams | requests | warm-up TTFT s (min / median / "
              "max) | ms per token (median) | min | max | tokens/s | text chunks / tokens |")
        print("|---:|---|---:|---:|---|---:|---:|---:|---:|---:|")
        rng = random.Random(1)
        for ctx in contexts:
            prompt = [rng.randrange(words) for _ in range(ctx)]
            for m in modes:
                rounds = [one_round(port, prompt, args.max_tokens, MODES[m], n, words)
                          for _ in range(args.requests)]
                measured = [r for rnd in rounds[1:] for r in rnd]
                per_token = [r[1] * 1e3 for r in measured]
                med = statistics.median(per_token)
                # All n streams together: tokens over first token -> last token, per round.
                rate = statistics.median(
                    sum(r[2] - 1 for r in rnd) / (max(r[5] for r in rnd) - min(r[4] for r in rnd))
                    for rnd in rounds[1:])
                last = rounds[-1][-1]
                ttfts = sorted(r[0] for r in rounds[0])
                ttft = (f"{ttfts[0]:.2f} / {statistics.median(ttfts):.2f} / {ttfts[-1]:.2f}"
                        if n > 1 else f"{ttfts[0]:.2f}")
                print(f"| {ctx} | {m} | {n} | {len(measured)} | {ttft} | "
                      f"{med:.3f} | {min(per_token):.3f} | {max(per_token):.3f} | {rate:.0f} | "
                      f"{last[3]} / {last[2]} |",
                      flush=True)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
        lines = log.read_text(errors="replace").splitlines()
        keep = ("error", "warn", "gpu", "engine:", "ready", "max-num-batched-tokens")
        print("serve log:", *[ln for ln in lines if any(k in ln.lower() for k in keep)][:24],
              sep="\n  ")
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
