"""safetensors interop with the safetensors package: its files (numpy API, and the raw serializer
for BF16/F8_E4M3) read identically, ours load identically in it, sharded checkpoints work."""

import json

import numpy as np
import pytest
import safetensors
from safetensors.numpy import load_file, save_file

from formats_tool import dump, run

NP_NAMES = {np.float32: "F32", np.float16: "F16", np.uint8: "U8", np.int8: "I8",
            np.int32: "I32", np.int64: "I64"}


def numpy_tensors(rng):
    return {
        "model.embed_tokens.weight": rng.standard_normal((7, 5)).astype(np.float32),
        "a.f16": rng.standard_normal((3, 2, 4)).astype(np.float16),
        "a.u8": rng.integers(0, 256, (9,), dtype=np.uint8),
        "a.i8": rng.integers(-128, 128, (2, 2), dtype=np.int8),
        "a.i32": rng.integers(-2**31, 2**31, (3,), dtype=np.int32),
        "a.i64": rng.integers(-2**62, 2**62, (1, 1), dtype=np.int64),
        "a.scalar": np.array(2.5, dtype=np.float32),
        "a.empty": np.zeros((0, 4), dtype=np.float32),
    }


def test_reader_reads_safetensors_numpy_file(tmp_path):
    t = numpy_tensors(np.random.default_rng(1))
    path = tmp_path / "model.safetensors"
    save_file(t, str(path), metadata={"format": "pt", "note": "ü"})
    got = dump("st-dump", path)
    assert got["metadata"] == {"format": "pt", "note": "ü"}
    assert set(got["tensors"]) == set(t)
    for name, arr in t.items():
        g = got["tensors"][name]
        assert g["dtype"] == NP_NAMES[arr.dtype.type], name
        assert g["shape"] == list(arr.shape), name
        assert bytes.fromhex(g["data"]) == arr.tobytes(), name


def raw_tensors(rng):
    """name -> (package dtype, our dtype name, array holding the raw bytes)."""
    return {
        "w.bf16": ("bfloat16", "BF16", rng.integers(0, 2**16, (4, 6), dtype=np.uint16)),
        "w.f8": ("float8_e4m3fn", "F8_E4M3", rng.integers(0, 256, (3, 16), dtype=np.uint8)),
        "w.f32": ("float32", "F32", np.array([1, -2], np.float32)),
    }


def serialize_raw(t) -> bytes:
    specs = {name: safetensors.TensorSpec(
        dtype=dt, shape=list(a.shape), data_ptr=a.ctypes.data, data_len=a.nbytes)
             for name, (dt, _, a) in t.items()}
    return safetensors.serialize(specs, None)


def test_reader_reads_bf16_and_f8_e4m3(tmp_path):
    t = raw_tensors(np.random.default_rng(2))
    path = tmp_path / "raw.safetensors"
    path.write_bytes(serialize_raw(t))
    got = dump("st-dump", path)["tensors"]
    for name, (_, ours, a) in t.items():
        assert got[name]["dtype"] == ours
        assert got[name]["shape"] == list(a.shape)
        assert bytes.fromhex(got[name]["data"]) == a.tobytes(), name


def test_writer_output_loads_in_safetensors_package(tmp_path):
    t = numpy_tensors(np.random.default_rng(3))
    src, out = tmp_path / "src.safetensors", tmp_path / "out.safetensors"
    save_file(t, str(src), metadata={"k": "v"})
    run("st-copy", src, out)
    back = load_file(str(out))
    assert set(back) == set(t)
    for name, arr in t.items():
        assert back[name].dtype == arr.dtype and back[name].shape == arr.shape, name
        np.testing.assert_array_equal(back[name], arr)
    with safetensors.safe_open(str(out), framework="numpy") as f:
        assert f.metadata() == {"k": "v"}


def test_writer_output_bf16_f8_deserialize_in_safetensors_package(tmp_path):
    t = raw_tensors(np.random.default_rng(4))
    src, out = tmp_path / "src.safetensors", tmp_path / "out.safetensors"
    src.write_bytes(serialize_raw(t))
    run("st-copy", src, out)
    back = dict(safetensors.deserialize(out.read_bytes()))
    assert set(back) == set(t)
    for name, (_, ours, a) in t.items():
        assert back[name]["dtype"] == ours and list(back[name]["shape"]) == list(a.shape), back[name]
        assert bytes(back[name]["data"]) == a.tobytes(), name


def write_sharded(tmp_path, rng, n_shards=3):
    t = numpy_tensors(rng)
    names = sorted(t)
    weight_map = {}
    for s in range(n_shards):
        fname = f"model-{s + 1:05d}-of-{n_shards:05d}.safetensors"
        part = {n: t[n] for n in names[s::n_shards]}
        save_file(part, str(tmp_path / fname), metadata={"format": "pt"})
        weight_map.update({n: fname for n in part})
    index = {"metadata": {"total_size": 0}, "weight_map": weight_map}
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps(index))
    return t


def test_sharded_directory_reads_every_tensor(tmp_path):
    t = write_sharded(tmp_path, np.random.default_rng(5))
    for path in (tmp_path, tmp_path / "model.safetensors.index.json"):
        got = dump("st-dump", path)["tensors"]
        assert set(got) == set(t)
        for name, arr in t.items():
            assert bytes.fromhex(got[name]["data"]) == arr.tobytes(), name


def test_sharded_missing_shard_is_an_error(tmp_path):
    write_sharded(tmp_path, np.random.default_rng(6))
    (tmp_path / "model-00002-of-00003.safetensors").unlink()
    r = run("st-dump", tmp_path, check=False)
    assert r.returncode == 1
    assert "model-00002-of-00003.safetensors" in r.stderr and "cannot open" in r.stderr


def test_sharded_tensor_in_two_shards_is_an_error(tmp_path):
    t = write_sharded(tmp_path, np.random.default_rng(7))
    name = sorted(t)[0]
    save_file({name: t[name]}, str(tmp_path / "model-00002-of-00003.safetensors"))
    r = run("st-dump", tmp_path, check=False)
    assert r.returncode == 1 and name in r.stderr, r.stderr


@pytest.mark.parametrize("mutate,needle", [
    (lambda h: h["x"].update(data_offsets=[0, 400]), "outside"),
    (lambda h: h["x"].update(shape=[3, 3]), "needs"),
    (lambda h: h["x"].update(dtype="F64"), "dtype F64"),
    (lambda h: h["x"].update(shape=[2**62, 2**62]), "overflow"),
    (lambda h: h["y"].update(data_offsets=[8, 24]), "overlap"),
])
def test_reader_rejects_bad_headers(tmp_path, mutate, needle):
    header = {"x": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]},
              "y": {"dtype": "F32", "shape": [4], "data_offsets": [16, 32]}}
    mutate(header)
    text = json.dumps(header).encode()
    path = tmp_path / "bad.safetensors"
    path.write_bytes(len(text).to_bytes(8, "little") + text + bytes(32))
    r = run("st-dump", path, check=False)
    assert r.returncode == 1 and needle in r.stderr and "bad.safetensors" in r.stderr, r.stderr
