#!/usr/bin/env python3
"""llama.cpp's tokenization, greedy text and perplexity of the real Gemma-3-270M Q4_K_M file,
written as tests/data/gemma3/llamacpp.json for tests/python/test_gemma3_real.py.

    python3 tools/reference/gemma3_llamacpp_reference.py LLAMA_BIN_DIR MODEL.gguf [OUT.json]

LLAMA_BIN_DIR holds llama-tokenize, llama-simple and llama-perplexity of llama.cpp as vendored in
PyPI's llama-cpp-python 0.3.36 sdist (vendor/llama.cpp; cmake -DGGML_NATIVE=ON, those targets).

- tokenize: every text of TEXTS in the four (add_special, parse_special) combinations, through
  `llama-tokenize -f FILE --ids --log-disable --no-escape [--no-bos] [--no-parse-special]`
  (the same call as tokenizer_special_cases.py).
- greedy: `llama-simple -m MODEL -n N PROMPT` (greedy sampling, the prompt tokenized with
  add_special and parse_special, as `retrograd generate --raw --temp 0` does); the text it prints
  after the prompt.
- perplexity: `llama-perplexity -m MODEL -f tests/data/text/eval-prose.txt -c 256 -t 2`, its
  final estimate (the same protocol as `retrograd perplexity`).
Standard library only; run by hand, never in CI (llama.cpp is never committed).
"""
import json
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from tokenizer_special_cases import tokenize  # noqa: E402  (the same llama-tokenize call)

TEXTS = [
    "Hello world", " Hello world", "Hello  world,   three   spaces", "The capital of France is",
    "line one\nline two\n\nline four", "\t tabs\tand  mixed \n whitespace ",
    "1234567890 and 3.14159 and 1,000,000", "don't won't it's we'll they're", "naïve café résumé Zürich",
    "日本語のテキストと中文文本", "Emoji: 🙂🚀👩\u200d💻 done", "def f(x):\n    return x ** 2  # square",
    "<start_of_turn>user\nHi there<end_of_turn>\n<start_of_turn>model\n",
    "text<start_of_turn>inside text<end_of_turn>more", "<bos>starts with the BOS text", "   leading spaces",
    "trailing spaces   ", "UPPER lower MiXeD", "http://example.com/path?query=1&b=2", "a\u00a0non-breaking space",
    "Ω≈ç√∫ mathematical ∑∏", " ", "\n", "<pad><eos><unk> special names", "<start_of_image> and <end_of_image>",
    "Marrowick is a small harbour town on the coast of Eldmere.", "\u200b zero width \ufeff BOM",
    "a" * 40 + " " + "ab" * 20, "    four-space indent\n\tand a tab",
]

PROMPTS = [
    ("The capital of France is", 24),
    ("Once upon a time, in a small village by the sea,", 32),
    ("The three primary colours are", 24),
]


def greedy(exe, model, prompt, n):
    r = subprocess.run([exe, "-m", model, "-n", str(n), prompt], capture_output=True, check=True)
    out = r.stdout.decode("utf-8", errors="replace")
    at = out.find(prompt)
    if at < 0:
        raise SystemExit("llama-simple did not echo the prompt %r: %r" % (prompt, out[:200]))
    return out[at + len(prompt):].rstrip("\n")


def perplexity(exe, model, text):
    r = subprocess.run([exe, "-m", model, "-f", text, "-c", "256", "-t", "2"], capture_output=True, check=True)
    m = re.search(r"Final estimate: PPL = ([0-9.]+)", r.stdout.decode() + r.stderr.decode())
    if not m:
        raise SystemExit("llama-perplexity printed no final estimate")
    return float(m.group(1))


def main():
    if len(sys.argv) < 3:
        raise SystemExit(__doc__)
    bindir, model = sys.argv[1], sys.argv[2]
    out = sys.argv[3] if len(sys.argv) > 3 else os.path.join(ROOT, "tests", "data", "gemma3", "llamacpp.json")
    tok = os.path.join(bindir, "llama-tokenize")
    cases = []
    for t in TEXTS:
        for a, p in ((True, True), (True, False), (False, True), (False, False)):
            cases.append({"text": t, "add_special": a, "parse_special": p, "ids": tokenize(tok, model, t, a, p)})
    gen = [{"prompt": p, "n": n, "text": greedy(os.path.join(bindir, "llama-simple"), model, p, n)} for p, n in PROMPTS]
    for g in gen:
        print("greedy %r -> %r" % (g["prompt"], g["text"]))
    ppl = perplexity(os.path.join(bindir, "llama-perplexity"), model, os.path.join(ROOT, "tests", "data", "text",
                                                                                    "eval-prose.txt"))
    print("llama-perplexity -c 256: %.4f" % ppl)
    doc = {"source": "llama.cpp of llama-cpp-python 0.3.36 (vendor/llama.cpp), "
                     "gemma-3-270m-q4_k_m.gguf sha256 a5fd3b62...6818",
           "tokenize": cases, "greedy": gen, "perplexity": {"text": "tests/data/text/eval-prose.txt", "ctx": 256,
                                                           "ppl": ppl}}
    with open(out, "w", encoding="utf-8") as f:
        json.dump(doc, f, ensure_ascii=False, indent=0)
        f.write("\n")
    print("wrote %s: %d tokenizations, %d greedy texts" % (out, len(cases), len(gen)))


if __name__ == "__main__":
    main()
