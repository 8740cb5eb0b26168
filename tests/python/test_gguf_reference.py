#!/usr/bin/env python3
"""Independent check of our GGUF reader and writer against the reference `gguf` package.

Usage: python3 tests/python/test_gguf_reference.py BUILD_DIR
       (BUILD_DIR holds the `retrograd` binary; needs gguf==0.19.0 and numpy,
        see tests/python/requirements.txt)

Three groups of checks, each printed as `PASS name` or `FAIL name: details`, then
a final line `N passed, N failed`; the exit status is 1 when any check failed.

1. make-tiny fixtures (qwen2 f32, f16, bf16, both f32 twins, tied, another seed, and
   two quantized ones: q8_0 and the q4_k_m mixture)
   read by gguf.GGUFReader and by `retrograd info --json --full` must agree on
   every key (order, value type, element type, value), every tensor (name, type,
   ggml shape, data offset, byte size, FNV-1a 64 of the raw bytes, value sum),
   and must look like a real qwen2 GGUF (hyperparameters, gpt2 tokenizer,
   ChatML specials, merges, tensor types and shapes).
   Comparison rules: strings and integers exactly; f32 values after rounding
   the printed decimal to np.float32, bit for bit (NaN matches any NaN); f64
   values bit for bit; tensor sums (double, summed in file order) with a
   relative tolerance of 1e-9.
2. A file written by gguf.GGUFWriter holding every metadata value type, arrays
   of each (empty ones too), and tensors of many types and ranks (F32, F16,
   BF16, F64, I8..I64 and raw Q4_0/Q8_0/Q4_K blocks, 1-D..4-D), plus a second
   file with general.alignment = 64: the CLI must report exactly what was written.
3. make-tiny is deterministic: the same arguments give byte-identical files,
   another seed gives different bytes.

Only the standard library, gguf and numpy; no pytest.
"""

import json
import math
import os
import subprocess
import sys
import tempfile
import time
import traceback

import numpy as np

try:
    import gguf
    from gguf import GGMLQuantizationType as QT
    from gguf import GGUFReader, GGUFWriter
    from gguf import GGUFValueType as VT
except ImportError as e:  # pragma: no cover - environment problem, reported plainly
    print(f"FAIL import gguf: {e} (pip install -r tests/python/requirements.txt)")
    print("0 passed, 1 failed")
    sys.exit(1)

SUM_REL_TOL = 1e-9

# ---------------------------------------------------------------------------
# Small helpers

# The offset basis of `retrograd info` (tools/cli/cmd_info.c), as the project defines it.
# Standard FNV-1a 64: offset basis 0xcbf29ce484222325, prime 0x100000001b3.
FNV_OFFSET = 0xCBF29CE484222325
FNV_PRIME = 1099511628211


def fnv1a64_many(bufs):
    """FNV-1a 64 of each uint8 array in bufs, vectorised across the buffers.

    FNV is sequential within a buffer, so the buffers run side by side as lanes:
    one numpy step per byte position, with the lanes sorted by length so the
    active ones are always a prefix.
    """
    n = len(bufs)
    if n == 0:
        return []
    lens = np.array([len(b) for b in bufs], dtype=np.int64)
    order = np.argsort(-lens, kind="stable")
    slens = lens[order]
    maxlen = int(slens[0])
    mat = np.zeros((maxlen, n), dtype=np.uint8)  # byte position major: mat[j, :k] is contiguous
    for lane, idx in enumerate(order):
        if lens[idx]:
            mat[: lens[idx], lane] = bufs[idx]
    h = np.full(n, FNV_OFFSET, dtype=np.uint64)
    prime = np.uint64(FNV_PRIME)
    start = 0
    # Distinct lengths, ascending: between two of them the number of active lanes is fixed.
    for end in sorted(set(int(x) for x in slens if x > 0)):
        k = int(np.count_nonzero(slens >= end))
        hk = h[:k]
        for j in range(start, end):
            hk ^= mat[j, :k]
            hk *= prime
        start = end
    out = [0] * n
    for lane, idx in enumerate(order):
        out[idx] = int(h[lane])
    return out


def fnv1a64_slow(data):
    h = FNV_OFFSET
    for b in data:
        h = ((h ^ b) * FNV_PRIME) & 0xFFFFFFFFFFFFFFFF
    return h


VTYPE_ID = {"u8": 0, "i8": 1, "u16": 2, "i16": 3, "u32": 4, "i32": 5, "f32": 6, "bool": 7,
            "string": 8, "array": 9, "u64": 10, "i64": 11, "f64": 12}
VTYPE_NAME = {v: k for k, v in VTYPE_ID.items()}
NP_OF_VTYPE = {0: "<u1", 1: "<i1", 2: "<u2", 3: "<i2", 4: "<u4", 5: "<i4", 6: "<f4", 7: "<u1",
               10: "<u8", 11: "<i8", 12: "<f8"}
INT_VTYPES = {0, 1, 2, 3, 4, 5, 10, 11}

# Element decoders of the plain tensor types: raw uint8 -> float64 values in file order.
def decode_tensor(type_id, raw):
    if type_id == QT.F32:
        return raw.view("<f4").astype(np.float64)
    if type_id == QT.F16:
        return raw.view("<f2").astype(np.float64)
    if type_id == QT.BF16:
        return (raw.view("<u2").astype(np.uint32) << np.uint32(16)).view("<f4").astype(np.float64)
    if type_id == QT.F64:
        return raw.view("<f8").copy()
    if type_id == QT.I8:
        return raw.view("<i1").astype(np.float64)
    if type_id == QT.I16:
        return raw.view("<i2").astype(np.float64)
    if type_id == QT.I32:
        return raw.view("<i4").astype(np.float64)
    if type_id == QT.I64:
        return raw.view("<i8").astype(np.float64)
    return None  # quantized: no sum


