#!/usr/bin/env python3
"""Our tensor types against the `gguf` Python package (an implementation nobody here wrote).

    python3 tests/python/test_quant_reference.py BUILD_DIR

Calls libretrograd.so through ctypes:
  - dequantize: for every type gguf-py can dequantize, random blocks (random bytes, and
    blocks quantized from Gaussian weights) must decode to the same float32 bits
    (any NaN equals any NaN);
  - quantize: for every type both sides can quantize, the same bytes from the same floats
    (Gaussian rows, rows with outliers, constant rows, zeros, tiny values).
Prints PASS/FAIL per type and ends with "N passed, N failed".
"""
import ctypes
import os
import sys
import warnings

import numpy as np
from gguf import quants
from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType as T

# Random blocks hold Inf/NaN scales on purpose; numpy's warnings about them are noise.
warnings.filterwarnings("ignore", category=RuntimeWarning)

build = sys.argv[1] if len(sys.argv) > 1 else "build"
lib = ctypes.CDLL(os.path.join(build, "libretrograd.so"))
lib.rg_dequantize.argtypes = [ctypes.c_uint32, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64, ctypes.c_char_p, ctypes.c_void_p]
lib.rg_dequantize.restype = ctypes.c_int
lib.rg_quantize.argtypes = [ctypes.c_uint32, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64,
                            ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
lib.rg_quantize.restype = ctypes.c_int

passed = failed = 0


def report(ok, name, detail=""):
    global passed, failed
    if ok:
        passed += 1
        print(f"PASS {name}")
    else:
        failed += 1
        print(f"FAIL {name}: {detail}")


def ours_dequant(t, raw: np.ndarray, n: int) -> np.ndarray:
    out = np.empty(n, dtype=np.float32)
    raw = np.ascontiguousarray(raw)
    rc = lib.rg_dequantize(int(t), raw.ctypes.data, out.ctypes.data, n, b"test", None)
    if rc != 0:
        raise RuntimeError(f"rg_dequantize({t.name}) returned {rc}")
    return out


def ours_quant(t, x: np.ndarray) -> np.ndarray:
    rows, n = x.shape
    block, size = GGML_QUANT_SIZES[t]
    out = np.zeros(rows * (n // block) * size, dtype=np.uint8)
    x = np.ascontiguousarray(x, dtype=np.float32)
    rc = lib.rg_quantize(int(t), x.ctypes.data, out.ctypes.data, rows, n, None, b"test", None)
    if rc != 0:
        raise RuntimeError(f"rg_quantize({t.name}) returned {rc}")
    return out


def same_bits(a: np.ndarray, b: np.ndarray):
    a = a.astype(np.float32).view(np.uint32)
    b = b.astype(np.float32).view(np.uint32)
    nan_a = (a & 0x7FFFFFFF) > 0x7F800000
    nan_b = (b & 0x7FFFFFFF) > 0x7F800000
    diff = (a != b) & ~(nan_a & nan_b)
    return int(diff.sum()), np.flatnonzero(diff)[:3]


def inputs(rng, n_per_row):
    rows = [rng.standard_normal(n_per_row).astype(np.float32) * 0.02]
    r = rng.standard_normal(n_per_row).astype(np.float32)
    r[rng.integers(0, n_per_row, 4)] *= 40.0  # outliers
    rows.append(r)
    rows.append(np.full(n_per_row, 0.37, dtype=np.float32))
    rows.append(np.zeros(n_per_row, dtype=np.float32))
    rows.append((rng.standard_normal(n_per_row) * 1e-30).astype(np.float32))
    rows.append(-np.abs(rng.standard_normal(n_per_row)).astype(np.float32))
    rows.append(rng.choice(np.array([-1.0, 0.0, 1.0], dtype=np.float32), n_per_row) * 0.5)  # ternary-like
    return np.stack(rows)


def main():
    rng = np.random.default_rng(1234)
    n_per_row = 1024
    x = inputs(rng, n_per_row)
    for t in T:
        if t not in quants._type_traits or t in (T.F32, T.F16):
            continue
        cls = quants._type_traits[t]
        block, size = GGML_QUANT_SIZES[t]
        if n_per_row % block:
            continue
        n_blocks = 4096 if block == 32 else 512
        name = t.name.lower()
        # dequantize random bytes
        raw = rng.integers(0, 256, n_blocks * size, dtype=np.uint8)
        try:
            ref = quants.dequantize(raw, t).reshape(-1)
            got = ours_dequant(t, raw, n_blocks * block)
            bad, where = same_bits(ref, got)
            report(bad == 0, f"dequantize {name} random blocks ({n_blocks})",
                   f"{bad} values differ, first at {list(where)}: ours {got[where]} gguf {ref[where]}")
        except Exception as e:  # noqa: BLE001
            report(False, f"dequantize {name} random blocks", repr(e))
        # quantize: bytes equal where both sides quantize
        if "quantize_blocks" in cls.__dict__:
            try:
                ref_q = quants.quantize(x, t).reshape(-1)
                got_q = ours_quant(t, x)
                nd = int((ref_q != got_q).sum())
                report(nd == 0, f"quantize {name} == gguf ({x.shape[0]} rows of {n_per_row})",
                       f"{nd} of {got_q.size} bytes differ")
                ref_d = quants.dequantize(ref_q, t).reshape(-1)
                got_d = ours_dequant(t, got_q, x.size)
                bad, where = same_bits(ref_d, got_d)
                report(bad == 0, f"dequantize {name} of quantized rows", f"{bad} values differ at {list(where)}")
            except Exception as e:  # noqa: BLE001
                report(False, f"quantize {name}", repr(e))
    print(f"{passed} passed, {failed} failed")
    return 0 if failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
