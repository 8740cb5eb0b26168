#!/usr/bin/env python3
"""Our LoRA adapter files against the reference `gguf` package (llama.cpp's gguf-py).

Usage: python3 tests/python/test_adapter_reference.py BUILD_DIR
       (BUILD_DIR holds `retrograd` and `test_lora`; needs gguf and numpy,
        see tests/python/requirements.txt)

1. An adapter we write (`test_lora --write-adapter`, rank 4, every projection) read
   by gguf.GGUFReader: general.type = "adapter", adapter.type = "lora",
   adapter.lora.alpha an F32, general.architecture the base's; every tensor is
   "<base name>.lora_a|.lora_b" of a tensor in the base, F32, and passes the shape
   checks of llama.cpp's llama-adapter.cpp (W.ne[0] == a.ne[0], W.ne[1] == b.ne[1],
   a.ne[1] == b.ne[0]).
2. `retrograd merge` of that adapter equals numpy's W + scale * alpha/r * B_t @ A_t,
   with A_t, B_t the tensors as gguf-py hands them out (PEFT's lora_A [r, in] and
   lora_B [out, r]), within 1e-6 relative to max |W| (the sum is double, one f32 rounding).
3. The other direction: an adapter written with gguf.GGUFWriter as
   convert_lora_to_gguf.py writes one (PEFT-shaped numpy arrays, F32 and F16 pairs,
   alpha 16, only some layers) is accepted by `retrograd merge` and merged the same way.

Prints `PASS name` / `FAIL name: details` and `N passed, N failed`; exit 1 on failure.
"""

import os
import subprocess
import sys
import tempfile

import numpy as np

try:
    import gguf
    from gguf import GGUFReader, GGUFWriter
except ImportError as e:  # pragma: no cover - environment problem, reported plainly
    print(f"FAIL import gguf: {e} (pip install -r tests/python/requirements.txt)")
    print("0 passed, 1 failed")
    sys.exit(1)

passed = failed = 0


def check(name, ok, details=""):
    global passed, failed
    if ok:
        print(f"PASS {name}")
        passed += 1
    else:
        print(f"FAIL {name}: {details}")
        failed += 1


def run(*args):
    p = subprocess.run(list(args), capture_output=True, text=True, timeout=120)
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(args)} exited {p.returncode}: {p.stderr.strip()[-400:]}")
    return p.stdout


def field_value(reader, key):
    f = reader.get_field(key)
    if f is None:
        return None, None
    vt = f.types[0] if f.types else None
    return f.contents(), vt


def tensors(reader):
    return {t.name: t for t in reader.tensors}


def f32_matrix(t):
    """A 2-D tensor as float64 numpy [ne1, ne0] (gguf-py's row-major view)."""
    return np.asarray(t.data, dtype=np.float64).reshape(int(t.shape[1]), int(t.shape[0]))


def check_merge(name, base_path, adapter_path, merged_path, scale):
    base, ad, mg = GGUFReader(base_path), GGUFReader(adapter_path), GGUFReader(merged_path)
    bt, at, mt = tensors(base), tensors(ad), tensors(mg)
    alpha, _ = field_value(ad, "adapter.lora.alpha")
    worst, n_merged, n_same = 0.0, 0, 0
    for tname, w in bt.items():
        m = mt.get(tname)
        if m is None:
            check(f"{name}: {tname} kept", False, "missing in the merged file")
            continue
        if tname + ".lora_a" not in at:
            n_same += int(bytes(np.asarray(w.data).tobytes()) == bytes(np.asarray(m.data).tobytes()))
            continue
        a = f32_matrix(at[tname + ".lora_a"])  # [r, in]  (PEFT lora_A)
        b = f32_matrix(at[tname + ".lora_b"])  # [out, r] (PEFT lora_B)
        r = a.shape[0]
        s = scale * (float(alpha) / r if alpha else 1.0)
        want = f32_matrix(w) + s * (b @ a)
        got = f32_matrix(m)
        rel = float(np.max(np.abs(got - want)) / max(np.max(np.abs(want)), 1e-30))
        worst = max(worst, rel)
        n_merged += 1
    check(f"{name}: merged W == W + s B_t A_t (numpy), worst {worst:.2e}", n_merged > 0 and worst <= 1e-6,
          f"{n_merged} merged, worst relative difference {worst:.3e}")
    check(f"{name}: {n_same} untouched tensors byte-identical", n_same == len(bt) - n_merged,
          f"{n_same} of {len(bt) - n_merged}")