def seq_sum(vals):
    """Sum in double, left to right, as the CLI does (cumsum is sequential)."""
    if len(vals) == 0:
        return 0.0
    with np.errstate(invalid="ignore", over="ignore"):
        return float(np.cumsum(vals)[-1])


class JInt(int):
    """A JSON integer that remembers its text (so "-0" keeps its sign)."""

    def __new__(cls, text):
        o = int.__new__(cls, int(text))
        o.text = text
        return o


class JFloat(float):
    def __new__(cls, text):
        o = float.__new__(cls, float(text))
        o.text = text
        return o


def parse_json(text):
    return json.loads(text, parse_int=JInt, parse_float=JFloat)


def json_number(jv):
    """A printed number (or "nan"/"inf"/"-inf") as a Python float from its exact text."""
    if isinstance(jv, bool):
        raise ValueError(f"expected a number, got {jv!r}")
    if isinstance(jv, str):
        if jv in ("nan", "inf", "-inf"):
            return float(jv)
        raise ValueError(f"expected a number, got string {jv!r}")
    if isinstance(jv, (JInt, JFloat)):
        return float(jv.text)
    if isinstance(jv, (int, float)):
        return float(jv)
    raise ValueError(f"expected a number, got {jv!r}")


def same_float(a, b, dtype):
    """Bitwise equality after rounding both to dtype; any NaN equals any NaN."""
    fa, fb = np.array([a], dtype=dtype), np.array([b], dtype=dtype)
    if np.isnan(fa[0]) or np.isnan(fb[0]):
        return bool(np.isnan(fa[0]) and np.isnan(fb[0]))
    bits = "<u4" if np.dtype(dtype).itemsize == 4 else "<u8"
    return fa.view(bits)[0] == fb.view(bits)[0]


def sums_agree(json_sum, expected):
    try:
        got = json_number(json_sum)
    except ValueError as e:
        return False, str(e)
    if math.isnan(expected) or math.isnan(got):
        return math.isnan(expected) and math.isnan(got), f"{got!r} vs {expected!r}"
    if math.isinf(expected) or math.isinf(got):
        return got == expected, f"{got!r} vs {expected!r}"
    ok = abs(got - expected) <= SUM_REL_TOL * max(abs(got), abs(expected))
    return ok, f"{got!r} vs {expected!r}"


def cmp_elem(vtype, jv, rv):
    """Compares one printed element jv with a reference element rv; returns None or a message."""
    if vtype == VT.STRING:
        expected = rv.decode("utf-8", errors="replace") if isinstance(rv, (bytes, bytearray)) else rv
        if not isinstance(jv, str) or jv != expected:
            return f"string {jv!r} != {expected!r}"
        return None
    if vtype == VT.BOOL:
        if not isinstance(jv, bool) or jv != bool(rv):
            return f"bool {jv!r} != {bool(rv)!r}"
        return None
    if vtype in INT_VTYPES:
        if isinstance(jv, bool) or not isinstance(jv, int) or int(jv) != int(rv):
            return f"int {jv!r} != {int(rv)}"
        return None
    if vtype in (VT.FLOAT32, VT.FLOAT64):
        dtype = np.float32 if vtype == VT.FLOAT32 else np.float64
        try:
            got = json_number(jv)
        except ValueError as e:
            return str(e)
        if vtype == VT.FLOAT32 and isinstance(jv, str) and math.isfinite(float(rv)):
            return f"finite f32 {float(rv)!r} printed as {jv!r}"
        if not same_float(got, rv, dtype):
            return f"{VTYPE_NAME[int(vtype)]} {getattr(jv, 'text', jv)!r} != {dtype(rv)!r}"
        return None
    return f"unexpected value type {vtype}"


# ---------------------------------------------------------------------------
# The reference view of a file, from gguf.GGUFReader


class RefKV:
    def __init__(self, key, vtype, etype, values):
        self.key, self.vtype, self.etype, self.values = key, vtype, etype, values

    @property
    def count(self):
        return len(self.values)


def reader_kvs(reader):
    """The metadata pairs of a GGUFReader in file order, values as numpy arrays or lists of bytes."""
    out = []
    fields = list(reader.fields.values())
    # The reader puts three pseudo-fields first: GGUF.version, GGUF.tensor_count, GGUF.kv_count.
    assert [f.name for f in fields[:3]] == ["GGUF.version", "GGUF.tensor_count", "GGUF.kv_count"]
    for f in fields[3:]:
        p = f.parts
        vtype = int(p[2][0])
        etype = None
        if vtype == VT.ARRAY:
            etype = int(p[3][0])
            n = int(p[4][0])
            if etype == VT.STRING:
                values = [p[i].tobytes() for i in f.data]
            elif n == 0:
                values = np.empty(0, dtype=NP_OF_VTYPE[etype])
            else:
                values = np.concatenate([np.asarray(p[i]).reshape(-1) for i in f.data]).astype(NP_OF_VTYPE[etype])
            if len(values) != n:
                raise AssertionError(f"{f.name}: reader gave {len(values)} elements, count says {n}")
        elif vtype == VT.STRING:
            values = [p[f.data[0]].tobytes()]
        else:
            values = np.asarray(p[f.data[0]]).reshape(-1).astype(NP_OF_VTYPE[vtype])
        out.append(RefKV(f.name, vtype, etype, values))
    return out


class RefTensor:
    def __init__(self, name, type_id, shape, offset, raw):
        self.name, self.type_id, self.shape, self.offset, self.raw = name, type_id, shape, offset, raw


def reader_tensors(reader):
    out = []
    for t in reader.tensors:
        raw = np.ascontiguousarray(t.data).reshape(-1).view(np.uint8)
        if raw.size != t.n_bytes:
            raise AssertionError(f"{t.name}: reader data holds {raw.size} bytes, n_bytes is {t.n_bytes}")
        out.append(RefTensor(t.name, int(t.tensor_type), [int(x) for x in t.shape],
                             int(t.data_offset) - int(reader.data_offset), raw))
    return out


