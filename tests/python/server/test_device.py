"""`flint serve --device`: the choice is logged, a device that is not there is a startup error,
and on the GPU (FLINT_TEST_DEVICE=cuda) the KV cache is sized from --gpu-memory-utilization or
--kv-cache-memory with out-of-memory reported at startup, naming the flag to change."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest
import requests

from conftest import DEVICE, FlintServer, flint_bin

on_gpu = pytest.mark.skipif(DEVICE != "cuda", reason="needs FLINT_TEST_DEVICE=cuda")


def serve_fails(model, *args, timeout=120) -> str:
    """Runs `flint serve` that must exit 1 at startup; returns its output."""
    p = subprocess.run([flint_bin(), "serve", str(model), "--port", "0", "--device", DEVICE,
                        *args], capture_output=True, text=True, timeout=timeout)
    assert p.returncode == 1, p.stderr[-3000:]
    return p.stdout + p.stderr


def kv_sizes(model) -> dict:
    """Bytes of one page (16 tokens, all full layers) and one ring (all sliding layers), bf16."""
    cfg = json.loads((Path(model) / "config.json").read_text())
    row = 2 * cfg["num_key_value_heads"] * cfg["head_dim"] * 2
    types = cfg["layer_types"]
    full = sum(t != "sliding_attention" for t in types)
    sliding = len(types) - full
    return {"page": max(1, full * row * 16), "ring": sliding * row * cfg["sliding_window"]}


def test_device_choice_is_logged(random_model, log_dir):
    with FlintServer(random_model, "--max-model-len", "256", "--max-num-seqs", "4",
                     "--kv-cache-memory", "16M", log_dir=log_dir) as s:
        logs = s.logs()
        if DEVICE == "cuda":
            assert re.search(r"device: cuda \(.+, [0-9.]+ GiB", logs), logs
        else:
            assert "device: cpu (--device cpu)" in logs, logs


def test_unknown_device_is_rejected(random_model):
    p = subprocess.run([flint_bin(), "serve", random_model, "--port", "0", "--device", "tpu"],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 1
    assert "--device" in p.stdout + p.stderr


@pytest.mark.skipif(DEVICE == "cuda", reason="this machine has a GPU")
def test_device_cuda_without_a_gpu_is_a_startup_error(random_model):
    p = subprocess.run([flint_bin(), "serve", random_model, "--port", "0", "--device", "cuda"],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 1
    out = p.stdout + p.stderr
    assert "--device cuda" in out and ("without CUDA" in out or "no usable CUDA device" in out), out


@on_gpu
def test_kv_cache_is_sized_from_gpu_memory_utilization(random_model, log_dir):
    with FlintServer(random_model, "--gpu-memory-utilization", "0.3", "--max-model-len", "512",
                     "--max-num-seqs", "8", "--served-model-name", "m", log_dir=log_dir) as s:
        logs = s.logs()
        m = re.search(r"total, budget ([0-9.]+) GiB .* KV cache ([0-9.]+) GiB", logs)
        assert m, logs
        budget, kv = float(m.group(1)), float(m.group(2))
        assert 0.5 * budget < kv < budget, logs  # a tiny model: the KV cache gets most of it
        tokens = int(re.search(r"KV cache size (\d+) tokens", logs).group(1))
        pages = int(re.search(r"engine: (\d+) KV pages of 16 tokens", logs).group(1))
        assert pages * 16 == tokens, logs  # the plan and the engine agree
        assert "maximum concurrency for 512 tokens per request" in logs
        r = requests.post(s.url + "/v1/completions", json={
            "model": "m", "prompt": "hello", "max_tokens": 4, "temperature": 0}, timeout=60)
        assert r.status_code == 200, r.text
        assert r.json()["usage"]["completion_tokens"] == 4


@on_gpu
def test_kv_cache_memory_larger_than_the_gpu_is_a_startup_error(random_model):
    out = serve_fails(random_model, "--kv-cache-memory", "100000G")
    assert "--kv-cache-memory" in out and "does not fit" in out, out


@on_gpu
def test_tiny_gpu_memory_utilization_is_a_startup_error(random_model):
    out = serve_fails(random_model, "--gpu-memory-utilization", "0.00001")
    assert "raise --gpu-memory-utilization" in out, out


@on_gpu
def test_kv_cache_too_small_for_one_sequence_names_max_model_len(random_model):
    s = kv_sizes(random_model)
    rings = (1 + 4) * s["ring"]  # one sequence ring + the minimum 4 prefix-cache snapshots
    kv = rings + (512 // 16 - 1) * s["page"]  # one page short of a 512-token sequence
    out = serve_fails(random_model, "--max-num-seqs", "1", "--max-model-len", "512",
                      "--kv-cache-memory", str(kv))
    assert f"lower --max-model-len to at most {(512 // 16 - 1) * 16}" in out, out


@on_gpu
def test_rings_that_do_not_fit_name_max_num_seqs(random_model):
    s = kv_sizes(random_model)
    if s["ring"] == 0:
        pytest.skip("no sliding layers")
    out = serve_fails(random_model, "--max-num-seqs", "8", "--max-model-len", "512",
                      "--kv-cache-memory", str(s["ring"] * 4))
    assert "lower --max-num-seqs" in out, out
