"""A failed load lists every missing, unexpected and misshapen tensor in one report."""

import json
import sys

import numpy as np

from conftest import SOURCE_DIR, run_flint

sys.path.insert(0, str(SOURCE_DIR / "tests" / "support"))
import tiny_flint  # noqa: E402


def test_report_lists_every_problem(flint_bin, tmp_path):
    res = tiny_flint.write_hf(tmp_path / "hf")
    w = dict(res["weights"])
    del w["model.layers.2.self_attn.q_norm.weight"]
    del w["model.layers.3.mlp.experts.5.down_proj.weight"]
    w["model.layers.1.self_attn.k_proj.weight"] = np.zeros((31, 64), np.float32)
    w["model.layers.0.mlp.extra.weight"] = np.zeros((4,), np.float32)
    dtypes = {n: "F32" for n in w}
    (tmp_path / "hf" / "model.safetensors").unlink()
    tiny_flint.write_safetensors(tmp_path / "hf" / "model.safetensors", w, dtypes)
    r = run_flint(flint_bin, "inspect", tmp_path / "hf")
    assert r.returncode == 1
    msg = r.stderr.strip()
    assert "\n" not in msg
    assert "4 tensor problems" in msg
    assert "missing tensor 'model.layers.2.self_attn.q_norm.weight'" in msg
    assert "missing tensor 'model.layers.3.mlp.experts.5.down_proj.weight'" in msg
    assert "'model.layers.1.self_attn.k_proj.weight' has shape [31,64], expected [32,64]" in msg
    assert "unexpected tensor 'model.layers.0.mlp.extra.weight'" in msg


def test_report_names_the_shared_expert_spellings(flint_bin, tmp_path):
    res = tiny_flint.write_hf(tmp_path / "hf")
    w = {n: a for n, a in res["weights"].items() if "shared_expert.up_proj" not in n}
    (tmp_path / "hf" / "model.safetensors").unlink()
    tiny_flint.write_safetensors(tmp_path / "hf" / "model.safetensors", w, {n: "F32" for n in w})
    r = run_flint(flint_bin, "inspect", tmp_path / "hf")
    assert r.returncode == 1
    assert ("missing tensor 'model.layers.1.mlp.shared_expert.up_proj.weight' or "
            "'model.layers.1.mlp.shared_experts.up_proj.weight'") in r.stderr


def test_gguf_report_for_a_stacked_expert_shape(flint_bin, tmp_path):
    import gguf

    res = tiny_flint.write_gguf(tmp_path / "a.gguf")
    cfg = res["config"]
    # Rewrite with one stacked expert tensor short of an expert.
    reader = gguf.GGUFReader(tmp_path / "a.gguf")
    w = gguf.GGUFWriter(str(tmp_path / "b.gguf"), arch="flint")
    for key, value in tiny_flint.gguf_metadata(cfg).items():
        if isinstance(value, list):
            w.add_array(key, value)
        elif isinstance(value, bool):
            w.add_bool(key, value)
        elif isinstance(value, float):
            w.add_float32(key, value)
        else:
            w.add_uint32(key, value)
    for name, arr in res["gguf_weights"].items():
        if name == "blk.2.ffn_up_exps.weight":
            arr = arr[:-1]
        w.add_tensor(name, np.ascontiguousarray(arr, np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    del reader
    r = run_flint(flint_bin, "inspect", tmp_path / "b.gguf")
    assert r.returncode == 1
    e, i, d = cfg["num_experts"], cfg["moe_intermediate_size"], cfg["hidden_size"]
    assert (f"tensor 'blk.2.ffn_up_exps.weight' has shape [{e - 1},{i},{d}], "
            f"expected [{e},{i},{d}]") in r.stderr