# ---------------------------------------------------------------------------
# Comparing the CLI's report with a reference


def compare_kvs(info, ref_kvs, errs):
    meta = info["metadata"]
    got_keys = [m["key"] for m in meta]
    want_keys = [k.key for k in ref_kvs]
    if got_keys != want_keys:
        errs.append(f"key order differs: cli {got_keys[:8]}... vs reference {want_keys[:8]}...")
        return
    for m, ref in zip(meta, ref_kvs):
        key = ref.key
        if VTYPE_ID.get(m["type"]) != ref.vtype:
            errs.append(f"{key}: type {m['type']} != {VTYPE_NAME.get(ref.vtype, ref.vtype)}")
            continue
        if ref.vtype == VT.ARRAY:
            if VTYPE_ID.get(m.get("elem_type")) != ref.etype:
                errs.append(f"{key}: elem_type {m.get('elem_type')} != {VTYPE_NAME.get(ref.etype, ref.etype)}")
                continue
            vals = m["value"]
            if not isinstance(vals, list) or len(vals) != ref.count:
                errs.append(f"{key}: {len(vals) if isinstance(vals, list) else vals!r} elements, expected {ref.count}")
                continue
            etype = ref.etype
        else:
            if "elem_type" in m:
                errs.append(f"{key}: scalar has an elem_type")
            vals = [m["value"]]
            etype = ref.vtype
        bad = 0
        for i, (jv, rv) in enumerate(zip(vals, ref.values)):
            msg = cmp_elem(etype, jv, rv)
            if msg:
                bad += 1
                if bad <= 3:
                    errs.append(f"{key}[{i}]: {msg}")
        if bad > 3:
            errs.append(f"{key}: {bad} elements differ in all")


def compare_tensors(info, ref_tensors, errs, hashes=None):
    ts = info["tensors"]
    if [t["name"] for t in ts] != [t.name for t in ref_tensors]:
        errs.append(f"tensor names/order differ: cli {[t['name'] for t in ts][:6]} vs "
                    f"reference {[t.name for t in ref_tensors][:6]}")
        return
    if hashes is None:
        hashes = fnv1a64_many([t.raw for t in ref_tensors])
    for jt, rt, h in zip(ts, ref_tensors, hashes):
        n = rt.name
        if jt["type_id"] != rt.type_id:
            errs.append(f"{n}: type_id {jt['type_id']} != {rt.type_id}")
        if jt["type"].lower() != QT(rt.type_id).name.lower():  # ggml spells some mixed case: q4_K
            errs.append(f"{n}: type name {jt['type']!r} != {QT(rt.type_id).name!r}")
        if [int(x) for x in jt["shape"]] != rt.shape:
            errs.append(f"{n}: shape {jt['shape']} != {rt.shape}")
        if jt["offset"] != rt.offset:
            errs.append(f"{n}: offset {jt['offset']} != {rt.offset}")
        if jt["bytes"] != rt.raw.size:
            errs.append(f"{n}: bytes {jt['bytes']} != {rt.raw.size}")
        if jt.get("fnv1a64") != f"{h:016x}":
            errs.append(f"{n}: fnv1a64 {jt.get('fnv1a64')} != {h:016x}")
        vals = decode_tensor(rt.type_id, rt.raw)
        if vals is None:
            if "sum" in jt:
                errs.append(f"{n}: quantized tensor has a sum {jt['sum']!r}")
        elif "sum" not in jt:
            errs.append(f"{n}: no sum printed")
        else:
            ok, detail = sums_agree(jt["sum"], seq_sum(vals))
            if not ok:
                errs.append(f"{n}: sum {detail} (rel tol {SUM_REL_TOL:g})")


def compare_file(path, info, reader, errs, tensors=None, hashes=None):
    """The CLI's report of path against gguf.GGUFReader's reading of it.

    tensors and hashes: reader_tensors(reader) and their FNV values, when already computed.
    """
    kvs = reader_kvs(reader)
    if tensors is None:
        tensors = reader_tensors(reader)
    version = int(reader.fields["GGUF.version"].parts[0][0])
    n_kv = int(reader.fields["GGUF.kv_count"].parts[0][0])
    n_t = int(reader.fields["GGUF.tensor_count"].parts[0][0])
    for field, want in (("version", version), ("alignment", int(reader.alignment)),
                        ("data_start", int(reader.data_offset)), ("file_size", os.path.getsize(path)),
                        ("n_parameters", sum(int(t.n_elements) for t in reader.tensors)),
                        ("tensor_bytes", sum(int(t.n_bytes) for t in reader.tensors))):
        if info.get(field) != want:
            errs.append(f"{field}: cli {info.get(field)!r} != {want!r}")
    if len(info["metadata"]) != n_kv or len(kvs) != n_kv:
        errs.append(f"kv count: cli {len(info['metadata'])}, reader {len(kvs)}, header {n_kv}")
    if len(info["tensors"]) != n_t:
        errs.append(f"tensor count: cli {len(info['tensors'])}, header {n_t}")
    compare_kvs(info, kvs, errs)
    compare_tensors(info, tensors, errs, hashes)
    return kvs, tensors


# ---------------------------------------------------------------------------
# Running the CLI


class Cli:
    def __init__(self, build_dir):
        self.exe = os.path.join(build_dir, "retrograd")
        if not os.access(self.exe, os.X_OK):
            raise FileNotFoundError(f"{self.exe} is not an executable (build first)")

    def run(self, *args):
        p = subprocess.run([self.exe, *args], capture_output=True, text=True, timeout=60)
        if p.returncode != 0:
            raise RuntimeError(f"retrograd {' '.join(args)} exited {p.returncode}: {p.stderr.strip()[:400]}")
        return p.stdout

    def make_tiny(self, out, *args):
        self.run("make-tiny", "--arch", "qwen2", "-o", out, *args)

    def info(self, path):
        return parse_json(self.run("info", path, "--json", "--full"))


