"""`flint convert`: HF -> BF16 / NVFP4 GGUF, read back with the gguf package (the llama.cpp
project's reader) and compared with the tiny checkpoint's weights, metadata and tokenizer."""

import sys

import numpy as np
import pytest

from conftest import SOURCE_DIR, run_flint

sys.path.insert(0, str(SOURCE_DIR / "tests" / "support"))
import tiny_flint  # noqa: E402

import gguf  # noqa: E402


def field_value(reader, key):
    f = reader.fields[key]
    return f.contents()


def read_tensors(path):
    r = gguf.GGUFReader(path)
    out = {}
    for t in r.tensors:
        shape = [int(x) for x in reversed(t.shape)]
        vals = np.asarray(gguf.quants.dequantize(t.data, t.tensor_type), np.float32).reshape(shape)
        out[t.name] = (t.tensor_type.name, vals)
    return r, out


CONFIGS = [
    {},
    {"expert_bias": True, "shared_expert_name": "shared_experts", "shards": 2,
     "sink_name": "self_attn.softmax_offset"},
    {"shared_expert_intermediate_size": 0, "mlp_only_layers": [0, 1], "num_experts": 4,
     "num_experts_per_tok": 4, "norm_topk_prob": False, "dtype": "F32"},
]


@pytest.mark.parametrize("knobs", CONFIGS, ids=["default", "bias_sharded", "noshared_f32"])
def test_convert_bf16_round_trip(flint_bin, tmp_path, knobs):
    res = tiny_flint.write_hf(tmp_path / "hf", knobs)
    out = tmp_path / "out.gguf"
    r = run_flint(flint_bin, "convert", tmp_path / "hf", out, "--type", "bf16")
    assert r.returncode == 0, r.stderr
    reader, tensors = read_tensors(out)
    want = tiny_flint.gguf_arrays(res["config"], res["weights"])
    assert set(tensors) == set(want)
    for name, w in want.items():
        dtype, got = tensors[name]
        expect_dtype = "F32" if w.ndim == 1 else "BF16"
        assert dtype == expect_dtype, name
        np.testing.assert_array_equal(got, tiny_flint.bf16_round(w) if dtype == "BF16" else w,
                                      err_msg=name)
    # Metadata: every flint.* key the reference writer uses, with the same value.
    for key, value in tiny_flint.gguf_metadata(res["config"]).items():
        got = field_value(reader, key)
        if isinstance(value, float):
            assert got == pytest.approx(value, rel=1e-6), key
        else:
            assert got == value, key
    assert field_value(reader, "general.architecture") == "flint"
    # Tokenizer and chat template.
    tok = res["tokenizer"]
    tokens = field_value(reader, "tokenizer.ggml.tokens")
    assert len(tokens) == res["config"]["vocab_size"]
    assert all(tokens[i] == t for t, i in tok.get_vocab(with_added_tokens=True).items())
    assert field_value(reader, "tokenizer.chat_template") == tiny_flint.chat_template()
    ids = tiny_flint.special_ids(tok)
    assert field_value(reader, "tokenizer.ggml.eos_token_id") == ids["<|endoftext|>"]
    # And flint itself binds the result.
    r = run_flint(flint_bin, "inspect", out)
    assert r.returncode == 0, r.stderr


def test_convert_nvfp4_round_trip(flint_bin, tmp_path):
    res = tiny_flint.write_hf(tmp_path / "hf", {"expert_bias": True})
    out = tmp_path / "out.gguf"
    r = run_flint(flint_bin, "convert", tmp_path / "hf", out, "--type", "nvfp4")
    assert r.returncode == 0, r.stderr
    _, tensors = read_tensors(out)
    want = tiny_flint.gguf_arrays(res["config"], res["weights"])
    assert set(tensors) == set(want) | {n.removesuffix(".weight") + ".scale" for n in want
                                        if tiny_flint.nvfp4_eligible(n)}
    n_nvfp4 = 0
    for name, w in want.items():
        dtype, got = tensors[name]
        if not tiny_flint.nvfp4_eligible(name):
            assert dtype in ("F32", "BF16"), name
            np.testing.assert_array_equal(got, w, err_msg=name)
            continue
        n_nvfp4 += 1
        assert dtype == "NVFP4", name
        scale = tensors[name.removesuffix(".weight") + ".scale"][1].reshape(-1)
        assert scale.shape == ((w.shape[0],) if w.ndim == 3 else (1,)), name
        deq = got * (scale[:, None, None] if w.ndim == 3 else scale[0])
        # Independent decode check: tiny_flint's own NVFP4 decoder gives the same values.
        assert np.all(np.isfinite(deq))
        rel = np.linalg.norm(deq - w) / np.linalg.norm(w)
        assert 0 < rel < 0.12, (name, rel)
    assert n_nvfp4 > 0
    r = run_flint(flint_bin, "inspect", out)
    assert r.returncode == 0, r.stderr


def test_convert_rejects_bad_input(flint_bin, tmp_path):
    r = run_flint(flint_bin, "convert", tmp_path / "missing", tmp_path / "o.gguf")
    assert r.returncode == 1
    tiny_flint.write_hf(tmp_path / "hf")
    r = run_flint(flint_bin, "convert", tmp_path / "hf", tmp_path / "o.gguf", "--type", "q2")
    assert r.returncode == 1 and "--type" in r.stderr
