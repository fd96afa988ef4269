"""`flint serve --load-format dummy`: random weights of the model's config, as vLLM's dummy
format; the checkpoint's weight files are never read."""

from __future__ import annotations

import shutil

import pytest
import requests

from conftest import BUNDLED_MODEL, FlintServer


def test_dummy_load_format_serves_without_weight_files(tmp_path):
    model = tmp_path / "model"
    shutil.copytree(BUNDLED_MODEL, model)
    for f in model.glob("*.safetensors*"):
        f.unlink()  # no weights at all: dummy must not need them
    with FlintServer(model, "--load-format", "dummy", "--seed", "3", log_dir=tmp_path) as srv:
        r = requests.post(srv.url + "/v1/completions", json={
            "model": str(model), "prompt": "hello", "max_tokens": 5, "temperature": 0}, timeout=60)
        assert r.status_code == 200, r.text
        assert r.json()["usage"]["completion_tokens"] == 5


def test_unknown_load_format_is_rejected(tmp_path):
    srv = FlintServer(BUNDLED_MODEL, "--load-format", "pt", log_dir=tmp_path, wait_ready=False)
    with srv:
        assert srv.proc.wait(timeout=60) == 1
        assert "--load-format must be auto or dummy" in srv.logs()