# ---------------------------------------------------------------------------
# Part 1: make-tiny fixtures

QWEN2_KEYS = ["qwen2.block_count", "qwen2.context_length", "qwen2.embedding_length",
              "qwen2.feed_forward_length", "qwen2.attention.head_count", "qwen2.attention.head_count_kv",
              "qwen2.rope.freq_base", "qwen2.attention.layer_norm_rms_epsilon"]
CONTROL = 3
# name, make-tiny arguments, matrix storage type (None: a quantized mixture), tied, seed,
# general.file_type (llama_ftype)
FIXTURES = [
    ("qwen2-f32", ["--type", "f32"], QT.F32, False, 42, 0),
    ("qwen2-f16", ["--type", "f16"], QT.F16, False, 42, 1),
    ("qwen2-bf16", ["--type", "bf16"], QT.BF16, False, 42, 32),
    ("qwen2-f16-twin-f32", ["--type", "f16", "--twin-f32"], QT.F32, False, 42, 0),
    ("qwen2-bf16-twin-f32", ["--type", "bf16", "--twin-f32"], QT.F32, False, 42, 0),
    ("qwen2-f32-tied", ["--type", "f32", "--tied"], QT.F32, True, 42, 0),
    ("qwen2-f16-seed7", ["--type", "f16", "--seed", "7"], QT.F16, False, 7, 1),
    # Quantized: raw blocks for the checksum, no sum; q4_k_m mixes q4_K and q6_K.
    ("qwen2-q8_0", ["--type", "q8_0"], QT.Q8_0, False, 42, 7),
    ("qwen2-q4_k_m", ["--type", "q4_k_m"], None, False, 42, 15),
]


def check_qwen2_structure(kvs, tensors, mtype, tied, seed, file_type, errs):
    kv = {k.key: k for k in kvs}

    def scalar(key):
        k = kv.get(key)
        if k is None:
            errs.append(f"missing key {key}")
            return None
        if k.vtype == VT.STRING:
            return k.values[0].decode("utf-8")
        if k.vtype == VT.ARRAY:
            errs.append(f"{key} is an array")
            return None
        return k.values[0].item()

    if scalar("general.architecture") != "qwen2":
        errs.append(f"general.architecture is {scalar('general.architecture')!r}")
    hp = {}
    for key in QWEN2_KEYS:
        if key not in kv:
            errs.append(f"missing key {key}")
            continue
        want = VT.FLOAT32 if key.endswith(("freq_base", "epsilon")) else None
        k = kv[key]
        if want is not None and k.vtype != want:
            errs.append(f"{key} has type {VTYPE_NAME[k.vtype]}, expected f32")
        if want is None and k.vtype not in INT_VTYPES:
            errs.append(f"{key} has type {VTYPE_NAME[k.vtype]}, expected an integer")
        hp[key.split("qwen2.")[1]] = k.values[0].item()
    ft = scalar("general.file_type")
    if ft != file_type:
        errs.append(f"general.file_type {ft} != {file_type}")
    quantized = mtype is None or gguf.GGML_QUANT_SIZES[mtype][0] > 1
    if quantized and scalar("general.quantization_version") != 2:
        errs.append("quantized file without general.quantization_version = 2")
    if scalar("general.seed") != seed:
        errs.append(f"general.seed {scalar('general.seed')} != {seed}")
    if scalar("tokenizer.ggml.model") != "gpt2":
        errs.append(f"tokenizer.ggml.model is {scalar('tokenizer.ggml.model')!r}")

    toks, ttype, merges = kv.get("tokenizer.ggml.tokens"), kv.get("tokenizer.ggml.token_type"), kv.get("tokenizer.ggml.merges")
    if toks is None or ttype is None or merges is None:
        errs.append("tokenizer.ggml.tokens/token_type/merges missing")
        return
    if toks.etype != VT.STRING or merges.etype != VT.STRING or ttype.etype not in INT_VTYPES:
        errs.append("tokenizer arrays have the wrong element types")
        return
    tokens = [t.decode("utf-8") for t in toks.values]
    if len(set(tokens)) != len(tokens):
        errs.append("duplicate tokens")
    if ttype.count != toks.count:
        errs.append(f"{toks.count} tokens but {ttype.count} token types")
    index = {t: i for i, t in enumerate(tokens)}
    for special in ("<|endoftext|>", "<|im_start|>", "<|im_end|>"):
        if special not in index:
            errs.append(f"special token {special} missing")
        elif int(ttype.values[index[special]]) != CONTROL:
            errs.append(f"{special} has token type {int(ttype.values[index[special]])}, expected CONTROL (3)")
    eos = scalar("tokenizer.ggml.eos_token_id")
    if eos is None or not (0 <= eos < len(tokens)) or tokens[eos] != "<|im_end|>":
        errs.append(f"eos id {eos} does not point at <|im_end|>")
    for key in ("tokenizer.ggml.bos_token_id", "tokenizer.ggml.padding_token_id"):
        if key in kv and not (0 <= kv[key].values[0].item() < len(tokens)):
            errs.append(f"{key} out of range")
    if merges.count == 0:
        errs.append("no merges")
    bad = 0
    for m in merges.values:
        s = m.decode("utf-8")
        parts = s.split(" ")
        if len(parts) != 2 or not all(p in index for p in parts) or (parts[0] + parts[1]) not in index:
            bad += 1
            if bad <= 3:
                errs.append(f"merge {s!r}: parts or result not in the token list")
    if bad > 3:
        errs.append(f"{bad} bad merges in all")
    tmpl = scalar("tokenizer.chat_template")
    if not tmpl or "<|im_start|>" not in tmpl or "<|im_end|>" not in tmpl:
        errs.append("chat template is not ChatML")

    # Tensors: names, types and shapes from the hyperparameters.
    by_name = {t.name: t for t in tensors}
    d, L = hp.get("embedding_length"), hp.get("block_count")
    H, Hkv, F = hp.get("attention.head_count"), hp.get("attention.head_count_kv"), hp.get("feed_forward_length")
    if None in (d, L, H, Hkv, F):
        return
    V, Dh = len(tokens), d // H
    want = {"token_embd.weight": [d, V], "output_norm.weight": [d]}
    if not tied:
        want["output.weight"] = [d, V]
    for il in range(L):
        p = f"blk.{il}."
        want.update({p + "attn_norm.weight": [d], p + "attn_q.weight": [d, H * Dh], p + "attn_q.bias": [H * Dh],
                     p + "attn_k.weight": [d, Hkv * Dh], p + "attn_k.bias": [Hkv * Dh],
                     p + "attn_v.weight": [d, Hkv * Dh], p + "attn_v.bias": [Hkv * Dh],
                     p + "attn_output.weight": [H * Dh, d], p + "ffn_norm.weight": [d],
                     p + "ffn_gate.weight": [d, F], p + "ffn_up.weight": [d, F], p + "ffn_down.weight": [F, d]})
    if tied and "output.weight" in by_name:
        errs.append("tied fixture has output.weight")
    if set(by_name) != set(want):
        errs.append(f"tensor set differs: extra {sorted(set(by_name) - set(want))}, "
                    f"missing {sorted(set(want) - set(by_name))}")
    for name, shape in want.items():
        t = by_name.get(name)
        if t is None:
            continue
        if t.shape != shape:
            errs.append(f"{name}: shape {t.shape}, expected {shape}")
        want_type = QT.F32 if len(shape) == 1 else mtype
        if want_type is None:  # a mixture: any block-quantized type
            if gguf.GGML_QUANT_SIZES[QT(t.type_id)][0] == 1:
                errs.append(f"{name}: type {QT(t.type_id).name}, expected a quantized type")
        elif t.type_id != want_type:
            errs.append(f"{name}: type {QT(t.type_id).name}, expected {QT(want_type).name}")
        vals = decode_tensor(t.type_id, t.raw)
        if vals is not None and not np.all(np.isfinite(vals)):
            errs.append(f"{name}: non-finite values")


