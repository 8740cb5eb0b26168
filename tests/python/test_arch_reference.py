#!/usr/bin/env python3
"""The architecture tables' names and layouts against llama.cpp's own (its gguf-py package).

Usage: python3 tests/python/test_arch_reference.py BUILD_DIR
       (BUILD_DIR holds `retrograd`; needs gguf==0.19.0 and numpy, see tests/python/requirements.txt)

For each architecture make-tiny writes (llama, qwen2, qwen3, lfm2, mamba2, gemma2, gemma3), the f32 fixture read by
gguf.GGUFReader:
1. every tensor name is one of gguf-py's tensor names for that architecture (MODEL_TENSORS, with
   .weight / .bias, or none for ssm_a / ssm_d as llama.cpp names them), for the right block;
2. every "<arch>." key is one of gguf-py's key names (gguf.constants.Keys);
3. every shape follows architectures.md from the file's own keys, worked out here independently of
   the C tables; the small elementwise weights (1-D, *_norm, conv kernels, ssm_a/ssm_d) are F32, as
   llama.cpp's converter writes them;
4. lfm2: head_count_kv is an INT32 array of block_count values, a layer has attention tensors exactly
   where it holds a value > 0 and short-conv tensors where it holds 0, the final norm is
   token_embd_norm and the head is tied; mamba2: A is negative, the head is tied; gemma2 / gemma3: the
   sandwich norms on every layer, the caps (gemma2) and the sliding window written as float / integer keys,
   the head tied.

Prints `PASS name` / `FAIL name: details` and `N passed, N failed`; exit 1 on failure.
"""

import os
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from rg_harness import check, finish, require_gguf, run  # noqa: E402

gguf = require_gguf()
from gguf import GGUFReader  # noqa: E402
from gguf import GGMLQuantizationType as QT  # noqa: E402
from gguf.constants import MODEL_ARCH_NAMES, MODEL_TENSORS, TENSOR_NAMES, Keys  # noqa: E402


def key_names():
    out = set()
    for cls in vars(Keys).values():
        if isinstance(cls, type):
            out.update(v for v in vars(cls).values() if isinstance(v, str) and v.startswith("{arch}."))
    return out


def field(reader, key):
    f = reader.get_field(key)
    if f is None:
        return None
    vals = [f.parts[i] for i in f.data]
    if f.types and f.types[0] == gguf.GGUFValueType.ARRAY:
        return [int(v[0]) for v in vals]
    return vals[0][0].item()


