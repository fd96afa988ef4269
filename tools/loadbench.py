#!/usr/bin/env python3
"""Load benchmark for `flint serve` (or any OpenAI-compatible server) on loopback.

For each concurrency level, N client threads each send streaming completions back to back with
ignore_eos (fixed output length) for a fixed number of requests, and we report:
  TTFT      time from sending the request to the first content chunk (p50 / p99, ms)
  ITL       time between consecutive content chunks (p50 / p99, ms)
  E2E       request latency (p50, ms)
  out tok/s generated tokens per second over the level's wall time (from the usage chunk)
  req/s     finished requests per second

Usage:
  tools/loadbench.py --url http://127.0.0.1:8000 --model flint-tiny --concurrency 1,4,16
  tools/loadbench.py --spawn models/flint-tiny ...   # starts `flint serve` itself (FLINT_BIN)
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

import requests


def pct(xs, q):
    if not xs:
        return float("nan")
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(q / 100.0 * (len(xs) - 1))))]


def one_request(url, model, prompt, max_tokens, chat):
    if chat:
        path = "/v1/chat/completions"
        body = {"model": model, "messages": [{"role": "user", "content": prompt}]}
    else:
        path = "/v1/completions"
        body = {"model": model, "prompt": prompt}
    body.update({"max_tokens": max_tokens, "stream": True, "ignore_eos": True, "temperature": 1.0,
                 "stream_options": {"include_usage": True}})
    t0 = time.perf_counter()
    times = []
    completion_tokens = 0
    with requests.post(url + path, json=body, stream=True, timeout=600) as r:
        r.raise_for_status()
        for line in r.iter_lines():
            if not line.startswith(b"data: ") or line == b"data: [DONE]":
                continue
            j = json.loads(line[6:])
            if j.get("usage") and not j.get("choices"):
                completion_tokens = j["usage"]["completion_tokens"]
                continue
            for c in j.get("choices", []):
                piece = c.get("text") if not chat else (c.get("delta") or {}).get("content")
                if piece:
                    times.append(time.perf_counter())
    end = time.perf_counter()
    ttft = times[0] - t0 if times else float("nan")
    itl = [b - a for a, b in zip(times, times[1:])]
    return ttft, itl, end - t0, completion_tokens


def run_level(url, model, concurrency, num_requests, prompt, max_tokens, chat):
    lock = threading.Lock()
    ttfts, itls, e2es, tokens = [], [], [], []
    counter = iter(range(num_requests))

    def worker():
        while True:
            with lock:
                if next(counter, None) is None:
                    return
            ttft, itl, e2e, n = one_request(url, model, prompt, max_tokens, chat)
            with lock:
                ttfts.append(ttft)
                itls.extend(itl)
                e2es.append(e2e)
                tokens.append(n)

    t0 = time.perf_counter()
    threads = [threading.Thread(target=worker) for _ in range(concurrency)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    return {
        "concurrency": concurrency, "requests": len(e2es),
        "ttft_p50_ms": 1e3 * pct(ttfts, 50), "ttft_p99_ms": 1e3 * pct(ttfts, 99),
        "itl_p50_ms": 1e3 * pct(itls, 50), "itl_p99_ms": 1e3 * pct(itls, 99),
        "e2e_p50_ms": 1e3 * pct(e2es, 50),
        "out_tok_s": sum(tokens) / wall, "req_s": len(e2es) / wall, "wall_s": wall,
    }


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def spawn(model, extra):
    root = Path(__file__).resolve().parents[1]
    exe = os.environ.get("FLINT_BIN") or next(iter(sorted(root.glob("build*/src/cli/flint"))), None)
    if not exe:
        sys.exit("loadbench: set FLINT_BIN or build flint first")
    port = free_port()
    proc = subprocess.Popen([str(exe), "serve", model, "--host", "127.0.0.1", "--port", str(port),
                             "--served-model-name", "flint-tiny", *extra],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    for _ in range(600):
        try:
            if requests.get(url + "/health", timeout=1).status_code == 200:
                return proc, url
        except requests.RequestException:
            pass
        if proc.poll() is not None:
            sys.exit("loadbench: flint serve exited during startup")
        time.sleep(0.1)
    proc.kill()
    sys.exit("loadbench: server not ready")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--url", default="http://127.0.0.1:8000")
    ap.add_argument("--spawn", metavar="MODEL", help="start `flint serve MODEL` on a free port")
    ap.add_argument("--server-arg", action="append", default=[],
                    help="extra flag for the spawned server (repeatable)")
    ap.add_argument("--model", default="flint-tiny")
    ap.add_argument("--concurrency", default="1,4,16")
    ap.add_argument("--requests-per-level", type=int, default=0,
                    help="default: 4 x concurrency (at least 8)")
    ap.add_argument("--prompt-words", type=int, default=32)
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--chat", action="store_true", help="use /v1/chat/completions")
    ap.add_argument("--json", action="store_true", help="print JSON lines instead of a table")
    args = ap.parse_args()

    proc = None
    url = args.url
    if args.spawn:
        proc, url = spawn(args.spawn, args.server_arg)
    try:
        prompt = " ".join(["hello world"] * (args.prompt_words // 2))
        one_request(url, args.model, prompt, 4, args.chat)  # warm-up
        rows = []
        for c in [int(x) for x in args.concurrency.split(",")]:
            n = args.requests_per_level or max(8, 4 * c)
            rows.append(run_level(url, args.model, c, n, prompt, args.max_tokens, args.chat))
            if args.json:
                print(json.dumps(rows[-1]), flush=True)
        if not args.json:
            print(f"{'conc':>5} {'reqs':>5} {'TTFT p50':>9} {'TTFT p99':>9} {'ITL p50':>8} "
                  f"{'ITL p99':>8} {'E2E p50':>8} {'out tok/s':>10} {'req/s':>7}")
            for r in rows:
                print(f"{r['concurrency']:>5} {r['requests']:>5} {r['ttft_p50_ms']:>7.1f}ms "
                      f"{r['ttft_p99_ms']:>7.1f}ms {r['itl_p50_ms']:>6.1f}ms {r['itl_p99_ms']:>6.1f}ms "
                      f"{r['e2e_p50_ms']:>6.0f}ms {r['out_tok_s']:>10.1f} {r['req_s']:>7.2f}")
    finally:
        if proc:
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()


if __name__ == "__main__":
    main()