def check_shape_order(reader, errs):
    """GGUFReader's tensor.shape is ggml order (ne0 first); its data array is numpy order (reversed)."""
    t = next(t for t in reader.tensors if t.name == "token_embd.weight")
    d = int(reader.fields["qwen2.embedding_length"].parts[-1][0])
    n_vocab = len(reader.fields["tokenizer.ggml.tokens"].data)
    if [int(x) for x in t.shape] != [d, n_vocab]:
        errs.append(f"token_embd.weight reader shape {list(t.shape)}, expected ggml [{d}, {n_vocab}]")
    if t.tensor_type in (QT.F32, QT.F16) and tuple(t.data.shape) != (n_vocab, d):
        errs.append(f"token_embd.weight data shape {t.data.shape}, expected numpy ({n_vocab}, {d})")


def part1(cli, tmp, report):
    # Write and read every fixture first, so the FNV of all their tensors runs as one batch.
    loaded, failed = {}, {}
    for name, args, mtype, tied, seed, file_type in FIXTURES:
        path = os.path.join(tmp, name + ".gguf")
        try:
            cli.make_tiny(path, *args)
            info = cli.info(path)
            reader = GGUFReader(path)
            loaded[name] = (path, info, reader, reader_tensors(reader))
        except Exception as e:  # noqa: BLE001 - reported as a failure below
            failed[name] = f"{type(e).__name__}: {e}"
    all_hashes = fnv1a64_many([t.raw for v in loaded.values() for t in v[3]])

    parsed = {}
    at = 0
    for name, args, mtype, tied, seed, file_type in FIXTURES:
        errs = []
        if name in failed:
            errs.append(failed[name])
        else:
            path, info, reader, tensors = loaded[name]
            hashes, at = all_hashes[at:at + len(tensors)], at + len(tensors)
            try:
                kvs, tensors = compare_file(path, info, reader, errs, tensors, hashes)
                parsed[name] = (kvs, tensors)
                if name == "qwen2-f32":
                    check_shape_order(reader, errs)
            except Exception as e:  # noqa: BLE001 - reported as a failure
                errs.append(f"{type(e).__name__}: {e} [{traceback.format_exc(limit=2).splitlines()[-2].strip()}]")
        report(f"cli-vs-gguf-reader {name} (values exact, sums rel tol {SUM_REL_TOL:g})", errs)
        if name in parsed:
            errs = []
            try:
                check_qwen2_structure(*parsed[name], mtype, tied, seed, file_type, errs)
            except Exception as e:  # noqa: BLE001
                errs.append(f"{type(e).__name__}: {e}")
            report(f"qwen2-structure {name}", errs)

    # The f32 twins hold the half fixtures' values exactly. (The tied file is not compared by
    # value: one random stream per tensor in creation order, so dropping output.weight shifts
    # the streams of the tensors after it.)
    for half, twin in (("qwen2-f16", "qwen2-f16-twin-f32"), ("qwen2-bf16", "qwen2-bf16-twin-f32")):
        errs = []
        if half not in parsed or twin not in parsed:
            errs.append("fixture missing")
        else:
            a = {t.name: t for t in parsed[half][1]}
            for t in parsed[twin][1]:
                u = a.get(t.name)
                if u is None:
                    errs.append(f"{t.name} missing in {half}")
                    continue
                va, vb = decode_tensor(u.type_id, u.raw), decode_tensor(t.type_id, t.raw)
                if va.shape != vb.shape or not np.array_equal(va, vb):
                    errs.append(f"{t.name}: values differ")
            if set(a) != {t.name for t in parsed[twin][1]}:
                errs.append("tensor sets differ")
        report(f"same-values {twin} == {half}", errs)

    errs = []
    if "qwen2-f32" not in parsed or "qwen2-f32-tied" not in parsed:
        errs.append("fixture missing")
    else:
        a = {t.name: t for t in parsed["qwen2-f32"][1]}
        b = {t.name: t for t in parsed["qwen2-f32-tied"][1]}
        if set(a) - set(b) != {"output.weight"} or set(b) - set(a):
            errs.append(f"tensor sets differ by {sorted(set(a) ^ set(b))}, expected output.weight only")
        if "token_embd.weight" in b and not np.array_equal(a["token_embd.weight"].raw, b["token_embd.weight"].raw):
            errs.append("token_embd.weight differs")
    report("tied qwen2-f32-tied == qwen2-f32 minus output.weight", errs)


