#!/usr/bin/env python3
"""llama.cpp's prompt and generation speed on this machine, for the bar of
bench/bench_generate.c (issue 5: SmolLM2-135M, 2 threads, a 128-token prompt,
32 generated tokens), measured through the llama-cpp-python package (which
builds llama.cpp from source on install: `python3 -m pip install
llama-cpp-python`).

    python3 tools/reference/llama_cpp_speed.py DIR [TYPE ...]

DIR holds smollm2-<type>.gguf files, as bench_generate writes them with
RG_BENCH_CACHE=DIR (f32, f16, bf16, q8_0, q4_0, q4_k_m; the shipped Q4_1 file
is printed by scripts/smollm2.sh and may be copied in as smollm2-q4_1.gguf).
The prompt is bench_generate's (token k = (k * 7919 + 13) % (V - 100) + 50),
the generation greedy; each type is timed best of 5, prompt and generation
separately, as bench_generate does, so the two programs can be run one after
the other on the same machine and compared row by row. A benchmark helper,
not part of the product.
"""
import os
import sys
import time

import llama_cpp
import numpy as np
from llama_cpp import Llama

PP, TG, REPS = 128, 32, 5


def measure(path):
    llm = Llama(model_path=path, n_threads=2, n_threads_batch=2, n_ctx=PP + TG + 8, n_batch=PP, verbose=False)
    vocab = llm.n_vocab()
    prompt = [(k * 7919 + 13) % (vocab - 100) + 50 for k in range(PP)]
    best_pp = best_tg = float("inf")
    best_ipp = best_itg = float("inf")
    for _ in range(REPS):
        llm.reset()
        llama_cpp.llama_perf_context_reset(llm._ctx.ctx)
        t0 = time.perf_counter()
        llm.eval(prompt)
        t1 = time.perf_counter()
        for _ in range(TG):
            # the last evaluated token's logits, read in place (no copy into Python lists)
            last = np.ctypeslib.as_array(llama_cpp.llama_get_logits_ith(llm._ctx.ctx, -1), shape=(vocab,))
            tok = int(np.argmax(last))
            llm.eval([tok])
        t2 = time.perf_counter()
        best_pp, best_tg = min(best_pp, t1 - t0), min(best_tg, t2 - t1)
        # llama.cpp's own clock (what llama-bench reports): the time inside its decode calls.
        perf = llama_cpp.llama_perf_context(llm._ctx.ctx)
        if perf.n_p_eval > 0 and perf.n_eval > 0:
            best_ipp = min(best_ipp, perf.t_p_eval_ms / 1e3 / perf.n_p_eval * PP)
            best_itg = min(best_itg, perf.t_eval_ms / 1e3 / perf.n_eval * TG)
    return PP / best_pp, TG / best_tg, PP / best_ipp, TG / best_itg


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    root = sys.argv[1]
    types = sys.argv[2:] or ["f32", "f16", "bf16", "q8_0", "q4_0", "q4_1", "q4_k_m"]
    print(f"llama.cpp (llama-cpp-python), SmolLM2-135M, prompt {PP}, {TG} generated (greedy), 2 threads, best of {REPS}")
    print(f"{'type':<10} {'prompt tok/s':>13} {'gen tok/s':>10}   (llama.cpp's own clock: prompt, gen)")
    for t in types:
        path = os.path.join(root, f"smollm2-{t}.gguf")
        if not os.path.exists(path):
            print(f"{t:<10} (no {path})")
            continue
        pp, tg, ipp, itg = measure(path)
        print(f"{t:<10} {pp:13.1f} {tg:10.1f}   ({ipp:.1f}, {itg:.1f})", flush=True)


if __name__ == "__main__":
    main()
