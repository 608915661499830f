"""The fp8 KV format (src/format/kv_fp8.h) against independent references: the C
encoder (driven through build/test_kv_fp8) against ml_dtypes' float8_e4m3fn and a
float64 reimplementation of the OCP E4M3 rules written here, over random floats of
every magnitude; and a head's quantization (bf16 values -> amax -> scale -> codes)
against the same steps in numpy float32, bit for bit."""
import os
import pathlib
import subprocess

import ml_dtypes
import numpy as np
import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def tool():
    path = ROOT / os.environ.get("LPX_BUILD", "build") / "test_kv_fp8"
    assert path.exists(), f"{path} missing: build the unit tests"
    return str(path)


def spec_encode(x):
    """OCP E4M3 (e4m3fn) by the book, in float64: the nearest of the 253 finite values
    (ties to the even code), saturating to +-448, NaN -> 0x7F|sign."""
    mags = np.array([m * 2.0 ** -9 for m in range(8)] +
                    [(8 + m) * 2.0 ** (e - 10) for e in range(1, 16) for m in range(8)
                     if not (e == 15 and m == 7)])          # codes 0x00..0x7E in order
    with np.errstate(invalid="ignore"):    # signalling NaNs among the bit patterns
        x = np.asarray(x, dtype=np.float64)
    a = np.minimum(np.abs(x), 448.0)
    i = np.clip(np.searchsorted(mags, a), 1, len(mags) - 1)
    lo, hi = mags[i - 1], mags[i]
    pick_hi = (a - lo > hi - a) | ((a - lo == hi - a) & (i % 2 == 0))
    code = np.where(a <= mags[0], 0, np.where(pick_hi, i, i - 1)).astype(np.uint8)
    code = np.where(np.isnan(x), 0x7F, code)
    return code | np.where(np.signbit(x), 0x80, 0).astype(np.uint8)


def random_floats(n, seed):
    rng = np.random.default_rng(seed)
    mant = rng.uniform(1, 2, n)
    exp = rng.integers(-14, 10, n)                   # around fp8's whole range
    x = (mant * 2.0 ** exp * rng.choice([-1, 1], n)).astype(np.float32)
    raw = rng.integers(0, 2 ** 32, n // 4, dtype=np.uint64).astype(np.uint32).view(np.float32)
    return np.concatenate([x, raw])                  # and arbitrary bit patterns


def c_encode(tool, tmp_path, x):
    src, dst = tmp_path / "in.f32", tmp_path / "out.u8"
    np.asarray(x, dtype="<f4").tofile(src)
    subprocess.run([tool, "encode", src, dst], check=True)
    return np.fromfile(dst, dtype=np.uint8)


def test_encoder_matches_ml_dtypes_and_the_spec(tool, tmp_path):
    x = random_floats(200_000, 1)
    got = c_encode(tool, tmp_path, x)
    want = spec_encode(x)
    assert (got == want).all(), f"{(got != want).sum()} differ from the spec, e.g. " \
        f"{x[got != want][:5]}"
    # ml_dtypes rounds the same way but gives NaN past 448 (no saturation)
    small = np.abs(x) <= 448
    ref = x[small].astype(ml_dtypes.float8_e4m3fn).view(np.uint8)
    assert small.sum() > 150_000 and (got[small] == ref).all()
    assert (got[np.isnan(x)] & 0x7F == 0x7F).all()
    assert (got[np.isinf(x) | (np.abs(x) > 448)] & 0x7F == 0x7E).all()


def test_every_code_decodes_as_ml_dtypes_does(tool, tmp_path):
    codes = np.arange(256, dtype=np.uint8)
    vals = codes.view(ml_dtypes.float8_e4m3fn).astype(np.float32)
    got = c_encode(tool, tmp_path, vals)
    nan = (codes & 0x7F) == 0x7F
    assert (got[~nan] == codes[~nan]).all() and (got[nan] & 0x7F == 0x7F).all()


def test_head_quantization_matches_numpy_float32(tool, tmp_path):
    hd, rows = 64, 2000
    rng = np.random.default_rng(2)
    x = (rng.standard_normal((rows, hd)) * 10.0 ** rng.uniform(-3, 2, (rows, 1)))
    x = x.astype(ml_dtypes.bfloat16).astype(np.float32)   # the values are bf16 first
    x[0] = 0.0
    x[1, 7] = np.inf
    src, dst = tmp_path / "heads.f32", tmp_path / "heads.out"
    x.astype("<f4").tofile(src)
    subprocess.run([tool, "quantize", str(hd), src, dst], check=True)
    out = np.fromfile(dst, dtype=np.uint8).reshape(rows, hd + 4)
    codes, scale = out[:, :hd], out[:, hd:].copy().view("<f4")[:, 0]
    assert scale[0] == 1.0 and (codes[0] == 0).all()
    assert np.isnan(scale[1]) and (codes[1] == 0x7F).all()
    amax = np.abs(x[2:]).max(axis=1)
    assert (scale[2:] == amax / np.float32(448)).all()
    inv = np.float32(448) / amax
    assert (codes[2:] == spec_encode(x[2:] * inv[:, None])).all()
    # what attention reads back: within half an fp8 step of each bf16 value
    back = codes[2:].view(ml_dtypes.float8_e4m3fn).astype(np.float32) * scale[2:, None]
    err = np.abs(back - x[2:]) / amax[:, None]
    assert err.max() <= 2.0 ** -4 and err.mean() < 0.01, (err.max(), err.mean())