# ---------------------------------------------------------------------------
# Part 2: a file written by gguf.GGUFWriter


class Writer(GGUFWriter):
    """GGUFWriter that can also write empty arrays (gguf 0.19.0 refuses them)."""

    def _pack_val(self, val, vtype, add_vtype, sub_type=None):
        if vtype == VT.ARRAY and len(val) == 0:
            if sub_type is None:
                raise ValueError("an empty array needs an explicit element type")
            out = self._pack("I", vtype) if add_vtype else b""
            return out + self._pack("I", sub_type) + self._pack("Q", 0)
        return super()._pack_val(val, vtype, add_vtype, sub_type)


F32_SPECIAL = [0.0, -0.0, 1.0, -2.5, 0.1, 3.4028234663852886e38, -3.4028234663852886e38, 1.1754943508222875e-38,
               1.401298464324817e-45, float("inf"), float("-inf"), float("nan"), 1e-6, 123456.789]
F64_SPECIAL = [0.0, -0.0, 0.1, -1e-300, 5e-324, 1.7976931348623157e308, math.pi, float("inf"),
               float("-inf"), float("nan"), 2.0 ** 53 + 1]

# key, value type, element type (arrays), values (list; one element for scalars)
METADATA = [
    ("test.u8", VT.UINT8, None, [255]),
    ("test.i8", VT.INT8, None, [-128]),
    ("test.u16", VT.UINT16, None, [65535]),
    ("test.i16", VT.INT16, None, [-32768]),
    ("test.u32", VT.UINT32, None, [4294967295]),
    ("test.i32", VT.INT32, None, [-2147483648]),
    ("test.f32", VT.FLOAT32, None, [0.1]),
    ("test.f32_neg_zero", VT.FLOAT32, None, [-0.0]),
    ("test.f32_nan", VT.FLOAT32, None, [float("nan")]),
    ("test.f32_inf", VT.FLOAT32, None, [float("inf")]),
    ("test.f32_denormal", VT.FLOAT32, None, [1.401298464324817e-45]),
    ("test.bool_true", VT.BOOL, None, [True]),
    ("test.bool_false", VT.BOOL, None, [False]),
    ("test.string", VT.STRING, None, ["hello"]),
    ("test.string_empty", VT.STRING, None, [""]),
    ("test.string_unicode", VT.STRING, None, ["h\u00e9llo w\u00f6rld \U0001F999 \u2014 \u65e5\u672c\u8a9e \U0001F600"]),
    ("test.string_escapes", VT.STRING, None, ["tab\there \"quoted\" back\\slash\nnew line\r\x01\x1f\x7f end"]),
    ("test.string_invalid_utf8", VT.STRING, None, [b"ok\xff\xfe!"]),
    ("test.u64", VT.UINT64, None, [2 ** 64 - 1]),
    ("test.i64", VT.INT64, None, [-(2 ** 63)]),
    ("test.f64", VT.FLOAT64, None, [0.1]),
    ("test.f64_max", VT.FLOAT64, None, [1.7976931348623157e308]),
    ("test.arr.u8", VT.ARRAY, VT.UINT8, [0, 1, 127, 128, 255]),
    ("test.arr.i8", VT.ARRAY, VT.INT8, [-128, -1, 0, 1, 127]),
    ("test.arr.u16", VT.ARRAY, VT.UINT16, [0, 1, 65535, 4660]),
    ("test.arr.i16", VT.ARRAY, VT.INT16, [-32768, -1, 0, 32767]),
    ("test.arr.u32", VT.ARRAY, VT.UINT32, [0, 1, 4294967295, 305419896]),
    ("test.arr.i32", VT.ARRAY, VT.INT32, [-2147483648, -1, 0, 2147483647] + list(range(-20, 20))),
    ("test.arr.f32", VT.ARRAY, VT.FLOAT32, F32_SPECIAL),
    ("test.arr.bool", VT.ARRAY, VT.BOOL, [True, False, False, True]),
    ("test.arr.string", VT.ARRAY, VT.STRING, ["a", "", "\U0001F999 llama", "x y", "\u00fcber", "q\"uote"]),
    ("test.arr.u64", VT.ARRAY, VT.UINT64, [0, 1, 2 ** 64 - 1, 2 ** 63]),
    ("test.arr.i64", VT.ARRAY, VT.INT64, [-(2 ** 63), -1, 0, 2 ** 63 - 1]),
    ("test.arr.f64", VT.ARRAY, VT.FLOAT64, F64_SPECIAL),
    ("test.arr.empty_u32", VT.ARRAY, VT.UINT32, []),
    ("test.arr.empty_string", VT.ARRAY, VT.STRING, []),
    ("test.arr.one_f64", VT.ARRAY, VT.FLOAT64, [1.5]),
    ("general.name", VT.STRING, None, ["gguf-py reference file"]),
]


