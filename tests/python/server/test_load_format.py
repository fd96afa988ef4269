"""`flint serve --load-format dummy`: random weights of the model's config, as vLLM's dummy
format; the checkpoint's weight files are never read. On the GPU they are generated there (BF16, or
NVFP4 with --quantization); --dtype and --quantization refuse what flint cannot serve."""

from __future__ import annotations

import shutil

import pytest
import requests

from conftest import BUNDLED_MODEL, DEVICE, SOURCE_DIR, FlintServer


def complete(srv, model, max_tokens=5):
    r = requests.post(srv.url + "/v1/completions", json={
        "model": str(model), "prompt": "hello", "max_tokens": max_tokens, "temperature": 0},
        timeout=60)
    assert r.status_code == 200, r.text
    assert r.json()["usage"]["completion_tokens"] == max_tokens


def test_dummy_load_format_serves_without_weight_files(tmp_path):
    model = tmp_path / "model"
    shutil.copytree(BUNDLED_MODEL, model)
    for f in model.glob("*.safetensors*"):
        f.unlink()  # no weights at all: dummy must not need them
    with FlintServer(model, "--load-format", "dummy", "--seed", "3", "--dtype", "bfloat16",
                     log_dir=tmp_path) as srv:
        complete(srv, model)
        if DEVICE == "cuda":
            assert "gpu: dummy BF16 weights generated on the GPU" in srv.logs()


def test_dummy_nvfp4_is_generated_on_the_gpu_and_refused_on_the_cpu(tmp_path):
    args = ("--load-format", "dummy", "--quantization", "nvfp4", "--seed", "3")
    if DEVICE == "cuda":
        with FlintServer(BUNDLED_MODEL, *args, log_dir=tmp_path) as srv:
            complete(srv, BUNDLED_MODEL)
            assert "gpu: dummy NVFP4 weights generated on the GPU" in srv.logs()
        return
    with FlintServer(BUNDLED_MODEL, *args, log_dir=tmp_path, wait_ready=False) as srv:
        assert srv.proc.wait(timeout=60) == 1
        assert "--quantization nvfp4 needs --device cuda" in srv.logs()


@pytest.mark.parametrize("args, message", [
    (("--dtype", "float16"), "--dtype must be auto or bfloat16"),
    (("--dtype", "bf16"), "--dtype must be auto or bfloat16"),
    (("--quantization", "fp8"), "--quantization must be nvfp4"),
    (("--load-format", "dummy", "--quantization", "awq"), "--quantization must be nvfp4"),
    # flint-tiny's checkpoint is BF16: --quantization describes the checkpoint, it converts nothing
    (("--quantization", "nvfp4"), "stores BF16 linear weights"),
])
def test_unservable_dtype_and_quantization_are_rejected(tmp_path, args, message):
    with FlintServer(BUNDLED_MODEL, *args, log_dir=tmp_path, wait_ready=False) as srv:
        assert srv.proc.wait(timeout=60) == 1
        assert message in srv.logs()


def test_quantization_names_an_nvfp4_checkpoint(tmp_path):
    model = SOURCE_DIR / "models" / "flint-nano" / "flint-nano-nvfp4.gguf"
    with FlintServer(model, "--quantization", "modelopt_fp4", "--max-model-len", "512",
                     log_dir=tmp_path) as srv:
        complete(srv, model, max_tokens=2)


def test_unknown_load_format_is_rejected(tmp_path):
    srv = FlintServer(BUNDLED_MODEL, "--load-format", "pt", log_dir=tmp_path, wait_ready=False)
    with srv:
        assert srv.proc.wait(timeout=60) == 1
        assert "--load-format must be auto or dummy" in srv.logs()