def expected_shapes(arch, kv, n_vocab):
    """name -> ggml shape by architectures.md (§1.2, §2.3, §3.2), from the file's keys."""
    d, n_layer = kv("embedding_length"), kv("block_count")
    shapes = {"token_embd.weight": [d, n_vocab]}
    if arch == "mamba2":
        D, N, nh, G, K = (kv("ssm.inner_size"), kv("ssm.state_size"), kv("ssm.time_step_rank"),
                          kv("ssm.group_count"), kv("ssm.conv_kernel"))
        shapes["output_norm.weight"] = [d]
        for i in range(n_layer):
            b = f"blk.{i}."
            shapes.update({b + "attn_norm.weight": [d], b + "ssm_in.weight": [d, 2 * D + 2 * G * N + nh],
                           b + "ssm_conv1d.weight": [K, D + 2 * G * N], b + "ssm_conv1d.bias": [D + 2 * G * N],
                           b + "ssm_dt.bias": [nh], b + "ssm_a": [1, nh], b + "ssm_d": [1, nh],
                           b + "ssm_norm.weight": [D // G, G], b + "ssm_out.weight": [D, d]})
        return shapes
    H, F = kv("attention.head_count"), kv("feed_forward_length")
    hkv = kv("attention.head_count_kv")
    hkv = hkv if isinstance(hkv, list) else [hkv if hkv is not None else H] * n_layer
    Dh = kv("attention.key_length") or d // H
    shapes["token_embd_norm.weight" if arch == "lfm2" else "output_norm.weight"] = [d]
    for i in range(n_layer):
        b = f"blk.{i}."
        shapes.update({b + "attn_norm.weight": [d], b + "ffn_norm.weight": [d], b + "ffn_gate.weight": [d, F],
                       b + "ffn_up.weight": [d, F], b + "ffn_down.weight": [F, d]})
        if arch == "lfm2" and hkv[i] == 0:
            L = kv("shortconv.l_cache")
            shapes.update({b + "shortconv.in_proj.weight": [d, 3 * d], b + "shortconv.conv.weight": [L, d],
                           b + "shortconv.out_proj.weight": [d, d]})
            continue
        shapes.update({b + "attn_q.weight": [d, H * Dh], b + "attn_k.weight": [d, hkv[i] * Dh],
                       b + "attn_v.weight": [d, hkv[i] * Dh], b + "attn_output.weight": [H * Dh, d]})
        if arch == "qwen2":
            shapes.update({b + "attn_q.bias": [H * Dh], b + "attn_k.bias": [hkv[i] * Dh], b + "attn_v.bias": [hkv[i] * Dh]})
        if arch in ("qwen3", "lfm2", "gemma3"):
            shapes.update({b + "attn_q_norm.weight": [Dh], b + "attn_k_norm.weight": [Dh]})
        if arch in ("gemma2", "gemma3"):  # architectures.md 1.7: the post-attention and post-FFN norms
            shapes.update({b + "post_attention_norm.weight": [d], b + "post_ffw_norm.weight": [d]})
    return shapes


def elementwise(name, shape):
    return (len(shape) == 1 or name.endswith("_norm.weight") or name.endswith("conv.weight") or
            name.endswith("conv1d.weight") or name.endswith(".ssm_a") or name.endswith(".ssm_d"))


def check_arch(bin_path, tmp, arch, keys_known):
    path = os.path.join(tmp, f"{arch}.gguf")
    run(bin_path, "make-tiny", "--arch", arch, "--type", "f32", "-o", path)
    r = GGUFReader(path)
    ga = MODEL_ARCH_NAMES
    march = next(a for a, n in ga.items() if n == arch)
    n_layer = field(r, f"{arch}.block_count")
    allowed = set()
    for t in MODEL_TENSORS[march]:
        pat = TENSOR_NAMES[t]
        for i in range(n_layer) if "{bid}" in pat else [None]:
            base = pat.format(bid=i) if i is not None else pat
            allowed.update({base + ".weight", base + ".bias", base})
    names = [t.name for t in r.tensors]
    bad = [n for n in names if n not in allowed]
    check(f"{arch}: every tensor name is llama.cpp's", not bad, f"unknown to gguf-py: {bad[:4]}")
    ours = [f.name for f in r.fields.values() if f.name.startswith(arch + ".")]
    bad = [k for k in ours if k.replace(arch + ".", "{arch}.", 1) not in keys_known]
    check(f"{arch}: every key is llama.cpp's", not bad and len(ours) >= 8, f"unknown to gguf-py: {bad[:4]}")

    def kv(suffix):
        return field(r, f"{arch}.{suffix}")

    n_vocab = len(r.get_field("tokenizer.ggml.tokens").data)
    want = expected_shapes(arch, kv, n_vocab)
    got = {t.name: [int(x) for x in t.shape] for t in r.tensors}
    missing = sorted(set(want) - set(got))
    extra = sorted(set(got) - set(want) - {"output.weight"})
    wrong = [(n, got[n], want[n]) for n in want if n in got and got[n] != want[n]]
    check(f"{arch}: the tensors and shapes of architectures.md", not missing and not extra and not wrong,
          f"missing {missing[:3]}, extra {extra[:3]}, wrong {wrong[:3]}")
    not_f32 = [t.name for t in r.tensors if elementwise(t.name, got[t.name]) and t.tensor_type != QT.F32]
    check(f"{arch}: elementwise weights are f32", not not_f32, f"{not_f32[:3]}")
    return r, kv, got


def main():
    if len(sys.argv) != 2:
        print(__doc__)
        sys.exit(2)
    bin_path = os.path.join(sys.argv[1], "retrograd")
    keys_known = key_names()
    with tempfile.TemporaryDirectory() as tmp:
        for arch in ("llama", "qwen2", "qwen3", "lfm2", "mamba2", "gemma2", "gemma3"):
            try:
                r, kv, got = check_arch(bin_path, tmp, arch, keys_known)
            except Exception as e:  # a crash is a failure with its reason
                check(f"{arch}: fixture", False, repr(e))
                continue
            if arch == "lfm2":
                f = r.get_field("lfm2.attention.head_count_kv")
                hkv = kv("attention.head_count_kv")
                typed = f is not None and f.types == [gguf.GGUFValueType.ARRAY, gguf.GGUFValueType.INT32]
                check("lfm2: head_count_kv is an INT32 array of block_count values",
                      typed and isinstance(hkv, list) and len(hkv) == kv("block_count"), f"{f.types if f else None}")
                kinds = [("attn" if f"blk.{i}.attn_q.weight" in got else "") +
                         ("conv" if f"blk.{i}.shortconv.in_proj.weight" in got else "") for i in range(len(hkv))]
                check("lfm2: attention exactly where head_count_kv > 0, short conv where 0",
                      all(k == ("attn" if h > 0 else "conv") for k, h in zip(kinds, hkv)) and
                      "attn" in kinds and "conv" in kinds, f"{list(zip(hkv, kinds))}")
                check("lfm2: the final norm is token_embd_norm, the head tied",
                      "token_embd_norm.weight" in got and "output.weight" not in got and "output_norm.weight" not in got)
                check("lfm2: the lfm2 pre-tokenizer", bytes(r.get_field("tokenizer.ggml.pre").parts[-1]) == b"lfm2")
            if arch == "mamba2":
                a = [np.asarray(t.data) for t in r.tensors if t.name.endswith(".ssm_a")]
                check("mamba2: A = -exp(A_log) is negative", a and all((x < 0).all() for x in a))
                check("mamba2: the head is tied", "output.weight" not in got)
            if arch in ("gemma2", "gemma3"):
                check(f"{arch}: the head is tied", "output.weight" not in got)
                win = r.get_field(f"{arch}.attention.sliding_window")
                check(f"{arch}: attention.sliding_window is a positive integer",
                      win is not None and win.types[0] == gguf.GGUFValueType.UINT32 and kv("attention.sliding_window") > 0)
            if arch == "gemma2":
                caps = [r.get_field(f"gemma2.{k}_logit_softcapping") for k in ("attn", "final")]
                check("gemma2: both caps are positive float32 keys",
                      all(c is not None and c.types[0] == gguf.GGUFValueType.FLOAT32 for c in caps) and
                      kv("attn_logit_softcapping") > 0 and kv("final_logit_softcapping") > 0)
    finish()


if __name__ == "__main__":
    main()