def make_tensor_specs(rng):
    """(name, type id, ggml shape, numpy array handed to the writer, raw_dtype or None)."""
    specs = []

    def add(name, type_id, arr, raw_dtype=None, ggml_shape=None):
        if ggml_shape is None:
            ggml_shape = list(reversed(arr.shape))
        specs.append((name, type_id, ggml_shape, arr, raw_dtype))

    add("f32.4d", QT.F32, rng.standard_normal((2, 3, 4, 5)).astype(np.float32))
    add("f16.2d", QT.F16, rng.standard_normal((3, 16)).astype(np.float16))
    bf = (rng.standard_normal((4, 8)).astype(np.float32).view(np.uint32) >> np.uint32(16)).astype(np.uint16)
    add("bf16.2d", QT.BF16, bf, raw_dtype=QT.BF16)
    add("i8.1d.odd", QT.I8, rng.integers(-128, 128, size=7, dtype=np.int8))
    add("i16.3d", QT.I16, rng.integers(-32768, 32768, size=(3, 2, 4), dtype=np.int16))
    add("empty.f32", QT.F32, np.zeros(0, dtype=np.float32))
    add("i32.trailing1", QT.I32, rng.integers(-2 ** 31, 2 ** 31, size=(1, 8), dtype=np.int32))
    add("i64.1d", QT.I64, np.array([-(2 ** 62), 5, 2 ** 62, -7, 3], dtype=np.int64))
    add("f64.2d", QT.F64, rng.standard_normal((3, 3)))
    # Q8_0: blocks of 34 bytes (f16 d, 32 x i8) along ne0 = 64 -> two blocks per row, 3 rows.
    q8 = rng.integers(0, 256, size=(3, 2 * 34), dtype=np.uint8)
    for b in range(2):  # a sane scale in each block
        q8[:, b * 34:b * 34 + 2] = np.frombuffer(np.float16(0.0125).tobytes(), np.uint8)
    add("q8_0.2d", QT.Q8_0, q8, raw_dtype=QT.Q8_0, ggml_shape=[64, 3])
    # Q4_0: the block of the spec's §7.1 and an all-zero block, as in its §1.13 example.
    q40 = np.array([[0xd8, 0xa7, 0x89, 0x56, 0x72, 0x0e, 0xbb, 0x28, 0xf8, 0xfc, 0xf3, 0xa0, 0x65, 0x39, 0x92, 0xe3, 0x38, 0x3e],
                    [0x00, 0x80] + [0x88] * 16], dtype=np.uint8)
    add("q4_0.2d", QT.Q4_0, q40, raw_dtype=QT.Q4_0, ggml_shape=[32, 2])
    q4k = rng.integers(0, 256, size=(2, 144), dtype=np.uint8)
    add("q4_k.2d", QT.Q4_K, q4k, raw_dtype=QT.Q4_K, ggml_shape=[256, 2])
    add("f32.inf", QT.F32, np.array([1.0, np.inf, 2.0], dtype=np.float32))
    add("f64.nan", QT.F64, np.array([1.0, np.nan], dtype=np.float64))
    add("f32.3d.last", QT.F32, rng.standard_normal((2, 1, 3)).astype(np.float32))
    return specs


def write_reference(path, specs, metadata, alignment=None):
    w = Writer(path, arch="testarch")
    if alignment is not None:
        w.add_custom_alignment(alignment)
    for key, vtype, etype, values in metadata:
        if vtype == VT.ARRAY:
            w.add_key_value(key, list(values), VT.ARRAY, sub_type=etype)
        else:
            w.add_key_value(key, values[0], vtype)
    for name, type_id, shape, arr, raw_dtype in specs:
        w.add_tensor(name, arr, raw_dtype=raw_dtype)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def expected_kvs(metadata, alignment):
    """What the file must hold: the writer puts general.architecture first, then general.alignment if set."""
    out = [RefKV("general.architecture", VT.STRING, None, [b"testarch"])]
    if alignment is not None:
        out.append(RefKV("general.alignment", VT.UINT32, None, np.array([alignment], dtype="<u4")))
    for key, vtype, etype, values in metadata:
        t = etype if vtype == VT.ARRAY else vtype
        if t == VT.STRING:
            vals = [v if isinstance(v, bytes) else v.encode("utf-8") for v in values]
        else:
            vals = np.array([int(v) if t == VT.BOOL else v for v in values], dtype=NP_OF_VTYPE[t])
        out.append(RefKV(key, vtype, etype, vals))
    return out


