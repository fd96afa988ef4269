"""GGUF interop with the gguf package: files it writes are read identically by flint, and files
flint writes are read identically by gguf.GGUFReader (metadata of every type, all tensor types)."""

import numpy as np
import pytest
from gguf import GGUFReader, GGUFValueType, GGUFWriter, GGMLQuantizationType as Q
from gguf import quants

from formats_tool import dump, run

V = GGUFValueType

# key -> (value type, value, array element type or None)
METADATA = {
    "t.u8": (V.UINT8, 200, None),
    "t.i8": (V.INT8, -100, None),
    "t.u16": (V.UINT16, 60000, None),
    "t.i16": (V.INT16, -30000, None),
    "t.u32": (V.UINT32, 4_000_000_000, None),
    "t.i32": (V.INT32, -2_000_000_000, None),
    "t.u64": (V.UINT64, 2**63 + 5, None),
    "t.i64": (V.INT64, -(2**62), None),
    "t.f32": (V.FLOAT32, 0.1, None),
    "t.f64": (V.FLOAT64, 1.0 / 3.0, None),
    "t.bool": (V.BOOL, True, None),
    "t.string": (V.STRING, "héllo ✓ world", None),
    "t.arr_i32": (V.ARRAY, [1, -2, 3, 2**30], V.INT32),
    "t.arr_f32": (V.ARRAY, [0.5, -1.25, 3e-8], V.FLOAT32),
    "t.arr_str": (V.ARRAY, ["a", "", "ü", "<|im_end|>"], V.STRING),
    "t.arr_u8": (V.ARRAY, [0, 1, 255], V.UINT8),
    "t.arr_bool": (V.ARRAY, [True, False, True], V.BOOL),
    "t.nested": (V.ARRAY, [[1, 2], [3], [4, 5, 6]], None),
}


def f32(x):
    return float(np.float32(x))


def expected_value(vtype, value, sub):
    """The dump form of a metadata value (see formats_dump value_json)."""
    if vtype == V.ARRAY:
        if sub is None:  # nested: arrays of int32
            items = [expected_value(V.ARRAY, v, V.INT32) for v in value]
            return {"type": 9, "elem": 9, "value": items}
        return {"type": 9, "elem": int(sub), "value": [expected_value(sub, v, None) for v in value]}
    if vtype == V.STRING:
        return {"type": 8, "value": value.encode().hex()}
    if vtype == V.FLOAT32:
        return {"type": 6, "value": f32(value)}
    return {"type": int(vtype), "value": value}


def make_tensors(rng):
    """name -> (ggml type, numpy shape, raw bytes as written)."""
    out = {}
    out["w.f32"] = (Q.F32, (3, 5), rng.standard_normal((3, 5)).astype(np.float32))
    out["w.f16"] = (Q.F16, (7,), rng.standard_normal(7).astype(np.float16))
    bf = (rng.standard_normal((2, 3, 4)).astype(np.float32).view(np.uint32) >> 16).astype(np.uint16)
    out["w.bf16"] = (Q.BF16, (2, 3, 4), bf.view(np.uint8).reshape(2, 3, 8))
    x = rng.standard_normal((4, 64)).astype(np.float32)
    out["w.q8_0"] = (Q.Q8_0, (4, 64), quants.quantize(x, Q.Q8_0))
    out["w.q4_1"] = (Q.Q4_1, (4, 64), quants.quantize(x, Q.Q4_1))
    blocks = rng.integers(0, 256, size=(2, 3, 2, 36), dtype=np.uint8)
    blocks[..., :4] = rng.integers(0, 0x7F, size=(2, 3, 2, 4), dtype=np.uint8)  # valid UE4M3
    out["blk.0.ffn_up_exps.weight"] = (Q.NVFP4, (2, 3, 128), blocks.reshape(2, 3, 72))
    out["blk.0.ffn_up_exps.weight.scale"] = (Q.F32, (2,), np.array([0.5, 2.0], dtype=np.float32))
    out["ids.i32"] = (Q.I32, (5,), np.arange(5, dtype=np.int32) - 2)
    return out


