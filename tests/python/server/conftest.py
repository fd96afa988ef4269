"""Fixtures for the server tests: tiny models written at test time (a random one, and a
"scripted" one whose weights make greedy and sampled decoding emit one fixed token sequence), and
`flint serve` processes on free ports that are always killed at the end."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from pathlib import Path

import numpy as np
import pytest
import requests

from support import tiny_flint

SOURCE_DIR = Path(os.environ.get("FLINT_SOURCE_DIR", Path(__file__).resolve().parents[3]))
BUNDLED_MODEL = SOURCE_DIR / "models" / "flint-tiny"
# The backend every server runs on: cpu (CI, the default) or cuda (scripts/gpu.sh serve-tests).
DEVICE = os.environ.get("FLINT_TEST_DEVICE", "cpu")


def flint_bin() -> str:
    if os.environ.get("FLINT_BIN"):
        return os.environ["FLINT_BIN"]
    for d in sorted(SOURCE_DIR.glob("build*/src/cli/flint")):
        return str(d)
    raise RuntimeError("FLINT_BIN is not set and no build*/src/cli/flint exists")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class FlintServer:
    """One `flint serve` process. Use as a context manager; the process is killed on exit."""

    def __init__(self, model: str, *args: str, log_dir: Path, wait_ready: bool = True):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = log_dir / f"serve-{self.port}.log"
        self.cmd = [flint_bin(), "serve", str(model), "--host", "127.0.0.1", "--port",
                    str(self.port), "--device", DEVICE, *args]
        self.wait_ready = wait_ready
        self.proc: subprocess.Popen | None = None

    def __enter__(self) -> "FlintServer":
        self.log = open(self.log_path, "wb")
        self.proc = subprocess.Popen(self.cmd, stdout=self.log, stderr=subprocess.STDOUT)
        if self.wait_ready:
            self.wait_healthy(timeout=120)
        return self

    def wait_healthy(self, timeout: float = 60):
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"flint serve exited with {self.proc.returncode}:\n{self.logs()}")
            try:
                if requests.get(self.url + "/health", timeout=2).status_code == 200:
                    return
            except requests.RequestException:
                pass
            time.sleep(0.1)
        raise RuntimeError(f"flint serve not healthy after {timeout}s:\n{self.logs()}")

    def logs(self) -> str:
        self.log.flush()
        return self.log_path.read_text(errors="replace")[-6000:]

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def __exit__(self, *exc):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        self.log.close()


def metric(url: str, name: str) -> float:
    """The value of one unlabelled-by-reason vLLM metric from /metrics."""
    text = requests.get(url + "/metrics", timeout=10).text
    for line in text.splitlines():
        if line.startswith(name + "{") or line.startswith(name + " "):
            return float(line.rsplit(" ", 1)[1])
    raise KeyError(name)


# ---- models ----

@pytest.fixture(scope="session")
def random_model(tmp_path_factory) -> str:
    out = tmp_path_factory.mktemp("flint-tiny-random")
    try:
        tiny_flint.write_hf(out, {"seed": 3})
    except Exception:  # the writer needs the chat template from /work/shared; fall back
        return str(BUNDLED_MODEL)
    return str(out)


def scripted_token_ids(tok, script: list[str]) -> list[int]:
    """Token ids spelling `script` (special tokens by name, other items as text) with every id
    used at most once, so that a bigram model can emit them as one chain."""
    specials = set(tiny_flint.SPECIAL_TOKENS)
    pieces = {}
    for i in range(tok.get_vocab_size()):
        s = tok.decode([i], skip_special_tokens=False)
        if s and s not in specials and "\ufffd" not in s and not s.startswith("<|reserved"):
            pieces.setdefault(s, i)
    used: set[int] = set()
    ids: list[int] = []

    def spell(text: str) -> list[int] | None:
        if not text:
            return []
        for n in range(len(text), 0, -1):
            i = pieces.get(text[:n])
            if i is None or i in used:
                continue
            used.add(i)
            rest = spell(text[n:])
            if rest is not None:
                return [i] + rest
            used.discard(i)
        return None

    for item in script:
        if item in specials:
            i = tok.token_to_id(item)
            assert i not in used, item
            used.add(i)
            ids.append(i)
        else:
            got = spell(item)
            assert got is not None, f"cannot spell {item!r} with distinct tokens"
            ids.extend(got)
    return ids


# The scripted model's output after a prompt ending in <think> (thinking on); after </think>
# (thinking off) it continues from "Sure.".
SCRIPT = ["<think>", "The weather", "</think>", "Sure.", "<tool_call>", "get_weather", "<arg_key>",
          "city", "</arg_key>", "<arg_value>", "Paris", "</arg_value>", "</tool_call>"]


@pytest.fixture(scope="session")
def scripted_model(tmp_path_factory) -> str:
    """A bigram model: every layer adds nothing to the residual (o_proj and down_proj are zero), so
    the logits depend on the last token only; embed/lm_head make token t_i predict t_{i+1} of the
    SCRIPT chain, and every other token predict <|observation|> (an EOS)."""
    out = tmp_path_factory.mktemp("flint-tiny-scripted")
    res = tiny_flint.write_hf(out, {"seed": 5, "dtype": "F32"})
    cfg, w, tok = res["config"], res["weights"], res["tokenizer"]
    h, v = cfg["hidden_size"], cfg["vocab_size"]
    chain = scripted_token_ids(tok, SCRIPT)
    assert len(chain) < h - 1, len(chain)
    eos = tok.token_to_id("<|observation|>")
    embed = np.zeros((v, h), np.float32)
    embed[:, h - 1] = 1.0
    head = np.zeros((v, h), np.float32)
    head[eos, h - 1] = 30.0
    for k, t in enumerate(chain):
        embed[t] = 0.0
        embed[t, k] = 1.0
        nxt = chain[k + 1] if k + 1 < len(chain) else eos
        head[nxt, k] = 30.0
    for name in w:
        if name.endswith("o_proj.weight") or name.endswith("down_proj.weight"):
            w[name] = np.zeros_like(w[name])
    w["model.embed_tokens.weight"] = embed
    w["lm_head.weight"] = head
    w["model.norm.weight"] = np.ones_like(w["model.norm.weight"])
    dtypes = {n: "F32" for n in w}
    tiny_flint.write_safetensors(Path(out) / "model.safetensors", w, dtypes, {"format": "pt"})
    return str(out)


@pytest.fixture(scope="session")
def log_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("serve-logs")


COMMON_ARGS = ["--max-model-len", "512", "--kv-cache-memory", "64M", "--max-num-seqs", "32",
               "--threads", "2", "--served-model-name", "flint-tiny", "flint-alias"]
