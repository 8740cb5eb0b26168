#!/usr/bin/env python3
"""Our full fine-tuning against llama.cpp's own llama-finetune, on the same F32
file, the same context and threads, back to back per round on the machine at
hand (whose speed drifts by 20-40% within an hour, so a figure from another
day or another state of the machine is no comparison).

    python3 tools/reference/llama_finetune_compare.py --llama-finetune PATH/llama-finetune \\
        [--bench build/bench_train] [--retrograd build/retrograd] [--rounds 3] \\
        [--windows 12] [--ctx 256] [--threads 2] MODEL_F32.gguf TEXT.txt

Per round:
  1. llama-finetune -m MODEL -f TEXT' -c CTX -b CTX -ub CTX -t THREADS
     --epochs 1 -val-split 0 -o TMP: one window of CTX tokens per optimizer
     step (AdamW), TEXT' being TEXT cut to about WINDOWS windows (its dataset
     takes windows of CTX tokens every CTX/2 tokens). Its per-window progress
     lines ("train: [...] data=N/M ... t=HH:MM:SS") are timestamped as they
     arrive; a window's tokens/s is CTX over the time between its line and the
     previous one, so the first window (which includes the graph set-up) is
     not timed; the median of the others is taken.
  2. bench_train with RG_BENCH_TRAIN_MODEL=MODEL (one sequence of CTX tokens
     per AdamW step, the same threads), WINDOWS - 1 timed steps after one
     warm-up; the median of its steps' tokens/s.
Then the median and the worst of the per-round ratios (ours / llama.cpp).

What differs, and is stated with the result:
  - llama.cpp's finetune does not train token_embd.weight (llama_set_param
    skips it, marked FIXME in src/llama-context.cpp); with a tied head
    (SmolLM2: no output.weight) it therefore computes no gradient for the
    [n_embd, n_vocab] head either, about 7% of SmolLM2-135M's step FLOPs at
    context 256. Ours trains every tensor, token_embd included.
  - llama.cpp counts every position of a window (CTX labels per window, the
    labels being the next tokens); ours counts CTX tokens per step (CTX - 1
    labels). Both are reported as CTX tokens per step.

llama-finetune is not part of this project and is not built by it: it was
measured with the one in PyPI's llama-cpp-python sdist (vendor/llama.cpp),
`cmake -B build -DGGML_NATIVE=ON -DLLAMA_CURL=OFF && cmake --build build
--target llama-finetune`. A benchmark helper, not part of the product.
"""
import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

PROGRESS = re.compile(r"train: \[.*?\] data=(\d+)/(\d+) loss=([-\d.na]+)")


