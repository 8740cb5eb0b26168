#!/usr/bin/env python3
"""tokenizer_special_cases.py - special and user-defined token text inside ordinary text, as
llama.cpp's `llama-tokenize` cuts it: regenerates tests/data/tokenizer/X.gguf.special.{inp,out}
for the five shipped vocabularies (read by tests/test_tokenizer.c, in CI).

    python3 tools/reference/tokenizer_special_cases.py PATH/TO/llama-tokenize [DATA_DIR]

The expected ids were made with the llama-tokenize of llama.cpp as vendored in PyPI's
llama-cpp-python 0.3.36 sdist (vendor/llama.cpp, built with cmake, target llama-tokenize).
Each text is written to a file and tokenized with

    llama-tokenize -m X.gguf -f FILE --ids --log-disable --no-escape [--no-bos] [--no-parse-special]

(-f with --no-escape reads the bytes verbatim). llama-tokenize's add_special is the model's
add_bos_token unless --no-bos, so the four columns of X.gguf.special.out are, in order:

    add_special=1 parse_special=1 | add_special=1 parse_special=0 | add_special=0 parse_special=1 | add_special=0 parse_special=0

X.gguf.special.inp holds the texts separated by a line `__ggml_vocab_test__` (each text is
followed by "\\n__ggml_vocab_test__\\n"), the format of the X.gguf.inp files; X.gguf.special.out
has a header line starting with '#' (the columns above) and then one line per text.

Only the standard library is used; no part of llama.cpp is copied, it is run.
"""
import os
import subprocess
import sys
import tempfile

SEP = "\n__ggml_vocab_test__\n"
FLAGS = [  # (add_special, parse_special) per column
    (True, True),
    (True, False),
    (False, True),
    (False, False),
]
HEADER = "# " + " | ".join("add_special=%d parse_special=%d" % (int(a), int(p)) for a, p in FLAGS)

# Per vocabulary: B the BOS text, C a control token, E an end-of-turn token, U a user-defined
# token (None where the vocabulary has none), K a token of type UNKNOWN (None likewise), and
# cases of its own.
VOCABS = {
    "qwen2": dict(B="<|endoftext|>", C="<|im_start|>", E="<|im_end|>", U="[PAD151646]", K=None, extra=[
        "[PAD151646][PAD151647]",
        "[PAD151646]1]",
        "[PAD15164]",
        "[PAD151935]x",
        "<|endoftext|><|im_end|>",
        "<|im_start|>assistant\n<|im_end|>[PAD151700]",
        "<|im_start|><|im_start|>",
    ]),
    "llama-bpe": dict(B="<|begin_of_text|>", C="<|start_header_id|>", E="<|eot_id|>", U=None, K=None, extra=[
        "<|reserved_special_token_1|>0",
        "<|reserved_special_token_10|>",
        "<|reserved_special_token_1|><|reserved_special_token_10|>",
        "<|reserved_special_token_1<|reserved_special_token_10|>|>",
        "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>",
        "<|end_of_text|> <|end_of_text|>",
        "<|start_header_id|>assistant<|end_header_id|>\n\n",
    ]),
    "gpt-2": dict(B="<|endoftext|>", C="<|endoftext|>", E="<|endoftext|>", U=None, K=None, extra=[
        "<|endoftext|>\n\n",
        "<|endoftext",
        "<|endoftext|>|>",
        "<<|endoftext|>>",
        " <|endoftext|>x",
        "a<|endoftext|> b",
    ]),
    "llama-spm": dict(B="<s>", C="</s>", E="</s>", U=None, K="<unk>", extra=[
        "<s></s><unk>",
        " </s>",
        "<s>\n",
        "\u2581<s>",
        "<s>\u2581Hello",
        "</s>Hello</s> world</s>",
        "<unk>Hello",
    ]),
    "phi-3": dict(B="<s>", C="<|user|>", E="<|end|>", U="</s>", K="[PAD32011]", extra=[
        "<|user|>\nHi<|end|>\n<|assistant|>\n",
        "<s><|user|>\nHi<|end|>\n<|assistant|>\n",
        "<|system|>\nYou are helpful.<|end|>\n<|user|>\n  Hi  <|end|>\n<|assistant|>",
        "<|endoftext|>  x",
        "<s>  x",
        "<unk>  x",
        "</s>  x",
        "<|end|>oftext|>",
        "<|end|><|endoftext|>",
        "<|endoftext|><|end|>",
        "<|placeholder1|>\n\n x",
        "[PAD32011]\n x",
        "x \n<|system|>",
        "<|assistant|>\n\n\n",
    ]),
}

