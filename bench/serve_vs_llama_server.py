#!/usr/bin/env python3
"""`retrograd serve` against llama.cpp's llama-server in the same run, on the same GGUF file and threads.

    python3 bench/serve_vs_llama_server.py --retrograd build/retrograd --llama-server PATH/llama-server \\
        --model MODEL.gguf [--model MODEL2.gguf ...] [--threads 2] [--rounds 2] [--max-tokens 32]

Per model and concurrency C in 1, 4, 16 (each server with 16 slots, 2048 tokens of context per slot): C clients
each send 2 streamed chat requests (distinct prompts, greedy, max_tokens), and the row reports generated
tokens per second over the wall time and the median time to first token. The servers alternate run by run
(ours, llama-server, ours, ...; --rounds of each), so drift on this VM lands on both; every run is printed,
and the summary gives the best and the spread. Then the edited conversation: a chat of N earlier turns
(N = 4, 10, 20) is sent, then resent with its last user message edited; the time to first token of the
resend is reported per N (a server that feeds only what changed keeps it flat as N grows).

llama-server is built from the llama-cpp-python sdist as the other peers are (see docs/BENCHMARKS.md); it is
started with --parallel 16 -c 16*1024 (its context is shared by its slots), -t/-tb THREADS, --no-webui.
A benchmark helper, not part of the product.
"""
import argparse
import concurrent.futures
import http.client
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

SLOTS, CTX = 16, 2048


def start(cmd, pattern, port_hint):
    log = tempfile.NamedTemporaryFile("w+", delete=False)
    p = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port_hint}"
    deadline = time.time() + 300
    while time.time() < deadline:
        if p.poll() is not None:
            log.seek(0)
            raise RuntimeError(f"{cmd[0]} exited: {log.read()[-2000:]}")
        try:
            with urllib.request.urlopen(url + "/health", timeout=2) as r:
                if r.status == 200:
                    return p, url
        except Exception:
            pass
        time.sleep(0.2)
    p.kill()
    raise RuntimeError(f"{cmd[0]} did not become healthy")


def stop(p):
    p.terminate()
    try:
        p.wait(timeout=30)
    except subprocess.TimeoutExpired:
        p.kill()


def stream_chat(url, messages, max_tokens, model_id):
    """(time to first token, tokens generated, seconds) of one streamed greedy chat request."""
    host, port = url[len("http://"):].split(":")
    c = http.client.HTTPConnection(host, int(port), timeout=600)
    body = {"model": model_id, "messages": messages, "max_tokens": max_tokens, "temperature": 0, "stream": True,
            "stream_options": {"include_usage": True}}
    t0 = time.perf_counter()
    c.request("POST", "/v1/chat/completions", json.dumps(body), {"Content-Type": "application/json"})
    r = c.getresponse()
    if r.status != 200:
        raise RuntimeError(f"status {r.status}: {r.read()[:300]}")
    ttft, n = None, 0
    while True:
        line = r.readline()
        if not line:
            break
        line = line.decode().strip()
        if not line.startswith("data: ") or line == "data: [DONE]":
            if line == "data: [DONE]":
                break
            continue
        ch = json.loads(line[6:])
        if ch.get("usage"):
            n = ch["usage"]["completion_tokens"]
        for choice in ch.get("choices", []):
            if (choice.get("delta") or {}).get("content") and ttft is None:
                ttft = time.perf_counter() - t0
    c.close()
    return ttft if ttft is not None else time.perf_counter() - t0, n, time.perf_counter() - t0


def load_run(url, model_id, conc, max_tokens, salt):
    topics = ["the sea", "mountains", "bread", "rivers", "music", "trains", "the moon", "gardens", "clocks",
              "bridges", "winter", "bees", "paper", "glass", "salt", "maps"]

    def client(k):
        out = []
        for j in range(2):
            msg = f"Tell me something about {topics[(k + j) % len(topics)]} ({salt}-{k}-{j})."
            out.append(stream_chat(url, [{"role": "user", "content": msg}], max_tokens, model_id))
        return out
    t0 = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(conc) as ex:
        res = [x for lst in ex.map(client, range(conc)) for x in lst]
    wall = time.perf_counter() - t0
    toks = sum(r[1] for r in res)
    return toks / wall, statistics.median(r[0] for r in res)