def cut_text(retrograd, model, text_path, ctx, windows, out_path):
    """Writes the start of TEXT that gives about `windows` windows of ctx tokens every ctx/2."""
    text = open(text_path, encoding="utf-8", errors="replace").read()
    r = subprocess.run([retrograd, "tokenize", "-m", model, "-f", text_path, "--count", "--no-bos"],
                       check=True, capture_output=True, text=True)
    m = re.search(r"(\d+)", r.stdout)
    if not m:
        sys.exit(f"retrograd tokenize --count printed no count:\n{r.stdout}{r.stderr}")
    n_tok = int(m.group(1))
    need = windows * (ctx // 2) + ctx + 1
    if n_tok < need:
        sys.exit(f"{text_path}: {n_tok} tokens, {windows} windows of {ctx} need {need}: use a longer text or fewer --windows")
    keep = int(len(text) * min(1.0, 1.05 * need / n_tok)) + 1
    with open(out_path, "w", encoding="utf-8") as f:
        f.write(text[:keep])


def llama_finetune(exe, model, text, ctx, threads, out):
    """Runs llama-finetune; returns (per-window tokens/s after the first window, windows seen, final loss)."""
    cmd = [exe, "-m", model, "-f", text, "-c", str(ctx), "-b", str(ctx), "-ub", str(ctx), "-t", str(threads),
           "--epochs", "1", "-val-split", "0", "-o", out]
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    seen, buf, log = [], b"", []
    while True:
        chunk = p.stderr.read1(4096) if hasattr(p.stderr, "read1") else p.stderr.read(1)
        if not chunk:
            break
        now = time.monotonic()
        buf += chunk
        parts = re.split(rb"[\r\n]", buf)
        buf = parts.pop()
        for line in parts:
            s = line.decode("utf-8", "replace")
            log.append(s)
            m = PROGRESS.search(s)
            if m:
                seen.append((now, int(m.group(1)), int(m.group(2)), m.group(3)))
    rc = p.wait()
    if rc != 0:
        tail = "\n".join(log[-15:])
        sys.exit(f"llama-finetune exited {rc}:\n{tail}")
    # A window's rate: CTX tokens per datapoint over the time since the previous line.
    rates = []
    for (t0, d0, _, _), (t1, d1, _, _) in zip(seen, seen[1:]):
        if d1 > d0 and t1 > t0:
            rates.append((d1 - d0) * ctx / (t1 - t0))
    if len(rates) < 2:
        sys.exit(f"llama-finetune printed {len(seen)} progress lines; at least 3 windows are needed "
                 f"(a longer text or more --windows)")
    return rates, seen[-1][2], seen[-1][3]


def ours(exe, model, ctx, threads, steps):
    env = dict(os.environ, RG_BENCH_TRAIN_MODEL=model, RG_BENCH_TRAIN_CTX=str(ctx), RG_BENCH_THREADS=str(threads),
               RG_BENCH_TRAIN_METHOD="full")
    out = subprocess.run([exe, str(steps)], check=True, capture_output=True, text=True, env=env).stdout
    m = re.search(r"^step seconds \((\d+) tokens each\):((?: [\d.]+)+)$", out, re.M)
    if not m:
        sys.exit(f"bench_train printed no step line:\n{out}")
    tokens = int(m.group(1))
    return [tokens / float(x) for x in m.group(2).split()]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--llama-finetune", required=True)
    ap.add_argument("--bench", default="build/bench_train")
    ap.add_argument("--retrograd", default="build/retrograd")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--windows", type=int, default=12)
    ap.add_argument("--ctx", type=int, default=256)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("model")
    ap.add_argument("text")
    a = ap.parse_args()
    for path in (a.model, a.text):
        if not os.path.exists(path):
            sys.exit(f"{path} is missing")
    print(f"llama-finetune vs bench_train: {os.path.basename(a.model)}, context {a.ctx}, {a.threads} threads, "
          f"one window of {a.ctx} tokens per AdamW step, {a.rounds} rounds")
    print("note: llama.cpp's finetune does not train token_embd (with a tied head, no head gradient either); ours "
          "trains every tensor. llama.cpp counts every position of a window; both count ctx tokens per step.")
    print(f"{'round':>5} {'llama tok/s':>12} {'(spread)':>16} {'ours tok/s':>11} {'(spread)':>16} {'ratio':>6}")
    ratios = []
    with tempfile.TemporaryDirectory() as tmp:
        text = os.path.join(tmp, "text.txt")
        cut_text(a.retrograd, a.model, a.text, a.ctx, a.windows, text)
        for r in range(a.rounds):
            lr, n_win, loss = llama_finetune(a.llama_finetune, a.model, text, a.ctx, a.threads,
                                             os.path.join(tmp, "llama-out.gguf"))
            os.path.exists(os.path.join(tmp, "llama-out.gguf")) and os.remove(os.path.join(tmp, "llama-out.gguf"))
            ob = ours(a.bench, a.model, a.ctx, a.threads, max(2, n_win - 1))
            lm, om = statistics.median(lr), statistics.median(ob)
            ratios.append(om / lm)
            print(f"{r + 1:>5} {lm:12.1f} {f'{min(lr):.1f}-{max(lr):.1f}':>16} {om:11.1f} "
                  f"{f'{min(ob):.1f}-{max(ob):.1f}':>16} {om / lm:6.2f}   ({n_win} llama windows, last loss {loss})",
                  flush=True)
    print(f"median of the per-round ratios (ours / llama-finetune): {statistics.median(ratios):.2f} "
          f"(worst {min(ratios):.2f})")


if __name__ == "__main__":
    main()