# Cases for every vocabulary: {B}, {C}, {E}, {U}, {K} and their partial texts {C-} (without the
# last byte) and {-C} (without the first). A case naming a token the vocabulary lacks is skipped.
COMMON = [
    "",
    "{C}",
    "{C}Hello world",
    "Hello world{C}",
    "Hello {C} world",
    "Hello{C}world",
    " {C} ",
    "  {C}  ",
    "\n{C}\n",
    "\t{C}\t",
    "\v{C}\f\r",
    "\u00a0{C}\u00a0",
    "Hello \n {C} \n world",
    "Hello   {C}\n\n\n{E}   world",
    "{C}{E}",
    "{C} {E}",
    "{C}\n{E}\n",
    "{E}\r\n{C}\r\n",
    "{C}{C}{C}",
    "{C}system\nYou are helpful.{E}\n{C}user\nHello!{E}\n{C}assistant\n",
    "{B}",
    "{B}Hello",
    "{B} Hello",
    "{B}{B}Hello",
    " {B}Hello",
    "\n{B}Hello",
    "Hello{B}",
    "{B}{C}user\nHi{E}\n",
    "{C-}",
    "{-C}",
    "{C-} {C}",
    "<{C}>",
    "{C}{C-}",
    "h\u00e9llo{C}w\u00f6rld \U0001f999",
    "123{E}456",
    "{U}",
    "a{U}b",
    " {U} ",
    "{U}{C}",
    "{U-}",
    "{U}\n\n x",
    "{K}",
    "a {K} b",
    "{K}{K}",
]


def expand(case, v):
    out = case
    for key in ("B", "C", "E", "U", "K"):
        tok = v[key]
        for pat, text in (("{%s-}" % key, tok and tok[:-1]), ("{-%s}" % key, tok and tok[1:]), ("{%s}" % key, tok)):
            if pat in out:
                if text is None:
                    return None
                out = out.replace(pat, text)
    return out


def cases_of(v):
    seen, out = set(), []
    for c in COMMON + v["extra"]:
        text = expand(c, v)
        if text is not None and text not in seen:
            seen.add(text)
            out.append(text)
    return out


def tokenize(exe, model, text, add_special, parse_special):
    with tempfile.NamedTemporaryFile("wb", suffix=".txt", delete=False) as f:
        f.write(text.encode("utf-8"))
        path = f.name
    try:
        cmd = [exe, "-m", model, "-f", path, "--ids", "--log-disable", "--no-escape"]
        if not add_special:
            cmd.append("--no-bos")
        if not parse_special:
            cmd.append("--no-parse-special")
        r = subprocess.run(cmd, capture_output=True, check=True)
    finally:
        os.unlink(path)
    line = r.stdout.decode().strip().splitlines()[-1]
    if not (line.startswith("[") and line.endswith("]")):
        raise SystemExit("unexpected llama-tokenize output for %r: %r" % (text, r.stdout))
    return [int(x) for x in line[1:-1].split(",") if x.strip()]


def main():
    if len(sys.argv) < 2:
        raise SystemExit(__doc__)
    exe = sys.argv[1]
    data = sys.argv[2] if len(sys.argv) > 2 else os.path.join(os.path.dirname(__file__), "..", "..", "tests", "data", "tokenizer")
    for name, v in VOCABS.items():
        model = os.path.join(data, "ggml-vocab-%s.gguf" % name)
        texts = cases_of(v)
        lines = [HEADER]
        for t in texts:
            cols = [" ".join(str(i) for i in tokenize(exe, model, t, a, p)) for a, p in FLAGS]
            lines.append(" | ".join(cols))
        with open(model + ".special.inp", "w", encoding="utf-8", newline="") as f:
            f.write("".join(t + SEP for t in texts))
        with open(model + ".special.out", "w", encoding="utf-8", newline="") as f:
            f.write("\n".join(lines) + "\n")
        print("%-10s %d cases" % (name, len(texts)))


if __name__ == "__main__":
    main()
