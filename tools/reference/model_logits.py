#!/usr/bin/env python3
"""Reference logits from PyTorch + transformers (an implementation nobody here wrote).

    python3 tools/reference/model_logits.py BUILD_DIR OUT_DIR [SMOLLM2.gguf] [--arch A]...

--arch A (repeatable) writes only the tiny fixtures of those architectures (llama, qwen2,
qwen3), leaving the other fixtures in OUT_DIR as they are.

transformers loads each GGUF file directly (dequantizing it), so the reference is
independent of our loader. Writes one fixture per model to OUT_DIR:

  <name>.ref : magic "RGRL", u32 version 1, u64 fnv1a64 of the GGUF bytes,
               u32 n_tokens, u32 n_vocab, u32 top_k (0 = every logit stored),
               i32 ids[n_tokens], then per token either f32 logits[n_vocab]
               or top_k pairs (i32 id, f32 logit), highest first.

The tiny fixtures are written first with `retrograd make-tiny` (deterministic bytes;
the checksum lets the C test notice a drift). The llama GGUF stores attn_q/attn_k with
llama.cpp's row permutation for NORMAL rope; transformers undoes it on load (that is the
independent path under test). For qwen3, whose GGUF mapping in transformers ignores
attention.key_length, the script checks that the config's head_dim equals that key. SmolLM2 prompts are tokenized with the
Hugging Face tokenizer that transformers builds from the GGUF file; the C test also
checks our tokenizer gives the same ids.
Needs: torch, transformers, accelerate, gguf, numpy (tools only; not in CI).
"""
import os
import struct
import subprocess
import sys

import numpy as np
import torch
from gguf import GGUFReader
from transformers import AutoModelForCausalLM, AutoTokenizer

TINY = [  # name, architecture, make-tiny arguments
    ("tiny-qwen2-f32", "qwen2", ["--type", "f32"]),
    ("tiny-qwen2-f16", "qwen2", ["--type", "f16"]),
    ("tiny-qwen2-bf16", "qwen2", ["--type", "bf16"]),
    ("tiny-qwen2-f16-tied", "qwen2", ["--type", "f16", "--tied"]),
    ("tiny-qwen2-q8_0", "qwen2", ["--type", "q8_0"]),
    ("tiny-qwen2-q4_k_m", "qwen2", ["--type", "q4_k_m"]),
    ("tiny-llama-f32", "llama", ["--type", "f32"]),
    ("tiny-llama-q8_0", "llama", ["--type", "q8_0"]),
    ("tiny-qwen3-f32", "qwen3", ["--type", "f32"]),
    ("tiny-qwen3-q8_0", "qwen3", ["--type", "q8_0"]),
]
SMOL_PROMPTS = [
    "<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n",
    "The quick brown fox jumps over the lazy dog. In 1969, Apollo 11",
]


def fnv1a64(path):
    h = 0xCBF29CE484222325
    data = np.fromfile(path, dtype=np.uint8)
    # Chunked pure-Python FNV is slow on 100 MB; fold 1 MB at a time with numpy-free loop over bytes.
    for b in data.tobytes():
        h = ((h ^ b) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return h


def write(path, gguf, ids, logits, top_k):
    with open(path, "wb") as f:
        f.write(b"RGRL")
        f.write(struct.pack("<IQIII", 1, fnv1a64(gguf), len(ids), logits.shape[1], top_k))
        f.write(np.asarray(ids, dtype=np.int32).tobytes())
        for row in logits:
            if top_k == 0:
                f.write(row.astype(np.float32).tobytes())
            else:
                order = np.argsort(-row, kind="stable")[:top_k]
                for i in order:
                    f.write(struct.pack("<if", int(i), float(row[i])))


def check_head_dim(model, gguf):
    """transformers reads no attention.key_length for qwen3 (its config default is 128)."""
    reader = GGUFReader(gguf)
    arch = bytes(reader.fields["general.architecture"].parts[-1]).decode()
    field = reader.fields.get(f"{arch}.attention.key_length")
    if field is not None and int(field.parts[-1][0]) != model.config.head_dim:
        raise SystemExit(f"{gguf}: key_length {int(field.parts[-1][0])}, transformers head_dim {model.config.head_dim}")


def logits_of(gguf, ids):
    d, name = os.path.split(os.path.abspath(gguf))
    model = AutoModelForCausalLM.from_pretrained(d, gguf_file=name, dtype=torch.float32)
    check_head_dim(model, gguf)
    model.eval()
    with torch.no_grad():
        return model(torch.tensor([ids])).logits[0].float().numpy()


def main():
    args = sys.argv[1:]
    archs = [args[i + 1] for i in range(len(args) - 1) if args[i] == "--arch"]
    args = [a for i, a in enumerate(args) if a != "--arch" and (i == 0 or args[i - 1] != "--arch")]
    build, out = args[0], args[1]
    os.makedirs(out, exist_ok=True)
    ids = [(i * 37 + 11) % 509 for i in range(16)]  # below the three special ids
    for name, arch, make_args in TINY:
        if archs and arch not in archs:
            continue
        gguf = os.path.join(out, name + ".gguf")
        subprocess.run([os.path.join(build, "retrograd"), "make-tiny", "--arch", arch, "--seed", "7", "-o", gguf]
                       + make_args, check=True, stdout=subprocess.DEVNULL)
        write(os.path.join(out, name + ".ref"), gguf, ids, logits_of(gguf, ids), 0)
        os.remove(gguf)
        print("wrote", name)
    if len(args) > 2:
        gguf = args[2]
        d, name = os.path.split(os.path.abspath(gguf))
        tok = AutoTokenizer.from_pretrained(d, gguf_file=name)
        for k, prompt in enumerate(SMOL_PROMPTS):
            pid = tok(prompt, add_special_tokens=False)["input_ids"]
            write(os.path.join(out, f"smollm2-q4_1-{k}.ref"), gguf, pid, logits_of(gguf, pid), 64)
            print("wrote smollm2", k, len(pid), "tokens")


if __name__ == "__main__":
    main()
