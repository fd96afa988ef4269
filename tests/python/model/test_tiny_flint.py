"""tests/support/tiny_flint.py itself: its files read back with the real safetensors, gguf,
tokenizers and jinja2 packages give the arrays and tokens it returns."""

import json
import subprocess
import sys

import jinja2
import numpy as np
from safetensors.numpy import load_file
from tokenizers import Tokenizer

from conftest import SOURCE_DIR

sys.path.insert(0, str(SOURCE_DIR / "tests" / "support"))
import tiny_flint  # noqa: E402


def test_hf_f32_sharded_reads_back_with_safetensors(tmp_path):
    res = tiny_flint.write_hf(tmp_path / "hf", {"dtype": "F32", "shards": 3, "expert_bias": True})
    index = json.loads((tmp_path / "hf" / "model.safetensors.index.json").read_text())
    got = {}
    for f in set(index["weight_map"].values()):
        got.update(load_file(tmp_path / "hf" / f))
    assert set(got) == set(res["weights"]) == set(index["weight_map"])
    for name, arr in got.items():
        np.testing.assert_array_equal(arr, res["weights"][name], err_msg=name)
    cfg = json.loads((tmp_path / "hf" / "config.json").read_text())
    assert cfg["architectures"] == ["FlintForCausalLM"]
    assert len(cfg["layer_types"]) == cfg["num_hidden_layers"]


def test_tokenizer_and_template(tmp_path):
    res = tiny_flint.write_hf(tmp_path / "hf")
    tok = Tokenizer.from_file(str(tmp_path / "hf" / "tokenizer.json"))
    assert tok.get_vocab_size() == res["config"]["vocab_size"]
    for t in tiny_flint.SPECIAL_TOKENS:
        assert tok.encode(t).ids == [tok.token_to_id(t)], t
    text = "Hello, world! def add(a, b): return a + b"
    assert tok.decode(tok.encode(text).ids) == text
    tcfg = json.loads((tmp_path / "hf" / "tokenizer_config.json").read_text())
    env = jinja2.Environment(extensions=["jinja2.ext.loopcontrols"])
    env.filters["tojson"] = lambda v, **kw: json.dumps(v)
    prompt = env.from_string(tcfg["chat_template"]).render(
        messages=[{"role": "user", "content": "hi"}], add_generation_prompt=True)
    assert prompt.startswith("[gMASK]<sop>") and "<|user|>hi" in prompt
    assert prompt.endswith("<|user|>hi<|assistant|><think>")
    assert [tok.id_to_token(i) for i in tok.encode("<|assistant|><think>").ids] == [
        "<|assistant|>", "<think>"]
    gen = json.loads((tmp_path / "hf" / "generation_config.json").read_text())
    assert gen["eos_token_id"][0] == tok.token_to_id("<|endoftext|>")


def test_nvfp4_gguf_decodes_with_gguf_package(tmp_path):
    import gguf

    res = tiny_flint.write_gguf(tmp_path / "m.gguf", {"expert_bias": True}, quant="nvfp4")
    tensors = {t.name: t for t in gguf.GGUFReader(tmp_path / "m.gguf").tensors}
    for name, want in res["gguf_weights"].items():
        t = tensors[name]
        got = np.asarray(gguf.quants.dequantize(t.data, t.tensor_type), np.float32).reshape(want.shape)
        sc = tensors.get(name.removesuffix(".weight") + ".scale")
        if sc is not None:
            s = np.asarray(sc.data, np.float32)
            got = got * (s[:, None, None] if want.ndim == 3 else s[0])
        np.testing.assert_array_equal(got, want, err_msg=name)
    # Quantization really happened and the global scale matters.
    w = res["weights"]["model.layers.1.mlp.experts.0.up_proj.weight"]
    orig = tiny_flint.random_weights(res["config"])["model.layers.1.mlp.experts.0.up_proj.weight"]
    assert 0 < np.linalg.norm(w - orig) / np.linalg.norm(orig) < 0.12


def test_cli_writes_every_form(tmp_path):
    for form in ("hf", "gguf-bf16", "gguf-nvfp4"):
        out = tmp_path / form
        out.mkdir()
        r = subprocess.run([sys.executable, str(SOURCE_DIR / "tests/support/tiny_flint.py"), str(out),
                            "--form", form, "--set", "num_experts=4"],
                           capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stderr
        assert any(out.iterdir())


def test_bundled_model_is_reproducible(tmp_path):
    out = tmp_path / "tiny"
    r = subprocess.run([sys.executable, str(SOURCE_DIR / "tools/make_tiny_model.py"), str(out)],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    bundled = SOURCE_DIR / "models" / "flint-tiny"
    names = sorted(p.name for p in bundled.iterdir())
    assert names == sorted(p.name for p in out.iterdir())
    for n in names:
        assert (bundled / n).read_bytes() == (out / n).read_bytes(), n
    assert sum((bundled / n).stat().st_size for n in names) < 3.2e6