@pytest.fixture(scope="module")
def gguf_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("gguf") / "ref.gguf"
    rng = np.random.default_rng(1)
    w = GGUFWriter(str(path), "flint")
    for key, (vtype, value, sub) in METADATA.items():
        w.add_key_value(key, value, vtype, sub_type=sub)
    tensors = make_tensors(rng)
    for name, (qt, _, data) in tensors.items():
        raw = None if qt in (Q.F32, Q.F16, Q.I32) else qt
        w.add_tensor(name, data, raw_dtype=raw)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path, tensors


def test_reader_reads_gguf_package_metadata(gguf_file):
    path, _ = gguf_file
    got = dump("gguf-dump", path)
    assert got["version"] == 3 and got["alignment"] == 32
    meta = got["metadata"]
    assert meta["general.architecture"] == {"type": 8, "value": b"flint".hex()}
    for key, (vtype, value, sub) in METADATA.items():
        assert meta[key] == expected_value(vtype, value, sub), key
    assert set(meta) == set(METADATA) | {"general.architecture"}


def test_reader_reads_gguf_package_tensors(gguf_file):
    path, tensors = gguf_file
    got = {t["name"]: t for t in dump("gguf-dump", path)["tensors"]}
    reader = GGUFReader(str(path))
    assert set(got) == set(tensors)
    for rt in reader.tensors:
        t = got[rt.name]
        qt, shape, data = tensors[rt.name]
        assert t["ggml_type"] == int(qt) == int(rt.tensor_type)
        assert t["ne"] == list(reversed(shape)) == [int(d) for d in rt.shape]
        assert t["offset"] == int(rt.data_offset) - int(reader.data_offset)
        assert bytes.fromhex(t["data"]) == np.ascontiguousarray(data).tobytes() == rt.data.tobytes()
        want = quants.dequantize(rt.data, rt.tensor_type).astype(np.float32) if qt != Q.I32 \
            else rt.data.astype(np.float32)
        got_f32 = np.frombuffer(bytes.fromhex(t["f32"]), dtype=np.float32)
        assert got_f32.tobytes() == np.ascontiguousarray(want).reshape(-1).tobytes(), rt.name


def test_writer_output_reads_identically_in_gguf_package(gguf_file, tmp_path):
    path, _ = gguf_file
    out = tmp_path / "copy.gguf"
    run("gguf-copy", path, out)
    a, b = GGUFReader(str(path)), GGUFReader(str(out))
    fa = {k: f for k, f in a.fields.items() if not k.startswith("GGUF.")}
    fb = {k: f for k, f in b.fields.items() if not k.startswith("GGUF.")}
    assert set(fa) == set(fb)
    for key in fa:
        assert fa[key].types == fb[key].types, key
        assert [bytes(p) for p in fa[key].parts] == [bytes(p) for p in fb[key].parts], key
    ta = {t.name: t for t in a.tensors}
    tb = {t.name: t for t in b.tensors}
    assert set(ta) == set(tb)
    for name, t in ta.items():
        assert tb[name].tensor_type == t.tensor_type
        assert list(tb[name].shape) == list(t.shape)
        assert tb[name].data.tobytes() == t.data.tobytes(), name
        assert int(tb[name].data_offset) % 32 == 0


def test_writer_keeps_custom_alignment(tmp_path):
    path = tmp_path / "a64.gguf"
    w = GGUFWriter(str(path), "flint")
    w.add_custom_alignment(64)
    w.add_tensor("x", np.arange(3, dtype=np.float32))
    w.add_tensor("y", np.arange(5, dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    assert dump("gguf-dump", path)["alignment"] == 64
    out = tmp_path / "copy.gguf"
    run("gguf-copy", path, out)
    r = GGUFReader(str(out))
    assert r.alignment == 64
    assert all(int(t.data_offset) % 64 == 0 for t in r.tensors)
    assert r.tensors[1].data.tolist() == [0, 1, 2, 3, 4]


def test_reader_rejects_truncated_gguf_package_file(gguf_file, tmp_path):
    path, _ = gguf_file
    data = path.read_bytes()
    last = max(int(t.data_offset) + int(t.n_bytes) for t in GGUFReader(str(path)).tensors)
    for cut in (3, 20, len(data) // 3, last - 1):
        bad = tmp_path / f"cut{cut}.gguf"
        bad.write_bytes(data[:cut])
        r = run("gguf-dump", bad, check=False)
        assert r.returncode == 1, cut
        assert r.stderr.startswith("error: gguf: ") and str(bad) in r.stderr, r.stderr
