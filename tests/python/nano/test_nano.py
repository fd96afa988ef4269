"""flint-nano (models/flint-nano, trained by tools/nano/train.py) against the outputs its PyTorch
training run recorded (tests/data/nano, written by tools/nano/export.py): CPU-backend logits on
fixed prompts for the BF16 safetensors and the NVFP4 GGUF, perplexity on held-out code windows,
greedy code completion, the tokenizer and chat template, and a tool call through `flint serve`.

The PyTorch references are FP64 forward passes over exactly the stored weights (BF16-rounded, or
NVFP4 fake-quantized with the GGUF's own quantizer), so the only expected difference is the CPU
backend's FP32 arithmetic: logits agree to 1e-4 of their largest magnitude, perplexities to 0.01%.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import requests

SOURCE_DIR = Path(os.environ.get("FLINT_SOURCE_DIR", Path(__file__).resolve().parents[3]))
sys.path.insert(0, str(SOURCE_DIR / "tests" / "reference"))
sys.path.insert(0, str(SOURCE_DIR / "tools" / "nano"))

# The overrides exist to check tools/nano/fake_run.py output; CI uses the shipped paths.
MODEL_DIR = Path(os.environ.get("NANO_MODEL_DIR", SOURCE_DIR / "models" / "flint-nano"))
GGUF = MODEL_DIR / "flint-nano-nvfp4.gguf"
FIXTURES = Path(os.environ.get("NANO_FIXTURE_DIR", SOURCE_DIR / "tests" / "data" / "nano"))
LOGITS_RTOL = 1e-4   # max |got - want| / max |want| (measured: 2.6e-7)
PPL_RTOL = 1e-4     # measured: 2e-6


def flint_bin() -> str:
    if os.environ.get("FLINT_BIN"):
        return os.environ["FLINT_BIN"]
    for d in sorted(SOURCE_DIR.glob("build*/src/cli/flint")):
        return str(d)
    raise RuntimeError("FLINT_BIN is not set and no build*/src/cli/flint exists")


@pytest.fixture(scope="module")
def fx():
    meta = json.loads((FIXTURES / "prompts.json").read_text())
    arrays = dict(np.load(FIXTURES / "fixtures.npz"))
    return meta, arrays


@pytest.fixture(scope="module")
def config():
    return json.loads((MODEL_DIR / "config.json").read_text())


def generate(model: Path, ids: list[int], tmp_path: Path, max_tokens: int = 1, dump: bool = True):
    """Runs `flint generate` greedily; returns (logits rows for the prompt or None, generated ids)."""
    out = tmp_path / f"logits-{len(ids)}-{model.name}.f32"
    args = [flint_bin(), "generate", "--device", "cpu", str(model), "--prompt-ids", ",".join(map(str, ids)),
            "--max-tokens", str(max_tokens), "--temperature", "0", "--ignore-eos",
            "--threads", "2", "--kv-dtype", "f32", "--tokenizer", str(MODEL_DIR)]
    if dump:
        args += ["--dump-logits", str(out)]
    p = subprocess.run(args, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    m = re.search(r"generated ids: \[([0-9,]*)\]", p.stderr)
    assert m, p.stderr
    gen = [int(x) for x in m.group(1).split(",") if x]
    if not dump:
        return None, gen
    vocab = json.loads((MODEL_DIR / "config.json").read_text())["vocab_size"]
    got = np.fromfile(out, dtype=np.float32).reshape(-1, vocab)
    assert got.shape[0] >= len(ids)
    return got[:len(ids)], gen


def rel_err(got, want) -> float:
    return float(np.abs(got.astype(np.float64) - want).max() / np.abs(want).max())


def test_nano_files_are_complete_and_small():
    names = {f.name for f in MODEL_DIR.iterdir()}
    assert {"config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json",
            "model.safetensors", GGUF.name} <= names
    total = sum(f.stat().st_size for f in MODEL_DIR.iterdir())
    assert total < 30e6, total
    cfg = json.loads((MODEL_DIR / "config.json").read_text())
    # Every Flint feature is present (spec section 1, scaled down).
    assert cfg["mlp_only_layers"] == [0, 1]
    assert cfg["layer_types"].count("full_attention") == 4
    assert cfg["no_rope_layer_indices"] == [i for i, t in enumerate(cfg["layer_types"])
                                            if t == "full_attention"]
    assert cfg["num_key_value_heads"] < cfg["num_attention_heads"]
    assert cfg["shared_expert_intermediate_size"] > 0 and cfg["num_experts"] > cfg["num_experts_per_tok"]
    assert cfg["sliding_window"] == 64 and not cfg["tie_word_embeddings"]


@pytest.mark.parametrize("kind", ["bf16", "nvfp4"])
def test_cpu_logits_match_pytorch(fx, tmp_path, kind):
    meta, arrays = fx
    model = MODEL_DIR if kind == "bf16" else GGUF
    for p in meta["prompts"]:
        got, _ = generate(model, p["ids"], tmp_path)
        want = arrays[f"{kind}_logits_{p['name']}"]
        err = rel_err(got[p["rows"]], want)
        assert err < LOGITS_RTOL, f"{kind} {p['name']}: rel err {err:.2e}"
        # Same top token wherever PyTorch's choice is clear.
        top2 = np.sort(want, axis=1)[:, -2:]
        clear = (top2[:, 1] - top2[:, 0]) > 1e-2
        assert (got[p["rows"]].argmax(1) == want.argmax(1))[clear].all(), p["name"]


@pytest.mark.parametrize("kind", ["bf16", "nvfp4"])
def test_heldout_perplexity_matches_pytorch(fx, tmp_path, kind):
    meta, arrays = fx
    model = MODEL_DIR if kind == "bf16" else GGUF
    got_nll, want_nll = [], []
    for k, ids in enumerate(meta["windows"]):
        logits, _ = generate(model, ids, tmp_path)
        lg = logits[:-1].astype(np.float64)
        m = lg.max(axis=1, keepdims=True)
        lse = (m + np.log(np.exp(lg - m).sum(axis=1, keepdims=True)))[:, 0]
        got_nll.append(lse - lg[np.arange(len(ids) - 1), ids[1:]])
        want_nll.append(arrays[f"{kind}_nll_window{k}"])
    got = float(np.exp(np.concatenate(got_nll).mean()))
    want = float(np.exp(np.concatenate(want_nll).mean()))
    assert abs(got - want) / want < PPL_RTOL, (got, want)


def test_nvfp4_perplexity_close_to_bf16(fx):
    _, arrays = fx
    ppl = {kind: float(np.exp(np.concatenate([arrays[f"{kind}_nll_window{k}"] for k in (0, 1)]).mean()))
           for kind in ("bf16", "nvfp4")}
    assert ppl["nvfp4"] < ppl["bf16"] * 1.15, ppl


def test_greedy_code_completion_matches_pytorch(fx, tmp_path):
    meta, _ = fx
    done = 0
    for c in meta["completions"]:
        if c["kind"] != "bf16" or not c["name"].startswith("code_"):
            continue
        from tokenizers import Tokenizer
        tok = Tokenizer.from_file(str(MODEL_DIR / "tokenizer.json"))
        ids = tok.encode(c["prompt"], add_special_tokens=False).ids
        n = min(24, len(c["ids"]))
        _, gen = generate(MODEL_DIR, ids, tmp_path, max_tokens=n, dump=False)
        assert gen[:n] == c["ids"][:n], (c["name"], tok.decode(gen), c["completion"])
        done += 1
    assert done >= 2


def test_numpy_reference_reproduces_fixture_on_shipped_weights(fx, config):
    """The shipped safetensors are the weights the fixtures came from (independent of C++)."""
    import flint_ref
    import export
    meta, arrays = fx
    W = export.read_safetensors(MODEL_DIR / "model.safetensors")
    p = min(meta["prompts"], key=lambda p: len(p["ids"]))
    want = arrays[f"bf16_logits_{p['name']}"]
    got = flint_ref.forward(flint_ref.Config(config), W, p["ids"])[p["rows"]]
    assert rel_err(got, want) < 1e-5


def test_tokenizer_and_template_give_fixture_prompts(fx):
    """tokenizer.json and the chat template shipped reproduce the training-time prompt ids."""
    import chat_data
    from tokenizers import Tokenizer
    meta, _ = fx
    tok = Tokenizer.from_file(str(MODEL_DIR / "tokenizer.json"))
    tc = json.loads((MODEL_DIR / "tokenizer_config.json").read_text())
    r = chat_data.Renderer(tc["chat_template"])
    text = r.render([{"role": "user", "content": "What is 12 + 7?"}], add_generation_prompt=True)
    want = next(p for p in meta["prompts"] if p["name"] == "chat_math")["ids"]
    assert tok.encode(text, add_special_tokens=False).ids == want


# ---- end to end through the server --------------------------------------------------------

def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


TOOL_CALL_RE = re.compile(r"<tool_call>([^<\s]+)((?:<arg_key>.*?</arg_key><arg_value>.*?</arg_value>)*)"
                          r"</tool_call>", re.S)


def test_server_returns_tool_call_from_nano(fx, tmp_path):
    import chat_data
    meta, _ = fx
    rec = next(c for c in meta["completions"] if c["name"] == "chat_tool" and c["kind"] == "bf16")
    m = TOOL_CALL_RE.search(rec["completion"])
    assert m, f"PyTorch greedy completion has no tool call: {rec['completion']!r}"
    want_args = dict(re.findall(r"<arg_key>(.*?)</arg_key><arg_value>(.*?)</arg_value>", m.group(2)))
    port = free_port()
    log = open(tmp_path / "serve.log", "wb")
    proc = subprocess.Popen([flint_bin(), "serve", str(MODEL_DIR), "--host", "127.0.0.1", "--port",
                             str(port), "--max-model-len", "1024", "--kv-cache-memory", "64M",
                             "--max-num-seqs", "4", "--threads", "2", "--enable-auto-tool-choice",
                             "--tool-call-parser", "glm47", "--reasoning-parser", "glm47"],
                            stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.time() + 120
        while time.time() < deadline:
            assert proc.poll() is None, (tmp_path / "serve.log").read_text()[-4000:]
            try:
                if requests.get(url + "/health", timeout=2).status_code == 200:
                    break
            except requests.RequestException:
                pass
            time.sleep(0.1)
        model = requests.get(url + "/v1/models", timeout=10).json()["data"][0]["id"]
        body = {"model": model, "temperature": 0, "max_tokens": 80,
                "messages": [{"role": "user", "content": "What's the weather in Paris?"}],
                "tools": [chat_data.TOOLS["get_weather"][0]]}
        r = requests.post(url + "/v1/chat/completions", json=body, timeout=120)
        assert r.status_code == 200, r.text
        msg = r.json()["choices"][0]["message"]
        calls = msg.get("tool_calls") or []
        assert len(calls) == 1, msg
        assert calls[0]["function"]["name"] == m.group(1) == "get_weather"
        assert json.loads(calls[0]["function"]["arguments"]) == want_args
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)
        log.close()
