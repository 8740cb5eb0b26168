#!/usr/bin/env python3
"""Ours against llama.cpp's own llama-bench, type by type, back to back, on the
machine at hand: the comparison behind issue 5's speed bar (SmolLM2-135M,
2 threads, a 128-token prompt, 32 generated tokens).

    python3 tools/reference/llama_bench_compare.py --llama-bench PATH/llama-bench \\
        [--bench build/bench_generate] [--rounds 3] [--reps 5] DIR [TYPE ...]
    python3 tools/reference/llama_bench_compare.py --llama-bench PATH/llama-bench \\
        --model A.gguf [--model B.gguf ...]      (any files as they are, e.g. the LFM2-350M shape)
    python3 tools/reference/llama_bench_compare.py --llama-bench PATH/llama-bench --pp 512 \\
        DIR bf16 q4_0 q5_0 q8_0 q4_k q6_k q4_k_m (issue 25: BF16 and the int8-tile types at pp512)

--pp N / --tg N: the prompt and generated tokens of both sides (llama-bench -p/-n, bench_generate's
RG_BENCH_PP/RG_BENCH_TG; default 128 and 32). Issue 25's prompt rows are pp512 of the BF16 file and
of the types whose prompts run on INT8 tiles (TDPBUSD): Q4_0, Q5_0, Q8_0, Q4_K, Q6_K, and Q4_K_M
(Q4_K with Q6_K tensors). bench_generate makes f32 .. q4_k_m itself; the others (q5_0, q4_k,
q6_k: EXTRA_TYPES) this script makes into DIR as smollm2-TYPE.gguf with `RETROGRAD quantize
--allow-requantize DIR/smollm2-q4_1.gguf OUT TYPE` (the same values, as bench_generate makes its
types) when missing, and measures ours on them with RG_BENCH_MODEL (bench_generate's "file" row).
A 1B-shaped file (`retrograd make-tiny --arch llama --shape 1b --type bf16`, quantized with
`retrograd quantize`) goes through --model.

DIR holds smollm2-<type>.gguf files as bench_generate writes them with
RG_BENCH_CACHE=DIR (f32, f16, bf16, q8_0, q4_0, q4_k_m; the shipped Q4_1 file,
printed by scripts/smollm2.sh, copied in as smollm2-q4_1.gguf). For every round
and type, llama-bench (`-t 2 -p 128 -n 32 -r REPS -o json`) and then
bench_generate (RG_BENCH_TYPES=type, RG_BENCH_REPS=REPS) run on the same file
one right after the other, so both see the same state of a machine whose
memory rate drifts by 20-40% within an hour. Both are read as the best of the
repetitions (llama-bench's per-repetition samples, bench_generate's best), and
the table gives each round's tokens/s and the median of the per-round ratios.

llama-bench is not part of this project and is not built by it: any build will
do (it was measured here with the one in the llama-cpp-python sdist,
vendor/llama.cpp, configured with cmake -DGGML_NATIVE=ON and built with
`cmake --build build --target llama-bench`). A benchmark helper, not part of
the product.
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys

TYPES = ["f32", "f16", "bf16", "q8_0", "q4_0", "q4_1", "q4_k_m"]
EXTRA_TYPES = {"q5_0": "Q5_0", "q4_k": "Q4_K", "q6_k": "Q6_K"}  # made here: bench_generate has no row for them
PP, TG = 128, 32


def llama_bench(exe, path, reps):
    out = subprocess.run([exe, "-m", path, "-t", "2", "-p", str(PP), "-n", str(TG), "-r", str(reps), "-o", "json"],
                         check=True, capture_output=True, text=True).stdout
    pp = tg = None
    for test in json.loads(out):
        best = max(test["samples_ts"]) if test.get("samples_ts") else test["avg_ts"]
        if test["n_prompt"] == PP and test["n_gen"] == 0:
            pp = best
        elif test["n_gen"] == TG and test["n_prompt"] == 0:
            tg = best
    if pp is None or tg is None:
        sys.exit(f"llama-bench printed no pp{PP}/tg{TG} rows for {path}")
    return pp, tg


def ours(exe, src, cache, typ, reps):
    env = dict(os.environ, RG_SMOLLM2=src, RG_BENCH_CACHE=cache, RG_BENCH_TYPES=typ, RG_BENCH_REPS=str(reps),
               RG_BENCH_PP=str(PP), RG_BENCH_TG=str(TG))
    out = subprocess.run([exe], check=True, capture_output=True, text=True, env=env).stdout
    for line in out.splitlines():
        m = re.match(r"^(\S+)(?: \(shipped\))?\s+([\d.]+)\s+([\d.]+)\s", line)
        if m and m.group(1) == typ:
            return float(m.group(2)), float(m.group(3))
    sys.exit(f"bench_generate printed no row for {typ}:\n{out}")


def ours_file(exe, path, reps):
    """bench_generate on one file as it is (RG_BENCH_MODEL): its "file" row."""
    env = dict(os.environ, RG_BENCH_MODEL=path, RG_BENCH_REPS=str(reps), RG_BENCH_PP=str(PP), RG_BENCH_TG=str(TG))
    out = subprocess.run([exe], check=True, capture_output=True, text=True, env=env).stdout
    for line in out.splitlines():
        m = re.match(r"^file\s+([\d.]+)\s+([\d.]+)\s", line)
        if m:
            return float(m.group(1)), float(m.group(2))
    sys.exit(f"bench_generate printed no file row for {path}:\n{out}")


def main():
    global PP, TG
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--llama-bench", required=True)
    ap.add_argument("--bench", default="build/bench_generate")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--pp", type=int, default=PP, help="prompt tokens of both sides (default 128)")
    ap.add_argument("--tg", type=int, default=TG, help="generated tokens of both sides (default 32)")
    ap.add_argument("--retrograd", default="build/retrograd", help="makes the EXTRA_TYPES files (quantize)")
    ap.add_argument("--model", action="append", default=[],
                    help="instead of DIR's SmolLM2 types: this file as it is (repeatable; e.g. make-tiny "
                         "--arch lfm2 --shape lfm2-350m in q4_k_m and f16); DIR is then not read")
    ap.add_argument("dir", nargs="?")
    ap.add_argument("types", nargs="*")
    a = ap.parse_args()
    PP, TG = a.pp, a.tg
    if a.model:
        for path in a.model:
            if not os.path.exists(path):
                sys.exit(f"{path} is missing")
        rows = {os.path.basename(p): [] for p in a.model}
        print(f"{'round':>5} {'file':28} {'llama pp':>9} {'ours pp':>9} {'ratio':>6} {'llama tg':>9} {'ours tg':>9} {'ratio':>6}")
        for r in range(a.rounds):
            for path in a.model:
                lpp, ltg = llama_bench(a.llama_bench, path, a.reps)
                opp, otg = ours_file(a.bench, path, a.reps)
                rows[os.path.basename(path)].append((lpp, opp, ltg, otg))
                print(f"{r + 1:>5} {os.path.basename(path):28} {lpp:9.1f} {opp:9.1f} {opp / lpp:6.2f} {ltg:9.1f} "
                      f"{otg:9.1f} {otg / ltg:6.2f}", flush=True)
        summary(rows, 28)
        return
    if not a.dir:
        sys.exit("DIR (the SmolLM2 types) or --model FILE is needed")
    types = a.types or TYPES
    src = os.path.join(a.dir, "smollm2-q4_1.gguf")
    if not os.path.exists(src):
        sys.exit(f"{src} is missing: copy the shipped Q4_1 file there (scripts/smollm2.sh prints it)")
    for t in types:
        path = os.path.join(a.dir, f"smollm2-{t}.gguf")
        if t in EXTRA_TYPES and not os.path.exists(path):
            subprocess.run([a.retrograd, "quantize", "--allow-requantize", "--quiet", src, path, EXTRA_TYPES[t]], check=True)
    rows = {t: [] for t in types}
    print(f"pp{PP} / tg{TG}, 2 threads")
    print(f"{'round':>5} {'type':8} {'llama pp':>9} {'ours pp':>9} {'ratio':>6} {'llama tg':>9} {'ours tg':>9} {'ratio':>6}")
    for r in range(a.rounds):
        for t in types:
            path = os.path.join(a.dir, f"smollm2-{t}.gguf")
            if not os.path.exists(path):
                sys.exit(f"{path} is missing: run bench_generate once with RG_BENCH_CACHE={a.dir}")
            lpp, ltg = llama_bench(a.llama_bench, path, a.reps)
            if t in EXTRA_TYPES:
                opp, otg = ours_file(a.bench, path, a.reps)
            else:
                opp, otg = ours(a.bench, src, a.dir, t, a.reps)
            rows[t].append((lpp, opp, ltg, otg))
            print(f"{r + 1:>5} {t:8} {lpp:9.1f} {opp:9.1f} {opp / lpp:6.2f} {ltg:9.1f} {otg:9.1f} {otg / ltg:6.2f}",
                  flush=True)
    summary(rows, 8)


def summary(rows, width):
    print("median of the per-round ratios (ours / llama-bench), and the worst round:")
    for t, v in rows.items():
        pr = [o / l for l, o, _, _ in v]
        gr = [o / l for _, _, l, o in v]
        print(f"  {t:{width}} prompt {statistics.median(pr):.2f} (worst {min(pr):.2f})   "
              f"generation {statistics.median(gr):.2f} (worst {min(gr):.2f})")


if __name__ == "__main__":
    main()
