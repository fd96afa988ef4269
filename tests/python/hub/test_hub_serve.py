"""`flint serve` with repo ids: a cache filled by huggingface_hub serves with no network under
HF_HUB_OFFLINE=1, and an incomplete cache fails at once, naming what is missing."""

from __future__ import annotations

import os
import socket
import subprocess
import time
from pathlib import Path

import requests
from huggingface_hub import hf_hub_download

from support.fake_hub import FakeHub

FLINT = os.environ.get("FLINT_BIN", "build/src/cli/flint")
SOURCE_DIR = Path(os.environ.get("FLINT_SOURCE_DIR", Path(__file__).resolve().parents[3]))
TINY = SOURCE_DIR / "models" / "flint-tiny"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def offline_env(cache: Path) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "HUGGINGFACE_"))}
    env.update({"HF_HUB_CACHE": str(cache), "HF_HUB_OFFLINE": "1", "HF_ENDPOINT": "http://127.0.0.1:9"})
    return env


def fill_cache_with_huggingface_hub(cache: Path) -> list[str]:
    files = {p.name: p.read_bytes() for p in TINY.iterdir() if p.is_file()}
    with FakeHub() as hub:
        hub.repo("RecursiveSI/flint-tiny").add_commit(files)
        for name in files:
            hf_hub_download("RecursiveSI/flint-tiny", name, cache_dir=cache, endpoint=hub.url)
    return sorted(files)


def test_serve_by_repo_id_offline_from_a_huggingface_hub_cache(tmp_path):
    cache = tmp_path / "hub"
    fill_cache_with_huggingface_hub(cache)
    port = free_port()
    log = open(tmp_path / "serve.log", "wb")
    proc = subprocess.Popen([FLINT, "serve", "RecursiveSI/flint-tiny", "--port", str(port)],
                            env=offline_env(cache), stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.time() + 120
        while time.time() < deadline:
            assert proc.poll() is None, (tmp_path / "serve.log").read_text()
            try:
                if requests.get(f"http://127.0.0.1:{port}/health", timeout=2).status_code == 200:
                    break
            except requests.RequestException:
                pass
            time.sleep(0.2)
        models = requests.get(f"http://127.0.0.1:{port}/v1/models", timeout=10).json()
        assert [m["id"] for m in models["data"]] == ["RecursiveSI/flint-tiny"]
        r = requests.post(f"http://127.0.0.1:{port}/v1/completions", timeout=60, json={
            "model": "RecursiveSI/flint-tiny", "prompt": "def", "max_tokens": 3, "temperature": 0})
        assert r.status_code == 200 and r.json()["usage"]["completion_tokens"] == 3
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_serve_offline_with_an_incomplete_cache_fails_at_once(tmp_path):
    cache = tmp_path / "hub"
    fill_cache_with_huggingface_hub(cache)
    snap = next((cache / "models--RecursiveSI--flint-tiny" / "snapshots").iterdir())
    shard = sorted(snap.glob("model-*.safetensors"))[-1]
    shard.unlink()
    start = time.time()
    p = subprocess.run([FLINT, "serve", "RecursiveSI/flint-tiny", "--port", str(free_port())],
                       env=offline_env(cache), capture_output=True, text=True, timeout=60)
    assert p.returncode == 1
    assert f"lacks: {shard.name}" in p.stderr, p.stderr
    assert time.time() - start < 30


def test_serve_dummy_by_repo_id_needs_no_weight_files(tmp_path):
    # --load-format dummy takes only the config and tokenizer from a repo: with the weight files
    # gone from the cache it still serves, offline.
    cache = tmp_path / "hub"
    fill_cache_with_huggingface_hub(cache)
    snap = next((cache / "models--RecursiveSI--flint-tiny" / "snapshots").iterdir())
    for f in snap.glob("model*.safetensors*"):
        f.unlink()
    port = free_port()
    log = open(tmp_path / "serve.log", "wb")
    proc = subprocess.Popen([FLINT, "serve", "RecursiveSI/flint-tiny", "--port", str(port),
                             "--load-format", "dummy", "--device", "cpu"],
                            env=offline_env(cache), stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.time() + 120
        while time.time() < deadline:
            assert proc.poll() is None, (tmp_path / "serve.log").read_text()
            try:
                if requests.get(f"http://127.0.0.1:{port}/health", timeout=2).status_code == 200:
                    break
            except requests.RequestException:
                pass
            time.sleep(0.2)
        r = requests.post(f"http://127.0.0.1:{port}/v1/completions", timeout=60, json={
            "model": "RecursiveSI/flint-tiny", "prompt": "def", "max_tokens": 3, "temperature": 0})
        assert r.status_code == 200 and r.json()["usage"]["completion_tokens"] == 3
    finally:
        proc.terminate()
        proc.wait(timeout=30)