def main():
    if len(sys.argv) != 2:
        print(__doc__)
        sys.exit(2)
    build = sys.argv[1]
    exe, helper = os.path.join(build, "retrograd"), os.path.join(build, "test_lora")
    with tempfile.TemporaryDirectory() as tmp:
        model = os.path.join(tmp, "tiny.gguf")
        adapter = os.path.join(tmp, "adapter.gguf")
        run(exe, "make-tiny", "--arch", "qwen2", "--type", "f32", "-o", model)
        run(helper, "--write-adapter", model, adapter)

        # 1. the file as gguf-py reads it
        r = GGUFReader(adapter)
        base = tensors(GGUFReader(model))
        for key, want in (("general.type", "adapter"), ("adapter.type", "lora"), ("general.architecture", "qwen2")):
            v, _ = field_value(r, key)
            check(f"adapter key {key} = {want!r}", v == want, f"got {v!r}")
        alpha, vt = field_value(r, "adapter.lora.alpha")
        check("adapter.lora.alpha is an F32 8.0", vt == gguf.GGUFValueType.FLOAT32 and alpha == 8.0,
              f"type {vt}, value {alpha}")
        bad = []
        names = tensors(r)
        for tname, t in names.items():
            stem, _, suffix = tname.rpartition(".")
            if suffix not in ("lora_a", "lora_b") or stem not in base:
                bad.append(f"{tname}: not <base tensor>.lora_a|b")
                continue
            if t.tensor_type != gguf.GGMLQuantizationType.F32:
                bad.append(f"{tname}: type {t.tensor_type.name}")
            if suffix == "lora_a":
                w, a, b = base[stem], t, names.get(stem + ".lora_b")
                if b is None:
                    bad.append(f"{tname}: no lora_b")
                    continue
                if not (w.shape[0] == a.shape[0] and w.shape[1] == b.shape[1] and a.shape[1] == b.shape[0]):
                    bad.append(f"{stem}: W {list(w.shape)}, a {list(a.shape)}, b {list(b.shape)}")
        check(f"{len(names)} tensors named and shaped as llama-adapter.cpp checks", len(names) == 28 and not bad,
              "; ".join(bad[:5]) or f"{len(names)} tensors")

        # 2. our merge against numpy
        merged = os.path.join(tmp, "merged.gguf")
        run(exe, "merge", "-m", model, "--lora", adapter + ":0.5", "-o", merged, "--quiet")
        check_merge("our adapter", model, adapter, merged, 0.5)

        # 3. an adapter written by gguf-py the way convert_lora_to_gguf.py writes one
        rng = np.random.default_rng(7)
        rank = 8
        w2 = GGUFWriter(os.path.join(tmp, "peft.gguf"), "qwen2")
        w2.add_type(gguf.GGUFType.ADAPTER)
        w2.add_string(gguf.Keys.Adapter.TYPE, "lora")
        w2.add_float32(gguf.Keys.Adapter.LORA_ALPHA, 16.0)
        for tname, dtype in (("blk.0.attn_q.weight", np.float32), ("blk.1.attn_v.weight", np.float16),
                             ("blk.1.ffn_down.weight", np.float32)):
            n_in, n_out = int(base[tname].shape[0]), int(base[tname].shape[1])
            lora_a = rng.uniform(-1, 1, (rank, n_in)) / np.sqrt(n_in)   # PEFT lora_A.weight [r, in]
            lora_b = rng.uniform(-0.05, 0.05, (n_out, rank))              # PEFT lora_B.weight [out, r]
            w2.add_tensor(tname + ".lora_a", lora_a.astype(dtype))
            w2.add_tensor(tname + ".lora_b", lora_b.astype(dtype))
        w2.write_header_to_file()
        w2.write_kv_data_to_file()
        w2.write_tensors_to_file()
        w2.close()
        merged2 = os.path.join(tmp, "merged2.gguf")
        out = run(exe, "merge", "-m", model, "--lora", os.path.join(tmp, "peft.gguf"), "-o", merged2, "--quiet")
        check("retrograd merge accepts a gguf-py adapter (F32 and F16 pairs)", "3 merged (rank 8, alpha 16" in out, out)
        check_merge("gguf-py adapter", model, os.path.join(tmp, "peft.gguf"), merged2, 1.0)
    print(f"{passed} passed, {failed} failed")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