def expected_tensors(specs, alignment):
    out, offset = [], 0
    for name, type_id, shape, arr, raw_dtype in specs:
        raw = np.ascontiguousarray(arr).reshape(-1).view(np.uint8)
        out.append(RefTensor(name, int(type_id), list(shape), offset, raw))
        offset += -(-raw.size // alignment) * alignment
    return out


def check_reference_file(cli, path, specs, metadata, alignment, report, label):
    # a) the CLI against what was written
    errs = []
    try:
        info = cli.info(path)
        want_kvs = expected_kvs(metadata, alignment)
        want_t = expected_tensors(specs, alignment or 32)
        if info.get("alignment") != (alignment or 32):
            errs.append(f"alignment {info.get('alignment')} != {alignment or 32}")
        if len(info["metadata"]) != len(want_kvs):
            errs.append(f"{len(info['metadata'])} keys, expected {len(want_kvs)}")
        compare_kvs(info, want_kvs, errs)
        compare_tensors(info, want_t, errs)
        if info.get("file_size") != os.path.getsize(path):
            errs.append(f"file_size {info.get('file_size')} != {os.path.getsize(path)}")
        end = info["data_start"] + sum(-(-t.raw.size // (alignment or 32)) * (alignment or 32) for t in want_t)
        if end != os.path.getsize(path):
            errs.append(f"data_start + padded tensor bytes = {end}, file is {os.path.getsize(path)} bytes")
    except Exception as e:  # noqa: BLE001
        errs.append(f"{type(e).__name__}: {e}")
        info = None
    report(f"cli-vs-written {label} (every value type; sums rel tol {SUM_REL_TOL:g})", errs)

    # b) the CLI against gguf.GGUFReader, and the reader's shape convention
    errs = []
    try:
        reader = GGUFReader(path)
        if info is None:
            raise RuntimeError("no CLI output")
        compare_file(path, info, reader, errs)
        for (name, type_id, shape, arr, raw_dtype), t in zip(specs, reader.tensors):
            if [int(x) for x in t.shape] != list(shape):
                errs.append(f"GGUFReader shape of {name} is {list(t.shape)}, ggml order is {list(shape)}")
    except Exception as e:  # noqa: BLE001
        errs.append(f"{type(e).__name__}: {e}")
    report(f"cli-vs-gguf-reader {label}", errs)


def part2(cli, tmp, report):
    rng = np.random.default_rng(20240601)
    specs = make_tensor_specs(rng)
    path = os.path.join(tmp, "reference.gguf")
    write_reference(path, specs, METADATA)
    check_reference_file(cli, path, specs, METADATA, None, report, "gguf-writer-all-types")

    # A second file with general.alignment = 64 and odd-sized tensors.
    specs64 = [s for s in specs if s[0] in ("i8.1d.odd", "f16.2d", "q4_0.2d", "empty.f32", "f32.inf")]
    meta64 = [m for m in METADATA if m[0] in ("test.u8", "test.arr.string", "test.f64")]
    path64 = os.path.join(tmp, "reference-align64.gguf")
    write_reference(path64, specs64, meta64, alignment=64)
    check_reference_file(cli, path64, specs64, meta64, 64, report, "gguf-writer-alignment-64")


# ---------------------------------------------------------------------------
# Part 3: determinism of our writer


def part3(cli, tmp, report):
    errs = []
    try:
        for args in (["--type", "f16", "--seed", "7"], ["--type", "bf16", "--tied"], ["--type", "f32", "--twin-f32"]):
            a, b = os.path.join(tmp, "det-a.gguf"), os.path.join(tmp, "det-b.gguf")
            cli.make_tiny(a, *args)
            cli.make_tiny(b, *args)
            with open(a, "rb") as fa, open(b, "rb") as fb:
                da, db = fa.read(), fb.read()
            if da != db:
                first = next((i for i in range(min(len(da), len(db))) if da[i] != db[i]), min(len(da), len(db)))
                errs.append(f"make-tiny {' '.join(args)} twice: files differ from byte {first}")
    except Exception as e:  # noqa: BLE001
        errs.append(f"{type(e).__name__}: {e}")
    report("make-tiny deterministic (same seed, byte-identical)", errs)

    errs = []
    try:
        paths = []
        for seed in ("1", "2"):
            p = os.path.join(tmp, f"seed-{seed}.gguf")
            cli.make_tiny(p, "--type", "f16", "--seed", seed)
            paths.append(p)
        with open(paths[0], "rb") as fa, open(paths[1], "rb") as fb:
            da, db = fa.read(), fb.read()
        if da == db:
            errs.append("seeds 1 and 2 give identical files")
        ia, ib = cli.info(paths[0]), cli.info(paths[1])
        ta = {t["name"]: t["fnv1a64"] for t in ia["tensors"]}
        same = [t["name"] for t in ib["tensors"] if ta.get(t["name"]) == t["fnv1a64"]]
        if same:
            errs.append(f"tensors with identical bytes under both seeds: {same[:4]}")
        if len(da) != len(db):
            errs.append(f"sizes differ ({len(da)} vs {len(db)}) although only the seed changed")
    except Exception as e:  # noqa: BLE001
        errs.append(f"{type(e).__name__}: {e}")
    report("make-tiny seeds differ", errs)


# ---------------------------------------------------------------------------


def main(argv):
    if len(argv) != 2:
        print(__doc__.strip().splitlines()[2], file=sys.stderr)
        return 2
    t0 = time.monotonic()
    passed = failed = 0

    def report(name, errs):
        nonlocal passed, failed
        if errs:
            failed += 1
            more = f" (+{len(errs) - 6} more)" if len(errs) > 6 else ""
            print(f"FAIL {name}: " + "; ".join(errs[:6]) + more, flush=True)
        else:
            passed += 1
            print(f"PASS {name}", flush=True)

    # The vectorised FNV against the byte-at-a-time definition (standard FNV-1a 64).
    errs = []
    samples = [b"", b"a", b"foobar", bytes(range(256)) * 3, b"xy"]
    got = fnv1a64_many([np.frombuffer(s, np.uint8) for s in samples])
    want = [fnv1a64_slow(s) for s in samples]
    if want[:2] != [FNV_OFFSET, 0xAF63DC4C8601EC8C]:  # FNV-1a 64 of "a" is the published 0xaf63dc4c8601ec8c
        errs.append(f"fnv1a64_slow is off: {[hex(x) for x in want[:2]]}")
    if got != want:
        errs.append(f"fnv1a64 {[hex(x) for x in got]} != {[hex(x) for x in want]}")
    report("self-test fnv1a64", errs)

    try:
        cli = Cli(argv[1])
    except FileNotFoundError as e:
        print(f"FAIL setup: {e}")
        print(f"{passed} passed, {failed + 1} failed")
        return 1
    with tempfile.TemporaryDirectory(prefix="rg-gguf-ref-") as tmp:
        for part in (part1, part2, part3):
            try:
                part(cli, tmp, report)
            except Exception as e:  # noqa: BLE001 - a crash in a part is one failure, not an abort
                report(part.__name__, [f"{type(e).__name__}: {e}", traceback.format_exc(limit=3)])
    try:
        from importlib.metadata import version
        gver = version("gguf")
    except Exception:  # noqa: BLE001
        gver = "?"
    print(f"# gguf {gver}, numpy {np.__version__}, {time.monotonic() - t0:.1f} s",
          file=sys.stderr)
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
