"""A bounded load test of `retrograd serve` on loopback (SmolLM2-135M, 4 slots): 8 clients send 32 requests
(whole and streamed, chat and completions); every fourth stream's client disconnects after two chunks.

Checks: every response that was read to the end is complete and well-formed (a whole reply parses with a
finish_reason and usage; a stream is `data:` lines of JSON chunks ending in `data: [DONE]`, its text the
join of its deltas); nothing is lost (every request answered 200 or disconnected by the client itself);
afterwards no slot is busy and none waits, and the server still answers. Prints requests/s and p50/p99
latency (this machine's figures, informative; the assertions are on completeness, not speed).
Usage: test_serve_load.py BUILD_DIR (the model from $RG_SMOLLM2).
"""

import concurrent.futures
import http.client
import json
import os
import re
import statistics
import subprocess
import sys
import time
import urllib.parse
import urllib.request

sys.path.insert(0, os.path.dirname(__file__))
from rg_harness import check, finish  # noqa: E402

build = sys.argv[1] if len(sys.argv) > 1 else "build"
model = os.environ.get("RG_SMOLLM2", "")
if not model or not os.path.exists(model):
    check("SmolLM2 is installed ($RG_SMOLLM2)", False, f"'{model}' not found")
    finish()
MODEL_ID = os.path.basename(model)[: -len(".gguf")]
N_REQ, N_CLIENTS = 32, 8

log = open(os.path.join(build, "test_serve_load.log"), "w+")
srv = subprocess.Popen([os.path.join(build, "retrograd"), "serve", "-m", model, "--port", "0", "-np", "4",
                        "-c", "1024"], stderr=log)
url = None
for _ in range(600):
    time.sleep(0.05)
    log.seek(0)
    m = re.search(r"listening on (http://[^\s]+)", log.read())
    if m:
        url = m.group(1)
        break
if not url:
    check("the server starts", False, "no listening line")
    srv.kill()
    finish()
host = urllib.parse.urlparse(url)
for _ in range(600):
    try:
        urllib.request.urlopen(url + "/health", timeout=5)
        break
    except Exception:
        time.sleep(0.05)


def one(i):
    """(kind, latency, ok, why) of request i."""
    chat, stream, leave = i % 2 == 0, i % 3 != 0, i % 12 == 1
    body = {"model": MODEL_ID, "max_tokens": 12 + i % 5, "temperature": 0.7, "seed": i, "stream": stream}
    if chat:
        body["messages"] = [{"role": "user", "content": f"Give me fact number {i} about the sea."}]
    else:
        body["prompt"] = f"Fact {i}: the sea"
    path = "/v1/chat/completions" if chat else "/v1/completions"
    c = http.client.HTTPConnection(host.hostname, host.port, timeout=120)
    t0 = time.perf_counter()
    c.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
    r = c.getresponse()
    if r.status != 200:
        return ("error", 0, False, f"status {r.status}: {r.read()[:200]}")
    if not stream:
        data = json.loads(r.read())
        ok = data["choices"][0]["finish_reason"] in ("stop", "length") and data["usage"]["completion_tokens"] >= 1
        return ("whole", time.perf_counter() - t0, ok, json.dumps(data)[:200])
    chunks, text, done, finish_reason = 0, "", False, None
    while True:
        line = r.readline()
        if not line:
            break
        line = line.decode().strip()
        if not line:
            continue
        if not line.startswith("data: "):
            return ("stream", 0, False, f"not an SSE line: {line[:100]}")
        if line == "data: [DONE]":
            done = True
            break
        ch = json.loads(line[6:])
        chunks += 1
        for choice in ch["choices"]:
            text += (choice.get("delta", {}).get("content") or "") if chat else choice.get("text", "")
            finish_reason = choice.get("finish_reason") or finish_reason
        if leave and chunks == 2:
            c.close()  # the client goes away mid-stream
            return ("left", 0, True, "")
    ok = done and finish_reason in ("stop", "length") and chunks >= 2
    return ("stream", time.perf_counter() - t0, ok, f"done {done} finish {finish_reason} chunks {chunks}")


t0 = time.perf_counter()
with concurrent.futures.ThreadPoolExecutor(N_CLIENTS) as ex:
    results = list(ex.map(one, range(N_REQ)))
wall = time.perf_counter() - t0
bad = [(i, r) for i, r in enumerate(results) if not r[2]]
check(f"all {N_REQ} requests answered complete and well-formed", not bad, str(bad[:3]))
lat = sorted(r[1] for r in results if r[0] in ("whole", "stream"))
left = sum(r[0] == "left" for r in results)
check("some clients left mid-stream", left >= 2, str(left))
if lat:
    p50 = statistics.median(lat)
    p99 = lat[min(len(lat) - 1, int(round(0.99 * (len(lat) - 1))))]
    print(f"load (this machine, informative): {N_REQ} requests by {N_CLIENTS} clients on 4 slots in {wall:.2f} s: "
          f"{N_REQ / wall:.2f} requests/s, latency p50 {p50:.2f} s, p99 {p99:.2f} s; {left} clients left mid-stream")
time.sleep(0.5)
metrics = urllib.request.urlopen(url + "/metrics", timeout=30).read().decode()
busy = re.search(r"^retrograd_slots_busy (\d+)$", metrics, re.M)
waiting = re.search(r"^retrograd_requests_waiting (-?\d+)$", metrics, re.M)
check("afterwards no slot is busy and nothing waits", busy and waiting and busy.group(1) == "0" and
      waiting.group(1) == "0", metrics[-500:])
r = urllib.request.urlopen(urllib.request.Request(url + "/v1/completions", json.dumps(
    {"model": MODEL_ID, "prompt": "Hello", "max_tokens": 4, "temperature": 0}).encode(),
    {"Content-Type": "application/json"}), timeout=60)
check("the server still answers", json.loads(r.read())["usage"]["completion_tokens"] >= 1)
srv.terminate()
srv.wait(timeout=30)
check("the server exits cleanly", srv.returncode == 0, str(srv.returncode))
finish()
