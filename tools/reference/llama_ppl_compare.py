#!/usr/bin/env python3
"""Our perplexity against llama.cpp's llama-perplexity on the same files: the check that
llama.cpp loads the lfm2 and mamba2 files (and LoRA adapters) we write and computes what we
compute (issue 14: within 1e-4 relative).

    python3 tools/reference/llama_ppl_compare.py --llama-perplexity PATH/llama-perplexity \\
        [--retrograd build/retrograd] [--ctx 128] [--tol 1e-4] [--work DIR] [--arch lfm2 --arch mamba2]

For every architecture it makes the tiny F32 fixture and its Q8_0 quantization with
`retrograd make-tiny`, writes a fixed text (an LCG over a small word list: the same bytes on
every machine), trains a LoRA adapter of 20 steps on it with `retrograd train` (the default
targets: for lfm2 the attention, FFN and short-conv in_proj/out_proj projections, for mamba2
ssm_in/ssm_out), and then runs both perplexities on (fixture), (q8_0) and (fixture + the
adapter through --lora): llama-perplexity `-c CTX -b CTX -t 2`, and `retrograd perplexity -c CTX
-t 2` (the same chunking: the second half of each chunk is scored). Each row prints both
values and their relative difference; the exit status is 1 when a row is over --tol or a run
fails.

llama-perplexity is not part of this project and is not built by it: build it from the source
that PyPI's llama-cpp-python sdist vendors (vendor/llama.cpp; cmake -DGGML_NATIVE=ON, then
`cmake --build build --target llama-perplexity`), as llama_bench_compare.py describes. A
reference helper, run by hand, not part of the product.
"""
import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile

WORDS = ("the river runs past the mill and the bridge where the grey heron waits for fish in the cold "
         "morning light while boats drift down to the harbour").split()


def write_text(path, n_words=3000):
    x, out = 2024, []
    for _ in range(n_words):
        x = (x * 6364136223846793005 + 1442695040888963407) % (1 << 64)
        out.append(WORDS[(x >> 33) % len(WORDS)])
    with open(path, "w") as f:
        f.write(" ".join(out) + "\n")


def run(cmd):
    with tempfile.TemporaryFile(mode="w+") as f:
        p = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, text=True)
        f.seek(0)
        out = f.read()
    if p.returncode != 0:
        raise RuntimeError("%s failed (%d): %s" % (" ".join(cmd), p.returncode, out[-600:]))
    return out


def final_ppl(text):
    m = re.findall(r"Final estimate: PPL = ([0-9.]+)", text)
    if m:
        return float(m[-1])
    # llama.cpp's logger thread sometimes loses its last line at exit (seen here in about one
    # run of five, with a pipe or a file): the running value after the last chunk, "[N]x,", is
    # the same number as the final estimate it would have printed.
    runs = re.findall(r"\[(\d+)\]([0-9.]+),", text)
    if not runs:
        raise RuntimeError("no 'Final estimate' line and no chunk values in: " + text[-400:])
    return float(runs[-1][1])


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--llama-perplexity", required=True)
    ap.add_argument("--retrograd", default="build/retrograd")
    ap.add_argument("--ctx", type=int, default=128)
    ap.add_argument("--tol", type=float, default=1e-4)
    ap.add_argument("--work", default=None, help="folder for the files (default: a temporary one)")
    ap.add_argument("--arch", action="append", default=None, help="lfm2, mamba2 (default both)")
    a = ap.parse_args()
    work = a.work or tempfile.mkdtemp(prefix="rg_ppl_compare_")
    os.makedirs(work, exist_ok=True)
    text = os.path.join(work, "text.txt")
    write_text(text)
    rg, lp, ctx = a.retrograd, a.llama_perplexity, str(a.ctx)
    bad = 0
    print("%-28s %14s %14s %10s" % ("file", "llama.cpp", "retrograd", "rel diff"))
    for arch in a.arch or ["lfm2", "mamba2"]:
        f32 = os.path.join(work, arch + "-f32.gguf")
        q8 = os.path.join(work, arch + "-q8_0.gguf")
        lora_dir = os.path.join(work, arch + "-lora")
        shutil.rmtree(lora_dir, ignore_errors=True)  # a fresh run each time
        try:
            run([rg, "make-tiny", "--arch", arch, "--type", "f32", "-o", f32])
            run([rg, "quantize", f32, q8, "q8_0"])
            run([rg, "train", "-m", f32, "-d", text, "-o", lora_dir, "--set", "training.method=lora",
                 "--set", "training.steps=20", "--set", "training.lr=3e-3", "--set", "training.ctx=64",
                 "--set", "training.eval_every=0", "--progress", "lines"])
        except RuntimeError as e:
            print("%s: setting up failed: %s" % (arch, e))
            bad += 1
            continue
        adapter = os.path.join(lora_dir, "adapter.gguf")
        rows = [(arch + " f32", f32, []), (arch + " q8_0", q8, []), (arch + " f32 + lora", f32, ["--lora", adapter])]
        for name, model, extra in rows:
            try:
                theirs = final_ppl(run([lp, "-m", model, "-f", text, "-c", ctx, "-b", ctx, "-t", "2"] + extra))
                ours = final_ppl(run([rg, "perplexity", "-m", model, "-f", text, "-c", ctx, "-t", "2"] + extra))
            except RuntimeError as e:
                print("%-28s failed: %s" % (name, e))
                bad += 1
                continue
            rel = abs(ours - theirs) / theirs
            ok = rel <= a.tol
            bad += not ok
            print("%-28s %14.4f %14.4f %10.2e %s" % (name, theirs, ours, rel, "ok" if ok else "OVER %g" % a.tol))
    print("files in", work)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