def edited_ttft(url, model_id, turns, salt):
    msgs = []
    for t in range(turns):
        msgs.append({"role": "user", "content": f"Question {t} ({salt}): what is {t} plus {t}?"})
        msgs.append({"role": "assistant", "content": f"{t} plus {t} is {2 * t}. Anything else about numbers?"})
    msgs.append({"role": "user", "content": "Now tell me about the number seven."})
    stream_chat(url, msgs, 8, model_id)  # the conversation as it was
    msgs[-1] = {"role": "user", "content": "Now tell me about the number eight instead."}
    return stream_chat(url, msgs, 8, model_id)[0]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--retrograd", required=True)
    ap.add_argument("--llama-server", required=True)
    ap.add_argument("--model", action="append", required=True)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--max-tokens", type=int, default=32)
    ap.add_argument("--conc", default="1,4,16")
    a = ap.parse_args()
    concs = [int(x) for x in a.conc.split(",")]
    port = 18900
    for model in a.model:
        model_id = os.path.basename(model)[:-5]
        servers = {
            "retrograd": [a.retrograd, "serve", "-m", model, "--port", str(port), "-np", str(SLOTS), "-c", str(CTX),
                          "-t", str(a.threads)],
            "llama-server": [a.llama_server, "-m", model, "--port", str(port + 1), "--parallel", str(SLOTS), "-c",
                             str(SLOTS * CTX), "-t", str(a.threads), "-tb", str(a.threads), "--no-webui",
                             "--alias", model_id],
        }
        results = {name: {c: [] for c in concs} for name in servers}
        edits = {name: {} for name in servers}
        for rnd in range(a.rounds):
            for name, cmd in servers.items():
                p, url = start(cmd, None, port if name == "retrograd" else port + 1)
                try:
                    stream_chat(url, [{"role": "user", "content": "Warm up."}], 4, model_id)
                    for c in concs:
                        tps, ttft = load_run(url, model_id, c, a.max_tokens, f"{rnd}{name[0]}")
                        results[name][c].append((tps, ttft))
                        print(f"{os.path.basename(model)} round {rnd} {name:12s} C={c:2d}: {tps:7.1f} tok/s, "
                              f"TTFT median {ttft * 1e3:7.1f} ms", flush=True)
                    if rnd == 0:
                        for turns in (4, 10, 20):
                            edits[name][turns] = edited_ttft(url, model_id, turns, f"{name[0]}")
                            print(f"{os.path.basename(model)} {name:12s} edited last message of {turns:2d} turns: "
                                  f"TTFT {edits[name][turns] * 1e3:7.1f} ms", flush=True)
                finally:
                    stop(p)
        print(f"\n{os.path.basename(model)}, {a.threads} threads, {SLOTS} slots, {a.max_tokens} tokens per request:")
        print("| clients | retrograd tok/s (best, spread) | llama-server tok/s | ratio | TTFT retrograd | TTFT llama-server |")
        print("|---|---|---|---|---|---|")
        for c in concs:
            ours, theirs = results["retrograd"][c], results["llama-server"][c]
            bo, bt = max(x[0] for x in ours), max(x[0] for x in theirs)
            so = f"{min(x[0] for x in ours):.1f}-{bo:.1f}"
            st = f"{min(x[0] for x in theirs):.1f}-{bt:.1f}"
            print(f"| {c} | {bo:.1f} ({so}) | {bt:.1f} ({st}) | {bo / bt:.2f}x | "
                  f"{min(x[1] for x in ours) * 1e3:.0f} ms | {min(x[1] for x in theirs) * 1e3:.0f} ms |")
        print("| turns before the edit | TTFT retrograd | TTFT llama-server |\n|---|---|---|")
        for turns in sorted(edits["retrograd"]):
            print(f"| {turns} | {edits['retrograd'][turns] * 1e3:.0f} ms | {edits['llama-server'][turns] * 1e3:.0f} ms |")


if __name__ == "__main__":
    main()
