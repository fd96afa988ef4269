"""Block quantizers against the gguf package: Q8_0/Q4_1 quantize bit for bit like gguf.quants,
every type dequantizes bit for bit like gguf.quants, and NVFP4 quantizes like ggml's
quantize_row_nvfp4_ref. gguf 0.19 has no NVFP4 quantizer, so the reference below is written from
the spec (sec. 4.3) on top of the package's own UE4M3 helpers."""

import numpy as np
import pytest
from gguf import GGMLQuantizationType as Q
from gguf import quants

from formats_tool import run


def inputs(rng, n):
    """Awkward data: normal, wide dynamic range, tiny (UE4M3 subnormal scales), ties, zeros."""
    return {
        "normal": rng.standard_normal(n).astype(np.float32),
        "wide": (rng.standard_normal(n) * np.exp2(rng.integers(-20, 12, n))).astype(np.float32),
        "tiny": (rng.standard_normal(n) * 1e-3).astype(np.float32),
        "grid": (rng.integers(-12, 13, n) * 0.25).astype(np.float32),
        "zeros": np.zeros(n, dtype=np.float32),
        "huge": (rng.standard_normal(n) * 3000).astype(np.float32),
    }


def quantize_with_tool(tmp_path, qtype: str, x: np.ndarray) -> bytes:
    src, dst = tmp_path / "in.f32", tmp_path / "out.bin"
    src.write_bytes(x.tobytes())
    run("quantize", qtype, src, dst)
    return dst.read_bytes()


def dequantize_with_tool(tmp_path, qtype: str, data: bytes, n: int) -> np.ndarray:
    src, dst = tmp_path / "in.bin", tmp_path / "out.f32"
    src.write_bytes(data)
    run("dequantize", qtype, src, n, dst)
    return np.frombuffer(dst.read_bytes(), dtype=np.float32)


@pytest.mark.parametrize("qtype", ["Q8_0", "Q4_1"])
def test_quantize_matches_gguf_package(tmp_path, qtype):
    rng = np.random.default_rng(3)
    for kind, x in inputs(rng, 32 * 129).items():
        want = quants.quantize(x.reshape(129, 32), Q[qtype]).tobytes()
        assert quantize_with_tool(tmp_path, qtype, x) == want, kind


def test_bf16_and_f16_match_numpy_and_gguf(tmp_path):
    rng = np.random.default_rng(4)
    x = np.concatenate([v for v in inputs(rng, 769).values()])
    x = np.concatenate([x, np.array([np.inf, -np.inf, 65519.0, 65520.0, 1e-8, 2.0**-24 * 1.5],
                                    dtype=np.float32)])
    with np.errstate(over="ignore"):
        want_f16 = x.astype(np.float16).tobytes()
    assert quantize_with_tool(tmp_path, "F16", x) == want_f16
    assert quantize_with_tool(tmp_path, "BF16", x) == quants.quantize(x, Q.BF16).tobytes()


def ref_nvfp4_quantize(x: np.ndarray) -> bytes:
    """quantize_row_nvfp4_ref from the spec: d = fp32_to_ue4m3(amax / 6) per 16 values, then the
    nearest doubled-E2M1 entry times d/2 (first index wins ties); ggml nibble order."""
    kv = np.array(quants.NVFP4.kvalues, dtype=np.float32)
    sub = x.reshape(-1, 16)
    amax = np.abs(sub).max(axis=1)
    ue = quants.NVFP4.fp32_to_ue4m3((amax / np.float32(6.0)).astype(np.float32))
    d = quants.NVFP4.ue4m3_to_fp32(ue).astype(np.float32)
    err = np.abs(kv[None, None, :] * d[:, None, None] - sub[:, :, None]).astype(np.float32)
    codes = np.argmin(err, axis=-1).astype(np.uint8)  # [n_sub, 16]
    qs = codes[:, :8] | (codes[:, 8:] << 4)  # byte j: element j low, element j+8 high
    blocks = np.concatenate([ue.reshape(-1, 4), qs.reshape(-1, 32)], axis=1)
    return blocks.astype(np.uint8).tobytes()


def test_nvfp4_quantize_matches_ggml_reference(tmp_path):
    rng = np.random.default_rng(5)
    for kind, x in inputs(rng, 64 * 129).items():
        assert quantize_with_tool(tmp_path, "NVFP4", x) == ref_nvfp4_quantize(x), kind


@pytest.mark.parametrize("qtype", ["Q8_0", "Q4_1", "NVFP4", "BF16", "F16"])
def test_dequantize_matches_gguf_package(tmp_path, qtype):
    rng = np.random.default_rng(6)
    block, size = {"Q8_0": (32, 34), "Q4_1": (32, 20), "NVFP4": (64, 36), "BF16": (1, 2),
                   "F16": (1, 2)}[qtype]
    nb = 257
    raw = rng.integers(0, 256, size=(nb, size), dtype=np.uint8)
    if qtype in ("Q8_0", "Q4_1"):  # finite f16 scales (a NaN would make bit comparison moot)
        raw[:, 1] &= 0x3B
        raw[:, 3] &= 0xBB
    if qtype in ("BF16", "F16"):
        raw[:, 1] &= 0xBF  # keep the exponent away from inf/NaN
    want = quants.dequantize(raw, Q[qtype]).astype(np.float32).reshape(-1)
    got = dequantize_with_tool(tmp_path, qtype, raw.tobytes(), nb * block)
    assert got.tobytes() == want.tobytes()


def test_nvfp4_to_modelopt_decodes_identically(tmp_path):
    """ModelOpt layout (codes [out, in/2] low nibble = element 2j, e4m3 scales [out, in/16]):
    decoding it with e4m3fn scales gives the ggml values exactly."""
    rng = np.random.default_rng(7)
    rows, cols = 5, 192
    x = (rng.standard_normal((rows, cols)) * 0.05).astype(np.float32)
    blocks = quantize_with_tool(tmp_path, "NVFP4", x.reshape(-1))
    (tmp_path / "b.bin").write_bytes(blocks)
    run("nvfp4-modelopt", tmp_path / "b.bin", rows, cols, tmp_path / "mo.bin")
    mo = np.frombuffer((tmp_path / "mo.bin").read_bytes(), dtype=np.uint8)
    codes = mo[: rows * cols // 2].reshape(rows, cols // 2)
    scales = mo[rows * cols // 2:].reshape(rows, cols // 16)
    e2m1 = np.array([0, .5, 1, 1.5, 2, 3, 4, 6, 0, -.5, -1, -1.5, -2, -3, -4, -6], np.float32)
    el = np.stack([codes & 0xF, codes >> 4], axis=-1).reshape(rows, cols)
    e = (scales >> 3).astype(np.int32)
    m = (scales & 7).astype(np.float32)
    s = np.where(e == 0, m * 2.0**-9, (1 + m / 8) * 2.0 ** (e - 7)).astype(np.float32)  # e4m3fn
    assert not np.any(scales & 0x80) and not np.any(scales == 0x7F)
    got = e2m1[el] * np.repeat(s, 16, axis=1)
    want = quants.dequantize(np.frombuffer(blocks, np.uint8).reshape(rows, -1), Q.NVFP4)
    np.testing.assert_array_equal(got, want)
