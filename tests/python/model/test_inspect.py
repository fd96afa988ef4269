"""`flint inspect`: config, tensor table and parameter totals, checked against the gguf and
safetensors packages and the spec's published totals; bad files give one line and exit code 1."""

import json
import re
import struct
import sys

import pytest

from conftest import SOURCE_DIR, run_flint

sys.path.insert(0, str(SOURCE_DIR / "tests" / "support"))
import tiny_flint  # noqa: E402


def params_from_spec(c: dict) -> tuple[int, int]:
    """Parameter totals written from spec section 7.2, independent of the C++ code."""
    d, v = c["hidden_size"], c["vocab_size"]
    hq, hkv, hd = c["num_attention_heads"], c["num_key_value_heads"], c["head_dim"]
    e, k = c["num_experts"], c["num_experts_per_tok"]
    attn = d * hq * hd * 2 + d * hkv * hd * 2
    small = 2 * d + 2 * hd + hq
    dense = 3 * d * c["intermediate_size"]
    n_dense = len(c["mlp_only_layers"])
    n_moe = c["num_hidden_layers"] - n_dense
    expert = 3 * d * c["moe_intermediate_size"]
    shared = 3 * d * c["shared_expert_intermediate_size"]
    total = (2 * v * d + d + c["num_hidden_layers"] * (attn + small) + n_dense * dense
             + n_moe * (e * d + e * expert + shared))
    active = total - v * d - n_moe * (e - k) * expert
    return total, active


def parse_params(out: str) -> tuple[int, int]:
    total = int(re.search(r"total:\s+(\d+)", out).group(1))
    active = int(re.search(r"active:\s+(\d+)", out).group(1))
    return total, active


def test_inspect_real_config_prints_published_totals(flint_bin):
    path = SOURCE_DIR / "tests" / "data" / "flint-config.json"
    r = run_flint(flint_bin, "inspect", path)
    assert r.returncode == 0, r.stderr
    assert "(39.8B)" in r.stdout and "(2.5B)" in r.stdout, r.stdout
    total, active = parse_params(r.stdout)
    assert (total, active) == params_from_spec(json.load(open(path)))
    assert "kv cache per token (bf16)" in r.stdout and "28672 bytes" in r.stdout


def test_inspect_hf_dir_lists_every_tensor(flint_bin, tmp_path):
    res = tiny_flint.write_hf(tmp_path / "hf", {"shards": 2, "expert_bias": True})
    r = run_flint(flint_bin, "inspect", tmp_path / "hf")
    assert r.returncode == 0, r.stderr
    rows = {}
    for line in r.stdout.splitlines():
        m = re.match(r"\s+(\S+)\s+(F32|BF16|F16)\s+(\[[\d,]*\])\s+(\d+)$", line)
        if m:
            rows[m.group(1)] = (m.group(2), json.loads(m.group(3)), int(m.group(4)))
    seen = {}
    for f in sorted((tmp_path / "hf").glob("*.safetensors")):
        with open(f, "rb") as fh:
            n = struct.unpack("<Q", fh.read(8))[0]
            hdr = json.loads(fh.read(n))
        for name, info in hdr.items():
            if name != "__metadata__":
                o = info["data_offsets"]
                seen[name] = (info["dtype"], info["shape"], o[1] - o[0])
    assert rows == seen
    assert set(rows) == set(res["weights"])
    total, active = parse_params(r.stdout)
    t, a = params_from_spec(res["config"])
    n_moe = res["config"]["num_hidden_layers"] - len(res["config"]["mlp_only_layers"])
    assert total == t + n_moe * res["config"]["num_experts"]  # plus the expert-score biases
    assert active == a + n_moe * res["config"]["num_experts"]
    assert sum(w.size for w in res["weights"].values()) == total


@pytest.mark.parametrize("form", ["gguf-bf16", "gguf-nvfp4"])
def test_inspect_gguf_matches_gguf_reader(flint_bin, tmp_path, form):
    import gguf

    path = tmp_path / "m.gguf"
    tiny_flint.write(path, form)
    r = run_flint(flint_bin, "inspect", path)
    assert r.returncode == 0, r.stderr
    rows = {}
    for line in r.stdout.splitlines():
        m = re.match(r"\s+(\S+)\s+(F32|BF16|NVFP4)\s+(\[[\d,]*\])\s+(\d+)$", line)
        if m:
            rows[m.group(1)] = (m.group(2), json.loads(m.group(3)), int(m.group(4)))
    want = {t.name: (t.tensor_type.name, [int(x) for x in reversed(t.shape)], int(t.n_bytes))
            for t in gguf.GGUFReader(path).tensors}
    assert rows == want
    assert f"format: gguf v3" in r.stdout


def test_inspect_hf_config_override(flint_bin, tmp_path):
    path = tmp_path / "m.gguf"
    tiny_flint.write(path, "gguf-bf16")
    cfg_dir = tmp_path / "cfg"
    tiny_flint.write_hf(cfg_dir, {"rope_theta": 777777.0})
    r = run_flint(flint_bin, "inspect", path, "--hf-config-path", cfg_dir / "config.json")
    assert r.returncode == 0, r.stderr
    assert re.search(r"rope_theta\s+777777", r.stdout), r.stdout


def one_line_error(r, *needles):
    assert r.returncode == 1, (r.stdout, r.stderr)
    lines = [l for l in r.stderr.splitlines() if l.strip()]
    assert len(lines) == 1, r.stderr
    for n in needles:
        assert n in lines[0], lines[0]


def test_inspect_bad_files(flint_bin, tmp_path):
    one_line_error(run_flint(flint_bin, "inspect", tmp_path / "nope.gguf"), "nope.gguf")
    p = tmp_path / "bad_magic.gguf"
    p.write_bytes(b"GGUX" + b"\0" * 60)
    one_line_error(run_flint(flint_bin, "inspect", p), "bad_magic.gguf")
    good = tmp_path / "good.gguf"
    tiny_flint.write(good, "gguf-bf16")
    trunc = tmp_path / "trunc.gguf"
    trunc.write_bytes(good.read_bytes()[:5000])
    one_line_error(run_flint(flint_bin, "inspect", trunc), "trunc.gguf")
    c = tmp_path / "config.json"
    c.write_text('{"architectures": ["LlamaForCausalLM"]}')
    one_line_error(run_flint(flint_bin, "inspect", c), "LlamaForCausalLM")
    c.write_text("{not json")
    one_line_error(run_flint(flint_bin, "inspect", c), "invalid JSON")


def test_inspect_shape_mismatch_with_config(flint_bin, tmp_path):
    tiny_flint.write_hf(tmp_path / "hf")
    cfg = json.loads((tmp_path / "hf" / "config.json").read_text())
    cfg["num_experts"] = 6
    (tmp_path / "hf" / "config.json").write_text(json.dumps(cfg))
    r = run_flint(flint_bin, "inspect", tmp_path / "hf")
    one_line_error(r, "model.layers.1.mlp.gate.weight' has shape [8,64], expected [6,64]",
                   "unexpected tensor 'model.layers.3.mlp.experts.7.up_proj.weight'")
