#!/usr/bin/env python3
"""Reference logits from PyTorch + transformers (an implementation nobody here wrote).

    python3 tools/reference/model_logits.py BUILD_DIR OUT_DIR [SMOLLM2.gguf]

transformers loads each GGUF file directly (dequantizing it), so the reference is
independent of our loader. Writes one fixture per model to OUT_DIR:

  <name>.ref : magic "RGRL", u32 version 1, u64 fnv1a64 of the GGUF bytes,
               u32 n_tokens, u32 n_vocab, u32 top_k (0 = every logit stored),
               i32 ids[n_tokens], then per token either f32 logits[n_vocab]
               or top_k pairs (i32 id, f32 logit), highest first.

The tiny fixtures are written first with `retrograd make-tiny` (deterministic bytes;
the checksum lets the C test notice a drift). SmolLM2 prompts are tokenized with the
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
from transformers import AutoModelForCausalLM, AutoTokenizer

TINY = [  # name, make-tiny arguments
    ("tiny-qwen2-f32", ["--type", "f32"]),
    ("tiny-qwen2-f16", ["--type", "f16"]),
    ("tiny-qwen2-bf16", ["--type", "bf16"]),
    ("tiny-qwen2-f16-tied", ["--type", "f16", "--tied"]),
    ("tiny-qwen2-q8_0", ["--type", "q8_0"]),
    ("tiny-qwen2-q4_k_m", ["--type", "q4_k_m"]),
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


def logits_of(gguf, ids):
    d, name = os.path.split(os.path.abspath(gguf))
    model = AutoModelForCausalLM.from_pretrained(d, gguf_file=name, dtype=torch.float32)
    model.eval()
    with torch.no_grad():
        return model(torch.tensor([ids])).logits[0].float().numpy()


def main():
    build, out = sys.argv[1], sys.argv[2]
    os.makedirs(out, exist_ok=True)
    ids = [(i * 37 + 11) % 509 for i in range(16)]  # below the three special ids
    for name, args in TINY:
        gguf = os.path.join(out, name + ".gguf")
        subprocess.run([os.path.join(build, "retrograd"), "make-tiny", "--arch", "qwen2", "--seed", "7", "-o", gguf] + args,
                       check=True, stdout=subprocess.DEVNULL)
        write(os.path.join(out, name + ".ref"), gguf, ids, logits_of(gguf, ids), 0)
        os.remove(gguf)
        print("wrote", name)
    if len(sys.argv) > 3:
        gguf = sys.argv[3]
        d, name = os.path.split(os.path.abspath(gguf))
        tok = AutoTokenizer.from_pretrained(d, gguf_file=name)
        for k, prompt in enumerate(SMOL_PROMPTS):
            pid = tok(prompt, add_special_tokens=False)["input_ids"]
            write(os.path.join(out, f"smollm2-q4_1-{k}.ref"), gguf, pid, logits_of(gguf, pid), 64)
            print("wrote smollm2", k, len(pid), "tokens")


if __name__ == "__main__":
    main()
